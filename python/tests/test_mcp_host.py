"""A host built on the real `mcp` package starts server-everything through wrap(),
calls a tool, and is kill -9ed: 0 processes of the server's tree remain."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import List

from conftest import SERVER_EVERYTHING, Lines, Venv, base_env, describe, need, processes_with, wait_until

HOST = r'''
import asyncio, os, sys
import undertaker
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    command, args = undertaker.wrap("node", [sys.argv[1], "stdio"], label="py-mcp-host", grace="500ms")
    # The SDK passes only a few variables by default; hand down the test's marker.
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("echo", {"message": "through undertaker"})
            print("ECHO", result.content[0].text, flush=True)
            print("READY", flush=True)
            await asyncio.sleep(3600)

asyncio.run(main())
'''


def test_mcp_host_kill9_leaves_no_server_process(venv: Venv, tmp_path: Path, state_dir: Path, token: str) -> None:
    need(shutil.which("node") is not None, "node not installed")
    need(SERVER_EVERYTHING.is_file(), f"server-everything not installed at {SERVER_EVERYTHING} (see .ci/run)")
    host_py = tmp_path / "host.py"
    host_py.write_text(HOST)
    host = subprocess.Popen(
        [venv.python, str(host_py), str(SERVER_EVERYTHING)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        env=base_env(token, state_dir),
    )
    try:
        lines = Lines(host)
        assert "through undertaker" in lines.expect("ECHO")
        lines.expect("READY")
        tree = lambda: [p for p in processes_with(token) if p != host.pid]  # noqa: E731

        def node_in(pids: List[int]) -> bool:
            for p in pids:
                try:
                    if b"node" in Path(f"/proc/{p}/cmdline").read_bytes():
                        return True
                except OSError:
                    pass
            return False

        # The guardian and node (at least) carry the marker besides the host. Waited for:
        # a process that is exec'ing reads an empty environment for a moment.
        assert wait_until(lambda: len(tree()) >= 2 and node_in(tree())), describe(tree())
        os.kill(host.pid, signal.SIGKILL)
        assert host.wait(30) == -signal.SIGKILL
        assert wait_until(lambda: not processes_with(token), timeout=30), "survivors: " + describe(processes_with(token))
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
