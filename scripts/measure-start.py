#!/usr/bin/env python3
"""Start-up and exit latency of wrappers, side by side, alternating per sample.

Each round runs every contender once, in an order rotated round by round; the ratios
are of medians (wall, exit latency) or means (CPU) taken in the same run
(docs/BENCHMARKS.md, "Issue 30").

  scripts/measure-start.py [--rounds N] [--exit] PREFIX...

A PREFIX is a wrapper command as one argument (words split on spaces), e.g.
"tini -s --" or "target/release/undertaker run --tier subreaper --"; the first is
the anchor of the ratios. Without --exit each sample is `PREFIX /bin/true`: wall time
of spawn to reap, and the CPU time of every process the wrapper started, wherever it
ended: this script is a child subreaper, so a process the wrapper left behind (bwrap's
outer process exits without reaping its namespace's init, which then still runs CMD's
exit) is reparented here and reaped after the wrapper, its rusage added. With
--exit, CMD is undertaker-bench's `__stamp` mode (target/release/undertaker-bench, or
$UNDERTAKER_BENCH): it prints CLOCK_MONOTONIC and exits, and the sample is the time
from there until the wrapper is reaped. stdin and stdout are /dev/null (--exit: a
pipe for stdout; --pipeline: a pipe only a sibling reads, as in `run … | cat`, where
undertaker's host detection looks for the reader among its ancestors). Needs a state
dir: $UNDERTAKER_STATE_DIR, else a temporary one.
"""
import argparse, ctypes, os, statistics, sys, tempfile, time

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=300)
p.add_argument("--exit", action="store_true")
p.add_argument("--pipeline", action="store_true")
p.add_argument("prefix", nargs="+")
a = p.parse_args()
os.environ.setdefault("UNDERTAKER_STATE_DIR", tempfile.mkdtemp(prefix="measure-start."))
here = os.path.dirname(os.path.abspath(__file__))
bench = os.environ.get("UNDERTAKER_BENCH", os.path.join(here, "..", "target", "release", "undertaker-bench"))
conts = [c.split() for c in a.prefix]
cmd = [bench, "__stamp"] if a.exit else ["/bin/true"]
null = os.open("/dev/null", os.O_RDWR)
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed: CPU times would miss orphaned processes")


def reap_left_behind():
    """CPU µs of the processes a wrapper left running: reparented here, reaped now."""
    used = 0.0
    while True:
        try:
            _, _, ru = os.wait4(-1, 0)
        except ChildProcessError:
            return used
        used += (ru.ru_utime + ru.ru_stime) * 1e6
wall = [[] for _ in conts]
cpu = [[] for _ in conts]
orphaned = [[] for _ in conts]  # the part of cpu spent in processes left behind
for r in range(a.rounds + 1):  # round 0 warms up, untimed
    k = r % len(conts)
    for i in list(range(k, len(conts))) + list(range(k)):
        rd = wr = sibling = None
        acts = [(os.POSIX_SPAWN_DUP2, null, 0)]
        if a.pipeline:
            rd, wr = os.pipe()
            sibling = os.fork()
            if sibling == 0:
                os.close(wr)
                while os.read(rd, 4096):
                    pass
                os._exit(0)
            os.close(rd)
            acts += [(os.POSIX_SPAWN_DUP2, wr, 1)]
        elif a.exit:
            rd, wr = os.pipe()
            acts += [(os.POSIX_SPAWN_DUP2, wr, 1), (os.POSIX_SPAWN_CLOSE, rd)]
        else:
            acts += [(os.POSIX_SPAWN_DUP2, null, 1)]
        t = time.perf_counter_ns()
        pid = os.posix_spawnp(conts[i][0], conts[i] + cmd, os.environ, file_actions=acts)
        _, st, ru = os.wait4(pid, 0)
        end = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        dt = time.perf_counter_ns() - t
        if sibling:
            os.close(wr)
            os.waitpid(sibling, 0)
        left = reap_left_behind()
        if os.waitstatus_to_exitcode(st) != 0:
            sys.exit(f"{a.prefix[i]}: exit status {os.waitstatus_to_exitcode(st)}")
        if a.exit:
            os.close(wr)
            stamp = int(os.read(rd, 64).strip())
            os.close(rd)
            dt = end - stamp
        if r:
            wall[i].append(dt / 1e3)
            cpu[i].append((ru.ru_utime + ru.ru_stime) * 1e6 + left)
            orphaned[i].append(left)
print(f"{a.rounds} rounds, {'exit latency' if a.exit else 'start-up'}; load {os.getloadavg()[0]:.2f}")
w0, c0 = statistics.median(wall[0]), statistics.mean(cpu[0])
for i, c in enumerate(a.prefix):
    w = statistics.median(wall[i])
    line = f"{c[:64]:64} {'exit' if a.exit else 'wall'} {w:7.0f} µs {w / w0:5.2f}×"
    if not a.exit:
        u = statistics.mean(cpu[i])
        line += f"   CPU {u:6.0f} µs {u / c0:5.2f}×"
        o = statistics.mean(orphaned[i])
        if o:
            line += f" (left behind by the wrapper: {o:.0f} µs)"
    print(line)
