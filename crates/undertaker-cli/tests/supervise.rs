//! `undertaker supervise` (docs/SUPERVISE.md) with real hosts and real kill -9: a
//! Python host (standard library only) registering the groups it spawned, PID reuse
//! with a decoy, 100 spawned trees, the supervisor's own kill -9 and `sweep`, and a
//! table of malformed lines. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Writes the Python host that starts a supervisor, spawns three groups with
/// `start_new_session=True` (a sleeper, one ignoring SIGTERM, one that double-forks a
/// `setsid` grandchild once told to, after it was registered), registers them with
/// plain lines, and then waits to be killed.
const REGISTER_HOST: &str = r#"
import json, subprocess, sys, time
ut, state, tier, scratch = sys.argv[1:5]
sup = subprocess.Popen([ut, "--state-dir", state, "supervise", "--tier", tier, "--grace", "500ms"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
groups = [
    subprocess.Popen(["sleep", "1000"], start_new_session=True),
    subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 1000 & sleep 1000"], start_new_session=True),
    subprocess.Popen(["sh", "-c",
        "while [ ! -e %s/go ]; do sleep 0.05; done; "
        "(setsid sh -c 'echo $$ > %s/grandchild.tmp; mv %s/grandchild.tmp %s/grandchild; exec sleep 1000' &); "
        "sleep 1000" % (scratch, scratch, scratch, scratch)], start_new_session=True),
]
time.sleep(0.3)
for g in groups:
    sup.stdin.write(b"register %d\n" % g.pid)
    sup.stdin.flush()
    reply = json.loads(sup.stdout.readline())
    if not reply.get("ok"):
        print("refused:", reply, file=sys.stderr)
        sys.exit(3)
with open(scratch + "/registered.tmp", "w") as f:
    f.write(" ".join(str(g.pid) for g in groups))
import os
os.rename(scratch + "/registered.tmp", scratch + "/registered")
time.sleep(1000)
"#;

/// Runs the register scenario; returns the grandchild's pid after the host's kill -9,
/// and the scratch dir, which the caller keeps until the teardown has finished writing
/// into it (dropped earlier, the supervisor's last writes would recreate it).
fn register_then_kill_host(tier: &str) -> (i32, Scratch) {
    let scratch = Scratch::new("sv-register");
    let state = scratch.path().join("state");
    let host_py = scratch.file("host.py", REGISTER_HOST);
    let mut host = Command::new("python3")
        .arg(&host_py)
        .arg(UNDERTAKER)
        .arg(&state)
        .arg(tier)
        .arg(scratch.path())
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let registered = scratch.path().join("registered");
    assert!(
        wait_for_file(&registered, Duration::from_secs(60)),
        "host did not register its groups (status {:?})",
        host.try_wait()
    );
    std::fs::write(scratch.path().join("go"), "").unwrap();
    let grandchild_file = scratch.path().join("grandchild");
    assert!(wait_for_file(&grandchild_file, Duration::from_secs(60)));
    let grandchild: i32 = std::fs::read_to_string(&grandchild_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    kill9(&mut host);
    (grandchild, scratch)
}

#[test]
fn register_then_host_kill9_leaves_no_survivor_in_the_cgroup_tier() {
    if !require_cgroup()
        || !require_python()
        || !isolate("register_then_host_kill9_leaves_no_survivor_in_the_cgroup_tier")
    {
        return;
    }
    let (_, _scratch) = register_then_kill_host("cgroup");
    assert_nothing_left();
}

#[test]
fn register_then_host_kill9_in_the_subreaper_tier_leaves_only_the_double_forked_grandchild() {
    if !require_python()
        || !isolate(
            "register_then_host_kill9_in_the_subreaper_tier_leaves_only_the_double_forked_grandchild",
        )
    {
        return;
    }
    let (grandchild, _scratch) = register_then_kill_host("subreaper");
    // The tier's documented limit (docs/SUPERVISE.md): a process we did not start
    // cannot become our descendant, so a double-forked setsid grandchild born after
    // the registration is out of reach. Everything else is gone (waited for until it
    // is: waiting for nothing to be left would always take the whole bound).
    let only_the_grandchild = wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self() == vec![grandchild]
    });
    let left = survivors_after(Duration::ZERO);
    assert!(only_the_grandchild, "survivors: {left:?}");
    let pid = rustix::process::Pid::from_raw(grandchild).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    assert_nothing_left();
}

/// The portable tier (docs/SUPERVISE.md, "portable"): no cgroup holds the groups and
/// no subreaper hands us their orphans; the core tracks the registered processes and
/// what they fork. The double-forked `setsid` grandchild is orphaned within
/// microseconds of its birth and carries no marker (the host started its group), so
/// a look catches it only if one falls in that window: it may survive, as in the
/// subreaper tier; nothing else may.
#[test]
fn register_then_host_kill9_in_the_portable_tier_leaves_at_most_the_double_forked_grandchild() {
    if !require_python()
        || !isolate(
            "register_then_host_kill9_in_the_portable_tier_leaves_at_most_the_double_forked_grandchild",
        )
    {
        return;
    }
    let (grandchild, _scratch) = register_then_kill_host("portable");
    let settled = wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self()
            .iter()
            .all(|&p| p == grandchild)
    });
    let left = survivors_after(Duration::ZERO);
    assert!(settled, "survivors: {left:?}");
    if alive(grandchild) {
        let pid = rustix::process::Pid::from_raw(grandchild).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    }
    assert_nothing_left();
}

