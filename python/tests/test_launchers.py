"""Zero-install launchers between a host and undertaker (docs/INTEGRATIONS.md,
"Zero-install"): `uvx`, `uv tool run` and `pipx run` with the built wheel, `python -m
undertaker` and a `guard_self()` program behind a shell that does not exec. A host
holds the server's stdin and stdout pipes and is kill -9ed while the launcher lives on;
undertaker sees its stdio peer gone and tears the tree down: 0 processes left, the
launcher included (it exits with undertaker).

The server never reads its stdin and leaves a `setsid` daemon behind. (`pipx run`
execs the tool on Linux, so it never stood between them: its case is a guard.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import Venv, base_env, describe, need, processes_with, wait_until

UV_PIN = "uv==0.13.9"
PIPX_PIN = "pipx==1.18.4"

# The host: holds the far ends of its child's stdin and stdout, and waits.
HOST = r"""
import subprocess, sys, time
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
print(child.pid, flush=True)
time.sleep(3600)
"""

# A shell that runs its command and then exits: it stays between the host and undertaker.
SHELL_LAUNCHER = ["sh", "-c", '"$0" "$@"; exit $?']


def server(up: Path) -> List[str]:
    return ["sh", "-c", f"setsid sleep 1000 & echo up > {up}; exec sleep 1001"]


@pytest.fixture(scope="session")
def launchers(venv: Venv) -> Venv:
    """uv and pipx, pip-installed into the test venv."""
    installed = subprocess.run(
        [venv.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", UV_PIN, PIPX_PIN],
    )
    need(installed.returncode == 0, f"cannot pip install {UV_PIN} {PIPX_PIN}")
    return venv


def kill_host_and_count(host_argv: List[str], env: Dict[str, str], up: Path, token: str, tmp_path: Path) -> None:
    host_py = tmp_path / "host.py"
    host_py.write_text(HOST)
    host = subprocess.Popen([sys.executable, str(host_py), *host_argv], stdin=subprocess.DEVNULL, env=env)
    try:
        # A launcher's first run may set up a cache or an environment: generous.
        assert wait_until(up.exists, timeout=180), "the server never started: " + describe(processes_with(token))
        assert wait_until(lambda: len(processes_with(token)) >= 4), describe(processes_with(token))
        os.kill(host.pid, signal.SIGKILL)
        assert host.wait(30) == -signal.SIGKILL
        assert wait_until(lambda: not processes_with(token), timeout=30), "survivors: " + describe(
            processes_with(token)
        )
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def launcher_env(token: str, state_dir: Path, tmp_path: Path, venv: Venv) -> Dict[str, str]:
    env = base_env(token, state_dir)
    env["PATH"] = f"{venv.bin}{os.pathsep}{env.get('PATH', '')}"
    # Caches and tool homes of this test only.
    env["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
    env["UV_TOOL_DIR"] = str(tmp_path / "uv-tools")
    env["PIPX_HOME"] = str(tmp_path / "pipx-home")
    env["PIPX_BIN_DIR"] = str(tmp_path / "pipx-bin")
    return env


RUN = ["undertaker", "run", "--grace", "300ms", "--"]


@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param(lambda wheel: ["uvx", "--offline", "--from", str(wheel)], id="uvx"),
        pytest.param(lambda wheel: ["uv", "tool", "run", "--offline", "--from", str(wheel)], id="uv-tool-run"),
        pytest.param(lambda wheel: ["pipx", "run", "--spec", str(wheel)], id="pipx-run"),
    ],
)
def test_host_kill9_behind_a_python_launcher_leaves_nothing(
    launcher, launchers: Venv, wheel: Path, tmp_path: Path, state_dir: Path, token: str
) -> None:
    up = tmp_path / "up"
    env = launcher_env(token, state_dir, tmp_path, launchers)
    kill_host_and_count([*launcher(wheel), *RUN, *server(up)], env, up, token, tmp_path)


def test_host_kill9_behind_a_shell_and_python_m_undertaker(
    venv: Venv, tmp_path: Path, state_dir: Path, token: str
) -> None:
    up = tmp_path / "up"
    argv = [*SHELL_LAUNCHER, venv.python, "-m", "undertaker", "run", "--grace", "300ms", "--", *server(up)]
    kill_host_and_count(argv, base_env(token, state_dir), up, token, tmp_path)


GUARDED_PROGRAM = r"""
import subprocess, sys, time
import undertaker
undertaker.guard_self(grace="300ms")
subprocess.Popen(["sh", "-c", "setsid sleep 1000 & exec sleep 1001"])
open(sys.argv[1], "w").write("up")
time.sleep(3600)
"""


def test_host_kill9_behind_a_shell_in_front_of_guard_self(
    venv: Venv, tmp_path: Path, state_dir: Path, token: str
) -> None:
    """guard_self()'s owner is the program itself, which lives on behind the
    launcher: its stdio peer (the host) is what ends it."""
    up = tmp_path / "up"
    program = tmp_path / "program.py"
    program.write_text(GUARDED_PROGRAM)
    argv = [*SHELL_LAUNCHER, venv.python, str(program), str(up)]
    kill_host_and_count(argv, base_env(token, state_dir), up, token, tmp_path)


# A host that starts the same labelled server twice, as one that reconnects does: the
# second start, with --replace, ends the first (the same host, behind a new launcher).
RECONNECTING_HOST = r"""
import os, subprocess, sys, time
up1, up2, *argv = sys.argv[1:]
def start(up):
    cmd = [a.replace("@UP@", up) for a in argv]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
