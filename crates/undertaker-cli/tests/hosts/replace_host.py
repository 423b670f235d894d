"""A host that starts the same labelled MCP-style server again and again, for
tests/replace.rs: what a host that reconnects or restarts a server does, each time
through an optional launcher (`sh -c`, `npx`, `uvx`) between it and undertaker.

    replace_host.py DIR COUNT WAIT -- LAUNCHER... UNDERTAKER RUN-ARGS...

Starts `LAUNCHER... UNDERTAKER RUN-ARGS... -- sh -c 'touch DIR/ready-<host>-<n>; exec
sleep 1000'` COUNT times, one after the other, each with its stdin and stdout pipes
held by this host (the server never reads them), waiting for each server to run before
the next. Then prints one JSON line: its pid, the pid it started each time, and
(when WAIT is 1) the exit status of each but the last once it has exited (null when
it did not within 60 s). Then waits for end of file on its stdin, terminates what it started and exits.
With STDIO=socketpair in its environment, each server's stdin and stdout are one end
of a socket pair instead (as Node's child_process gives them). Standard library only.
"""
import json
import os
import socket
import subprocess
import sys
import time

DIR = sys.argv[1]
COUNT = int(sys.argv[2])
WAIT = sys.argv[3] == "1"
PREFIX = sys.argv[5:]
KEPT = []


def wait_for(cond, limit=60.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def start(n):
    ready = os.path.join(DIR, "ready-%d-%d" % (os.getpid(), n))
    server = ["--", "sh", "-c", 'touch "$0"; exec sleep 1000', ready]
    if os.environ.get("STDIO") == "socketpair":
        ours, theirs = socket.socketpair()
        proc = subprocess.Popen(PREFIX + server, stdin=theirs, stdout=theirs)
        theirs.close()
        KEPT.append(ours)
    else:
        proc = subprocess.Popen(PREFIX + server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    wait_for(lambda: os.path.exists(ready) or proc.poll() is not None)
    return proc


procs = [start(n) for n in range(COUNT)]
statuses = []
for proc in procs[:-1] if WAIT else []:
    wait_for(lambda: proc.poll() is not None)
    statuses.append(proc.poll())
print(json.dumps({"host": os.getpid(), "pids": [p.pid for p in procs], "statuses": statuses}), flush=True)
sys.stdin.read()
for proc in procs:
    if proc.poll() is None:
        proc.terminate()
for proc in procs:
    proc.wait()
