#!/usr/bin/env python3
"""Runs the code blocks of README.md and docs/INTEGRATIONS.md as a user would paste them,
so a recipe cannot rot (docs/INTEGRATIONS.md, "How the recipes are checked").

Every fenced block gets one verdict, printed with its place:
- run:     executed as written, in a scratch directory, with the built packages
           installed (python: a venv with the wheel and the pinned `mcp`; js: a project
           with the npm tarballs and the pinned MCP SDK, as an ES module; sh: bash from
           the repository root). It must exit 0 within the time limit and leave no
           process behind (each run's processes carry a token in their environment;
           survivors are counted through /proc, and only processes with the token are
           ever signalled).
- parse:   json, toml and ini (systemd units) are parsed.
- not run: the block says why on the line before it: `<!-- check: skip REASON -->`
           (a host CLI that is not installed here, a fragment of someone else's code).
- output:  a block without a language is a sample of output, not code.

A `sh`, `rust` or `dockerfile` block without a `<!-- check: run -->` or `<!-- check:
skip … -->` line is an error: whoever adds one decides. Needs target/wheels/*.whl
(scripts/build-wheel.sh) and target/npm/*.tgz (scripts/build-npm.sh).

Usage: scripts/check-doc-blocks.py [FILE.md ...]   (default: README.md docs/INTEGRATIONS.md)
"""

from __future__ import annotations

import configparser
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILES = ["README.md", "docs/INTEGRATIONS.md"]
TIME_LIMIT = 300
WORK = REPO / "target" / "doc-check"
DIRECTIVE = re.compile(r"^<!--\s*check:\s*(run|skip)\b\s*(.*?)\s*-->\s*$")
RUNNABLE = {"python", "js", "sh", "bash"}
PARSED = {"json", "toml", "ini"}


@dataclass
class Block:
    file: str
    line: int
    lang: str
    text: str
    directive: Optional[Tuple[str, str]]

    @property
    def place(self) -> str:
        return f"{self.file}:{self.line}"


