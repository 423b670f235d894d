"""guard_self(): a Python host started from a shell keeps the pid the shell knows (it
becomes undertaker's sentinel: signals sent to it reach the program, `wait` gets the
program's status), and a setsid grandchild it spawns dies when the host is kill -9ed —
whether the victim is the program itself or the pid the shell knows. Interactive
terminals keep working."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Lines, Venv, base_env, describe, processes_with, wait_until

HOST = r'''
import os, subprocess, sys, time
import undertaker
undertaker.guard_self(grace="500ms", label="guard-self-host")
print("HOST", os.getpid(), os.environ.get("UNDERTAKER_TREE", ""), flush=True)
# A double fork into a new session: the grandchild is nobody's child and in no group of ours.
subprocess.run(["setsid", "sh", "-c", "sleep 3600 & echo GRANDCHILD $!"], check=True)
undertaker.guard_self()  # already guarded: returns at once
try:
    print("READY", flush=True)
    time.sleep(3600)
except KeyboardInterrupt:
    sys.exit(7)
'''

SHELL = '"$PY" "$HOST_PY" & echo "SHELL_PID $!"; wait $!; echo "STATUS $?"'


def ppid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def sid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def cmdline(pid: int) -> list:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def ancestors(pid: int) -> list:
    chain = []
    while pid > 1:
        pid = ppid_of(pid)
        chain.append(pid)
    return chain


@pytest.mark.parametrize(
    "action,status",
    [("kill -9 the program", "137"), ("kill -9 the pid the shell knows", "137"), ("SIGINT to the pid the shell knows", "7")],
)
def test_guard_self(venv: Venv, tmp_path: Path, state_dir: Path, token: str, action: str, status: str) -> None:
    host_py = tmp_path / "host.py"
    host_py.write_text(HOST)
    env = base_env(token, state_dir)
    env.update(PY=venv.python, HOST_PY=str(host_py))
    shell = subprocess.Popen(["sh", "-c", SHELL], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    try:
        lines = Lines(shell)
        shell_pid = int(lines.expect("SHELL_PID"))
        host_pid_s, tree = lines.expect("HOST").split()
        host_pid = int(host_pid_s)
        grandchild = int(lines.expect("GRANDCHILD"))
        lines.expect("READY")

        # The pid the shell knows exec'd undertaker (owner: itself) and is an ancestor of
        # the program, with only undertaker processes in between.
        known = cmdline(shell_pid)
        run_options = known[: known.index("--")]
        assert os.path.basename(known[0]) == "undertaker" and known[1] == "run", known
        assert run_options[run_options.index("--owner") + 1] == str(shell_pid), known
        chain = ancestors(host_pid)
        assert shell_pid in chain, chain
        between = chain[: chain.index(shell_pid)]
        assert between and all(os.path.basename(cmdline(p)[0]) == "undertaker" for p in between), between
        assert tree, "the program runs with UNDERTAKER_TREE set"
        assert sid_of(grandchild) != sid_of(host_pid)
        # Waited for: a process that is exec'ing reads an empty environment for a moment.
        assert wait_until(lambda: grandchild in processes_with(token)), describe(processes_with(token))

        if action == "kill -9 the program":
            os.kill(host_pid, signal.SIGKILL)
        elif action == "kill -9 the pid the shell knows":
            os.kill(shell_pid, signal.SIGKILL)
        else:
            os.kill(shell_pid, signal.SIGINT)
        assert lines.expect("STATUS") == status
        assert shell.wait(30) == 0
        others = lambda: [p for p in processes_with(token) if p != shell.pid]  # noqa: E731
        assert wait_until(lambda: not others(), timeout=30), "survivors: " + describe(others())
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()


INTERACTIVE = r'''
import signal, sys
import undertaker
undertaker.guard_self(grace="300ms")
line = input("NAME? ")
print("GOT", line, flush=True)
try:
    sys.stdout.write("MORE? ")
    sys.stdout.flush()
    sys.stdin.readline()
except KeyboardInterrupt:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test may send one more
    print("INTERRUPTED", flush=True)
    sys.exit(3)
'''


class Terminal:
    """The master side of a pty, read with a timeout; text is consumed up to each match."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def expect(self, needle: bytes, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f"no {needle!r} on the terminal; got {self.buf!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"terminal closed before {needle!r}; got {self.buf!r}"
                self.buf += chunk
        self.buf = self.buf[self.buf.index(needle) + len(needle) :]


def test_guard_self_keeps_an_interactive_terminal(venv: Venv, tmp_path: Path, state_dir: Path, token: str) -> None:
    """The program reads the terminal (not stopped by SIGTTIN) and Ctrl-C reaches it."""
    host_py = tmp_path / "interactive.py"
    host_py.write_text(INTERACTIVE)
    env = base_env(token, state_dir)
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(venv.python, [venv.python, str(host_py)], env)
        finally:
            os._exit(127)
    try:
        term = Terminal(fd)
        term.expect(b"NAME? ")
        os.write(fd, b"undertaker\n")
        term.expect(b"GOT undertaker")
        term.expect(b"MORE? ")
        # Ctrl-C: SIGINT to the terminal's foreground group. Repeated, because a signal
        # that lands just before the program blocks in read() is only noticed at the next.
        for _ in range(30):
            os.write(fd, b"\x03")
            try:
                term.expect(b"INTERRUPTED", timeout=2)
                break
            except AssertionError:
                continue
        else:
            raise AssertionError(f"Ctrl-C never reached the program; terminal: {term.buf!r}")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
        assert wait_until(lambda: not processes_with(token), timeout=30), describe(processes_with(token))
    finally:
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