first = start(up1)
while not os.path.exists(up1):
    time.sleep(0.05)
second = start(up2)
time.sleep(3600)
"""


def cmdline_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def live_trees(venv: Venv, state_dir: Path, label: str) -> List[dict]:
    import json

    out = subprocess.run(
        [venv.undertaker, "--state-dir", str(state_dir), "ps", "--json"], capture_output=True, text=True
    )
    return [t for t in json.loads(out.stdout or "[]") if t.get("label") == label and t.get("state") == "running"]


@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param(lambda wheel: ["uvx", "--offline", "--from", str(wheel)], id="uvx"),
        pytest.param(lambda wheel: [*SHELL_LAUNCHER], id="sh-c"),
    ],
)
def test_replace_through_a_launcher_leaves_one_tree(
    launcher, launchers: Venv, wheel: Path, tmp_path: Path, state_dir: Path, token: str
) -> None:
    up1, up2 = tmp_path / "up1", tmp_path / "up2"
    env = launcher_env(token, state_dir, tmp_path, launchers)
    server_argv = ["sh", "-c", "setsid sleep 1000 & echo up > @UP@; exec sleep 1001"]
    run = ["undertaker", "run", "--label", "srv", "--replace", "--grace", "300ms", "--", *server_argv]
    host_py = tmp_path / "host.py"
    host_py.write_text(RECONNECTING_HOST)
    host = subprocess.Popen(
        [sys.executable, str(host_py), str(up1), str(up2), *launcher(wheel), *run], stdin=subprocess.DEVNULL, env=env
    )
    try:
        assert wait_until(up2.exists, timeout=180), "the second server never started: " + describe(
            processes_with(token)
        )
        assert wait_until(lambda: len(live_trees(launchers, state_dir, "srv")) == 1), live_trees(
            launchers, state_dir, "srv"
        )
        # The first tree is gone, its launcher included: nothing names up1 any more
        # (its setsid daemon never did: the one sleep 1000 left is the second's).
        def first_start() -> List[int]:
            return [p for p in processes_with(token) if p != host.pid and str(up1) in cmdline_of(p)]

        assert wait_until(lambda: not first_start()), describe(first_start())
        daemons = [p for p in processes_with(token) if cmdline_of(p) == "sleep 1000"]
        assert len(daemons) == 1, describe(processes_with(token))
    finally:
        os.kill(host.pid, signal.SIGKILL)
        host.wait(30)
    assert wait_until(lambda: not processes_with(token), timeout=30), "survivors: " + describe(processes_with(token))
