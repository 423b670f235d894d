#!/usr/bin/env python3
"""The Windows tests: `undertaker.exe run` and `undertaker.exe supervise`
(x86_64-pc-windows-gnu) under Wine, driven from Linux, with treeprog.exe
(scripts/wine/treeprog.c) as CMD and hostprog.exe (scripts/wine/hostprog.c) as the
supervisor's host.

Usage: WINEPREFIX=/abs/prefix test-windows.py [--native] UNDERTAKER_EXE TREEPROG_EXE HOSTPROG_EXE [NAME...]
(NAME: run only the tests whose name contains it; make the prefix with
scripts/wine/setup-prefix.sh). Prints PASS/FAIL/SKIP per test and
`windows under wine: N passed, M failed` (`windows native: ...`); exits 1 on any
failure.

Every process a test starts carries a unique tag in its command line, which Wine
shows in /proc/PID/cmdline: that is how the tests see Windows processes from Linux
and what they kill with `kill -9` (only processes the test started). Where Wine
differs from Windows, the test says so (WINE: ...).

`--native` runs the same tests on Windows itself (the ci workflow's windows job):
the exes are started directly, processes are found by their command line through
Win32_Process (PowerShell), and `kill -9` becomes `taskkill /F /PID` (TerminateProcess,
as abrupt). Tests that need Wine (a wineserver restart to force pid reuse) SKIP."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

ARGS = [a for a in sys.argv[1:] if a != "--native"]
NATIVE = "--native" in sys.argv[1:]
UT, TREEPROG, HOSTPROG = ARGS[0], ARGS[1], ARGS[2]
ENV = dict(os.environ, WINEDEBUG="-all", UNDERTAKER_LOG="warn")
FILTERS = ARGS[3:]
TESTS = []
RESULTS = []
SKIPPED = []


def winpath(p):
    if NATIVE:
        return os.path.abspath(p)
    return "Z:" + os.path.abspath(p).replace("/", "\\")


def wine(args, **kw):
    """Starts a Windows program: through Wine, or directly with --native."""
    return subprocess.Popen(([] if NATIVE else ["wine"]) + args, env=ENV, **kw)


def kill9(pid):
    """Ends a process at once, as `kill -9` does (native: TerminateProcess)."""
    if NATIVE:
        subprocess.run(["taskkill", "/F", "/PID", str(pid)], capture_output=True)
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def command_lines():
    """(pid, command line) of every running process."""
    if NATIVE:
        out = subprocess.run(
            ["powershell", "-NoProfile", "-Command",
             "Get-CimInstance Win32_Process | Select-Object ProcessId,CommandLine | ConvertTo-Json"],
            capture_output=True, text=True, timeout=60).stdout
        rows = json.loads(out or "[]")
        return [(r["ProcessId"], r.get("CommandLine") or "") for r in rows]
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append((int(d), cmd))
    return found


def tagged(tag):
    """Pids (Linux pids under Wine) of the processes whose command line holds `tag`,
    by role."""
    found = {}
    for d, cmd in command_lines():
        if tag not in cmd:
            continue
        if "hostprog" in cmd:
            role = "host"
        elif "undertaker" in cmd and "supervise" in cmd:
            role = "supervisor"
        elif "undertaker" in cmd and " run " in cmd:
            role = "guardian"
        elif "--owner" in cmd:
            role = "owner"
        elif "--decoys" in cmd:
            role = "keeper"
        elif "--grandchild" in cmd:
            role = "cmd"
        else:
            role = "grandchild"
        found.setdefault(role, []).append(int(d))
    return found


def wait_for(pred, limit, step=0.1):
    end = time.monotonic() + limit
    while True:
        got = pred()
        if got or time.monotonic() >= end:
            return got
        time.sleep(step)


def cleanup(tag):
    for pids in tagged(tag).values():
        for pid in pids:
            kill9(pid)


def test(fn):
    TESTS.append(fn)
    return fn


class Skip(Exception):
    pass


def wine_only(why):
    if NATIVE:
        raise Skip(why)


def run_one(fn):
    name = fn.__name__
    tag = "T" + uuid.uuid4().hex[:12]
    state = tempfile.mkdtemp(prefix="ut-wine-")
    start = time.monotonic()
    try:
        detail = fn(tag, winpath(state)) or ""
        RESULTS.append(True)
        print(f"PASS {name} ({time.monotonic() - start:.1f} s) {detail}", flush=True)
    except Skip as e:
        SKIPPED.append(name)
        print(f"SKIP {name}: {e}", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, then counted
        RESULTS.append(False)
        print(f"FAIL {name}: {e}", flush=True)
    finally:
        cleanup(tag)
        shutil.rmtree(state, ignore_errors=True)


def ut(state, *args, **kw):
    return subprocess.run(
        ([] if NATIVE else ["wine"]) + [UT, "--state-dir", state, *args], env=ENV,
        capture_output=True, text=True, timeout=120, **kw)


def restart_wineserver():
    """A fresh wineserver (only this prefix's processes, all started by these tests):
    Wine hands out a freed id again only once 256 ids are free, oldest freed first
    (WINE: Windows reuses pids sooner and in no documented order), so after a
    restart the tree's ids are near the front of that queue."""
    subprocess.run(["wineserver", "-k"], env=ENV, check=False)
    subprocess.run(["wineserver", "-w"], env=ENV, check=False, timeout=60)


def check(cond, why):
    if not cond:
        raise AssertionError(why)


@test
def exit_codes_are_cmds(tag, state):
    seen = []
    for code in (0, 3, 42, 255):
        r = ut(state, "run", "--", TREEPROG, "--tag", tag, "--exit", str(code))
        check(r.returncode == code, f"--exit {code}: undertaker exited {r.returncode}: {r.stderr}")
        seen.append(r.returncode)
    r = ut(state, "run", "--", "Z:\\no\\such\\program.exe")
    check(r.returncode == 127, f"missing CMD: exit {r.returncode}, want 127: {r.stderr}")
    r = ut(state, "run", "--tier", "cgroup", "--", TREEPROG)
    check(r.returncode == 125, f"--tier cgroup: exit {r.returncode}, want 125")
    r = ut(state, "supervise", input="")
    check(r.returncode == 0, f"supervise at end of input: exit {r.returncode}, want 0: {r.stderr}")
    return f"exit codes {seen}, missing CMD 127, --tier cgroup 125, supervise 0 at end of input"


@test
def doctor_finds_the_job_tier_and_the_default_state_dir(tag, state):
    # The default state dir, %LOCALAPPDATA%\\undertaker: Wine sets LOCALAPPDATA from the
    # prefix's registry (a Linux value is overridden); the prefix is the tests' own.
    r = subprocess.run(([] if NATIVE else ["wine"]) + [UT, "doctor", "--json"], env=ENV,
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"doctor exit {r.returncode}: {r.stderr}")
    d = json.loads(r.stdout)
    job = d["checks"].get("job_object_kill_on_close", {})
    check(job.get("ok"), f"job probe: {d['checks']}")
    tiers = {name: t["available"] for name, t in d["tiers"].items()}
    check(tiers == {"auto": True, "cgroup": False, "pidns": False, "subreaper": False}, f"tiers {tiers}")
    path = d["state_dir"]["path"]
    check(path.endswith("\\AppData\\Local\\undertaker") and d["state_dir"]["ok"],
          f"default state dir {d['state_dir']}")
    return f"job probe ok; tiers {tiers}; state dir {path}"


@test
def stdio_is_passed_through(tag, state):
    r = ut(state, "run", "--", TREEPROG, "--tag", tag, "--echo", input="hello through stdin\n")
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
    out = r.stdout.replace("\r\n", "\n")
    check(out == "treeprog: out\nhello through stdin\n", f"stdout {out!r}")
    check("treeprog: err" in r.stderr, f"stderr {r.stderr!r}")
    return "stdin -> CMD -> stdout; CMD's stderr on ours"


@test
def cmd_exit_tears_down_the_grandchild(tag, state):
    r = ut(state, "run", "--grace", "300ms", "--", TREEPROG, "--tag", tag, "--grandchild", "--exit", "7")
    check(r.returncode == 7, f"exit {r.returncode}: {r.stderr}")
    left = wait_for(lambda: not tagged(tag), 30)
    check(left, f"still alive after CMD exited: {tagged(tag)}")
    log = json.loads(ut(state, "log", "--json").stdout)
    kinds = [e.get("signal") for e in log]
    check("TerminateJobObject" in kinds, f"audit log has no TerminateJobObject: {kinds}")
    polite = [e for e in log if e.get("signal") == "CTRL_BREAK"]
    note = ""
    if polite and polite[0].get("outcome") == "failed":
        note = "WINE: GenerateConsoleCtrlEvent fails without a console, the polite round is audited as failed"
    return f"grandchild gone, audit: {kinds}. {note}"


def start_tree(tag, state, label=None):
    labelled = ["--label", label] if label else []
    p = wine([UT, "--state-dir", state, "run", *labelled, "--", TREEPROG, "--tag", tag, "--grandchild",
              "--sleep", "600"],
             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    got = wait_for(lambda: (lambda t: t if "cmd" in t and "grandchild" in t else None)(tagged(tag)), 60)
    check(got, f"tree did not start: {tagged(tag)}")
    return p, got


@test
def kill_9_of_undertaker_kills_cmd_and_grandchild_without_sweep(tag, state):
    p, procs = start_tree(tag, state)
    check(procs.get("guardian") == [p.pid] or p.pid in procs.get("guardian", []),
          f"undertaker's Wine process {p.pid} not found among {procs}")
    kill9(p.pid)
    p.wait()
    # Waited for, not slept on: no sweep runs here, so a tree the kill -9 left stays
    # past any bound, and a loaded machine may take more than a moment.
    check(wait_for(lambda: not tagged(tag), 30), f"alive 30 s after kill -9 of undertaker: {tagged(tag)}")
    rows = json.loads(ut(state, "ps", "--json").stdout)
    sweep = json.loads(ut(state, "sweep", "--json").stdout)
    check(sweep["left_alive"] == 0, f"sweep: {sweep}")
    return (f"CMD {procs['cmd']} and grandchild {procs['grandchild']} gone after kill -9 of "
            f"{p.pid}; ps then showed {[r['state'] for r in rows]}, the later sweep found nothing left")


@test
def owner_death_tears_the_tree_down(tag, state):
    owner = wine([TREEPROG, "--owner", winpath(UT), tag],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    got = wait_for(lambda: (lambda t: t if "cmd" in t and "grandchild" in t else None)(tagged(tag)), 60)
    check(got, f"tree did not start: {tagged(tag)}")
    # The owner is the Windows parent of undertaker.exe; kill it from Linux.
    kill9(owner.pid)
    owner.wait()
    left = wait_for(lambda: not tagged(tag), 30)
    check(left, f"alive 30 s after the owner died: {tagged(tag)}")
    return f"owner {owner.pid} killed: guardian, CMD and grandchild gone"


@test
def owner_fd_end_of_file_tears_the_tree_down(tag, state):
    owner = wine([TREEPROG, "--owner-pipe", winpath(UT), tag, "30"], stdout=subprocess.PIPE,
                 stderr=subprocess.DEVNULL, text=True)
    got = wait_for(lambda: (lambda t: t if "cmd" in t and "grandchild" in t else None)(tagged(tag)), 30)
    check(got, f"tree did not start within the 30 s the pipe stays open: {tagged(tag)}")
    # CMD writes to the same stdout (inherited through undertaker): skip its lines.
    lines = []
    for line in owner.stdout:
        lines.append(line.strip())
        if line.startswith("treeprog: pipe closed"):
            break
    check(lines and lines[-1] == "treeprog: pipe closed", f"owner did not close the pipe: {lines}")
    left = wait_for(lambda: set(tagged(tag)) <= {"owner"}, 30)
    check(left, f"alive 30 s after the pipe closed: {tagged(tag)}")
    check(owner.poll() is None, "the owner itself died: the pipe was not what ended the tree")
    return "write end closed by a live owner: guardian, CMD and grandchild gone"


@test
def kill_command_tears_a_live_tree_down(tag, state):
    p, procs = start_tree(tag, state)
    rows = json.loads(ut(state, "ps", "--json").stdout)
    check(len(rows) == 1 and rows[0]["guardian_alive"] and rows[0]["live_processes"] >= 2,
          f"ps: {rows}")
    r = ut(state, "kill", "--json", "--grace", "300ms", rows[0]["id"][:8])
    check(r.returncode == 0, f"kill exit {r.returncode}: {r.stdout} {r.stderr}")
    check(p.wait(timeout=30) is not None, "undertaker still running")
    left = wait_for(lambda: not tagged(tag), 30)
    check(left, f"alive 30 s after kill: {tagged(tag)}")
    return f"ps saw {rows[0]['live_processes']} live; kill: {json.loads(r.stdout)['action']}"


@test
def kill_takes_a_label(tag, state):
    p, procs = start_tree(tag, state, label="srv")
    r = ut(state, "kill", "--json", "--grace", "300ms", "srv")
    check(r.returncode == 0, f"kill srv exit {r.returncode}: {r.stdout} {r.stderr}")
    check(p.wait(timeout=30) is not None, "undertaker still running")
    check(wait_for(lambda: not tagged(tag), 30), f"alive 30 s after kill: {tagged(tag)}")
    r = ut(state, "kill", "srv")
    check(r.returncode == 2, f"kill of a label with no live tree: exit {r.returncode}")
    log = json.loads(ut(state, "log", "--json", "--tree", "srv").stdout)
    return f"kill srv ended the tree; log --tree srv: {len(log)} entries"


@test
def decoy_on_a_reused_pid_is_never_terminated(tag, state):
    wine_only("forcing pid reuse needs a wineserver restart")
    restart_wineserver()
    p, procs = start_tree(tag, state)
    rows = json.loads(ut(state, "ps", "--json").stdout)
    row = rows[0]
    targets = [str(row["guardian_pid"]), str(row["root_pid"])]
    kill9(p.pid)
    p.wait()
    check(wait_for(lambda: not tagged(tag), 30), "tree survived")
    dtag = tag + "D"
    keeper = wine([TREEPROG, "--decoys", dtag, "3000", *targets], stdout=subprocess.PIPE,
                  stderr=subprocess.DEVNULL, text=True)
    decoys, spawns = [], "?"
    for line in keeper.stdout:
        if line.startswith("decoy "):
            decoys.append(int(line.split()[1]))
        if line.startswith("decoys done"):
            spawns = line.split()[3]
            break
    check(decoys, f"no decoy got one of {targets} in {spawns} spawns")
    alive_before = len(tagged(dtag).get("grandchild", []))
    kill = ut(state, "kill", "--grace", "300ms", row["id"])
    sweep = ut(state, "sweep", "--grace", "300ms")
    ut(state, "ps", "--all")
    alive_after = len(tagged(dtag).get("grandchild", []))
    cleanup(dtag)
    check(alive_after == alive_before == len(decoys),
          f"decoys {decoys}: {alive_before} alive before, {alive_after} after kill+sweep")
    return (f"decoys on reused pids {decoys} (of guardian/CMD {targets}, after {spawns} spawns) alive after "
            f"kill (exit {kill.returncode}) and sweep (exit {sweep.returncode})")


import supervise_tests  # noqa: E402 - the supervise tests use the helpers above

for fn in TESTS:
    if not FILTERS or any(f in fn.__name__ for f in FILTERS):
        run_one(fn)
passed = RESULTS.count(True)
failed = RESULTS.count(False)
where = "windows native" if NATIVE else "windows under wine"
print(f"{where}: {passed} passed, {failed} failed, {len(SKIPPED)} skipped")
sys.exit(1 if failed else 0)