/// A decoy logging every signal it gets, as its own group leader.
const DECOY: &str = r#"
my $out = shift;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
for my $s (qw(TERM INT HUP QUIT USR1 USR2 CONT WINCH ALRM PIPE)) { $SIG{$s} = sub { note($s); }; }
note('ready');
sleep 1000 while 1;
"#;

/// The PID-reuse host: registers a group, lets it die without `unregister`, then
/// starts a decoy that takes the group's number as its pid and pgid; then waits.
const REUSE_HOST: &str = r#"
import json, os, subprocess, sys, time
ut, state, scratch, decoy = sys.argv[1:5]
sup = subprocess.Popen([ut, "--state-dir", state, "supervise", "--grace", "500ms"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
group = subprocess.Popen(["sleep", "1000"], start_new_session=True)
sup.stdin.write(b"register %d\n" % group.pid)
sup.stdin.flush()
reply = json.loads(sup.stdout.readline())
if not reply.get("ok"):
    print("refused:", reply, file=sys.stderr)
    sys.exit(3)
group.kill()
group.wait()
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(group.pid - 1))
d = subprocess.Popen(["perl", decoy, scratch + "/decoy.log"], start_new_session=True)
with open(scratch + "/pids.tmp", "w") as f:
    f.write("%d %d" % (group.pid, d.pid))
os.rename(scratch + "/pids.tmp", scratch + "/pids")
time.sleep(1000)
"#;

#[test]
fn a_dead_registered_group_whose_number_was_reused_is_never_signalled() {
    if !require_python()
        || !isolate("a_dead_registered_group_whose_number_was_reused_is_never_signalled")
    {
        return;
    }
    let scratch = Scratch::new("sv-reuse");
    let state = scratch.path().join("state");
    let host_py = scratch.file("host.py", REUSE_HOST);
    let decoy = scratch.file("decoy.pl", DECOY);
    let mut host = Command::new("python3")
        .arg(&host_py)
        .arg(UNDERTAKER)
        .arg(&state)
        .arg(scratch.path())
        .arg(&decoy)
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pids_file = scratch.path().join("pids");
    assert!(wait_for_file(&pids_file, Duration::from_secs(60)));
    let pids: Vec<i32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids[0], pids[1], "the decoy did not get the group's number");
    let log = scratch.path().join("decoy.log");
    assert!(wait_until(Duration::from_secs(60), || read_lines(&log) == ["ready"]));
    kill9(&mut host);
    // The supervisor sees end of input and tears down what it holds; then it exits.
    let supervisor_gone = wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self() == vec![pids[1]]
    });
    assert!(
        supervisor_gone,
        "left: {:?}",
        survivors_after(Duration::ZERO)
    );
    assert!(alive(pids[1]), "the decoy was killed");
    assert_eq!(read_lines(&log), ["ready"], "the decoy got signals");
    let pid = rustix::process::Pid::from_raw(pids[1]).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    assert_nothing_left();
}

