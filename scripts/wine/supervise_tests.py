"""The `undertaker.exe supervise` tests (docs/SUPERVISE.md; docs/PORTING.md, "Windows"),
run by test-windows.py with its helpers: a hostprog.exe host starts the supervisor
with pipes, as an MCP host does; the test speaks the protocol through it, starts
the host's own children with `child CMDLINE`, and kills with `kill -9` (native:
TerminateProcess) only what it started. Counts are printed with each PASS."""

import json
import time

import __main__ as h

check, test, tagged, wait_for, kill9 = h.check, h.test, h.tagged, h.wait_for, h.kill9


class Host:
    """hostprog.exe running `undertaker.exe supervise`, the test's tag as its label."""

    def __init__(self, tag, state, job=None):
        args = [h.HOSTPROG] + (["--job", job] if job else [])
        args += [h.UT, "--state-dir", state, "supervise", "--grace", "300ms", "--label", tag]
        self.p = h.wine(args, stdin=h.subprocess.PIPE, stdout=h.subprocess.PIPE,
                        stderr=h.subprocess.DEVNULL, text=True)
        self.tag = tag
        first = self.p.stdout.readline()
        check(first.startswith("host: supervisor "), f"host did not start the supervisor: {first!r}")
        self.events = []

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def read(self):
        """The next reply (events are kept aside)."""
        while True:
            line = self.p.stdout.readline()
            check(line, "the host's output ended")
            if line.startswith("{"):
                msg = json.loads(line)
                if "event" in msg:
                    self.events.append(msg)
                    continue
                return msg
            if line.startswith("host: child "):
                return int(line.split()[2])
            check(not line.startswith("host: supervisor output ended"),
                  "the supervisor exited (its output ended)")

    def ask(self, request):
        self.send(json.dumps(request) if isinstance(request, dict) else request)
        return self.read()

    def child(self, *args):
        """A process the host itself starts (its child, a new console group)."""
        quoted = " ".join([f'"{h.winpath(h.TREEPROG)}"', *args])
        pid = self.ask(f"child {quoted}")
        check(pid, f"the host could not start {args}")
        return pid

    def spawn(self, *args):
        r = self.ask({"op": "spawn", "argv": [h.winpath(h.TREEPROG), *args]})
        check(r.get("ok"), f"spawn: {r}")
        return r


def count(tag, role):
    return len(tagged(tag).get(role, []))


def tree_processes(tag):
    """The trees' processes seen (the host's and the supervisor's excluded)."""
    t = tagged(tag)
    return t.get("cmd", []) + t.get("grandchild", [])


def wait_until_seen(tag, n):
    got = wait_for(lambda: len(tree_processes(tag)) >= n, 60)
    check(got, f"want {n} tree processes, see {tagged(tag)}")


def start_trees(tag, state, job=None):
    """A host with a registered tree (root + a grandchild it started before the
    register: the escape window) and a spawned tree (root + grandchild), and one
    child of the host's that is never registered: 4 tree processes, 1 outsider."""
    host = Host(tag, state, job)
    root = host.child("--tag", tag, "--grandchild", "--sleep", "600")
    outsider_tag = "O" + tag[::-1]  # not containing `tag`: tagged(tag) must not see it
    host.child("--tag", outsider_tag, "--sleep", "600")
    # The grandchild exists before the register: it must be caught after it.
    wait_for(lambda: len(tree_processes(tag)) >= 2, 60)
    start = time.monotonic()
    reg = host.ask(f"register {root}")
    took = time.monotonic() - start
    check(reg.get("ok") and reg.get("members") == 2,
          f"register of a root with a pre-existing grandchild: {reg} (want members 2)")
    host.spawn("--tag", tag, "--grandchild", "--sleep", "600")
    wait_until_seen(tag, 4)
    check(count(outsider_tag, "grandchild") == 1, "the outsider did not start")
    return host, outsider_tag, took


