//! `undertaker supervise` as a drop-in for the seed hosts (issue 18, docs/SUPERVISE.md
//! and docs/INTEGRATIONS.md): Hermes Agent's death-supervisor contract (its argv, a host
//! that never reads replies, supervisor restarts with a replay, orphan groups, a reused
//! number) and pi-crew's spawn snapshot. The Hermes-contract host is
//! `tests/hosts/hermes_host.py`. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// A `sleep` of ours leading its own process group.
fn group_leader() -> Child {
    Command::new("sleep")
        .arg("1000")
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn refusal_reason(reply: &Value) -> &str {
    reply["error"]["reason"].as_str().unwrap_or("")
}

/// Item 1: Hermes starts its supervisor with `--parent-pgid <its own group>`. The
/// option is accepted, that group is never registered, and none of its members is
/// signalled when the supervisor tears down.
#[test]
fn parent_pgid_is_accepted_and_that_group_is_never_registered_or_signalled() {
    let scratch = Scratch::new("hermes-parent-pgid");
    let state = scratch.path().join("state");
    let mut host_group = group_leader();
    let pgid = host_group.id() as i32;
    let mut other = group_leader();
    let mut sup = Supervisor::start_with(
        undertaker(),
        &state,
        "auto",
        &["--parent-pgid", &pgid.to_string()],
    );
    let reply = sup.request(&format!("register {pgid}"));
    assert_eq!(reply["ok"], false, "{reply}");
    assert_eq!(refusal_reason(&reply), "protected", "{reply}");
    // Another group of ours is still accepted: the option protects one group only.
    let reply = sup.request(&format!("register {}", other.id()));
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(sup.close(), 0);
    assert!(alive(pgid), "the --parent-pgid group was signalled");
    assert!(
        wait_child(&mut other, Duration::from_secs(60)).is_some(),
        "the registered group survived"
    );
    kill9(&mut host_group);
}

/// Item 2: a refusal also goes to the audit log with its reason, for hosts that never
/// read replies.
#[test]
fn every_refusal_is_in_the_audit_log_with_its_reason() {
    let scratch = Scratch::new("hermes-refusal-log");
    let state = scratch.path().join("state");
    // A grandchild of ours: not the owner's child.
    let mut wrapper = Command::new("sh")
        .args(["-c", "setsid sleep 1000 & echo $!; wait"])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(wrapper.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grandchild: i32 = line.trim().parse().unwrap();
    let mut sup = Supervisor::start(&state, "auto");
    let reply = sup.request(&format!("register {grandchild}"));
    assert_eq!(refusal_reason(&reply), "not_owner_child", "{reply}");
    let reply = sup.request(r#"{"op":"adopt","pid":1}"#);
    assert_eq!(refusal_reason(&reply), "protected", "{reply}");
    assert_eq!(sup.close(), 0);
    let log = json(&ut(&state, &["log", "--json"]));
    let refusals: Vec<(&str, i64, &str)> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "refusal" && e["actor"] == "supervise")
        .map(|e| {
            (
                e["refusal_code"].as_str().unwrap_or(""),
                e["pid"].as_i64().unwrap_or(0),
                e["message"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(refusals.len(), 2, "log: {log}");
    assert_eq!(refusals[0].0, "not_owner_child");
    assert_eq!(refusals[0].1, grandchild as i64);
    assert!(refusals[0].2.starts_with("register: "), "{refusals:?}");
    assert_eq!(refusals[1].0, "protected");
    assert!(refusals[1].2.starts_with("adopt: "), "{refusals:?}");
    // The grandchild is our wrapper's child: end it through the wrapper's group.
    assert!(signal_child_of(
        wrapper.id() as i32,
        grandchild,
        rustix::process::Signal::KILL
    ));
    kill9(&mut wrapper);
}

/// The Hermes-contract host (tests/hosts/hermes_host.py), driven line by line.
struct HermesHost {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

/// One server group of the host: its leader (the group's number) and the leader's child.
#[derive(Debug, Clone, Copy)]
struct Server {
    pgid: i32,
    child: i32,
}

impl HermesHost {
    fn start(state: &Path, tier: &str, scratch: &Scratch) -> Self {
        let script = scratch.file("hermes_host.py", HERMES_HOST);
        let mut child = Command::new("python3")
            .arg(script)
            .arg(UNDERTAKER)
            .args(["supervise", "--tier", tier, "--grace", "500ms"])
            .env("UNDERTAKER_STATE_DIR", state)
            .env_remove("UNDERTAKER_TREE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the Hermes-contract host");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            input,
            output,
        }
    }

    fn command(&mut self, line: &str) -> Value {
        self.input
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        self.input.flush().unwrap();
        let mut text = String::new();
        let n = self.output.read_line(&mut text).unwrap();
        assert!(n > 0, "the host died at {line:?}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    fn server(&mut self, name: &str) -> Server {
        let v = self.command(&format!("server {name}"));
        Server {
            pgid: v["pgid"].as_i64().unwrap() as i32,
            child: v["child"].as_i64().unwrap() as i32,
        }
    }

    fn supervisor(&mut self) -> Option<i32> {
        self.command("supervisor")["pid"].as_i64().map(|p| p as i32)
    }
}

const HERMES_HOST: &str = include_str!("hosts/hermes_host.py");

/// Trees `undertaker ps` shows running, with their guardian's pid.
fn running_trees(state: &Path) -> Vec<(String, i64)> {
    let out = ut(state, &["ps", "--json"]);
    if !out.status.success() {
        return Vec::new();
    }
    json(&out)
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|t| t["state"] == "running")
                .map(|t| {
                    (
                        t["id"].as_str().unwrap_or("").to_owned(),
                        t["guardian_pid"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The refusals `undertaker log` holds: (reason, pid).
fn logged_refusals(state: &Path) -> Vec<(String, i64)> {
    let log = json(&ut(state, &["log", "--json"]));
    log.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "refusal" && e["actor"] == "supervise")
        .map(|e| {
            (
                e["refusal_code"].as_str().unwrap_or("").to_owned(),
                e["pid"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

/// The whole Hermes check (issue 18, "How it will be checked"): the supervisor is
/// `kill -9`ed, a registered group's leader dies leaving an orphan member, a dead
/// group's number goes to a decoy that is not the host's child, the host restarts the
/// supervisor and replays its set with a new group's registration, then is itself
/// `kill -9`ed. While the host lives nothing it still uses is killed; afterwards
/// nothing of its servers survives, and the decoy never got a signal.
fn hermes_restart_and_replay(tier: &str) {
    let scratch = Scratch::new(&format!("hermes-{tier}"));
    let state = scratch.path().join("state");
    let mut host = HermesHost::start(&state, tier, &scratch);
    let orphaned = host.server("orphaned");
    let live = host.server("live");
    let dead = host.server("dead");
    let first = host.supervisor().expect("the host started its supervisor");
    assert!(
        wait_until(Duration::from_secs(60), || running_trees(&state).len() == 3),
        "the first supervisor did not take the three groups: {:?}",
        running_trees(&state)
    );
    host.command("kill_group dead");
    host.command("kill_supervisor");
    host.command("kill_leader orphaned");
    assert!(alive(orphaned.child));
    // The dead group's number goes to a decoy of ours (not the host's child), leading
    // its own group: what a faithful host's signal-0 probe then takes for the group.
    // The group's number is free once its last member is reaped (we are its reaper).
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        proc_state(dead.child).is_none()
    }));
    set_next_pid(dead.pgid).unwrap();
    let (decoy, decoy_log) = spawn_decoy(&scratch, "decoy.log");
    assert_eq!(
        decoy.id() as i32,
        dead.pgid,
        "the decoy did not get the number"
    );
    // A new server: the host finds its supervisor dead, starts another and replays.
    let fresh = host.server("fresh");
    let second = host
        .supervisor()
        .expect("the host restarted its supervisor");
    assert_ne!(first, second);
    // The second supervisor serves; its self-healing runs a second after it starts:
    // give it time to have done whatever it would do.
    assert!(
        wait_until(Duration::from_secs(60), || {
            let trees = running_trees(&state);
            trees.len() == 3 && trees.iter().all(|(_, g)| *g == second as i64)
        }),
        "the second supervisor does not hold orphaned, live and fresh: {:?}\n{}",
        running_trees(&state),
        String::from_utf8_lossy(&ut(&state, &["log"]).stdout)
    );
    std::thread::sleep(Duration::from_secs(3));
    for pid in [
        orphaned.child,
        live.pgid,
        live.child,
        fresh.pgid,
        fresh.child,
    ] {
        assert!(alive(pid), "{pid} was killed while the host lives");
    }
    // The replayed registrations were accepted; only the decoy's number was refused.
    let refusals = logged_refusals(&state);
    assert_eq!(
        refusals,
        [("not_owner_child".to_string(), dead.pgid as i64)],
        "refusals: {refusals:?}"
    );
    kill9(&mut host.child);
    let gone = wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self() == vec![decoy.id() as i32]
    });
    assert!(gone, "survivors: {:?}", survivors_after(Duration::ZERO));
    assert_decoy_untouched(&decoy, &decoy_log);
    let mut decoy = decoy;
    kill9(&mut decoy);
    assert_nothing_left();
}

#[test]
fn hermes_restart_and_replay_leaves_no_survivor_in_the_cgroup_tier() {
    if !require_cgroup()
        || !require_python()
        || !isolate("hermes_restart_and_replay_leaves_no_survivor_in_the_cgroup_tier")
    {
        return;
    }
    hermes_restart_and_replay("cgroup");
}

#[test]
fn hermes_restart_and_replay_leaves_no_survivor_in_the_subreaper_tier() {
    if !require_python()
        || !isolate("hermes_restart_and_replay_leaves_no_survivor_in_the_subreaper_tier")
    {
        return;
    }
    hermes_restart_and_replay("subreaper");
}

/// /proc/PID/stat field 22 of a live process.
fn start_time(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// A group of ours whose leader (a shell) has a child in the group; returns the shell
/// and the child's pid.
fn group_with_member() -> (Child, i32) {
    let mut leader = Command::new("sh")
        .args(["-c", "sleep 1000 & echo $!; wait"])
        .process_group(0)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(leader.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (leader, line.trim().parse().unwrap())
}

/// Item 3: a group whose leader died is accepted when a snapshot proves it (pi-crew's
/// `adopt` form), refused `unproven_group` otherwise, never on a bare number; and the
/// snapshot form also takes a live group whose leader is not the owner's child.
#[test]
fn adopt_with_a_snapshot_proves_a_group_whose_leader_died() {
    if !isolate("adopt_with_a_snapshot_proves_a_group_whose_leader_died") {
        return;
    }
    let scratch = Scratch::new("hermes-snapshot");
    let state = scratch.path().join("state");
    let (mut leader, member) = group_with_member();
    let pgid = leader.id() as i32;
    let snapshot = format!(
        r#"[{{"pid":{pgid},"start_time":{}}},{{"pid":{member},"start_time":{}}}]"#,
        start_time(pgid),
        start_time(member)
    );
    let mut sup = Supervisor::start(&state, "subreaper");
    kill9(&mut leader);
    assert!(alive(member));
    // A bare number: the leader is gone, nothing proves the group.
    let reply = sup.request(&format!("register {pgid}"));
    assert_eq!(refusal_reason(&reply), "unproven_group", "{reply}");
    // A snapshot whose start times are not the live ones proves nothing.
    let wrong = format!(r#"[{{"pid":{member},"start_time":1}}]"#);
    let reply = sup.request(&format!(
        r#"{{"op":"adopt","pgid":{pgid},"snapshot":{wrong}}}"#
    ));
    assert_eq!(refusal_reason(&reply), "unproven_group", "{reply}");
    let reply = sup.request(&format!(
        r#"{{"op":"adopt","pgid":{pgid},"snapshot":{snapshot}}}"#
    ));
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["members"], 1, "{reply}");
    // The replayed plain line names the same tree.
    let again = sup.request(&format!("register {pgid}"));
    assert_eq!(again["tree"], reply["tree"], "{again}");
    // A live group led by a process that is not our child (a grandchild): `register`
    // refuses it, and so does the snapshot form: a leader's entry never proves its
    // group (a stranger that took the number in the same clock tick would match it).
    let mut wrapper = Command::new("sh")
        .args(["-c", "setsid sh -c 'sleep 1000 & wait' & echo $!; wait"])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(wrapper.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grandchild: i32 = line.trim().parse().unwrap();
    assert!(wait_until(Duration::from_secs(60), || {
        std::fs::read_to_string(format!("/proc/{grandchild}/task/{grandchild}/children"))
            .is_ok_and(|c| !c.trim().is_empty())
    }));
    let reply = sup.request(&format!("register {grandchild}"));
    assert_eq!(refusal_reason(&reply), "not_owner_child", "{reply}");
    let reply = sup.request(&format!(
        r#"{{"op":"adopt","pgid":{grandchild},"snapshot":[{{"pid":{grandchild},"start_time":{}}}]}}"#,
        start_time(grandchild)
    ));
    assert_eq!(refusal_reason(&reply), "not_owner_child", "{reply}");
    assert_eq!(sup.close(), 0);
    reap_zombies();
    assert!(!alive(member), "the adopted group's member survived");
    assert!(
        alive(grandchild),
        "a group the snapshot did not prove was torn down"
    );
    // Ours to end: the test started that session's group (the setsid shell and its sleep).
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(grandchild).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = wrapper.kill();
    let _ = wrapper.wait();
    assert_nothing_left();
}

/// Item 4: a supervisor `kill -9`ed while its owner lives; the owner starts the next
/// one. It takes the dead one's registered trees over at start (a group whose leader
/// died included), self-healing and `sweep` leave them alone meanwhile, and they die
/// with the new supervisor's teardown.
fn restarted_supervisor_takes_over(tier: &str) {
    let scratch = Scratch::new(&format!("hermes-takeover-{tier}"));
    let state = scratch.path().join("state");
    let (mut orphaned, orphan) = group_with_member();
    let (live, live_member) = group_with_member();
    let mut first = Supervisor::start(&state, tier);
    let mut first_trees = Vec::new();
    for g in [&orphaned, &live] {
        let reply = first.request(&format!("register {}", g.id()));
        assert_eq!(reply["ok"], true, "{reply}");
        first_trees.push(reply["tree"].as_str().unwrap().to_owned());
    }
    kill9(&mut first.child);
    kill9(&mut orphaned);
    // Meanwhile a sweep (self-healing's rule) leaves the live owner's trees alone.
    let sweep = json(&ut(&state, &["sweep", "--json"]));
    // (Only these two: tests running beside this one may leave tree cgroups behind.)
    let actions: Vec<&str> = sweep["trees"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| first_trees.iter().any(|id| t["id"] == id.as_str()))
        .map(|t| t["action"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(actions, ["left_alone", "left_alone"], "{sweep}");
    let mut second = Supervisor::start(&state, tier);
    // Its self-healing runs a second after it starts: give it time.
    std::thread::sleep(Duration::from_secs(3));
    for pid in [orphan, live.id() as i32, live_member] {
        assert!(alive(pid), "{pid} was killed while its owner lives");
    }
    // The replay of both numbers names the trees taken over (at start, or at the
    // first replayed line when the start-up look found nothing: the sweep above
    // folded the dead supervisor's record files).
    let mut trees = Vec::new();
    for pgid in [orphaned.id(), live.id()] {
        let reply = second.request(&format!("register {pgid}"));
        assert_eq!(reply["ok"], true, "{reply}");
        trees.push(reply["tree"].clone());
    }
    let list = second.request(r#"{"op":"list"}"#);
    // `list` promises no order (trees taken over at start and at a replayed line
    // interleave): compare as sets.
    let mut listed: Vec<String> = list["trees"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tree"].to_string())
        .collect();
    let mut replayed: Vec<String> = trees.iter().map(Value::to_string).collect();
    listed.sort();
    replayed.sort();
    assert_eq!(listed, replayed, "{list}");
    // A sweep of another state dir, in this PID namespace, sees every tree cgroup
    // here: the ones taken over name their live supervisor (cgroup v2 cannot rename
    // the dead one's cgroup), so it leaves them alone.
    let other = scratch.path().join("other-state");
    let sweep = json(&ut(&other, &["sweep", "--json"]));
    for pid in [orphan, live.id() as i32, live_member] {
        assert!(
            alive(pid),
            "{pid} was swept from its live supervisor: {sweep}"
        );
    }
    let list = second.request(r#"{"op":"list"}"#);
    assert_eq!(list["trees"].as_array().map(Vec::len), Some(2), "{list}");
    let audit = json(&ut(&state, &["log", "--json"]));
    let handed_over = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("taken over by the owner's next supervisor as tree"))
        })
        .count();
    assert_eq!(handed_over, 2, "{audit}");
    assert_eq!(second.close(), 0);
    assert_nothing_left();
}

#[test]
fn a_restarted_supervisor_takes_over_its_predecessors_trees_in_the_cgroup_tier() {
    if !require_cgroup()
        || !isolate("a_restarted_supervisor_takes_over_its_predecessors_trees_in_the_cgroup_tier")
    {
        return;
    }
    restarted_supervisor_takes_over("cgroup");
}

#[test]
fn a_restarted_supervisor_takes_over_its_predecessors_trees_in_the_subreaper_tier() {
    if !isolate("a_restarted_supervisor_takes_over_its_predecessors_trees_in_the_subreaper_tier") {
        return;
    }
    restarted_supervisor_takes_over("subreaper");
}

/// What a `kill -9`ed supervisor (subreaper tier) leaves: a group it registered, whose
/// leader was then killed too, and the supervisor's record file of that tree.
struct DeadPredecessor {
    pgid: u32,
    orphan: i32,
    record: std::path::PathBuf,
}

impl DeadPredecessor {
    fn left_in(state: &Path) -> DeadPredecessor {
        let (mut orphaned, orphan) = group_with_member();
        let mut first = Supervisor::start(state, "subreaper");
        let reply = first.request(&format!("register {}", orphaned.id()));
        assert_eq!(reply["ok"], true, "{reply}");
        let record = state
            .join("trees")
            .join(format!("{}.tree", reply["tree"].as_str().unwrap()));
        kill9(&mut first.child);
        kill9(&mut orphaned);
        DeadPredecessor {
            pgid: orphaned.id(),
            orphan,
            record,
        }
    }

    /// The host's replay of the group is accepted by `second` (the tree taken over),
    /// the orphan lives, and everything ends with `second`.
    fn replay_is_taken_over(&self, mut second: Supervisor) {
        let reply = second.request(&format!("register {}", self.pgid));
        assert_eq!(reply["ok"], true, "the replay was refused: {reply}");
        assert!(
            alive(self.orphan),
            "the orphan was killed while its owner lives"
        );
        assert_eq!(second.close(), 0);
        assert_nothing_left();
    }
}

/// A restarted supervisor whose registry answers its start-up search late (on a loaded
/// machine, later than the 3 s it waits at start) still takes over its predecessor's
/// tree: the late answer is used at the replayed `register`, whose group's leader died
/// (refused `unproven_group` while that answer was dropped, so the group's member was
/// left unguarded while its host lived: CI saw the Hermes test wait in vain for it).
#[test]
fn a_late_registry_answer_still_lets_the_restarted_supervisor_take_over() {
    if !isolate("a_late_registry_answer_still_lets_the_restarted_supervisor_take_over") {
        return;
    }
    let scratch = Scratch::new("hermes-late-search");
    let state = scratch.path().join("state");
    let dead = DeadPredecessor::left_in(&state);
    let record = &dead.record;
    assert!(
        record.exists(),
        "the dead supervisor's record file is there to fold"
    );
    // Folding that record file takes 4 s: longer than the start-up search may take.
    let mut slow = undertaker();
    slow.env("UNDERTAKER_TEST_PAUSE_IN_FOLD", "4000");
    let second = Supervisor::start_with(slow, &state, "subreaper", &[]);
    // The replay comes once the search has folded the record: its answer is on the way
    // (never a race with the fold itself, however slow the machine).
    assert!(wait_until(Duration::from_secs(60), || !record.exists()));
    dead.replay_is_taken_over(second);
}

/// A restarted supervisor takes over its predecessor's tree even when another command
/// (`ps`, `sweep`, self-healing) holds the dead guardian's record locked to fold it
/// just as the successor looks: a busy lock whose recorded guardian is gone is waited
/// out, not taken for a live guardian (the successor skipped that tree for good, and
/// the replay of its group, whose leader died, was refused: the Hermes test failed 1
/// run in 5 to 10 that way).
#[test]
fn a_record_held_by_a_reader_still_lets_the_restarted_supervisor_take_over() {
    if !isolate("a_record_held_by_a_reader_still_lets_the_restarted_supervisor_take_over") {
        return;
    }
    let scratch = Scratch::new("hermes-reader-lock");
    let state = scratch.path().join("state");
    let dead = DeadPredecessor::left_in(&state);
    // The lock a folding reader takes, held from before the successor starts until
    // after the replayed `register` was sent.
    let held = std::fs::File::open(&dead.record).expect("the dead supervisor's record file");
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let second = Supervisor::start(&state, "subreaper");
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(held);
    });
    dead.replay_is_taken_over(second);
    reader.join().unwrap();
}

/// Issue 18's double-fork host: a group whose shell double-forks a `setsid` grandchild
/// at once, registered right after spawn (the reply read), then the host waits to be
/// killed. Prints the supervisor's pid once registered.
const DOUBLE_FORK_HOST: &str = r#"
import json, subprocess, sys, time
ut = sys.argv[1]
sup = subprocess.Popen([ut, "supervise", "--tier", "cgroup", "--grace", "200ms"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
g = subprocess.Popen(["sh", "-c", "(setsid sleep 1000 &); exec sleep 1000"], process_group=0)
sup.stdin.write(b"register %d\n" % g.pid)
sup.stdin.flush()
reply = json.loads(sup.stdout.readline())
print(json.dumps({"sup": sup.pid, "ok": reply.get("ok")}), flush=True)
time.sleep(1000)
"#;

/// Runs the double-fork host `runs` times (host `kill -9`ed each time, cgroup tier);
/// returns how many runs left the `setsid` grandchild alive.
fn double_fork_escapes(runs: usize) -> usize {
    let scratch = Scratch::new("hermes-double-fork");
    let state = scratch.path().join("state");
    let host_py = scratch.file("host.py", DOUBLE_FORK_HOST);
    let mut escaped = 0;
    for run in 0..runs {
        let mut host = Command::new("python3")
            .arg(&host_py)
            .arg(UNDERTAKER)
            .env("UNDERTAKER_STATE_DIR", &state)
            .env_remove("UNDERTAKER_TREE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(host.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["ok"], true, "run {run}: {v}");
        let sup = v["sup"].as_i64().unwrap() as i32;
        kill9(&mut host);
        assert!(
            wait_until(Duration::from_secs(60), || {
                reap_zombies();
                !alive(sup)
            }),
            "run {run}: the supervisor did not finish"
        );
        // What is left is ours (a private namespace): the escaped grandchild.
        let left = live_processes_except_self();
        if !left.is_empty() {
            escaped += 1;
        }
        for pid in left {
            signal_child_of(1, pid, rustix::process::Signal::KILL);
        }
        assert!(wait_until(Duration::from_secs(60), || {
            reap_zombies();
            live_processes_except_self().is_empty()
        }));
    }
    escaped
}

/// Item 5 (issue 18): `register` right after spawn of a group that double-forks a
/// `setsid` grandchild at once, then the host's `kill -9`, in the cgroup tier. The
/// registration is accepted each time and the supervisor finishes; how often the
/// grandchild is left (it was born and orphaned before the supervisor read the line)
/// is printed. `UNDERTAKER_DOUBLE_FORK_RUNS=100` makes it the measurement quoted in
/// docs/SUPERVISE.md (default: 5 runs).
#[test]
fn double_fork_right_after_register_rate() {
    if !require_cgroup() || !require_python() || !isolate("double_fork_right_after_register_rate") {
        return;
    }
    let runs = std::env::var("UNDERTAKER_DOUBLE_FORK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let escaped = double_fork_escapes(runs);
    println!("double fork right after register: {escaped} of {runs} runs left the grandchild");
}

/// Item 4 for spawned trees: the dead supervisor's spawned root died with it
/// (PDEATHSIG), the rest of its tree carries the marker; the owner's next supervisor
/// takes that tree over at start, so it dies with the successor's teardown, however
/// soon (no sweep, no self-healing round has run).
fn spawned_tree_dies_with_the_successor(tier: &str) {
    let scratch = Scratch::new(&format!("hermes-spawned-{tier}"));
    let state = scratch.path().join("state");
    let mut first = Supervisor::start(&state, tier);
    let reply =
        first.request(r#"{"op":"spawn","argv":["sh","-c","sleep 1000 & sleep 1000 & wait"]}"#);
    assert_eq!(reply["ok"], true, "{reply}");
    let tree = reply["tree"].as_str().unwrap().to_owned();
    assert!(wait_until(Duration::from_secs(60), || survivors(&tree)
        .len()
        == 3));
    kill9(&mut first.child);
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        survivors(&tree).len() == 2
    }));
    let second = Supervisor::start(&state, tier);
    assert_eq!(second.close(), 0);
    reap_zombies();
    assert_eq!(
        survivors(&tree),
        Vec::<i32>::new(),
        "the spawned tree survived"
    );
    assert_nothing_left();
}

#[test]
fn a_dead_supervisors_spawned_tree_dies_with_its_successor_in_the_cgroup_tier() {
    if !require_cgroup()
        || !isolate("a_dead_supervisors_spawned_tree_dies_with_its_successor_in_the_cgroup_tier")
    {
        return;
    }
    spawned_tree_dies_with_the_successor("cgroup");
}

#[test]
fn a_dead_supervisors_spawned_tree_dies_with_its_successor_in_the_subreaper_tier() {
    if !isolate("a_dead_supervisors_spawned_tree_dies_with_its_successor_in_the_subreaper_tier") {
        return;
    }
    spawned_tree_dies_with_the_successor("subreaper");
}
