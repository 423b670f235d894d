//! `undertaker supervise` (docs/SUPERVISE.md) with real hosts and real kill -9: a
//! Python host (standard library only) registering the groups it spawned, PID reuse
//! with a decoy, 100 spawned trees, the supervisor's own kill -9 and `sweep`, and a
//! table of malformed lines. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// Skips the test (false) unless the cgroup tier is available here.
fn require_cgroup() -> bool {
    match undertaker::testing::cgroup_tier_available() {
        Ok(_) => true,
        Err(why) => {
            skip(&format!("cgroup tier unavailable: {why}"));
            false
        }
    }
}

fn require_python() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip("python3 not installed");
    }
    ok
}

/// A supervisor whose owner is this test: requests on a pipe, replies read back.
struct Supervisor {
    child: Child,
    input: Option<ChildStdin>,
    output: BufReader<ChildStdout>,
    /// Events read while waiting for replies.
    events: Vec<Value>,
}

impl Supervisor {
    fn start(state: &Path, tier: &str) -> Self {
        let mut child = undertaker()
            .arg("--state-dir")
            .arg(state)
            .args(["supervise", "--grace", "500ms", "--tier", tier])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start undertaker supervise");
        let input = child.stdin.take();
        let output = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            input,
            output,
            events: Vec::new(),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let input = self.input.as_mut().unwrap();
        input.write_all(bytes).unwrap();
        input.flush().unwrap();
    }

    /// Sends one line, returns its reply (events on the way are kept).
    fn request(&mut self, line: &str) -> Value {
        self.send_raw(format!("{line}\n").as_bytes());
        self.reply()
    }

    fn reply(&mut self) -> Value {
        loop {
            let mut text = String::new();
            let n = self.output.read_line(&mut text).unwrap();
            assert!(n > 0, "supervisor closed its output");
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            if v.get("event").is_some() {
                self.events.push(v);
            } else {
                return v;
            }
        }
    }

    /// End of input: the host is gone. Returns the exit code.
    fn close(mut self) -> i32 {
        drop(self.input.take());
        let status =
            wait_child(&mut self.child, Duration::from_secs(60)).expect("supervisor exits");
        status.code().unwrap_or(-1)
    }
}

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
        wait_for_file(&registered, Duration::from_secs(30)),
        "host did not register its groups (status {:?})",
        host.try_wait()
    );
    std::fs::write(scratch.path().join("go"), "").unwrap();
    let grandchild_file = scratch.path().join("grandchild");
    assert!(wait_for_file(&grandchild_file, Duration::from_secs(30)));
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
    let left = survivors_after(Duration::from_secs(30));
    assert!(left.is_empty(), "survivors: {left:?}");
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
    // the registration is out of reach. Everything else is gone.
    let left = survivors_after(Duration::from_secs(30));
    let pids: Vec<i32> = left.iter().map(|(p, _)| *p).collect();
    assert_eq!(pids, vec![grandchild], "survivors: {left:?}");
    let pid = rustix::process::Pid::from_raw(grandchild).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:?}");
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
    assert!(wait_for_file(&pids_file, Duration::from_secs(30)));
    let pids: Vec<i32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids[0], pids[1], "the decoy did not get the group's number");
    let log = scratch.path().join("decoy.log");
    assert!(wait_until(Duration::from_secs(10), || read_lines(&log) == ["ready"]));
    kill9(&mut host);
    // The supervisor sees end of input and tears down what it holds; then it exits.
    let supervisor_gone = wait_until(Duration::from_secs(30), || {
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
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:?}");
}

/// 100 spawned trees in one supervisor, then the host's kill -9.
const HUNDRED_HOST: &str = r#"
import json, os, subprocess, sys, time
ut, state, scratch = sys.argv[1:4]
sup = subprocess.Popen([ut, "--state-dir", state, "supervise", "--grace", "500ms"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
for i in range(100):
    req = {"op": "spawn", "id": i, "argv": ["sh", "-c", "sleep 1000 & exec sleep 1000"]}
    sup.stdin.write((json.dumps(req) + "\n").encode())
sup.stdin.flush()
ok = 0
for i in range(100):
    reply = json.loads(sup.stdout.readline())
    ok += bool(reply.get("ok"))
with open(scratch + "/spawned.tmp", "w") as f:
    f.write(str(ok))
os.rename(scratch + "/spawned.tmp", scratch + "/spawned")
time.sleep(1000)
"#;

#[test]
fn a_hundred_spawned_trees_die_with_their_host() {
    if !require_python() || !isolate("a_hundred_spawned_trees_die_with_their_host") {
        return;
    }
    let scratch = Scratch::new("sv-hundred");
    let state = scratch.path().join("state");
    let host_py = scratch.file("host.py", HUNDRED_HOST);
    let mut host = Command::new("python3")
        .arg(&host_py)
        .arg(UNDERTAKER)
        .arg(&state)
        .arg(scratch.path())
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let spawned = scratch.path().join("spawned");
    assert!(wait_for_file(&spawned, Duration::from_secs(120)));
    assert_eq!(std::fs::read_to_string(&spawned).unwrap(), "100");
    // host + supervisor + 100 × (sh's sleep + exec'd sleep)
    assert!(wait_until(Duration::from_secs(30), || {
        live_processes_except_self().len() >= 202
    }));
    kill9(&mut host);
    let left = survivors_after(Duration::from_secs(60));
    assert!(left.is_empty(), "{} survivors: {left:?}", left.len());
}

#[test]
fn supervisor_kill9_leaves_orphaned_trees_that_one_sweep_finishes() {
    if !isolate("supervisor_kill9_leaves_orphaned_trees_that_one_sweep_finishes") {
        return;
    }
    let scratch = Scratch::new("sv-kill9");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    for label in ["a", "b"] {
        let r = sup.request(&format!(
            r#"{{"op":"spawn","label":"{label}","argv":["sh","-c","sleep 1000 & sleep 1000 & wait"]}}"#
        ));
        assert_eq!(r["ok"], true, "{r}");
    }
    assert!(wait_until(Duration::from_secs(10), || {
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
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:?}");
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
    let mut stranger = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "1000",
        ])
        .process_group(0)
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{}/status", stranger.id()))
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t65534")))
    }));
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
        (
            "register 4194303".into(),
            "refused",
            Some("no_such_process"),
        ),
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
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:?}");
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
    assert!(wait_until(Duration::from_secs(10), || {
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
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:?}");
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
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:?}");
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
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:?}");
}
