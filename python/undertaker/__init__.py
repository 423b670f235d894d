"""Guard the process trees a Python program spawns.

The wheel installs the ``undertaker`` command; this module finds it and puts it in
front of the commands a host starts:

- :func:`find_bin` — the path of the installed ``undertaker`` binary (``python -m
  undertaker …`` runs it: the same as the ``undertaker`` command);
- :func:`wrap` — ``(command, args)`` prefixed with ``undertaker run --``, for
  ``StdioServerParameters`` and every API that takes a command and its arguments;
- :func:`guard_self` — first thing in ``main``: the rest of the program runs under
  ``undertaker run``, so everything it ever spawns dies with it;
- :class:`Supervisor` — one ``undertaker supervise`` per host, for processes the host
  spawns itself (``spawn``, ``adopt``, ``register``);
- :mod:`undertaker.protocol` — its requests, replies and events as TypedDicts,
  generated from the protocol's schema (docs/supervise.schema.json).

No dependencies beyond the standard library. See docs/INTEGRATIONS.md in the
repository for recipes.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from typing import List, Mapping, Optional, Sequence, Tuple

from . import protocol
from ._supervise import GuardedProcess, Supervisor, SupervisorError

__all__ = [
    "GuardedProcess",
    "Supervisor",
    "SupervisorError",
    "TREE_MARKER",
    "find_bin",
    "protocol",
    "guard_self",
    "run_args",
    "wrap",
]

#: Environment variable undertaker sets on every process of a guarded tree.
TREE_MARKER = "UNDERTAKER_TREE"

_EXE = "undertaker.exe" if os.name == "nt" else "undertaker"


def find_bin() -> str:
    """Returns the path of the ``undertaker`` binary that came with this package.

    ``$UNDERTAKER_BIN`` when set (taken as is). Otherwise the binary this package's own
    install recorded (its ``RECORD``); failing that, the scripts directory of the
    install scheme this module lives in (virtual environment, system, ``--user``,
    ``--target`` or ``--prefix``), then ``PATH`` — but only a binary whose
    ``--version`` is this package's version: another version is never picked
    silently. Raises ``FileNotFoundError`` if none is found, naming any binary of
    another version it passed over.
    """
    override = os.environ.get("UNDERTAKER_BIN")
    if override:
        if _is_executable(override):
            return override
        raise FileNotFoundError(f"UNDERTAKER_BIN={override} is not an executable file")
    recorded = _recorded_bin()
    if recorded is not None:
        return recorded
    want = _own_version()
    passed_over: List[str] = []
    for path in _candidates():
        if want is None:
            return path
        got = _version_of(path)
        if got == want:
            return path
        passed_over.append(f"{path} (version {got or 'unknown'})")
    looked = ", ".join(_candidate_dirs()) + " and PATH"
    if passed_over:
        raise FileNotFoundError(
            f"the undertaker binary of this package (version {want}) was not found; passed over "
            + "; ".join(passed_over)
            + f" (looked in {looked}); reinstall the undertaker package or set UNDERTAKER_BIN"
        )
    raise FileNotFoundError(
        f"the undertaker binary was not found (looked in {looked}); "
        "reinstall the undertaker package or set UNDERTAKER_BIN"
    )


def _recorded_bin() -> Optional[str]:
    """The binary the installer wrote for this very package (listed in its RECORD)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("undertaker")
    except metadata.PackageNotFoundError:
        return None
    files = dist.files or []
    here = os.path.realpath(__file__)
    # The distribution found first on sys.path must be the one this module came from.
    if not any(os.path.realpath(str(dist.locate_file(f))) == here for f in files if f.name == "__init__.py"):
        return None
    for f in files:
        if f.name == _EXE and f.parent.name in ("bin", "Scripts", "scripts"):
            path = os.path.normpath(str(dist.locate_file(f)))
            if _is_executable(path):
                return path
    return None


def _own_version() -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version("undertaker")
    except metadata.PackageNotFoundError:
        return None


def _version_of(path: str) -> Optional[str]:
    """``X.Y.Z`` from ``undertaker --version`` (``undertaker X.Y.Z``), or None."""
    import subprocess

    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[1] if len(out) == 2 and out[0] == "undertaker" else None


def _candidates() -> List[str]:
    """Executable ``undertaker`` files in the scripts directories, then on PATH."""
    found: List[str] = []
    for directory in _candidate_dirs():
        path = os.path.join(directory, _EXE)
        if _is_executable(path) and path not in found:
            found.append(path)
    on_path = shutil.which(_EXE)
    if on_path and on_path not in found:
        found.append(on_path)
    return found


def _candidate_dirs() -> List[str]:
    candidates: List[str] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(scripts)
    user_scheme = _user_scheme()
    if user_scheme:
        user_scripts = sysconfig.get_path("scripts", scheme=user_scheme)
        if user_scripts:
            candidates.append(user_scripts)
    # `pip install --target DIR` / `--prefix DIR`: the scripts sit beside the package.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates.append(os.path.join(package_root, "bin"))
    prefix = package_root
    for _ in range(3):  # lib/pythonX.Y/site-packages -> prefix
        prefix = os.path.dirname(prefix)
    candidates.append(os.path.join(prefix, "bin"))
    return candidates