/// 100 spawned trees in one supervisor, then the host's kill -9.
const HUNDRED_HOST: &str = r#"
import json, os, subprocess, sys, time
ut, state, scratch, tier, n, script, grace = sys.argv[1:8]
n = int(n)
sup = subprocess.Popen([ut, "--state-dir", state, "supervise", "--grace", grace, "--tier", tier],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
for i in range(n):
    req = {"op": "spawn", "id": i, "argv": ["sh", "-c", script]}
    sup.stdin.write((json.dumps(req) + "\n").encode())
sup.stdin.flush()
ok = 0
for i in range(n):
    reply = json.loads(sup.stdout.readline())
    ok += bool(reply.get("ok"))
with open(scratch + "/spawned.tmp", "w") as f:
    f.write(str(ok))
os.rename(scratch + "/spawned.tmp", scratch + "/spawned")
time.sleep(1000)
"#;

/// `n` trees spawned with `script` under `tier` by a host that is then `kill -9`ed;
/// `per_tree` processes each. Nothing may be left.
fn spawned_trees_die_with_their_host(tier: &str, n: usize, script: &str, per_tree: usize) {
    spawned_trees_die_with_their_host_within(tier, n, script, per_tree, "500ms");
}

/// [`spawned_trees_die_with_their_host`] with the supervisor's `--grace`; returns
/// how long after the host's `kill -9` nothing was left.
fn spawned_trees_die_with_their_host_within(
    tier: &str,
    n: usize,
    script: &str,
    per_tree: usize,
    grace: &str,
) -> Duration {
    let scratch = Scratch::new("sv-hundred");
    let state = scratch.path().join("state");
    let host_py = scratch.file("host.py", HUNDRED_HOST);
    let mut host = Command::new("python3")
        .arg(&host_py)
        .arg(UNDERTAKER)
        .arg(&state)
        .arg(scratch.path())
        .arg(tier)
        .arg(n.to_string())
        .arg(script)
        .arg(grace)
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let spawned = scratch.path().join("spawned");
    assert!(wait_for_file(&spawned, Duration::from_secs(120)));
    assert_eq!(std::fs::read_to_string(&spawned).unwrap(), n.to_string());
    // host + supervisor + n × the script's processes, once its transients are gone
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self().len() == 2 + n * per_tree
    }));
    kill9(&mut host);
    let killed = std::time::Instant::now();
    let left = survivors_after(Duration::from_secs(60));
    assert!(left.is_empty(), "{} survivors: {left:?}", left.len());
    killed.elapsed()
}

#[test]
fn a_hundred_spawned_trees_die_with_their_host() {
    if !require_python() || !isolate("a_hundred_spawned_trees_die_with_their_host") {
        return;
    }
    spawned_trees_die_with_their_host("auto", 100, "sleep 1000 & exec sleep 1000", 2);
}

/// The portable tier, owner `kill -9` with escapes: the root itself, which no
/// PDEATHSIG ends here; a double-forked `setsid` daemon reparented away from every
/// member (the marker); an `env -i` orphan whose parent lived 2 s, long enough for
/// the supervisor's looks to see it, and then left it with neither a member parent
/// nor the marker (only the tree's tracking knows it).
#[test]
fn spawned_trees_with_escapes_die_with_their_host_in_the_portable_tier() {
    if !require_python()
        || !isolate("spawned_trees_with_escapes_die_with_their_host_in_the_portable_tier")
    {
        return;
    }
    let script = "(env -i sleep 1000 & sleep 2) & (setsid sleep 1000 &); exec sleep 1000";
    spawned_trees_die_with_their_host("portable", 10, script, 3);
}

/// The portable tier's end takes every tree together: 3 trees, each with a member
/// that ignores SIGTERM and that only the tree's tracking knows (an `env -i` orphan
/// whose parent lived 2 s), `--grace 3s`, host `kill -9`: nothing left, and within
/// one grace and some, where one grace per tree would take at least 9 s.
#[test]
fn portable_trees_with_sigterm_ignorers_end_together_within_one_grace() {
    if !require_python()
        || !isolate("portable_trees_with_sigterm_ignorers_end_together_within_one_grace")
    {
        return;
    }
    let script = "(env -i sh -c 'trap \"\" TERM; exec sleep 1000' & sleep 2) & exec sleep 1000";
    let took = spawned_trees_die_with_their_host_within("portable", 3, script, 2, "3s");
    assert!(
        took < Duration::from_secs(8),
        "{took:?}: not one grace for all three trees (3 × 3 s in series)"
    );
}

/// The supervisor's own `kill -9` under `tier`: its trees are shown orphaned and one
/// `sweep` leaves nothing (in the portable tier the roots live on, no PDEATHSIG,
/// and the sweep seeds the core from each tree's member record).
fn supervisor_kill9_then_sweep(tier: &str) {
    let scratch = Scratch::new("sv-kill9");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, tier);
    for label in ["a", "b"] {
        let r = sup.request(&format!(
            r#"{{"op":"spawn","label":"{label}","argv":["sh","-c","sleep 1000 & sleep 1000 & wait"]}}"#
        ));
        assert_eq!(r["ok"], true, "{r}");
    }
    assert!(wait_until(Duration::from_secs(60), || {
        live_processes_except_self().len() >= 7
    }));
    kill9(&mut sup.child);
    let ps = json(&ut(&state, &["ps", "--json"]));
    let states: Vec<&str> = ps
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["orphaned", "orphaned"], "{ps}");
    let out = ut(&state, &["sweep", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["left_alive"], 0);
    assert_nothing_left();
}

