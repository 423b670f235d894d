"""Client for ``undertaker supervise``: one guardian per host (docs/SUPERVISE.md).

The supervisor is started as this process's child, so this process is its owner:
when this process dies (``kill -9`` included) the supervisor's standard input reaches
end of file and it tears down every tree it holds. The channel is one end of a Unix
``socketpair`` (the supervisor's stdin and stdout), so ``spawn`` can hand the child
its stdio as file descriptors; ``channel="pipe"`` uses two pipes instead. Requests go one at a time (a lock
around write + reply), so the reply to the request in flight is the next line on the
supervisor's standard output that is not an event; events (``{"event": ...}``) are
dispatched to the tree they name whenever they arrive.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import threading
from typing import IO, Any, Dict, List, Mapping, Optional, Sequence, Union, cast

from .protocol import ErrorReply, HelloReply, ListedTree, ListReply, RegisterReply, UnregisterReply

JsonObject = Dict[str, Any]
StdioSpec = Union[None, int, IO[Any]]


_STDIO_NAMES = ("stdin", "stdout", "stderr")


def _stdio_fd(index: int, spec: StdioSpec) -> "tuple[int, Optional[int], bool]":
    """(fd to pass, our end for PIPE, whether the passed fd is ours to close after).

    ``subprocess.STDOUT`` for stderr is resolved by the caller (it needs stdout's fd)."""
    if isinstance(spec, int) and spec < 0 and spec not in (subprocess.PIPE, subprocess.DEVNULL):
        if spec == subprocess.STDOUT:
            raise ValueError(f"{_STDIO_NAMES[index]}=subprocess.STDOUT: only stderr may be STDOUT")
        raise ValueError(f"{_STDIO_NAMES[index]}={spec}: not a file descriptor nor a subprocess constant")
    if spec is None:
        try:
            os.fstat(index)
            return index, None, False
        except OSError:
            return os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC), None, True
    if spec == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC), None, True
    if spec == subprocess.PIPE:
        read_end, write_end = os.pipe()
        return (read_end, write_end, True) if index == 0 else (write_end, read_end, True)
    if isinstance(spec, int):
        return spec, None, False
    return spec.fileno(), None, False


class SupervisorError(RuntimeError):
    """The supervisor refused a request (``code`` and ``message`` are its own)."""

    def __init__(self, code: str, message: str, reply: Optional[JsonObject] = None, reason: Optional[str] = None) -> None:
        super().__init__(f"{code}{'/' + reason if reason else ''}: {message}")
        self.code = code
        #: For ``refused``: why the process or group could not be proven.
        self.reason = reason
        self.message = message
        #: The error reply as the supervisor wrote it (docs/supervise.schema.json).
        self.reply: ErrorReply = cast(ErrorReply, reply or {})


class GuardedProcess:
    """A ``Popen``-like handle on one tree held by a :class:`Supervisor`.

    ``pid`` is the tree's root, ``tree`` its id. ``wait``/``poll`` report a spawned
    root's exit status (from the supervisor's ``exited`` event: the supervisor, not this
    process, is its parent); adopted and registered trees get no such event, so their
    handles only learn ``None`` when the supervisor ends. Once the supervisor is gone
    (closed, exited or killed) every handle's ``wait`` returns at once: the status if it
    was reported, else ``None``. ``kill()``/``terminate()`` tear the
    whole tree down (SIGTERM, then SIGKILL after the grace period).
    """

    def __init__(self, supervisor: "Supervisor", tree: str, pid: Optional[int], args: Any) -> None:
        self._supervisor = supervisor
        self.tree = tree
        self.pid = pid
        self.args = args
        self.returncode: Optional[int] = None
        self._exited = threading.Event()
        self.stdin: Optional[IO[bytes]] = None
        self.stdout: Optional[IO[bytes]] = None
        self.stderr: Optional[IO[bytes]] = None

    def _set_exited(self, status: Optional[int]) -> None:
        if not self._exited.is_set():
            self.returncode = status
            self._exited.set()

    def poll(self) -> Optional[int]:
        return self.returncode if self._exited.is_set() else None

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def kill(self) -> None:
        """Tears the whole tree down now (``{"op":"kill"}``); a no-op once it is gone."""
        if self._exited.is_set():
            return
        try:
            self._supervisor.request({"op": "kill", "tree": self.tree})
        except SupervisorError as e:
            if e.code != "unknown_tree":  # it ended meanwhile
                raise

    terminate = kill

    def release(self) -> None:
        """Stops guarding the tree; nothing is signalled (``{"op":"release"}``)."""
        self._supervisor.request({"op": "release", "tree": self.tree})

    def __repr__(self) -> str:
        return f"<GuardedProcess tree={self.tree} pid={self.pid} returncode={self.returncode}>"


