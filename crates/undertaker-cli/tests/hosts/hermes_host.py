"""A host speaking Hermes Agent's death-supervisor contract, for tests/hermes.rs.

What it reproduces of Hermes (tools/mcp_tool.py upstream, docs/INTEGRATIONS.md):
- the supervisor is started as ``SUPERVISOR + ["--parent-pgid", str(os.getpgid(0))]``
  with stdin a text pipe, stdout and stderr to /dev/null (replies are never read),
  ``start_new_session=True`` and ``close_fds=True``;
- it is fed ``register <pgid>`` / ``unregister <pgid>`` lines; the set of groups it
  wants reaped is the host's, not the pipe's;
- on every change, groups with no member left (``killpg(pgid, 0)`` says no such
  process) are forgotten and unregistered; an ambiguous answer keeps them;
- when the supervisor is found dead (``poll()``), the next change starts a new one and
  replays the whole set; a failed write drops it for the next change to restart;
- an MCP server is its own session and group (``start_new_session=True``); a server
  whose leader died leaving a member behind stays registered (the orphan ``node``
  that mcp-remote leaves).

The test drives it through stdin, one command per line, and reads one JSON answer per
command on stdout:
    server NAME          start a server group (a shell and its child), register it
    kill_leader NAME     SIGKILL the server's leader only (its child stays, an orphan)
    kill_group NAME      SIGKILL the whole group (the host does not unregister it)
    unregister NAME      the server shut down cleanly: unregister its group
    kill_supervisor      SIGKILL the supervisor (noticed at the next change)
    supervisor           the current supervisor's pid (null when none)
Standard library only.
"""
import json
import os
import signal
import subprocess
import sys

SUPERVISOR = sys.argv[1:]

_supervisor = None
_supervised = set()
_servers = {}


def _spawn_supervisor():
    try:
        return subprocess.Popen(
            SUPERVISOR + ["--parent-pgid", str(os.getpgid(0))],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, text=True)
    except Exception:
        return None


def _prune():
    stale = set()
    for pgid in list(_supervised):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            stale.add(pgid)
        except OSError:
            pass
    _supervised.difference_update(stale)
    return stale


def update(verb, pgids):
    global _supervisor
    wanted = set(pgids)
    if not wanted:
        return
    if verb == "register":
        _supervised.update(wanted)
    else:
        _supervised.difference_update(wanted)
    stale = _prune()
    proc = _supervisor
    if proc is None or proc.poll() is not None:
        if not _supervised:
            return
        proc = _spawn_supervisor()
        _supervisor = proc
        if proc is None:
            return
        payload = "".join("register %d\n" % pgid for pgid in sorted(_supervised))
    else:
        payload = "".join("%s %d\n" % (verb, pgid) for pgid in sorted(wanted))
        payload += "".join("unregister %d\n" % pgid for pgid in sorted(stale))
    try:
        proc.stdin.write(payload)
        proc.stdin.flush()
    except (BrokenPipeError, ValueError, OSError):
        _supervisor = None
        return
    if not _supervised:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except Exception:
            pass
        _supervisor = None


def answer(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    cmd, args = words[0], words[1:]
    if cmd == "server":
        leader = subprocess.Popen(["sh", "-c", "sleep 1000 & echo $!; wait"],
                                  stdout=subprocess.PIPE, start_new_session=True)
        child = int(leader.stdout.readline())
        _servers[args[0]] = (leader, child)
        update("register", [leader.pid])
        answer({"pgid": leader.pid, "leader": leader.pid, "child": child})
    elif cmd == "kill_leader":
        leader, _ = _servers[args[0]]
        leader.kill()
        leader.wait()
        answer({"ok": True})
    elif cmd == "kill_group":
        leader, _ = _servers[args[0]]
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
        answer({"ok": True})
    elif cmd == "unregister":
        leader, _ = _servers[args[0]]
        update("unregister", [leader.pid])
        answer({"ok": True})
    elif cmd == "kill_supervisor":
        if _supervisor is not None:
            _supervisor.kill()
            _supervisor.wait()
        answer({"ok": True})
    elif cmd == "supervisor":
        alive = _supervisor is not None and _supervisor.poll() is None
        answer({"pid": _supervisor.pid if alive else None})
    else:
        answer({"error": "unknown command %s" % cmd})
