#!/usr/bin/env python3
"""`list` of N trees held by one `undertaker supervise` (docs/BENCHMARKS.md).

Starts a supervisor with a scratch state dir, spawns N `sleep 1000` trees through
its protocol, times 5 `list` requests, prints the best and the median in ms (wall
time, and the supervisor's own CPU time per request from /proc/PID/schedstat), then
closes its input (every tree is torn down). Usage:
    scripts/measure-list.py [UNDERTAKER] [N]
"""
import json, statistics, subprocess, sys, tempfile, time

ut = sys.argv[1] if len(sys.argv) > 1 else "target/release/undertaker"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
with tempfile.TemporaryDirectory() as state:
    sup = subprocess.Popen([ut, "--state-dir", state, "--no-heal", "supervise"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    def request(obj):
        sup.stdin.write(json.dumps(obj) + "\n")
        sup.stdin.flush()
        while True:
            reply = json.loads(sup.stdout.readline())
            if reply.get("id") == obj["id"]:
                return reply
    for i in range(n):
        assert request({"op": "spawn", "id": i, "argv": ["sleep", "1000"]})["ok"]
    def cpu_ns():  # the supervisor's time on a CPU so far (load does not inflate it)
        with open(f"/proc/{sup.pid}/schedstat") as f:
            return int(f.read().split()[0])
    times, cpu = [], []
    for k in range(5):
        start, start_cpu = time.perf_counter(), cpu_ns()
        reply = request({"op": "list", "id": n + k})
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((cpu_ns() - start_cpu) / 1e6)
        assert len(reply["trees"]) == n, reply
    sup.stdin.close()
    sup.wait()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"list of {n} trees: best {min(times):.1f} ms, median {statistics.median(times):.1f} ms"
          f" (supervisor CPU per list: best {min(cpu):.1f} ms, median {statistics.median(cpu):.1f} ms;"
          f" load {load})")
