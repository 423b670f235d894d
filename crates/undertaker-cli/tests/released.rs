//! `release` and `unregister` are final across supervisor restarts (issue 26 item 2,
//! docs/SUPERVISE.md, `release`): a supervisor `kill -9`ed after releasing trees, and
//! the owner's next supervisor (which gets a replayed `register` of a group whose
//! leader died: the Hermes pattern that makes it search for its predecessor's trees),
//! its self-healing, `sweep` and `undertaker kill` never touch what was released, in
//! both tiers. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Records every catchable signal it receives to $1, one per line, after "ready".
const LOGGER: &str = r#"
use strict;
my $out = shift @ARGV;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
for my $s (qw(TERM INT HUP QUIT USR1 USR2 CONT WINCH ALRM PIPE)) { $SIG{$s} = sub { note($s); }; }
note('ready');
sleep 1000 while 1;
"#;

/// A signal logger of ours in process group `pgid` (0: its own), once it is ready.
fn logger(scratch: &Scratch, name: &str, pgid: i32) -> (Child, PathBuf) {
    let script = scratch.file("logger.pl", LOGGER);
    let log = scratch.path().join(name);
    let child = Command::new("perl")
        .arg(&script)
        .arg(&log)
        .process_group(pgid)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || read_lines(&log)
            .contains(&"ready".to_string())),
        "logger {name} did not start"
    );
    (child, log)
}

/// A group of two loggers (its leader and a member), as a host's server.
struct Group {
    leader: Child,
    member: Child,
    logs: [PathBuf; 2],
}

impl Group {
    fn start(scratch: &Scratch, name: &str) -> Self {
        let (leader, leader_log) = logger(scratch, &format!("{name}-leader.log"), 0);
        let pgid = leader.id() as i32;
        let (member, member_log) = logger(scratch, &format!("{name}-member.log"), pgid);
        Group {
            leader,
            member,
            logs: [leader_log, member_log],
        }
    }

    fn pgid(&self) -> u32 {
        self.leader.id()
    }

    /// Both alive, and neither got a signal.
    fn assert_untouched(&self, what: &str) {
        for (pid, log) in [self.leader.id(), self.member.id()].iter().zip(&self.logs) {
            assert!(alive(*pid as i32), "{what}: {pid} was killed");
            assert_eq!(read_lines(log), ["ready"], "{what}: {pid} got signals");
        }
    }

    fn end(mut self) {
        kill9(&mut self.leader);
        kill9(&mut self.member);
    }
}

fn ok(reply: &Value) -> &Value {
    assert_eq!(reply["ok"], true, "{reply}");
    reply
}