@test
def supervise_host_kill_9_leaves_no_tree_process(tag, state):
    host, outsider, took = start_trees(tag, state)
    before = len(tree_processes(tag))
    kill9(host.p.pid)
    host.p.wait()
    gone = wait_for(lambda: not tree_processes(tag) and not tagged(tag).get("supervisor"), 30)
    check(gone, f"alive 30 s after kill -9 of the host: {tagged(tag)}")
    outsiders = count(outsider, "grandchild")
    h.cleanup(outsider)
    check(outsiders == 1, "the host's unregistered child was touched")
    return (f"{before} tree processes (register caught the pre-existing grandchild: members 2, "
            f"reply in {took * 1000:.0f} ms), host kill -9: 0 left, supervisor gone, "
            f"the unregistered child alive")


@test
def supervise_kill_9_of_the_supervisor_ends_every_tree(tag, state):
    host, outsider, _ = start_trees(tag, state)
    supervisor = tagged(tag).get("supervisor", [])
    check(len(supervisor) == 1, f"supervisor not found: {tagged(tag)}")
    before = len(tree_processes(tag))
    kill9(supervisor[0])
    gone = wait_for(lambda: not tree_processes(tag), 30)
    check(gone, f"alive 30 s after kill -9 of the supervisor: {tagged(tag)}")
    host_alive = host.p.poll() is None
    kill9(host.p.pid)
    h.cleanup(outsider)
    check(host_alive, "the host died with the supervisor")
    return f"{before} tree processes, supervisor kill -9 (no sentinel, kill-on-close): 0 left"


@test
def supervise_kill_of_one_tree_leaves_the_others(tag, state):
    host = Host(tag, state)
    trees = []
    for i in range(3):
        r = host.spawn("--tag", f"{tag}T{i}", "--grandchild", "--sleep", "600")
        trees.append((f"{tag}T{i}", r["tree"]))
    for t, _ in trees:
        check(wait_for(lambda t=t: count(t, "cmd") == 1 and count(t, "grandchild") == 1, 60),
              f"tree {t} did not start")
    # 1. The protocol's kill: a reply after the teardown, and the root's `exited`.
    r = host.ask({"op": "kill", "tree": trees[0][1], "id": 7})
    check(r.get("ok") and r.get("live") == 0 and r.get("id") == 7, f"kill: {r}")
    # live 0 is the job's count; Wine's Linux processes may take a moment to go.
    check(wait_for(lambda: not tagged(trees[0][0]), 10), f"tree 0 alive after kill: {tagged(trees[0][0])}")
    # 2. `undertaker kill` from outside, through the tree's stop event.
    cli = h.ut(state, "kill", "--json", "--grace", "300ms", trees[1][1])
    check(cli.returncode == 0, f"undertaker kill: {cli.returncode} {cli.stdout} {cli.stderr}")
    check(wait_for(lambda: not tagged(trees[1][0]), 30), f"tree 1 alive: {tagged(trees[1][0])}")
    listed = host.ask({"op": "list"})
    left = [t["tree"] for t in listed["trees"]]
    alive = count(trees[2][0], "cmd") + count(trees[2][0], "grandchild")
    supervisor = tagged(tag).get("supervisor", [])
    events = [e["tree"] for e in host.events if e["event"] == "exited"]
    kill9(host.p.pid)
    check(wait_for(lambda: not any(tagged(t) for t, _ in trees), 30), "trees left after the host")
    check(left == [trees[2][1]], f"list after two kills: {left}")
    check(alive == 2, f"the third tree has {alive} processes, want 2")
    check(len(supervisor) == 1, "the supervisor ended with a tree")
    check(trees[0][1] in events, f"no exited event for the killed spawn: {host.events}")
    ended = [e["tree"] for e in host.events if e["event"] == "ended"]
    check(trees[0][1] in ended and trees[1][1] in ended, f"no ended events: {host.events}")
    return (f"kill op: tree 0 gone (live 0, exited and ended events); undertaker kill: tree 1 gone "
            f"({json.loads(cli.stdout)['action']}); tree 2 kept {alive} processes; supervisor alive")


