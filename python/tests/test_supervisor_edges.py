"""Supervisor edges (issue #16): a handle's wait() once the supervisor was kill -9ed,
and stdio specs Popen accepts (stderr=STDOUT) or that are no descriptor at all."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import Venv, base_env

HOST = r'''
import os, signal, subprocess, sys
import undertaker

sup = undertaker.Supervisor(grace="300ms", tier="subreaper").start()
merged = sup.spawn(["sh", "-c", "echo out; echo err >&2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
print("MERGED", sorted(merged.stdout.read().decode().split()), merged.wait(30), flush=True)
for bad in ({"stdout": subprocess.STDOUT}, {"stdin": -7}):
    try:
        sup.spawn(["true"], **bad)
        print("BAD accepted", flush=True)
    except ValueError as e:
        print("BAD", type(e).__name__, e, flush=True)
# Their stdio is not our output pipe: the test reads it to its end.
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
sleeper = sup.spawn(["sleep", "1000"], **quiet)
adoptee = subprocess.Popen(["sleep", "1000"], **quiet)
adopted = sup.adopt(adoptee)
os.kill(sup.pid, signal.SIGKILL)
for name, handle in (("spawned", sleeper), ("adopted", adopted)):
    try:
        print("WAIT", name, handle.wait(timeout=20), flush=True)
    except subprocess.TimeoutExpired:
        print("WAIT", name, "timeout", flush=True)
try:
    sup.list()
    print("AFTER answered", flush=True)
except RuntimeError as e:
    print("AFTER", type(e).__name__, flush=True)
'''


def test_waits_end_when_the_supervisor_is_killed_and_stdio_specs_are_checked(
    venv: Venv, tmp_path: Path, state_dir: Path, token: str
) -> None:
    host = tmp_path / "host.py"
    host.write_text(HOST)
    done = subprocess.run(
        [venv.python, str(host)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=base_env(token, state_dir),
        timeout=120,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, (lines, done.stderr)
    assert lines[0] == "MERGED ['err', 'out'] 0", lines
    assert lines[1].startswith("BAD ValueError stdout=subprocess.STDOUT"), lines
    assert lines[2].startswith("BAD ValueError stdin=-7"), lines
    # kill -9 of the supervisor: every handle's wait() returns (None: no status came).
    assert lines[3:5] == ["WAIT spawned None", "WAIT adopted None"], lines
    assert lines[5] == "AFTER RuntimeError", lines
    # The token fixture ends the two sleepers the dead supervisor left.
