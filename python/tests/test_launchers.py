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
