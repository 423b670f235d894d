#!/usr/bin/env python3
"""Runs CMD, then prints the CPU milliseconds of every process CMD started, wherever it
ended (CMD's own CPU time excluded).

This process is a child subreaper while CMD runs, so what a wrapper leaves running when
it exits (bwrap's outer process exits without reaping its PID namespace's init) is
reparented here, reaped once it ends, and counted: a shell's own reaped-children times
would miss it (docs/BENCHMARKS.md, "Issue 30, fourth round").

  scripts/subreap-time.py CMD [ARG...]
"""
import ctypes, os, resource, sys

PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
hz = os.sysconf("SC_CLK_TCK")
pid = os.posix_spawnp(sys.argv[1], sys.argv[1:], os.environ)
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
own = (int(fields[11]) + int(fields[12])) / hz  # utime, stime of CMD itself
_, status, _ = os.wait4(pid, 0)
while True:  # what CMD's processes left behind, reparented here
    try:
        os.wait4(-1, 0)
    except ChildProcessError:
        break
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = ru.ru_utime + ru.ru_stime - own
print(round(cpu * 1000))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 1)  # killed by a signal: a failed round
