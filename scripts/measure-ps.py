#!/usr/bin/env python3
"""`undertaker ps` with N live trees (docs/BENCHMARKS.md, "`ps` with 1 000 live trees").

Starts N `UNDERTAKER run --tier TIER --owner OWNER -- sleep 100000` trees with the
first UNDERTAKER and a scratch state dir (never the default one), BATCH at a time,
then times ROUNDS runs each of `ps` and `ps --json` of every UNDERTAKER given, taking
turns on the same trees (wall time of the whole command, output to a pipe, and its CPU time: user +
system from its rusage, which the load does not inflate as much), and prints the best
and the median in ms with the load average before and after. Every tree has
the same owner, a `cat` reading a pipe only this script holds: killing it (or this
script dying) tears every tree down. Afterwards it checks that no undertaker process,
tree cgroup or marked process of the run is left. Usage:
    scripts/measure-ps.py [-n N] [--tier cgroup|subreaper|auto] [--rounds R] UNDERTAKER...
With MEASURE_PS_HOLD=FILE the trees stay up after the timing (for profiling) until
FILE, which holds the state dir, is deleted.
"""
import argparse, functools, os, statistics, subprocess, sys, tempfile, time

print = functools.partial(print, flush=True)
ap = argparse.ArgumentParser()
ap.add_argument("-n", type=int, default=1000)
ap.add_argument("--tier", default="cgroup")
ap.add_argument("--rounds", type=int, default=9)
ap.add_argument("undertaker", nargs="*", default=["target/release/undertaker"])
args = ap.parse_args()
uts = [os.path.abspath(u) for u in args.undertaker]
n = args.n
BATCH = 25  # trees started before waiting for their record files


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def ours(state, ids):
    """Pids of processes whose command line names our state dir, or that carry the
    tree marker of one of our trees."""
    marks = {f"UNDERTAKER_TREE={i}".encode() for i in ids}
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                hit = state.encode() in f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                hit = hit or any(e in marks for e in f.read().split(b"\0"))
            if hit:
                found.append(int(pid))
        except OSError:
            pass
    return found


def tree_cgroups(ids):
    """Cgroups anywhere under /sys/fs/cgroup whose name holds one of our tree ids."""
    left = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        left += [os.path.join(root, d) for d in dirs if any(i in d for i in ids)]
    return left


with tempfile.TemporaryDirectory(prefix="measure-ps.") as state:
    trees_dir = os.path.join(state, "trees")
    r, w = os.pipe()
    owner = subprocess.Popen(["cat"], stdin=r, stdout=subprocess.DEVNULL)
    os.close(r)
    runs, ids = [], []
    env = dict(os.environ, UNDERTAKER_NO_HEAL="1")
    env.pop("UNDERTAKER_TREE", None)
    try:
        started = time.monotonic()
        for i in range(n):
            runs.append(subprocess.Popen(
                [uts[0], "--state-dir", state, "run", "--tier", args.tier, "--grace", "1s",
                 "--owner", str(owner.pid), "--", "sleep", "100000"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env))
            if (i + 1) % BATCH == 0 or i + 1 == n:
                while len(os.listdir(trees_dir) if os.path.isdir(trees_dir) else []) < i + 1:
                    if any(p.poll() is not None for p in runs[-BATCH:]):
                        sys.exit("a run exited early")
                    time.sleep(0.02)
        ids = [f[:-5] for f in os.listdir(trees_dir) if f.endswith(".tree")]
        print(f"{n} trees ({args.tier} tier) live after {time.monotonic() - started:.1f} s")
        time.sleep(2)  # let the last guardians settle
        times = {(u, what): [] for u in uts for what in ("ps", "ps --json")}
        cpu = {key: [] for key in times}
        loads = [load()]
        for k in range(args.rounds + 1):  # the first round is a warm-up
            for (u, what), ts in times.items():
                argv = [u, "--state-dir", state, *what.split()]
                t0 = time.perf_counter()
                child = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
                out = child.stdout.read()
                _, status, usage = os.wait4(child.pid, 0)
                dt = (time.perf_counter() - t0) * 1000
                assert status == 0, f"{argv}: status {status}"
                if k:
                    ts.append(dt)
                    cpu[(u, what)].append((usage.ru_utime + usage.ru_stime) * 1000)
                if what == "ps" and k == 0:
                    running = [l for l in out.decode().splitlines()[1:] if " running " in l]
                    assert len(running) == n, f"{u}: {len(running)} running trees, not {n}"
        loads.append(load())
        for (u, what), ts in times.items():
            c = cpu[(u, what)]
            print(f"{u}  {what:9}  {n} trees: best {min(ts):6.1f} ms, median "
                  f"{statistics.median(ts):6.1f} ms; CPU (user+sys) best {min(c):6.1f} ms, "
                  f"median {statistics.median(c):6.1f} ms ({args.rounds} rounds)")
        print(f"load average {loads[0]} before, {loads[1]} after")
        hold = os.environ.get("MEASURE_PS_HOLD")
        if hold:  # for profiling: the state dir is written to HOLD; delete HOLD to finish
            with open(hold, "w") as f:
                f.write(state)
            while os.path.exists(hold):
                time.sleep(0.5)
    finally:
        if os.path.isdir(trees_dir):
            ids = [f[:-5] for f in os.listdir(trees_dir) if f.endswith(".tree")]
        owner.kill()
        owner.wait()
        os.close(w)
        deadline = time.monotonic() + 120
        for p in runs:
            try:
                p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        left = ours(state, ids)
        cgroups = tree_cgroups(ids) if ids else []
        if left or cgroups:
            print(f"LEFT BEHIND: processes {left[:10]}, cgroups {cgroups[:10]}", file=sys.stderr)
            sys.exit(1)
print("clean-up: no process, tree cgroup or state file left")
