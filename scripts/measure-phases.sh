#!/usr/bin/env bash
# Where the wall time of `undertaker run -- /bin/true` goes, phase by phase
# (docs/BENCHMARKS.md, "Start-up, exit latency and 100 at once"), from the kernel's
# scheduler tracepoints (perf, as root): N runs in a shell loop, per phase the 25th
# percentile and the median in µs. `tini -s` is measured the same way for comparison.
#   scripts/measure-phases.sh [UNDERTAKER] [N]      (default target/release/undertaker 100)
set -euo pipefail
bin=$(realpath "${1:-target/release/undertaker}")
n=${2:-100}
tini=$(command -v tini)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export UNDERTAKER_STATE_DIR="$work/state"
events=sched:sched_process_exec,sched:sched_process_exit,sched:sched_process_fork
events+=,syscalls:sys_enter_clone3,syscalls:sys_enter_clone,syscalls:sys_enter_exit_group
record() {
  perf record -q -o "$work/perf.data" -e "$events" -- \
    sh -c "for i in \$(seq $n); do $1 /bin/true; done" >/dev/null 2>&1
  perf script -i "$work/perf.data" -F comm,pid,time,event,trace 2>/dev/null >"$work/$2.txt"
}
record "$bin run --" undertaker
record "$tini -s --" tini
echo "$n runs each; $(uptime)"
python3 - "$work" "$bin" "$tini" <<'EOF'
import re, statistics, sys
work, ut, tini = sys.argv[1:]

def events(name):
    for line in open(f"{work}/{name}.txt"):
        m = re.match(r"\s*(\S+)\s+(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if m:
            comm, pid, t, e, rest = m.groups()
            yield float(t) * 1e6, comm, int(pid), e.rstrip(":"), rest

def runs(name, exe):
    out, cur = [], None
    for t, comm, pid, e, rest in events(name):
        if e == "sched:sched_process_exec" and f"filename={exe} " in rest:
            cur = {"pid": pid, "exec": t}
            out.append(cur)
            continue
        if cur is None:
            continue
        child = re.search(r"child_pid=(\d+)", rest)
        if e.startswith("syscalls:sys_enter_clone") and pid == cur["pid"]:
            cur.setdefault("fork", t)
        elif e == "sched:sched_process_fork" and pid == cur["pid"] and child:
            cur.setdefault("child", int(child.group(1)))
        elif e.startswith("syscalls:sys_enter_clone") and pid == cur.get("child"):
            cur.setdefault("fork_cmd", t)
        elif e == "sched:sched_process_exec" and "filename=/bin/true" in rest:
            cur["cmd_exec"] = t
        elif e == "sched:sched_process_exit" and comm == "true":
            cur["cmd_exit"] = t
        elif e == "syscalls:sys_enter_exit_group" and pid == cur.get("child"):
            cur["guardian_exit"] = t
        elif e == "syscalls:sys_enter_exit_group" and pid == cur["pid"]:
            cur["exit"] = t
    return out

def show(title, rs, keys, labels):
    rs = [r for r in rs if all(k in r for k in keys)]
    print(f"\n{title} ({len(rs)} complete runs): p25 / median µs")
    total = []
    for (a, b), label in zip(zip(keys, keys[1:]), labels):
        d = [r[b] - r[a] for r in rs]
        q = statistics.quantiles(d, n=4)
        print(f"  {label:<52} {q[0]:8.0f} {q[1]:8.0f}")
    d = [r[keys[-1]] - r[keys[0]] for r in rs]
    q = statistics.quantiles(d, n=4)
    print(f"  {'total (exec of the wrapper -> its exit_group)':<52} {q[0]:8.0f} {q[1]:8.0f}")

show("undertaker run -- /bin/true", runs("undertaker", ut),
     ["exec", "fork", "fork_cmd", "cmd_exec", "cmd_exit", "guardian_exit", "exit"],
     ["sentinel: exec -> fork of the guardian",
      "guardian: set-up -> clone3 of CMD",
      "CMD: clone3 -> exec of /bin/true",
      "CMD runs",
      "guardian: CMD's exit -> its exit_group",
      "sentinel: guardian's exit_group -> its exit_group"])
show("tini -s -- /bin/true", runs("tini", tini),
     ["exec", "fork", "cmd_exec", "cmd_exit", "exit"],
     ["tini: exec -> fork", "CMD: fork -> exec of /bin/true", "CMD runs",
      "tini: CMD's exit -> its exit_group"])
EOF
