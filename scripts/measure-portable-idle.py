#!/usr/bin/env python3
"""CPU an idle `supervise --tier portable` uses holding N `sleep` trees
(docs/SUPERVISE.md, "The portable tier").

Usage: scripts/measure-portable-idle.py UNDERTAKER N [N...]
For each N: starts a supervisor in a scratch state dir, spawns N trees of
`sleep 1000`, waits 3 s, then reads the supervisor's user+system CPU time over
10 s (/proc/PID/stat). Closing its input ends it (every tree torn down).
"""
import json, os, subprocess, sys, tempfile, time

def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def measure(ut, n, window=10.0):
    with tempfile.TemporaryDirectory(prefix="measure-portable.") as state:
        env = dict(os.environ)
        env.pop("UNDERTAKER_TREE", None)
        sup = subprocess.Popen([ut, "--state-dir", state, "supervise", "--tier", "portable"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        for i in range(n):
            req = {"op": "spawn", "id": i, "argv": ["sleep", "1000"]}
            sup.stdin.write((json.dumps(req) + "\n").encode())
        sup.stdin.flush()
        for _ in range(n):
            reply = json.loads(sup.stdout.readline())
            assert reply.get("ok"), reply
        time.sleep(3)
        procs = len([p for p in os.listdir("/proc") if p.isdigit()])
        before = cpu_seconds(sup.pid)
        time.sleep(window)
        used = cpu_seconds(sup.pid) - before
        sup.stdin.close()
        sup.wait(timeout=60)
        return used, procs

def main():
    ut, counts = sys.argv[1], [int(n) for n in sys.argv[2:]]
    for n in counts:
        used, procs = measure(ut, n)
        print(f"{n} trees: {used:.2f} s CPU in 10 s ({procs} processes on the machine)")

if __name__ == "__main__":
    main()