@test
def supervise_protocol_answers_on_windows(tag, state):
    host = Host(tag, state)
    hello = host.ask({"op": "hello", "id": 1})
    check(hello.get("tier") == "job" and hello.get("socket") is False, f"hello: {hello}")
    no_fd = host.ask({"op": "adopt"})
    check(no_fd["error"]["code"] == "bad_request" and "Unix socket" in no_fd["error"]["message"],
          f"adopt without pid: {no_fd}")
    group = host.ask({"op": "adopt", "pgid": 5, "snapshot": [{"pid": 5, "start_time": 1}]})
    check(group["error"]["code"] == "bad_request", f"adopt by snapshot: {group}")
    me = host.ask(f"register {hello['pid']}")
    check(me["error"].get("reason") == "protected", f"register of the supervisor: {me}")
    owner = host.ask(f"register {hello['owner']['pid']}")
    check(owner["error"].get("reason") == "protected", f"register of the owner: {owner}")
    # Every refusal is in the audit log too (a host may never read its replies).
    log = json.loads(h.ut(state, "log", "--json").stdout or "[]")
    logged = [e.get("refusal_code") for e in log
              if e.get("actor") == "supervise" and e.get("event") == "refusal"]
    check(logged.count("protected") == 2, f"refusals in the audit log: {logged}")
    missing = host.ask({"op": "kill", "tree": "0" * 32})
    check(missing["error"]["code"] in ("unknown_tree", "bad_request"), f"kill of no tree: {missing}")
    # A grandchild of the host is not the owner's child.
    root = host.child("--tag", tag, "--grandchild", "--sleep", "600")
    wait_for(lambda: count(tag, "grandchild") == 1, 60)
    reg = host.ask(f"register {root}")
    check(reg.get("ok"), f"register: {reg}")
    again = host.ask(f"register {root}")
    check(again.get("tree") == reg["tree"], f"a second register names the same tree: {again}")
    # Released: nothing is signalled, and the host's death no longer ends it.
    rel = host.ask({"op": "release", "tree": reg["tree"]})
    check(rel.get("ok"), f"release: {rel}")
    kill9(host.p.pid)
    check(wait_for(lambda: not tagged(tag).get("supervisor"), 30), "supervisor still running")
    kept = count(tag, "cmd") + count(tag, "grandchild")
    check(kept == 2, f"a released tree lost processes: {tagged(tag)}")
    return (f"hello tier job; adopt without pid and by snapshot refused (bad_request); the "
            f"supervisor and owner protected (both in the audit log); register twice = one "
            f"tree; released tree kept "
            f"{kept} processes past the host's death")


@test
def supervise_register_of_a_non_child_is_refused(tag, state):
    host = Host(tag, state)
    stranger_tag = "S" + tag[::-1]
    stranger = h.wine([h.TREEPROG, "--tag", stranger_tag, "--sleep", "600"],
                      stdout=h.subprocess.DEVNULL, stderr=h.subprocess.DEVNULL)
    check(wait_for(lambda: count(stranger_tag, "grandchild") == 1, 60), "stranger did not start")
    # The test sees Linux pids only (under Wine), so it offers the supervisor every
    # Windows pid of the prefix's small range instead: the stranger, the host, the
    # supervisor and Wine's own services are all among them, and none is the host's
    # child (it has none), so none may be taken.
    refused = ok = 0
    for pid in range(8, 4096, 4):
        a = host.ask({"op": "adopt", "pid": pid})
        if a.get("ok"):
            ok += 1
        elif a["error"].get("reason") in ("not_owner_child", "protected", "no_such_process"):
            refused += 1
    alive = count(stranger_tag, "grandchild")
    kill9(host.p.pid)
    kill9(stranger.pid)
    check(ok == 0, f"{ok} processes that are not the host's children were adopted")
    check(alive == 1, "the stranger died")
    return f"{refused} pids refused (not the host's child, protected, or none), 0 adopted; the stranger alive"


