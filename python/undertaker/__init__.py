"""Guard the process trees a Python program spawns.

The wheel installs the ``undertaker`` command; this module finds it and puts it in
front of the commands a host starts:

- :func:`find_bin` — the path of the installed ``undertaker`` binary;
- :func:`wrap` — ``(command, args)`` prefixed with ``undertaker run --``, for
  ``StdioServerParameters`` and every API that takes a command and its arguments;
- :func:`guard_self` — first thing in ``main``: the rest of the program runs under
  ``undertaker run``, so everything it ever spawns dies with it;
- :class:`Supervisor` — one ``undertaker supervise`` per host, for processes the host
  spawns itself (``spawn``, ``adopt``, ``register``).

No dependencies beyond the standard library. See docs/INTEGRATIONS.md in the
repository for recipes.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from typing import List, Mapping, Optional, Sequence, Tuple

from ._supervise import GuardedProcess, Supervisor, SupervisorError

__all__ = [
    "GuardedProcess",
    "Supervisor",
    "SupervisorError",
    "TREE_MARKER",
    "find_bin",
    "guard_self",
    "run_args",
    "wrap",
]

#: Environment variable undertaker sets on every process of a guarded tree.
TREE_MARKER = "UNDERTAKER_TREE"

_EXE = "undertaker.exe" if os.name == "nt" else "undertaker"


def find_bin() -> str:
    """Returns the path of the ``undertaker`` binary that came with this package.

    Looks, in order, at ``$UNDERTAKER_BIN``, the scripts directory of the install
    scheme this module lives in (virtual environment, system, ``--user``, ``--target``
    or ``--prefix``), then ``PATH``. Raises ``FileNotFoundError`` if none has it.
    """
    override = os.environ.get("UNDERTAKER_BIN")
    if override:
        if _is_executable(override):
            return override
        raise FileNotFoundError(f"UNDERTAKER_BIN={override} is not an executable file")
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
    for directory in candidates:
        path = os.path.join(directory, _EXE)
        if _is_executable(path):
            return path
    found = shutil.which(_EXE)
    if found:
        return found
    raise FileNotFoundError(
        "the undertaker binary was not found (looked in "
        + ", ".join(candidates)
        + " and PATH); reinstall the undertaker package or set UNDERTAKER_BIN"
    )


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
) -> List[str]:
    """The ``undertaker run`` options (without the binary and without ``--``)."""
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
    return args


def wrap(
    command: str,
    args: Sequence[str] = (),
    *,
    label: Optional[str] = None,
    grace: Optional[str] = None,
    tier: Optional[str] = None,
    state_dir: Optional[str] = None,
) -> Tuple[str, List[str]]:
    """Returns ``(command, args)`` that run the given command under ``undertaker run``.

    The owner is whoever starts the returned command (undertaker's parent), so the
    command's whole tree dies when the caller dies, ``kill -9`` included::

        command, args = undertaker.wrap("npx", ["-y", "@modelcontextprotocol/server-everything"])
        params = StdioServerParameters(command=command, args=args)

    ``label``, ``grace`` (e.g. ``"2s"``), ``tier`` and ``state_dir`` are passed to
    ``undertaker run`` as the options of the same names.
    """
    if isinstance(args, (str, bytes)):
        raise TypeError("args must be a sequence of strings, not a single string")
    prefix = run_args(label=label, grace=grace, tier=tier, state_dir=state_dir)
    return find_bin(), [*prefix, "--", command, *args]


def guard_self(
    *,
    label: Optional[str] = None,
    grace: Optional[str] = None,
    tier: Optional[str] = None,
    state_dir: Optional[str] = None,
    argv: Optional[Sequence[str]] = None,
    env: Optional[Mapping[str, str]] = None,
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
    options = run_args(label=label, grace=grace, tier=tier, state_dir=state_dir, owner=os.getpid())
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