def _user_scheme() -> Optional[str]:
    get_preferred = getattr(sysconfig, "get_preferred_scheme", None)
    if get_preferred is not None:
        return str(get_preferred("user"))
    return "nt_user" if os.name == "nt" else "posix_user"


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def run_args(
    *,
    label: Optional[str] = None,
    grace: Optional[str] = None,
    tier: Optional[str] = None,
    state_dir: Optional[str] = None,
    owner: Optional[int] = None,
    stdio_owner: bool = True,
) -> List[str]:
    """The ``undertaker run`` options (without the binary and without ``--``).
    ``stdio_owner=False`` is ``--no-stdio-owner``."""
    args = ["run"]
    if label is not None:
        args += ["--label", label]
    if grace is not None:
        args += ["--grace", grace]
    if tier is not None:
        args += ["--tier", tier]
    if state_dir is not None:
        args += ["--state-dir", os.fspath(state_dir)]
    if owner is not None:
        args += ["--owner", str(owner)]
    if not stdio_owner:
        args.append("--no-stdio-owner")
    return args


def wrap(
    command: str,
    args: Sequence[str] = (),
    *,
    label: Optional[str] = None,
    grace: Optional[str] = None,
    tier: Optional[str] = None,
    state_dir: Optional[str] = None,
    stdio_owner: bool = True,
) -> Tuple[str, List[str]]:
    """Returns ``(command, args)`` that run the given command under ``undertaker run``.

    The owner is whoever starts the returned command (undertaker's parent), so the
    command's whole tree dies when the caller dies, ``kill -9`` included::

        command, args = undertaker.wrap("npx", ["-y", "@modelcontextprotocol/server-everything"])
        params = StdioServerParameters(command=command, args=args)

    ``label``, ``grace`` (e.g. ``"2s"``), ``tier`` and ``state_dir`` are passed to
    ``undertaker run`` as the options of the same names; ``stdio_owner=False`` as
    ``--no-stdio-owner``.
    """
    if isinstance(args, (str, bytes)):
        raise TypeError("args must be a sequence of strings, not a single string")
    command = _text("command", command)
    words = [_text(f"args[{i}]", a) for i, a in enumerate(args)]
    prefix = run_args(label=label, grace=grace, tier=tier, state_dir=state_dir, stdio_owner=stdio_owner)
    return find_bin(), [*prefix, "--", command, *words]


def _text(what: str, value: object) -> str:
    """A command-line word: a string, or a path (``os.PathLike`` of a string)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}: {value!r}")
    return value


def guard_self(
    *,
    label: Optional[str] = None,
    grace: Optional[str] = None,
    tier: Optional[str] = None,
    state_dir: Optional[str] = None,
    argv: Optional[Sequence[str]] = None,
    env: Optional[Mapping[str, str]] = None,
    stdio_owner: bool = True,
) -> None:
    """Re-runs this program under ``undertaker run``, keeping the pid its starter knows.

    Call it first thing in ``main`` (before threads, open servers or children). When the
    process is already inside a guarded tree (``$UNDERTAKER_TREE`` is set) it returns at
    once. Otherwise it never returns: this process execs ``undertaker run --owner <its
    own pid> -- <this program's command line>``. The pid the shell (or service manager)
    knows is now undertaker's sentinel, which relays signals, and exits with the
    program's status; the program runs again from the start as the guardian's command,
    with ``$UNDERTAKER_TREE`` set, so this call returns there and ``main`` goes on.

    The owner is the process itself, not its parent: the host keeps living when the
    shell that started it exits (``nohup``, a launcher script), and everything it spawns
    dies with it. A ``kill -9`` of the program, of the pid the shell knows, or of the
    guardian tears the whole tree down (docs/GUARANTEES.md, "Undertaker's own kill -9").
    The guardian hands the terminal's foreground to the program, so interactive
    programs keep reading it and Ctrl-C reaches them.

    When the program's stdin and stdout are its host's pipes, the host's death ends the
    tree too, even through a launcher that outlives the host (``uvx``, a shell): the
    stdio peer is an owner (docs/GUARANTEES.md, "The stdio peer"; ``stdio_owner=False``
    turns that off).

    ``argv`` defaults to the interpreter's own command line (``sys.orig_argv``);
    ``env`` to ``os.environ``. Raises ``FileNotFoundError`` if the binary is missing
    and ``OSError`` if it cannot be executed.
    """
    if os.environ.get(TREE_MARKER):
        return
    if not sys.platform.startswith("linux"):
        raise NotImplementedError("guard_self() needs Linux (undertaker run is Linux-only for now)")
    binary = find_bin()
    command = list(argv) if argv is not None else _own_command_line()
    options = run_args(
        label=label, grace=grace, tier=tier, state_dir=state_dir, owner=os.getpid(), stdio_owner=stdio_owner
    )
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os.execve(binary, [binary, *options, "--", *command], dict(os.environ if env is None else env))


def _own_command_line() -> List[str]:
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return [sys.executable, *orig[1:]]
    return [sys.executable, *sys.argv]


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import version

        return version("undertaker")
    raise AttributeError(name)
