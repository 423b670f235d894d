//! A dead guardian's tree is torn down as one tree (docs/ARCHITECTURE.md,
//! `Tree::left_behind`): its cgroup's members, its marked processes and their
//! descendants go through one escalation, with one grace period.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The pid written to `file` (atomically, by the tree's shell).
fn pid_in(file: &Path) -> i32 {
    assert!(wait_for_file(file, Duration::from_secs(60)), "no {file:?}");
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A cgroup beside the tree cgroups (not named like one), emptied and removed on drop
/// (it only ever holds the process a test moved there).
struct Outside(PathBuf);

impl Outside {
    /// Moves `pid` out of its tree cgroup `tree_cgroup` into a cgroup beside it.
    fn take(tree_cgroup: &Path, id: &str, pid: i32) -> Self {
        // Named by the tree: cgroups are shared by the whole machine, and inside
        // `isolate` every test's pid is 1.
        let dir = tree_cgroup
            .parent()
            .unwrap()
            .join(format!("sweep-test-outside-{id}"));
        std::fs::create_dir(&dir).unwrap();
        let outside = Outside(dir);
        std::fs::write(outside.0.join("cgroup.procs"), pid.to_string()).unwrap();
        let still_in = std::fs::read_to_string(tree_cgroup.join("cgroup.procs")).unwrap();
        assert!(
            !still_in.lines().any(|l| l == pid.to_string()),
            "{still_in}"
        );
        outside
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        wait_until(Duration::from_secs(60), || {
            reap_zombies();
            std::fs::remove_dir(&self.0).is_ok()
        });
    }
}

/// Starts a cgroup-tier tree running `script` (which writes its pid files into
/// `dir`), waits for `ready`, then kills every undertaker process at once so the
/// tree is left for a sweep. Returns the tree's id and its cgroup.
fn orphan_a_cgroup_tree(state: &Path, dir: &Path, label: &str, script: &str) -> (String, PathBuf) {
    let mut guardian = undertaker()
        .arg("--state-dir")
        .arg(state)
        .args(["run", "--tier", "cgroup", "--label", label, "--"])
        .args(["sh", "-c", script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_file(&dir.join("ready"), Duration::from_secs(60)));
    let id = find_tree(state, label, Duration::from_secs(60)).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cgroups = undertaker::testing::tree_cgroups_of_tree(&id);
    assert_eq!(cgroups.len(), 1, "{cgroups:?}");
    kill9_all(&mut guardian);
    (id, cgroups[0].clone())
}

fn signal_index(log: &serde_json::Value, pid: i32, signal: &str) -> Option<usize> {
    (log.as_array().unwrap().iter())
        .position(|e| e["event"] == "signal" && e["pid"] == i64::from(pid) && e["signal"] == signal)
}

/// Before, a sweep ran the cgroup's escalation to its end (SIGTERM, the whole grace
/// period for a member that ignores SIGTERM, SIGKILL) and only then the marker's: a
/// marked member outside the cgroup got its SIGTERM a grace period after the cgroup's
/// members. Now one escalation SIGTERMs both in its first round.
#[test]
fn a_dead_guardians_cgroup_and_marked_members_share_one_escalation() {
    if !isolate("a_dead_guardians_cgroup_and_marked_members_share_one_escalation")
        || !require_cgroup()
    {
        return;
    }
    if !is_root() {
        return skip("moving a process out of its tree cgroup needs root");
    }
    let tmp = Scratch::new("sweep-one");
    let state = tmp.path().join("state");
    let d = tmp.path().display();
    // A member that ignores SIGTERM (so the cgroup's part takes the whole grace
    // period) and a marked member the test moves out of the cgroup.
    let script = format!(
        "(trap '' TERM; exec sleep 1000) & echo $! > {d}/ignorer.tmp && mv {d}/ignorer.tmp {d}/ignorer; \
         sleep 1000 & echo $! > {d}/marked.tmp && mv {d}/marked.tmp {d}/marked; \
         echo > {d}/ready; wait"
    );
    let (id, cgroup) = orphan_a_cgroup_tree(&state, tmp.path(), "one", &script);
    let ignorer = pid_in(&tmp.path().join("ignorer"));
    let marked = pid_in(&tmp.path().join("marked"));
    let outside = Outside::take(&cgroup, &id, marked);

    let grace_ms = 3000;
    let out = ut(&state, &["sweep", "--grace", "3s", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = json(&out);
    assert_eq!(report["left_alive"], 0, "{report}");
    let log = json(&ut(&state, &["log", "--json", "--tree", &id]));
    let sent_at = |pid: i32| {
        let i = signal_index(&log, pid, "SIGTERM")
            .unwrap_or_else(|| panic!("no SIGTERM to {pid}: {log}"));
        log[i]["time_ms"].as_i64().unwrap()
    };
    // Sent in one round, a grace period apart before (the bound is that period, far
    // above one round's time).
    let apart = sent_at(marked) - sent_at(ignorer);
    assert!(
        apart < grace_ms,
        "the marked member outside the cgroup was SIGTERMed {apart} ms after the cgroup's: {log}"
    );
    assert!(!alive(ignorer) && !alive(marked));
    assert!(!cgroup.exists(), "the tree cgroup is left");
    drop(outside);
    assert_nothing_left();
}

/// A member's child that left the cgroup and carries no marker is the tree's by
/// parentage while its parent, a proven member, lives: the sweep finds it from the
/// cgroup's members (before, only from the marked ones, after the cgroup's members
/// were dead and the child reparented away: it survived).
#[test]
fn a_sweep_follows_unmarked_children_that_left_the_cgroup() {
    if !isolate("a_sweep_follows_unmarked_children_that_left_the_cgroup") || !require_cgroup() {
        return;
    }
    if !is_root() {
        return skip("moving a process out of its tree cgroup needs root");
    }
    let tmp = Scratch::new("sweep-walk");
    let state = tmp.path().join("state");
    let d = tmp.path().display();
    // A parent without the marker (only its cgroup names it) whose child the test
    // moves out of the cgroup: neither cgroup nor marker names the child then.
    let script = format!(
        "env -u UNDERTAKER_TREE sh -c 'sleep 1000 & echo $! > {d}/child.tmp && mv {d}/child.tmp {d}/child; wait' & \
         echo > {d}/ready; wait"
    );
    let (id, cgroup) = orphan_a_cgroup_tree(&state, tmp.path(), "walk", &script);
    let child = pid_in(&tmp.path().join("child"));
    let outside = Outside::take(&cgroup, &id, child);

    let out = ut(&state, &["sweep", "--grace", "1s", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let log = json(&ut(&state, &["log", "--json", "--tree", &id]));
    assert!(
        signal_index(&log, child, "SIGTERM").is_some(),
        "the child outside the cgroup was not signalled: {log}"
    );
    // Before the outside cgroup is killed on drop, which would hide a survivor.
    assert!(
        wait_until(Duration::from_secs(10), || {
            reap_zombies();
            !alive(child)
        }),
        "the child outside the cgroup survived the sweep"
    );
    drop(outside);
    assert_nothing_left();
}
