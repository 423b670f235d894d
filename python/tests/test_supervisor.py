"""Supervisor (the client of `undertaker supervise`, docs/SUPERVISE.md): a Python host
spawns, adopts and registers trees, and is kill -9ed: 0 survivors. Skips — also under
CI — only when the binary has no `supervise` command at all."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import Lines, Venv, base_env, describe, processes_with, wait_until

HOST = r'''
import json, subprocess, time
import undertaker

with undertaker.Supervisor(grace="500ms", label="py-supervisor") as sup:
    print("HELLO", json.dumps(sup.hello), flush=True)
    spawned = sup.spawn(["sh", "-c", "sleep 3600 & sleep 3600"])
    print("SPAWNED", spawned.pid, spawned.tree, flush=True)
    # stdio handed over as file descriptors on the socket channel, Popen-style
    echo = sup.spawn(["sh", "-c", "read x; echo got:$x; exit 5"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    echo.stdin.write(b"hi\n")
    echo.stdin.close()
    print("ECHO", echo.stdout.readline().decode().strip(), echo.wait(30), flush=True)
    doomed = sup.spawn(["sh", "-c", "sleep 3600 & sleep 3600"])
    doomed.kill()
    print("KILLED", doomed.tree not in [t["tree"] for t in sup.list()], flush=True)
    adoptee = subprocess.Popen(["sh", "-c", "sleep 3600 & sleep 3600"], start_new_session=True)
    adopted = sup.adopt(adoptee)
    print("ADOPTED", adoptee.pid, adopted.tree, flush=True)
    group = subprocess.Popen(["sh", "-c", "sleep 3600 & sleep 3600"], start_new_session=True)
    print("REGISTERED", group.pid, json.dumps(sup.register(group.pid)), flush=True)
    try:
        sup.adopt(1)
        print("REFUSED none", flush=True)
    except undertaker.SupervisorError as e:
        print("REFUSED", e.code, flush=True)
    print("TREES", len(sup.list()), flush=True)
    print("READY", flush=True)
    time.sleep(3600)
'''


def has_supervise(binary: str) -> bool:
    return subprocess.run([binary, "supervise", "--help"], capture_output=True).returncode == 0


def test_supervisor_host_kill9(venv: Venv, tmp_path: Path, state_dir: Path, token: str) -> None:
    if not has_supervise(venv.undertaker):
        pytest.skip("this undertaker binary has no `supervise` command")
    host_py = tmp_path / "host.py"
    host_py.write_text(HOST)
    host = subprocess.Popen(
        [venv.python, str(host_py)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=base_env(token, state_dir)
    )
    try:
        lines = Lines(host)
        lines.expect("HELLO")
        lines.expect("SPAWNED")
        assert lines.expect("ECHO") == "got:hi 5"
        assert lines.expect("KILLED") == "True"
        lines.expect("ADOPTED")
        lines.expect("REGISTERED")
        assert lines.expect("REFUSED") != "none"
        assert lines.expect("TREES") == "3"
        lines.expect("READY")
        # Waited for: a process that is exec'ing reads an empty environment for a moment.
        assert wait_until(lambda: len(processes_with(token)) >= 8), describe(processes_with(token))
        os.kill(host.pid, signal.SIGKILL)
        host.wait(30)
        assert wait_until(lambda: not processes_with(token), timeout=30), "survivors: " + describe(processes_with(token))
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