class Supervisor:
    """A context manager over one ``undertaker supervise`` process.

    ::

        with undertaker.Supervisor(label="my-host") as sup:
            proc = sup.spawn(["npx", "-y", "@modelcontextprotocol/server-everything"])
            sup.adopt(subprocess.Popen(["sleep", "100"], start_new_session=True))

    Leaving the block (or :meth:`close`) closes the control channel: the supervisor
    tears down every tree it holds and exits. So does this process's death.
    """

    def __init__(
        self,
        *,
        label: Optional[str] = None,
        grace: Optional[str] = None,
        tier: Optional[str] = None,
        state_dir: Optional[str] = None,
        binary: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        channel: str = "socket",
    ) -> None:
        from . import find_bin

        if channel not in ("socket", "pipe"):
            raise ValueError("channel must be 'socket' or 'pipe'")
        self.channel = channel
        self._sock: Optional[socket.socket] = None
        argv = [binary or find_bin(), "supervise"]
        if state_dir is not None:
            argv += ["--state-dir", os.fspath(state_dir)]
        if grace is not None:
            argv += ["--grace", grace]
        if label is not None:
            argv += ["--label", label]
        if tier is not None:
            argv += ["--tier", tier]
        self.argv = argv
        self._env = dict(env) if env is not None else None
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._replies: List[JsonObject] = []
        self._reply_ready = threading.Condition()
        self._trees: Dict[str, GuardedProcess] = {}
        self._early_exits: Dict[str, Optional[int]] = {}
        self._reader: Optional[threading.Thread] = None
        self._eof = False
        #: The ``hello`` reply (protocol, version, tier, pid, owner, socket).
        self.hello: HelloReply = cast(HelloReply, {})

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> "Supervisor":
        if self._proc is not None:
            return self
        if self.channel == "socket":
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._proc = subprocess.Popen(
                    self.argv, stdin=theirs.fileno(), stdout=theirs.fileno(), env=self._env, close_fds=True
                )
            finally:
                theirs.close()
            self._sock = ours
            self._rfile: IO[bytes] = ours.makefile("rb")
        else:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env, close_fds=True
            )
            assert self._proc.stdout is not None
            self._rfile = self._proc.stdout
        self._reader = threading.Thread(target=self._read_loop, name="undertaker-supervise", daemon=True)
        self._reader.start()
        self.hello = cast(HelloReply, self.request({"op": "hello"}))
        return self

    def _send(self, data: bytes, fds: Sequence[int] = ()) -> None:
        if self._sock is not None:
            if fds:
                sent = socket.send_fds(self._sock, [data], list(fds))
                if sent < len(data):
                    self._sock.sendall(data[sent:])
            else:
                self._sock.sendall(data)
            return
        assert self._proc is not None and self._proc.stdin is not None
        if fds:
            raise ValueError("file descriptors need the socket channel")
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def __enter__(self) -> "Supervisor":
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self, timeout: Optional[float] = 30.0) -> Optional[int]:
        """Closes the control channel: every tree is torn down, the supervisor exits."""
        proc = self._proc
        if proc is None:
            return None
        try:
            if self._sock is not None:
                self._sock.shutdown(socket.SHUT_WR)
            elif proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        code = proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        for tree in list(self._trees.values()):
            tree._set_exited(tree.returncode)
        return code

    # -- requests --------------------------------------------------------------

    def request(self, obj: Mapping[str, Any]) -> JsonObject:
        """Sends one JSON request and returns its reply; raises SupervisorError if refused.

        The reply has the type of its verb: ``undertaker.protocol.REPLY_BY_OP[op]``
        (docs/supervise.schema.json); the verbs below return it typed."""
        body = dict(obj)
        body.setdefault("id", next(self._ids))
        return self._exchange(json.dumps(body, separators=(",", ":")))

    def _request_with_fds(self, obj: Mapping[str, Any], fds: Sequence[int]) -> JsonObject:
        body = dict(obj)
        body.setdefault("id", next(self._ids))
        return self._exchange(json.dumps(body, separators=(",", ":")), fds)

    def send_line(self, line: str) -> JsonObject:
        """Sends one raw protocol line (e.g. ``register 1234``) and returns its reply."""
        if "\n" in line:
            raise ValueError("one line at a time")
        return self._exchange(line)

    def _exchange(self, line: str, fds: Sequence[int] = ()) -> JsonObject:
        if self._proc is None:
            raise RuntimeError("the supervisor is not started (use start() or `with`)")
        with self._lock:
            with self._reply_ready:
                self._replies.clear()
            try:
                self._send(line.encode() + b"\n", fds)
            except (BrokenPipeError, ConnectionResetError, ValueError) as e:
                raise RuntimeError("the supervisor is gone") from e
            with self._reply_ready:
                self._reply_ready.wait_for(lambda: self._replies or self._eof)
                if not self._replies:
                    raise RuntimeError("the supervisor closed its output without replying")
                reply = self._replies.pop(0)
        if reply.get("ok") is False:
            err = reply.get("error") or {}
            reason = err.get("reason")
            raise SupervisorError(
                str(err.get("code", "error")), str(err.get("message", "")), reply, str(reason) if reason else None
            )
        return reply

    def _read_loop(self) -> None:
        for raw in self._rfile:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if "event" in msg:
                self._on_event(msg)
                continue
            with self._reply_ready:
                self._replies.append(msg)
                self._reply_ready.notify_all()
        with self._reply_ready:
            self._eof = True
            self._reply_ready.notify_all()
            trees = list(self._trees.values())
        # The supervisor is gone (exited, or killed): no `exited` event will come, so
        # every handle ends now and nothing waits forever.
        for tree in trees:
            tree._set_exited(tree.returncode)

    def _on_event(self, msg: JsonObject) -> None:
        if msg.get("event") != "exited":
            return
        status = msg.get("status")
        code = int(status) if isinstance(status, int) else None
        with self._reply_ready:
            tree = self._trees.get(str(msg.get("tree")))
            if tree is None:
                # The event can overtake the caller's _track of the reply before it.
                self._early_exits[str(msg.get("tree"))] = code
                return
        tree._set_exited(code)

    def _track(self, reply: JsonObject, args: Any) -> GuardedProcess:
        tree_id = str(reply["tree"])
        pid = reply.get("pid")
        proc = GuardedProcess(self, tree_id, int(pid) if isinstance(pid, int) else None, args)
        with self._reply_ready:
            self._trees[tree_id] = proc
            early = tree_id in self._early_exits or self._eof
            code = self._early_exits.pop(tree_id, None)
        if early:
            proc._set_exited(code)
        return proc

    # -- verbs -----------------------------------------------------------------

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdin: StdioSpec = None,
        stdout: StdioSpec = None,
        stderr: StdioSpec = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        label: Optional[str] = None,
    ) -> GuardedProcess:
        """Has the supervisor start ``argv`` as a new tree; returns a Popen-like handle.

        As with ``subprocess.Popen``: ``stdin``/``stdout``/``stderr`` may be ``None``
        (this process's own), ``subprocess.PIPE`` (the handle's ``.stdin``/``.stdout``/
        ``.stderr`` are the other ends), ``subprocess.DEVNULL``, a file descriptor or a
        file object, and ``stderr`` may be ``subprocess.STDOUT``; anything else raises
        ``ValueError``. ``env`` replaces the environment. On the pipe channel the child's
        stdio is always ``/dev/null`` and only ``None``/``DEVNULL`` are accepted.
        """
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a sequence of strings")
        req: JsonObject = {"op": "spawn", "argv": [os.fspath(a) for a in argv]}
        if env is not None:
            req["env"] = dict(env)
            req["env_clear"] = True
        if cwd is not None:
            req["cwd"] = os.fspath(cwd)
        if label is not None:
            req["label"] = label
        if self._sock is None:
            if stderr == subprocess.STDOUT:
                stderr = stdout
            if any(x not in (None, subprocess.DEVNULL) for x in (stdin, stdout, stderr)):
                raise ValueError("stdio other than /dev/null needs the socket channel")
            return self._track(self.request(req), list(argv))
        theirs: List[int] = []
        close_after: List[int] = []
        ours: List[Optional[int]] = []
        try:
            for index, spec in enumerate((stdin, stdout, stderr)):
                if index == 2 and stderr == subprocess.STDOUT:
                    # As Popen: stderr goes wherever stdout goes.
                    theirs.append(theirs[1])
                    ours.append(None)
                    continue
                child_fd, our_fd, temporary = _stdio_fd(index, spec)
                theirs.append(child_fd)
                ours.append(our_fd)
                if temporary:
                    close_after.append(child_fd)
            reply = self._request_with_fds(req, theirs)
        except BaseException:
            for fd in ours:
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in close_after:
                os.close(fd)
        proc = self._track(reply, list(argv))
        if ours[0] is not None:
            proc.stdin = os.fdopen(ours[0], "wb")
        if ours[1] is not None:
            proc.stdout = os.fdopen(ours[1], "rb")
        if ours[2] is not None:
            proc.stderr = os.fdopen(ours[2], "rb")
        return proc

    def adopt(self, process: Union[int, "subprocess.Popen[Any]"]) -> GuardedProcess:
        """Puts a child of this process and its descendants under guard, by pid.

        The supervisor proves the process first (it must be our child and our uid).
        Returns a handle whose ``kill()`` tears the adopted tree down.
        """
        pid = process if isinstance(process, int) else process.pid
        return self._track(self.request({"op": "adopt", "pid": int(pid)}), pid)

    def register(self, pgid: int) -> RegisterReply:
        """The plain-line verb: ``register <pgid>`` (a group whose leader is our child)."""
        return cast(RegisterReply, self.send_line(f"register {int(pgid)}"))

    def unregister(self, pgid: int) -> UnregisterReply:
        """``unregister <pgid>``: stop guarding that group; nothing is signalled."""
        return cast(UnregisterReply, self.send_line(f"unregister {int(pgid)}"))

    def list(self) -> List[ListedTree]:
        """The trees held, as the supervisor reports them (``{"op":"list"}``)."""
        reply = cast(ListReply, self.request({"op": "list"}))
        return list(reply["trees"])