def blocks_of(path: str) -> List[Block]:
    lines = (REPO / path).read_text().splitlines()
    found: List[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        start = i
        body: List[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        directive = None
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        if prev >= 0:
            d = DIRECTIVE.match(lines[prev].strip())
            if d:
                directive = (d.group(1), d.group(2))
        found.append(Block(path, start + 1, lang, "\n".join(body) + "\n", directive))
        i += 1
    return found


def pin(path: str, pattern: str) -> str:
    m = re.search(pattern, (REPO / path).read_text())
    if not m:
        sys.exit(f"check-doc-blocks: no pin {pattern!r} in {path}")
    return m.group(1)


class Environments:
    """The Python venv and the Node project the blocks run in, made once."""

    def __init__(self) -> None:
        self._python: Optional[Path] = None
        self._node: Optional[Path] = None

    def python(self) -> Path:
        if self._python is None:
            wheels = glob.glob(str(REPO / "target/wheels/undertaker-*.whl"))
            if len(wheels) != 1:
                sys.exit(f"check-doc-blocks: expected one wheel in target/wheels, found {wheels}")
            venv = WORK / "venv"
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            mcp = pin("python/tests/conftest.py", r'MCP_PIN = "([^"]+)"')
            subprocess.run(
                [str(venv / "bin/pip"), "install", "--quiet", "--disable-pip-version-check", wheels[0], mcp],
                check=True,
            )
            self._python = venv
        return self._python

    def node(self) -> Path:
        if self._node is None:
            project = WORK / "node"
            subprocess.run(["rm", "-rf", str(project)], check=True)
            project.mkdir(parents=True)
            (project / "package.json").write_text('{"name": "doc-check", "private": true}\n')
            tgz = sorted(glob.glob(str(REPO / "target/npm/*.tgz")))
            plat = f"{'linux'}-{'x64' if os.uname().machine == 'x86_64' else 'arm64'}"
            mine = [t for t in tgz if re.search(rf"/process-undertaker-(\d|{plat}-\d)", t)]
            if len(mine) != 2:
                sys.exit(f"check-doc-blocks: expected the main and the {plat} tarball in target/npm, found {tgz}")
            sdk = pin("npm/tests/package.test.js", r"const SDK_PIN = '([^']+)'")
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *mine, sdk],
                cwd=project,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            self._node = project
        return self._node


def survivors(token: str) -> List[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if f"UT_DOC_CHECK={token}".encode() in environ.split(b"\0"):
            found.append(int(entry))
    return found


def run(block: Block, envs: Environments) -> Optional[str]:
    """Runs one block; None when it passed, else why not."""
    token = uuid.uuid4().hex
    scratch = Path(tempfile.mkdtemp(prefix="doc-check-", dir=WORK))
    # The MCP SDKs hand a server only a few variables (HOME, PATH, ...), not
    # UNDERTAKER_STATE_DIR: a scratch HOME keeps the default state dir a scratch one
    # too, never the real ~/.local/state/undertaker.
    home = scratch / "home"
    home.mkdir()
    env = dict(
        os.environ,
        UT_DOC_CHECK=token,
        UNDERTAKER_STATE_DIR=str(scratch / "state"),
        HOME=str(home),
        # The toolchain stays where the real HOME has it (the README's `cargo run`).
        RUSTUP_HOME=os.environ.get("RUSTUP_HOME", os.path.expanduser("~/.rustup")),
        CARGO_HOME=os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo")),
    )
    env.pop("XDG_STATE_HOME", None)
    if block.lang == "python":
        venv = envs.python()
        script = scratch / "recipe.py"
        script.write_text(block.text)
        env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
        argv, cwd = [str(venv / "bin/python"), str(script)], scratch
    elif block.lang == "js":
        project = envs.node()
        script = project / f"recipe-{token[:8]}.mjs"
        script.write_text(block.text)
        env["PATH"] = f"{project / 'node_modules/.bin'}:{env['PATH']}"
        argv, cwd = ["node", str(script)], project
    else:
        argv, cwd = ["bash", "-euo", "pipefail", "-c", block.text], REPO
    started = time.monotonic()
    try:
        out = subprocess.run(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIME_LIMIT
        )
        verdict = None if out.returncode == 0 else f"exit {out.returncode}"
        tail = (out.stdout + out.stderr).decode(errors="replace").strip().splitlines()[-15:]
    except subprocess.TimeoutExpired:
        verdict, tail = f"still running after {TIME_LIMIT} s", []
    # What a finished recipe left: its tree must be gone (a teardown may still be
    # finishing its grace period: a few seconds' patience).
    deadline = time.monotonic() + 10
    while survivors(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = survivors(token)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)  # carries our token: ours
        except OSError:
            pass
    if left and verdict is None:
        verdict = f"left {len(left)} process(es) behind"
    if verdict is not None:
        return verdict + "".join(f"\n      | {t}" for t in tail)
    print(f"  ran     {block.place} ({block.lang}, {time.monotonic() - started:.1f} s)")
    return None


def parse(block: Block) -> Optional[str]:
    try:
        if block.lang == "json":
            json.loads(block.text)
        elif block.lang == "toml":
            tomllib.loads(block.text)
        else:
            configparser.ConfigParser(strict=False, interpolation=None).read_string(block.text)
    except Exception as e:  # every parser's own error
        return f"does not parse as {block.lang}: {e}"
    print(f"  parsed  {block.place} ({block.lang})")
    return None


def main(files: List[str]) -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    envs = Environments()
    counts: Dict[str, int] = {"ran": 0, "parsed": 0, "not run": 0, "output": 0}
    failures: List[str] = []
    for path in files:
        for block in blocks_of(path):
            kind, reason = block.directive or ("", "")
            if kind == "skip":
                if not reason:
                    failures.append(f"{block.place}: `check: skip` needs a reason")
                    continue
                counts["not run"] += 1
                print(f"  not run {block.place} ({block.lang or 'text'}): {reason}")
            elif block.lang == "" or block.lang == "text":
                counts["output"] += 1
            elif block.lang in PARSED:
                why = parse(block)
                counts["parsed"] += why is None
                if why:
                    failures.append(f"{block.place}: {why}")
            elif block.lang in RUNNABLE and (kind == "run" or block.lang in {"python", "js"}):
                why = run(block, envs)
                counts["ran"] += why is None
                if why:
                    failures.append(f"{block.place}: {why}")
            else:
                failures.append(
                    f"{block.place}: a {block.lang} block needs `<!-- check: run -->` or "
                    "`<!-- check: skip REASON -->` on the line before it"
                )
    total = sum(counts.values()) + len(failures)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    print(f"doc blocks: {total} in {', '.join(files)}: {summary}, {len(failures)} failed")
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT_FILES))