fn released_then_restarted(tier: &str) {
    let scratch = Scratch::new(&format!("released-{tier}"));
    let state = scratch.path().join("state");
    let unregistered = Group::start(&scratch, "unregistered");
    let released = Group::start(&scratch, "released");
    // The Hermes trigger: a registered group whose leader dies while its supervisor is
    // gone, replayed to the next one (which then searches for its predecessor's trees).
    let mut gone = Group::start(&scratch, "gone");
    let mut first = Supervisor::start(&state, tier);
    let mut trees = Vec::new();
    for g in [&unregistered, &released, &gone] {
        let reply = first.request(&format!("register {}", g.pgid()));
        trees.push(ok(&reply)["tree"].as_str().unwrap().to_owned());
    }
    // A spawned tree released: its root dies of PDEATHSIG with the supervisor (as
    // documented; the portable tier has none, and the root lives on too), the
    // logger it started must live on.
    let spawned_log = scratch.path().join("spawned.log");
    let script = scratch.path().join("logger.pl");
    let reply = first.request(&format!(
        r#"{{"op":"spawn","argv":["sh","-c","perl {} {} & wait"]}}"#,
        script.display(),
        spawned_log.display()
    ));
    let spawned_tree = ok(&reply)["tree"].as_str().unwrap().to_owned();
    assert!(wait_until(Duration::from_secs(60), || read_lines(
        &spawned_log
    )
    .contains(&"ready".to_string())));
    let spawned = survivors(&spawned_tree);
    assert_eq!(spawned.len(), 2, "the spawned tree: {spawned:?}");
    ok(&first.request(&format!("unregister {}", unregistered.pgid())));
    ok(&first.request(&format!(r#"{{"op":"release","tree":"{}"}}"#, trees[1])));
    ok(&first.request(&format!(r#"{{"op":"release","tree":"{spawned_tree}"}}"#)));
    kill9(&mut first.child);
    kill9(&mut gone.leader);
    let left_by_the_release = if tier == "portable" { 2 } else { 1 };
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        survivors(&spawned_tree).len() == left_by_the_release
    }));
    let spawned_left = survivors(&spawned_tree);
    let spawned_logger = *spawned_left.last().unwrap();
    let mut second = Supervisor::start(&state, tier);
    let reply = second.request(&format!("register {}", gone.pgid()));
    ok(&reply);
    let list = second.request(r#"{"op":"list"}"#);
    let held: Vec<&Value> = list["trees"].as_array().unwrap().iter().collect();
    assert_eq!(held.len(), 1, "the successor holds released trees: {list}");
    // Its self-healing runs a second after it starts, then a sweep and `kill`.
    std::thread::sleep(Duration::from_secs(3));
    let sweep = json(&ut(&state, &["sweep", "--json"]));
    for tree in [&trees[0], &trees[1], &spawned_tree] {
        let killed = json(&ut(&state, &["kill", "--json", tree]));
        assert_eq!(killed["action"], "left_alone", "kill {tree}: {killed}");
    }
    assert_eq!(second.close(), 0);
    reap_zombies();
    let what = format!("{tier} tier, after the successor's end; sweep: {sweep}");
    unregistered.assert_untouched(&what);
    released.assert_untouched(&what);
    assert!(
        spawned_left.iter().all(|&p| alive(p)),
        "{what}: the spawned tree's processes were killed"
    );
    assert_eq!(
        read_lines(&spawned_log),
        ["ready"],
        "{what}: spawned logger"
    );
    assert!(
        !alive(gone.member.id() as i32),
        "the replayed group survived"
    );
    assert_no_signal_logged(&state, &[&unregistered, &released], spawned_logger);
    unregistered.end();
    released.end();
    let _ = gone.member.wait();
    // The portable tier's member records go with their trees, released or ended.
    let records: Vec<_> = (std::fs::read_dir(state.join("trees")).unwrap())
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".members"))
        .collect();
    assert!(
        records.is_empty(),
        "{what}: member records left: {records:?}"
    );
    for p in spawned_left {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(p).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert_nothing_left();
}

/// No audit line records a signal to a released process.
fn assert_no_signal_logged(state: &Path, groups: &[&Group], spawned: i32) {
    let mut pids: Vec<i64> = vec![spawned as i64];
    for g in groups {
        pids.extend([g.leader.id() as i64, g.member.id() as i64]);
    }
    let audit = json(&ut(state, &["log", "--json"]));
    let hits: Vec<&Value> = (audit.as_array().unwrap().iter())
        .filter(|e| e["event"] == "signal" && pids.contains(&e["pid"].as_i64().unwrap_or(0)))
        .collect();
    assert!(hits.is_empty(), "signals to released processes: {hits:?}");
}

#[test]
fn released_trees_stay_released_across_a_supervisor_restart_in_the_cgroup_tier() {
    if !require_cgroup()
        || !isolate("released_trees_stay_released_across_a_supervisor_restart_in_the_cgroup_tier")
    {
        return;
    }
    released_then_restarted("cgroup");
}

#[test]
fn released_trees_stay_released_across_a_supervisor_restart_in_the_subreaper_tier() {
    if !isolate("released_trees_stay_released_across_a_supervisor_restart_in_the_subreaper_tier") {
        return;
    }
    released_then_restarted("subreaper");
}

#[test]
fn released_trees_stay_released_across_a_supervisor_restart_in_the_portable_tier() {
    if !isolate("released_trees_stay_released_across_a_supervisor_restart_in_the_portable_tier") {
        return;
    }
    released_then_restarted("portable");
}

/// The cgroup a released record names, left behind with a member in it (as when a
/// member forked while `release` moved it out) after its supervisor's `kill -9`: a
/// dead guardian's tree cgroup, but `sweep`, the next supervisor and its self-healing
/// leave it alone.
#[test]
fn a_released_trees_leftover_cgroup_is_never_swept() {
    if !require_cgroup() || !isolate("a_released_trees_leftover_cgroup_is_never_swept") {
        return;
    }
    let scratch = Scratch::new("released-cgroup");
    let state = scratch.path().join("state");
    let released = Group::start(&scratch, "released");
    let mut first = Supervisor::start(&state, "cgroup");
    let reply = first.request(&format!("register {}", released.pgid()));
    let tree = ok(&reply)["tree"].as_str().unwrap().to_owned();
    let cgroups = undertaker::testing::tree_cgroups_of_tree(&tree);
    assert_eq!(cgroups.len(), 1, "{cgroups:?}");
    ok(&first.request(&format!(r#"{{"op":"release","tree":"{tree}"}}"#)));
    assert!(!cgroups[0].exists(), "release left the tree's cgroup");
    kill9(&mut first.child);
    // The leftover: the released tree's cgroup, its member back in it.
    std::fs::create_dir(&cgroups[0]).unwrap();
    let member = released.member.id();
    std::fs::write(cgroups[0].join("cgroup.procs"), member.to_string()).unwrap();
    let sweep = json(&ut(&state, &["sweep", "--json"]));
    let second = Supervisor::start(&state, "cgroup");
    // Its self-healing runs a second after it starts: give it time.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(second.close(), 0);
    released.assert_untouched(&format!("sweep: {sweep}"));
    // Ours to clean up: the processes, then the emptied cgroup.
    released.end();
    assert!(wait_until(Duration::from_secs(60), || {
        std::fs::remove_dir(&cgroups[0]).is_ok() || !cgroups[0].exists()
    }));
    assert_nothing_left();
}