@test
def supervise_decoy_on_a_reused_pid_is_never_terminated(tag, state):
    h.wine_only("forcing pid reuse needs a wineserver restart")
    h.restart_wineserver()
    host = Host(tag, state)
    root = host.child("--tag", tag, "--grandchild", "--sleep", "600")
    check(wait_for(lambda: len(tree_processes(tag)) >= 2, 60), "registered tree did not start")
    reg = host.ask(f"register {root}")
    check(reg.get("ok"), f"register: {reg}")
    sp = host.spawn("--tag", tag, "--sleep", "600")
    targets = [root, sp["pid"]]
    for t in (reg["tree"], sp["tree"]):
        k = host.ask({"op": "kill", "tree": t})
        check(k.get("ok") and k.get("live") == 0, f"kill: {k}")
    check(wait_for(lambda: not tree_processes(tag), 30), f"trees survived kill: {tagged(tag)}")
    dtag = "D" + tag[::-1]
    decoys, spawns, keepers, notes = [], [], [], []
    # A keeper whose CreateProcess fails stops early (it says why): another one
    # goes on from there, three at most.
    while not decoys and len(keepers) < 3:
        keeper = h.wine([h.TREEPROG, "--decoys", dtag, "3000", *map(str, targets)],
                        stdout=h.subprocess.PIPE, stderr=h.subprocess.DEVNULL, text=True)
        keepers.append(keeper)
        for line in keeper.stdout:
            if line.startswith("decoy "):
                decoys.append(int(line.split()[1]))
            if line.startswith("decoys: "):
                notes.append(line.strip())
            if line.startswith("decoys done"):
                spawns.append(line.split()[3])
                break
    if not decoys:
        for keeper in keepers:
            kill9(keeper.pid)
        h.cleanup(dtag)
    check(decoys, f"no decoy got one of {targets} in {'+'.join(spawns)} spawns {notes}")
    keeper = keepers[-1]
    refusals = [host.ask(f"register {d}")["error"].get("reason") for d in decoys]
    refusals += [host.ask({"op": "adopt", "pid": d})["error"].get("reason") for d in decoys]
    before = count(dtag, "grandchild")
    kill9(host.p.pid)
    check(wait_for(lambda: not tagged(tag).get("supervisor"), 30), "supervisor still running")
    after = count(dtag, "grandchild")
    h.cleanup(dtag)
    for keeper in keepers:
        kill9(keeper.pid)
    check(set(refusals) == {"not_owner_child"}, f"register/adopt of a decoy: {refusals}")
    check(after == before == len(decoys), f"decoys {decoys}: {before} alive before, {after} after")
    return (f"decoys on reused pids {decoys} (of roots {targets}, after {'+'.join(spawns)} spawns): "
            f"register/adopt refused not_owner_child, {after} of {len(decoys)} alive after the "
            f"host's kill -9 and the teardown ({len(keepers)} keeper(s))")


@test
def supervise_inside_a_host_job(tag, state):
    # A host's own job around the supervisor (IDEs, terminals). WINE: Wine nests jobs
    # (the jobs made for the trees become children of the host's), as Windows 8+ does;
    # the breakaway fallback for kernels that do not (Windows 7) is not reached here.
    results = []
    for kind in ("nest", "breakaway"):
        t = f"{tag}{kind[0].upper()}"
        host, outsider, _ = start_trees(t, state, job=kind)
        before = len(tree_processes(t))
        kill9(host.p.pid)
        gone = wait_for(lambda t=t: not tree_processes(t), 30)
        h.cleanup(outsider)
        h.cleanup(t)
        check(gone, f"--job {kind}: alive 30 s after kill -9 of the host")
        results.append(f"{kind}: {before} tree processes, 0 left")
    return "; ".join(results)