#[test]
fn supervisor_kill9_leaves_orphaned_trees_that_one_sweep_finishes() {
    if !isolate("supervisor_kill9_leaves_orphaned_trees_that_one_sweep_finishes") {
        return;
    }
    supervisor_kill9_then_sweep("auto");
}

#[test]
fn supervisor_kill9_in_the_portable_tier_leaves_trees_that_one_sweep_finishes() {
    if !isolate("supervisor_kill9_in_the_portable_tier_leaves_trees_that_one_sweep_finishes") {
        return;
    }
    supervisor_kill9_then_sweep("portable");
}

#[test]
fn bad_lines_get_typed_errors_and_change_nothing() {
    if !isolate("bad_lines_get_typed_errors_and_change_nothing") {
        return;
    }
    let scratch = Scratch::new("sv-bad");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let r = sup.request(r#"{"op":"spawn","id":"keep","argv":["sleep","1000"]}"#);
    assert_eq!(r["ok"], true, "{r}");
    let tree = r["tree"].as_str().unwrap().to_owned();
    // A process of another uid, child of ours (the owner), leading its own group.
    let mut stranger = sleep_as_nobody(true);
    let me = std::process::id();
    let long = format!(r#"{{"op":"hello","pad":"{}"}}"#, "x".repeat(65 * 1024));
    let table: Vec<(String, &str, Option<&str>)> = vec![
        ("this is not json".into(), "bad_json", None),
        ("[1,2,3]".into(), "not_object", None),
        ("42".into(), "not_object", None),
        (r#"{"op":"reboot"}"#.into(), "unknown_op", None),
        (r#"{"id":7}"#.into(), "unknown_op", None),
        (long, "line_too_long", None),
        ("register -5".into(), "bad_pid", None),
        ("register 99999999999".into(), "bad_pid", None),
        (r#"{"op":"adopt","pid":-1}"#.into(), "bad_pid", None),
        (r#"{"op":"adopt","pid":4294967296}"#.into(), "bad_pid", None),
        ("register 1".into(), "refused", Some("protected")),
        (
            format!("register {}", sup.pid()),
            "refused",
            Some("protected"),
        ),
        (format!("register {me}"), "refused", Some("protected")),
        (
            format!("register {}", stranger.id()),
            "refused",
            Some("other_uid"),
        ),
        ("register 4194303".into(), "refused", Some("unproven_group")),
        ("unregister 4242".into(), "not_registered", None),
        (
            r#"{"op":"kill","tree":"00000000000000000000000000000000"}"#.into(),
            "unknown_tree",
            None,
        ),
        (r#"{"op":"spawn","argv":[]}"#.into(), "bad_request", None),
        (
            r#"{"op":"spawn","argv":["/nonexistent/cmd"]}"#.into(),
            "not_found",
            None,
        ),
    ];
    for (line, code, reason) in &table {
        let r = sup.request(line);
        let shown: String = line.chars().take(60).collect();
        assert_eq!(r["ok"], false, "{shown}: {r}");
        assert_eq!(r["error"]["code"], *code, "{shown}: {r}");
        if let Some(reason) = reason {
            assert_eq!(r["error"]["reason"], *reason, "{shown}: {r}");
        }
    }
    // A truncated line (no newline yet) is not a request; the next one still is.
    let r = sup.request(r#"{"op":"list","id":"after"}"#);
    assert_eq!(r["id"], "after");
    let trees = r["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 1, "{r}");
    assert_eq!(trees[0]["tree"], tree.as_str());
    assert_eq!(trees[0]["live"], 1, "{r}");
    assert!(
        alive(stranger.id() as i32),
        "the other uid's process was touched"
    );
    assert_eq!(sup.close(), 0);
    kill9(&mut stranger);
    assert_nothing_left();
}

#[test]
fn spawn_kill_release_and_exited_events() {
    if !isolate("spawn_kill_release_and_exited_events") {
        return;
    }
    let scratch = Scratch::new("sv-verbs");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let hello = sup.request(r#"{"op":"hello","id":1}"#);
    assert_eq!(hello["protocol"], 1, "{hello}");
    assert_eq!(hello["id"], 1);
    // A root that exits with 3 leaves a sleeper behind: `exited`, then the rest goes.
    let r = sup.request(r#"{"op":"spawn","argv":["sh","-c","sleep 1000 & exit 3"]}"#);
    let exiting = r["tree"].as_str().unwrap().to_owned();
    let r = sup.request(r#"{"op":"spawn","argv":["sh","-c","sleep 1000 & sleep 1000"]}"#);
    let killed = r["tree"].as_str().unwrap().to_owned();
    // A group of ours (the owner), registered then released.
    let mut group = Command::new("sleep")
        .arg("1000")
        .process_group(0)
        .spawn()
        .unwrap();
    let r = sup.request(&format!("register {}", group.id()));
    assert_eq!(r["ok"], true, "{r}");
    let released = r["tree"].as_str().unwrap().to_owned();
    assert!(wait_until(Duration::from_secs(60), || {
        let r = sup.request(r#"{"op":"list"}"#);
        r["trees"].as_array().unwrap().len() == 2
    }));
    let r = sup.request(&format!("register {}", group.id()));
    assert_eq!(
        r["tree"],
        released.as_str(),
        "registering twice names the same tree"
    );
    let exited = sup
        .events
        .iter()
        .find(|e| e["tree"] == exiting.as_str())
        .cloned()
        .expect("exited event");
    assert_eq!(exited["event"], "exited");
    assert_eq!(exited["status"], 3);
    assert!(survivors(&exiting).is_empty());
    let r = sup.request(&format!(r#"{{"op":"kill","tree":"{killed}"}}"#));
    assert_eq!(r["live"], 0, "{r}");
    assert!(survivors(&killed).is_empty());
    let r = sup.request(&format!(r#"{{"op":"release","tree":"{released}"}}"#));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(sup.close(), 0);
    // Released: not signalled at the end.
    assert!(alive(group.id() as i32), "a released tree was torn down");
    kill9(&mut group);
    assert_nothing_left();
}

#[test]
fn a_socket_peer_of_another_uid_is_refused_before_any_line() {
    if !is_root() {
        skip("needs root to run the supervisor as another uid");
        return;
    }
    // Created by us (uid 0): the supervisor, running as 65534, sees peer uid 0.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let out = undertaker_as_nobody()
        .arg("supervise")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    drop(ours);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not ours"), "{stderr}");
}

#[test]
fn a_host_that_never_reads_replies_does_not_stall_the_supervisor() {
    if !isolate("a_host_that_never_reads_replies_does_not_stall_the_supervisor") {
        return;
    }
    let scratch = Scratch::new("sv-noread");
    let state = scratch.path().join("state");
    // Replies go to a pipe nobody reads: about 300 KB of them, far over a pipe's 64 KiB.
    let mut sup = Supervisor::start(&state, "auto");
    let mut flood = String::new();
    for i in 0..2000 {
        flood.push_str(&format!("{{\"op\":\"hello\",\"id\":{i}}}\n"));
    }
    flood.push_str(r#"{"op":"spawn","argv":["sh","-c","sleep 1000 & sleep 1000"]}"#);
    flood.push('\n');
    sup.send_raw(flood.as_bytes());
    assert!(wait_until(Duration::from_secs(60), || {
        live_processes_except_self().len() >= 3
    }));
    // Without dropping replies each of ~1 600 would wait 100 ms: minutes, not seconds.
    drop(sup.input.take());
    let status = wait_child(&mut sup.child, Duration::from_secs(60));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "supervisor stalled");
    assert_nothing_left();
}

#[test]
fn a_registered_group_that_emptied_is_forgotten() {
    if !isolate("a_registered_group_that_emptied_is_forgotten") {
        return;
    }
    let scratch = Scratch::new("sv-prune");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let mut group = Command::new("sleep")
        .arg("1000")
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = group.id();
    let r = sup.request(&format!("register {pgid}"));
    assert_eq!(r["ok"], true, "{r}");
    let r = sup.request(r#"{"op":"list"}"#);
    assert_eq!(r["trees"].as_array().unwrap().len(), 1, "{r}");
    kill9(&mut group);
    // Gone from the list, and its number no longer counts as registered.
    let r = sup.request(r#"{"op":"list"}"#);
    assert_eq!(r["trees"].as_array().unwrap().len(), 0, "{r}");
    let r = sup.request(&format!("unregister {pgid}"));
    assert_eq!(r["error"]["code"], "not_registered", "{r}");
    assert_eq!(sup.close(), 0);
    assert_nothing_left();
}

/// docs/SUPERVISE.md: the owner is protected. An owner that is not the supervisor's
/// ancestor (`--owner PID`) handed over as a pidfd is refused, and survives the end.
#[test]
fn the_owner_cannot_be_adopted() {
    if !isolate("the_owner_cannot_be_adopted") {
        return;
    }
    let scratch = Scratch::new("sv-owner");
    let state = scratch.path().join("state");
    let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let owner_pid = owner.id() as i32;
    let mut sup = Supervisor::on_socket(&state, &["--owner", &owner_pid.to_string()]);
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(owner_pid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    let r = sup.request_with_fds(r#"{"op":"adopt"}"#, &[pidfd.as_fd()]);
    assert_eq!(r["ok"], false, "the owner was adopted: {r}");
    assert_eq!(r["error"]["reason"], "protected", "{r}");
    assert_eq!(sup.close(), 0);
    assert!(alive(owner_pid), "the owner was killed");
    kill9(&mut owner);
    assert_nothing_left();
}

/// Requests that were queued when the owner died are never acted on: the owner is
/// checked before each one, as `run` checks it before starting CMD.
#[test]
fn spawns_queued_before_the_owner_died_are_never_started() {
    if !isolate("spawns_queued_before_the_owner_died_are_never_started") {
        return;
    }
    let scratch = Scratch::new("sv-queued");
    let state = scratch.path().join("state");
    let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let owner_arg = owner.id().to_string();
    let mut sup = Supervisor::start_with(undertaker(), &state, "auto", &["--owner", &owner_arg]);
    assert_eq!(sup.request(r#"{"op":"hello"}"#)["ok"], true);
    // Stopped, the supervisor reads nothing: the spawns queue up, then the owner dies.
    signal_child(&sup.child, rustix::process::Signal::STOP);
    assert!(wait_until(Duration::from_secs(60), || proc_state(
        sup.pid()
    ) == Some('T')));
    let mut queued = String::new();
    for i in 0..5 {
        queued.push_str(&format!(
            r#"{{"op":"spawn","id":{i},"argv":["sleep","1000"]}}"#
        ));
        queued.push('\n');
    }
    sup.send_raw(queued.as_bytes());
    kill9(&mut owner);
    signal_child(&sup.child, rustix::process::Signal::CONT);
    let mut started = Vec::new();
    while let Some(reply) = sup.next_line() {
        if reply["ok"] == true {
            started.push(reply);
        }
    }
    let status = wait_child(&mut sup.child, Duration::from_secs(60)).expect("supervisor exits");
    assert_eq!(status.code(), Some(0));
    assert!(
        started.is_empty(),
        "started after the owner died: {started:?}"
    );
    assert_nothing_left();
}

/// A `cwd` the command cannot enter is reported as the step that failed, naming
/// the directory, not as argv[0] being unexecutable.
#[test]
fn an_unenterable_cwd_is_reported_as_the_cwd() {
    use std::os::unix::fs::PermissionsExt;
    if !isolate("an_unenterable_cwd_is_reported_as_the_cwd") {
        return;
    }
    let scratch = Scratch::world_writable("sv-cwd");
    let closed = scratch.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    // Root enters any directory: the supervisor then runs as nobody, for whom a 0700
    // directory of root's is closed.
    let (base, mode) = match is_root() {
        true => (undertaker_as_nobody(), 0o700),
        false => (undertaker(), 0o000),
    };
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(mode)).unwrap();
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start_with(base, &state, "subreaper", &[]);
    let line = serde_json::json!({"op": "spawn", "argv": ["true"], "cwd": closed});
    let r = sup.request(&line.to_string());
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error"]["code"], "spawn_failed", "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(closed.to_str().unwrap()),
        "the message does not name the cwd: {r}"
    );
    assert_eq!(sup.close(), 0);
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// `list` makes one /proc scan per request and reads each child's marker once, not
/// once per tree: with 300 trees a debug build answered in 7.4 s at ae8a51c on a
/// loaded machine, 0.23 s after. The bound is generous for such a machine.
#[test]
fn list_of_300_trees_scans_proc_once() {
    if !isolate("list_of_300_trees_scans_proc_once") {
        return;
    }
    let scratch = Scratch::new("sv-list300");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let mut batch = String::new();
    for i in 0..300 {
        batch.push_str(&format!(
            r#"{{"op":"spawn","id":{i},"argv":["sleep","1000"]}}"#
        ));
        batch.push('\n');
    }
    sup.send_raw(batch.as_bytes());
    for _ in 0..300 {
        assert_eq!(sup.reply()["ok"], true);
    }
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let start = std::time::Instant::now();
        let r = sup.request(r#"{"op":"list"}"#);
        best = best.min(start.elapsed());
        assert_eq!(r["trees"].as_array().map(Vec::len), Some(300), "{r}");
    }
    eprintln!("list of 300 trees: {best:?}");
    // 3 s: a machine 4x slower than ours stays under it, the per-tree scan does not.
    assert!(
        best < Duration::from_secs(3),
        "list of 300 trees took {best:?}"
    );
    assert_eq!(sup.close(), 0);
    let left = survivors_after(Duration::from_secs(60));
    assert!(left.is_empty(), "{} survivors", left.len());
}

/// `list` counts a tree of the cgroup tier through its cgroup while it is populated
/// (no look at all of /proc): a member that scrubbed its environment (no marker) and a
/// marked one count alike, with CMD.
#[test]
fn list_counts_a_cgroup_trees_members_through_its_cgroup() {
    if !isolate("list_counts_a_cgroup_trees_members_through_its_cgroup") || !require_cgroup() {
        return;
    }
    let scratch = Scratch::new("sv-list-cgroup");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "cgroup");
    let d = scratch.path().display();
    let script = format!(
        "env -u UNDERTAKER_TREE sleep 1000 & a=$!; sleep 1000 & echo $a $! > {d}/p.tmp; \
         mv {d}/p.tmp {d}/pids; wait"
    );
    let r =
        sup.request(&serde_json::json!({"op": "spawn", "argv": ["sh", "-c", script]}).to_string());
    assert_eq!(r["ok"], true, "{r}");
    assert!(wait_for_file(
        &scratch.path().join("pids"),
        Duration::from_secs(60)
    ));
    let pids = std::fs::read_to_string(scratch.path().join("pids")).unwrap();
    // Both have exec'd sleep (mid-exec, a process is briefly neither).
    assert!(wait_until(Duration::from_secs(60), || {
        pids.split_whitespace().all(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == b"sleep\x001000\x00")
        })
    }));
    // Polled: the `mv` that wrote the file is in the cgroup until it has exited (a list
    // then counted 4, under load).
    let mut list = serde_json::Value::Null;
    let three = wait_until(Duration::from_secs(60), || {
        list = sup.request(r#"{"op":"list"}"#);
        list["trees"][0]["live"] == 3
    });
    assert!(three, "{list}");
    assert_eq!(sup.close(), 0);
    assert_nothing_left();
}

/// `undertaker kill <tree>` of one tree a supervisor holds ends that tree only: the
/// supervisor is asked (over its control socket), never signalled, and its other
/// trees live on.
/// `undertaker kill <tree>` of one tree of a supervisor under `tier`.
fn kill_one_of_two(tier: &str) {
    let scratch = Scratch::new("sv-kill-one");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, tier);
    let spawn = |sup: &mut Supervisor| {
        let r = sup.request(r#"{"op":"spawn","argv":["sh","-c","sleep 1000 & exec sleep 1000"]}"#);
        assert_eq!(r["ok"], true, "{r}");
        (
            r["tree"].as_str().unwrap().to_owned(),
            r["pid"].as_i64().unwrap() as i32,
        )
    };
    let (killed, killed_pid) = spawn(&mut sup);
    let (kept, kept_pid) = spawn(&mut sup);
    let out = ut(&state, &["kill", &killed, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        json(&out)["left_alive"],
        0,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(wait_until(Duration::from_secs(60), || !alive(killed_pid)));
    assert!(survivors(&killed).is_empty());
    assert!(alive(sup.pid()), "the supervisor was killed");
    assert!(alive(kept_pid), "another tree of the supervisor was killed");
    let r = sup.request(r#"{"op":"list"}"#);
    let trees: Vec<&str> = (r["trees"].as_array().unwrap().iter())
        .map(|t| t["tree"].as_str().unwrap())
        .collect();
    assert_eq!(trees, [kept.as_str()], "{r}");
    assert_eq!(sup.close(), 0);
    assert_nothing_left();
}

#[test]
fn killing_one_supervised_tree_leaves_its_supervisor_and_the_other_trees() {
    if !isolate("killing_one_supervised_tree_leaves_its_supervisor_and_the_other_trees") {
        return;
    }
    kill_one_of_two("auto");
}

#[test]
fn killing_one_portable_tree_leaves_its_supervisor_and_the_other_trees() {
    if !isolate("killing_one_portable_tree_leaves_its_supervisor_and_the_other_trees") {
        return;
    }
    kill_one_of_two("portable");
}

/// A released tree is the host's again: its record says released, `ps` never
/// shows it orphaned, and neither `sweep` nor `kill` signals it, while its
/// supervisor lives or after it is gone.
#[test]
fn a_released_tree_is_never_swept_killed_or_shown_orphaned() {
    if !isolate("a_released_tree_is_never_swept_killed_or_shown_orphaned") {
        return;
    }
    let scratch = Scratch::new("sv-released");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let r = sup.request(r#"{"op":"spawn","argv":["sh","-c","sleep 1000 & exec sleep 1000"]}"#);
    let tree = r["tree"].as_str().unwrap().to_owned();
    let pid = r["pid"].as_i64().unwrap() as i32;
    assert!(wait_until(Duration::from_secs(60), || survivors(&tree)
        .len()
        == 2));
    let members = survivors(&tree);
    let r = sup.request(&format!(r#"{{"op":"release","tree":"{tree}"}}"#));
    assert_eq!(r["ok"], true, "{r}");
    let check = |when: &str, members: &[i32]| {
        let ps = json(&ut(&state, &["ps", "--json", "--all"]));
        let row = (ps.as_array().unwrap().iter())
            .find(|t| t["id"] == tree.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{when}: no row for {tree}: {ps}"));
        assert_eq!(row["state"], "released", "{when}: {row}");
        let ps = json(&ut(&state, &["ps", "--json"]));
        assert!(
            !ps.as_array()
                .unwrap()
                .iter()
                .any(|t| t["id"] == tree.as_str()),
            "{when}: a released tree is listed as guarded: {ps}"
        );
        let out = ut(&state, &["sweep", "--json", "--grace", "200ms"]);
        assert!(
            out.status.success(),
            "{when}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = ut(&state, &["kill", &tree, "--json", "--grace", "200ms"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(members.iter().all(|&p| alive(p)), "{when}: {text}");
    };
    check("supervisor alive", &members);
    assert_eq!(sup.close(), 0);
    // The root itself dies with the supervisor (PDEATHSIG, docs/SUPERVISE.md), a moment
    // after it (waited for: counted alive, it then died under the check below); what it
    // started carries the marker and lives on, released.
    assert!(
        wait_until(Duration::from_secs(60), || {
            reap_zombies();
            !alive(pid)
        }),
        "the spawned root outlived its supervisor"
    );
    let members: Vec<i32> = members.into_iter().filter(|&p| p != pid).collect();
    assert!(
        !members.is_empty() && members.iter().all(|&p| alive(p)),
        "the released tree's marked child died at the end"
    );
    check("supervisor gone", &members);
    for p in members {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(p).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert_nothing_left();
}

/// `adopt` in the portable tier: the adopted process forks, after the adoption, an
/// `env -i` child whose parent then exits (no marker, no member parent, not a
/// descendant of the supervisor). Only the tree's tracking knows it; the
/// supervisor's end (its owner closing the channel) must leave nothing.
#[test]
fn an_adopted_processs_scrubbed_orphan_goes_with_the_portable_tree() {
    if !isolate("an_adopted_processs_scrubbed_orphan_goes_with_the_portable_tree") {
        return;
    }
    let scratch = Scratch::new("sv-adopt-portable");
    let state = scratch.path().join("state");
    let go = scratch.path().join("go");
    let mut sup = Supervisor::start(&state, "portable");
    let orphan = scratch.path().join("orphan");
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; \
         (env -i sh -c 'echo $$ > {orphan}.tmp; mv {orphan}.tmp {orphan}; exec sleep 1000' & sleep 2) & \
         exec sleep 1000",
        go = go.display(),
        orphan = orphan.display()
    );
    let mut adopted = Command::new("sh")
        .args(["-c", &script])
        .env_remove("UNDERTAKER_TREE")
        .spawn()
        .unwrap();
    let r = sup.request(&format!(r#"{{"op":"adopt","pid":{}}}"#, adopted.id()));
    assert_eq!(r["ok"], true, "{r}");
    std::fs::write(&go, "").unwrap();
    assert!(wait_for_file(&orphan, Duration::from_secs(60)));
    let orphan: i32 = std::fs::read_to_string(&orphan)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // supervisor + the adopted sleep + the orphan, once its parent is gone
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self().len() == 3
    }));
    assert!(alive(orphan));
    assert_eq!(sup.close(), 0);
    let _ = adopted.wait();
    assert_nothing_left();
}
