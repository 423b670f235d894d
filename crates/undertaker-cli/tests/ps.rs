//! `ps` counts a tree's live processes as its cgroup's and its marked ones, and reads
//! the environment only of processes no tree cgroup holds (docs/BENCHMARKS.md, "`ps`
//! with 1 000 live trees").
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

/// The pid written to `file` once the process it names has exec'd `sleep` (environ
/// can read empty during an exec).
fn sleeping_pid(file: &Path) -> i32 {
    assert!(wait_for_file(file, Duration::from_secs(60)), "no {file:?}");
    let pid: i32 = wait_until_some(|| std::fs::read_to_string(file).ok()?.trim().parse().ok());
    assert!(
        wait_until(Duration::from_secs(60), || {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x001000\x00")
        }),
        "{pid} never became sleep"
    );
    pid
}

fn wait_until_some<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let mut out = None;
    assert!(wait_until(Duration::from_secs(60), || {
        out = f();
        out.is_some()
    }));
    out.unwrap()
}

fn live_of(state: &Path, id: &str) -> u64 {
    let ps = json(&ut(state, &["ps", "--json"]));
    let row = (ps.as_array().unwrap().iter())
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("tree {id} not in ps: {ps}"))
        .clone();
    assert_eq!(row["state"], "running", "{row}");
    row["live_processes"].as_u64().unwrap()
}

/// A cgroup beside the tree cgroups (not named like one), emptied and removed on drop
/// (it only ever holds the process this test moved there).
struct Outside(PathBuf);

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        wait_until(Duration::from_secs(60), || {
            reap_zombies();
            std::fs::remove_dir(&self.0).is_ok()
        });
    }
}

fn start(state: &Path, dir: &Path) -> Child {
    let d = dir.display();
    // CMD (sh), a member whose environment was scrubbed (no marker: only its cgroup
    // says it is a member), and a marked member.
    let script = format!(
        "env -u UNDERTAKER_TREE sleep 1000 & echo $! > {d}/scrubbed.tmp && mv {d}/scrubbed.tmp {d}/scrubbed; \
         sleep 1000 & echo $! > {d}/marked.tmp && mv {d}/marked.tmp {d}/marked; wait"
    );
    undertaker()
        .arg("--state-dir")
        .arg(state)
        .args([
            "run", "--tier", "cgroup", "--label", "count", "--grace", "1s",
        ])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn ps_counts_unmarked_cgroup_members_and_marked_processes_outside_the_cgroup() {
    if !isolate("ps_counts_unmarked_cgroup_members_and_marked_processes_outside_the_cgroup")
        || !require_cgroup()
    {
        return;
    }
    if !is_root() {
        skip("moving a process out of its tree cgroup needs root");
        return;
    }
    let tmp = Scratch::new("ps-count");
    let state = tmp.path().join("state");
    let mut guardian = start(&state, tmp.path());
    let scrubbed = sleeping_pid(&tmp.path().join("scrubbed"));
    let marked = sleeping_pid(&tmp.path().join("marked"));
    let id = find_tree(&state, "count", Duration::from_secs(60)).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        survivors(&id).len(),
        2,
        "sh and the marked sleep carry the marker"
    );
    assert!(!survivors(&id).contains(&scrubbed));
    let cgroups = undertaker::testing::tree_cgroups_of_tree(&id);
    assert_eq!(cgroups.len(), 1, "{cgroups:?}");

    // All three in the cgroup; the scrubbed one is counted by its cgroup alone.
    assert_eq!(live_of(&state, &id), 3);
    // Still when it sits in a cgroup below the tree's (the tree cgroup is no leaf).
    let below = cgroups[0].join("below");
    std::fs::create_dir(&below).unwrap();
    std::fs::write(below.join("cgroup.procs"), scrubbed.to_string()).unwrap();
    assert_eq!(live_of(&state, &id), 3);

    // The marked member leaves the cgroup: its marker still counts it.
    let outside = Outside(
        cgroups[0]
            .parent()
            .unwrap()
            // Named by the tree: cgroups are shared by the whole machine, and inside
            // `isolate` every test's pid is 1.
            .join(format!("ps-test-outside-{id}")),
    );
    std::fs::create_dir(&outside.0).unwrap();
    std::fs::write(outside.0.join("cgroup.procs"), marked.to_string()).unwrap();
    let still_in = std::fs::read_to_string(cgroups[0].join("cgroup.procs")).unwrap();
    assert!(
        !still_in.lines().any(|l| l == marked.to_string()),
        "{still_in}"
    );
    assert_eq!(live_of(&state, &id), 3);

    // The guardian still finds it (its descendant) and tears everything down.
    signal_child(&guardian, rustix::process::Signal::TERM);
    assert!(wait_child(&mut guardian, Duration::from_secs(60)).is_some());
    drop(outside);
    assert_nothing_left();
}
