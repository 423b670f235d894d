"""Shared fixtures: the wheel installed into a fresh virtual environment, scratch
state directories, and process accounting by a per-test environment token.

Every process a test starts carries ``UT_TEST_TOKEN=<unique>`` in its environment
(undertaker passes the environment down to the whole tree), so survivors are found by
reading ``/proc/*/environ`` and nothing the test did not start is ever looked at
twice, let alone signalled. Missing prerequisites skip with a reason locally and FAIL
when ``CI=true``.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
MCP_PIN = "mcp==2.3.0"
SERVER_EVERYTHING = Path(
    os.environ.get(
        "UNDERTAKER_MCP_SERVER",
        REPO / "target/mcp-server/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    )
)


def need(condition: bool, reason: str) -> None:
    """Skips with a reason, or fails under CI=true (a CI run must test everything)."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


class Venv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = str(root / "bin" / "python")
        self.bin = root / "bin"
        self.undertaker = str(root / "bin" / "undertaker")


@pytest.fixture(scope="session")
def wheel() -> Path:
    wheels = sorted(glob.glob(str(REPO / "target/wheels/undertaker-*.whl")))
    if os.environ.get("UNDERTAKER_WHEEL"):
        wheels = [os.environ["UNDERTAKER_WHEEL"]]
    assert len(wheels) == 1, f"expected one wheel in target/wheels (run scripts/build-wheel.sh), found {wheels}"
    return Path(wheels[0])


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
    """A fresh virtual environment with the wheel and the real `mcp` package."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    env = Venv(root)
    subprocess.run(
        [env.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel), MCP_PIN],
        check=True,
    )
    return env


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir()
    return d


@pytest.fixture
def token() -> Iterator[str]:
    """A unique marker for this test's processes; leftovers are killed after the test
    (each one re-checked to still carry the marker right before its signal)."""
    value = f"ut-{uuid.uuid4().hex}"
    yield value
    for pid in processes_with(value):
        if value in environ_of(pid).get("UT_TEST_TOKEN", ""):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def environ_of(pid: int) -> Dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def state_of(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat.rsplit(")", 1)[1].split()[0]


def processes_with(token: str) -> List[int]:
    """Live (non-zombie) processes whose environment carries UT_TEST_TOKEN=token."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and environ_of(int(entry)).get("UT_TEST_TOKEN") == token:
            if state_of(int(entry)) not in ("Z", "X", "gone"):
                found.append(int(entry))
    return found


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Polls predicate until true or the (generous) timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def describe(pids: List[int]) -> str:
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = "?"
        out.append(f"{pid} [{state_of(pid)}] {cmd.strip()}")
    return "; ".join(out)


def base_env(token: str, state_dir: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("UNDERTAKER_TREE", "UNDERTAKER_BIN")}
    env["UT_TEST_TOKEN"] = token
    env["UNDERTAKER_STATE_DIR"] = str(state_dir)
    return env


class Lines:
    """Reads a process's stdout on a thread, so waiting for a line has a timeout."""

    def __init__(self, proc: subprocess.Popen) -> None:
        import queue
        import threading

        self.seen: List[str] = []
        self._queue: "queue.Queue[Optional[str]]" = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self._thread.start()

    def _pump(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, prefix: str, timeout: float = 90.0) -> str:
        """The rest of the next line starting with prefix (fails on EOF or timeout)."""
        import queue

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(0.01, left))
            except queue.Empty:
                line = None if left <= 0 else ""
                if left > 0:
                    continue
            if line is None:
                raise AssertionError(f"no line starting with {prefix!r}; output so far: {self.seen!r}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
