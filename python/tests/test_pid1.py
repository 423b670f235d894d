"""The Dockerfile recipe (ENTRYPOINT ["undertaker","run","--"]): undertaker as PID 1 of
a private PID namespace, started the way a container runtime starts its entrypoint.
It reaps orphans that are reparented to it, forwards SIGINT to the command, and on
SIGTERM (`docker stop`) tears the tree down and exits."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import List

from conftest import Lines, Venv, base_env, describe, need, processes_with, wait_until

# Runs as CMD, pid 2 of the namespace (/proc there shows only the namespace).
SCRIPT = r'''
trap 'echo "CMD got INT"; exit 3' INT
echo "PID1 $(tr '\0' ' ' </proc/1/cmdline | cut -d' ' -f2)"
orphan=$(sh -c 'sleep 0.3 >/dev/null & echo $!')  # its parent exits: reparented to PID 1
# Until it is reaped (a zombie keeps its /proc entry), at most 30 s: no guess at how
# long a loaded machine takes to run a 0.3 s sleep.
i=0
while [ -e "/proc/$orphan" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
zombies=0
for f in /proc/[0-9]*/stat; do
  state=$(sed 's/.*) //' "$f" 2>/dev/null | cut -d' ' -f1)
  [ "$state" = Z ] && zombies=$((zombies + 1))
done
echo "ZOMBIES $zombies"
sh -c 'sleep 3600 &'                # an orphan that lives: must go at teardown
echo READY
while :; do sleep 0.1; done
'''


def cmdline_bytes(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def unshare_argv() -> List[str]:
    argv = ["unshare"]
    if os.geteuid() != 0:
        argv += ["--user", "--map-root-user"]
    return argv + ["--pid", "--fork", "--mount-proc", "--"]


def child_of(pid: int) -> int:
    def children() -> List[int]:
        try:
            return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    assert wait_until(lambda: bool(children()), timeout=30)
    return children()[0]


def start(venv: Venv, state_dir: Path, token: str) -> subprocess.Popen:
    need(shutil.which("unshare") is not None, "unshare not installed")
    probe = subprocess.run([*unshare_argv(), "true"], capture_output=True, text=True)
    need(probe.returncode == 0, f"no private PID namespace here: {probe.stderr.strip()}")
    return subprocess.Popen(
        [*unshare_argv(), venv.undertaker, "run", "--grace", "300ms", "--", "sh", "-c", SCRIPT],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        env=base_env(token, state_dir),
    )


def test_pid1_reaps_orphans_and_forwards_sigint(venv: Venv, state_dir: Path, token: str) -> None:
    proc = start(venv, state_dir, token)
    try:
        lines = Lines(proc)
        assert lines.expect("PID1") == "run"
        assert lines.expect("ZOMBIES") == "0"
        lines.expect("READY")
        pid1 = child_of(proc.pid)  # undertaker, seen from here
        os.kill(pid1, signal.SIGINT)
        lines.expect("CMD got INT")
        assert proc.wait(30) == 3
        assert wait_until(lambda: not processes_with(token), timeout=30), describe(processes_with(token))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_pid1_sigterm_tears_the_tree_down(venv: Venv, state_dir: Path, token: str) -> None:
    proc = start(venv, state_dir, token)
    try:
        lines = Lines(proc)
        lines.expect("READY")
        orphan = lambda: [p for p in processes_with(token) if cmdline_bytes(p) == b"sleep\x003600\x00"]
        assert wait_until(lambda: bool(orphan()), timeout=30), describe(processes_with(token))
        os.kill(child_of(proc.pid), signal.SIGTERM)
        assert proc.wait(30) != 0
        assert wait_until(lambda: not processes_with(token), timeout=30), describe(processes_with(token))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
