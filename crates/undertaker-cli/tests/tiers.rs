//! The cgroup and pidns tiers against the escape zoo, with real kill -9 of the owner
//! and of the guardian. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `Ok` when `tier` can guard a tree here. Asked of the binary for pidns: the probe
/// forks, which the multi-threaded test harness may not.
fn tier_available(tier: &str) -> Result<(), String> {
    if tier == "cgroup" {
        return undertaker::testing::cgroup_tier_available();
    }
    let out = undertaker()
        .args(["run", "--tier", tier, "--", "true"])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Skips the test (false) unless `tier` is available here.
fn require_tier(tier: &str) -> bool {
    match tier_available(tier) {
        Ok(()) => true,
        Err(why) => {
            skip(&format!("{tier} tier unavailable: {why}"));
            false
        }
    }
}

/// Tree cgroups on disk whose guardian had pid `guardian` (in this namespace).
fn tree_cgroups_of(guardian: i32) -> Vec<PathBuf> {
    undertaker::testing::tree_cgroups_of(guardian)
}

/// Starts `undertaker run --tier TIER` guarding the zoo, owned by `owner`; as uid 65534
/// when `as_nobody`.
fn spawn_guarded_zoo(tier: &str, owner: i32, dir: &Scratch, as_nobody: bool) -> Child {
    let mut cmd = if as_nobody {
        undertaker_as_nobody()
    } else {
        undertaker()
    };
    cmd.args(["run", "--tier", tier, "--grace", "300ms", "--owner"])
        .arg(owner.to_string())
        .args(["--", "sh", "-c"])
        .arg(zoo_with_escapees(dir.path()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

enum Victim {
    Owner,
    Guardian,
}

/// Starts the zoo under `tier`, kill -9s the owner or the guardian, and returns the
/// guardian's pid once the zoo is torn down (or left to a sweep).
fn zoo_then_kill(tier: &str, victim: Victim, as_nobody: bool, name: &str) -> i32 {
    let dir = Scratch::world_writable(name);
    // A stand-in owner: a process we started and will kill -9.
    let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let mut guardian = spawn_guarded_zoo(tier, owner.id() as i32, &dir, as_nobody);
    assert!(
        wait_for_file(&dir.path().join("ready"), Duration::from_secs(20)),
        "zoo never became ready"
    );
    let started = live_processes_except_self();
    assert!(started.len() >= 8, "zoo did not start: {started:?}");
    let gpid = guardian.id() as i32;
    match victim {
        Victim::Owner => {
            kill9(&mut owner);
            let st = wait_child(&mut guardian, Duration::from_secs(30));
            assert!(st.is_some(), "guardian did not finish after owner death");
        }
        Victim::Guardian => {
            kill9(&mut guardian);
            kill9(&mut owner);
        }
    }
    gpid
}

fn assert_no_survivors() {
    let left = survivors_after(Duration::from_secs(5));
    assert!(left.is_empty(), "survivors: {left:#?}");
}

/// The pidns tier run as uid 65534 (skipped unless root can switch to it and user
/// namespaces are open to it), with `victim` killed: nothing may be left.
fn pidns_as_nobody_leaves_no_survivor(test_name: &str, victim: Victim, name: &str) {
    if !is_root() {
        return skip("needs root to switch to uid 65534 with setpriv");
    }
    if !isolate(test_name) {
        return;
    }
    let probe = undertaker_as_nobody()
        .args(["run", "--tier", "pidns", "--", "true"])
        .status()
        .unwrap();
    if !probe.success() {
        return skip("user namespaces are not available to uid 65534 here");
    }
    zoo_then_kill("pidns", victim, true, name);
    assert_no_survivors();
}

#[test]
fn cgroup_owner_kill9_leaves_no_survivor_and_no_cgroup() {
    if !require_tier("cgroup") || !isolate("cgroup_owner_kill9_leaves_no_survivor_and_no_cgroup") {
        return;
    }
    let gpid = zoo_then_kill("cgroup", Victim::Owner, false, "cg-owner");
    assert_no_survivors();
    assert_eq!(tree_cgroups_of(gpid), Vec::<PathBuf>::new());
}

#[test]
fn cgroup_guardian_kill9_then_one_sweep_leaves_no_survivor() {
    if !require_tier("cgroup")
        || !isolate("cgroup_guardian_kill9_then_one_sweep_leaves_no_survivor")
    {
        return;
    }
    let gpid = zoo_then_kill("cgroup", Victim::Guardian, false, "cg-guardian");
    assert!(
        !live_processes_except_self().is_empty(),
        "nothing left for the sweep to do?"
    );
    assert_eq!(
        tree_cgroups_of(gpid).len(),
        1,
        "the orphaned cgroup is findable"
    );
    let out = undertaker().arg("sweep").output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_survivors();
    assert_eq!(tree_cgroups_of(gpid), Vec::<PathBuf>::new());
}

#[test]
fn pidns_owner_kill9_leaves_no_survivor() {
    if !require_tier("pidns") || !isolate("pidns_owner_kill9_leaves_no_survivor") {
        return;
    }
    zoo_then_kill("pidns", Victim::Owner, false, "ns-owner");
    assert_no_survivors();
}

#[test]
fn pidns_guardian_kill9_leaves_no_survivor_without_sweep() {
    if !require_tier("pidns") || !isolate("pidns_guardian_kill9_leaves_no_survivor_without_sweep") {
        return;
    }
    zoo_then_kill("pidns", Victim::Guardian, false, "ns-guardian");
    // No sweep: the kernel kills the namespace when its init dies.
    assert_no_survivors();
}

#[test]
fn pidns_as_normal_user_guardian_kill9_leaves_no_survivor() {
    pidns_as_nobody_leaves_no_survivor(
        "pidns_as_normal_user_guardian_kill9_leaves_no_survivor",
        Victim::Guardian,
        "ns-user",
    );
}

#[test]
fn pidns_as_normal_user_owner_kill9_leaves_no_survivor() {
    pidns_as_nobody_leaves_no_survivor(
        "pidns_as_normal_user_owner_kill9_leaves_no_survivor",
        Victim::Owner,
        "ns-user-owner",
    );
}

#[test]
fn pidns_shows_its_own_proc_and_passes_the_exit_status() {
    if !require_tier("pidns") {
        return;
    }
    let out = undertaker()
        .args(["run", "--tier", "pidns", "--", "sh", "-c"])
        .arg("echo $$; ls /proc | grep -c '^[0-9]'; exit 7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // CMD is PID 2 (the init is 1); /proc shows only init, sh, ls, grep.
    assert_eq!(lines[0], "2", "{text}");
    assert!(lines[1].parse::<u32>().unwrap() <= 4, "{text}");
}

#[test]
fn finished_cgroup_tree_leaves_no_cgroup_and_reports_status() {
    if !require_tier("cgroup") {
        return;
    }
    let child = undertaker()
        .args(["run", "--tier", "cgroup", "--", "sh", "-c"])
        .arg("grep '^0::' /proc/self/cgroup; sleep 1000 & exit 5")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let gpid = child.id() as i32;
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("/undertaker."),
        "CMD ran outside its cgroup: {text}"
    );
    let path = text.trim().trim_start_matches("0::").to_owned();
    let parsed = path.rsplit('/').next().unwrap();
    assert!(undertaker::testing::is_tree_cgroup_name(parsed), "{parsed}");
    assert_eq!(tree_cgroups_of(gpid), Vec::<PathBuf>::new());
}

#[test]
fn auto_picks_cgroup_where_writable() {
    if !require_tier("cgroup") {
        return;
    }
    let out = undertaker()
        .args(["run", "--", "grep", "^0::", "/proc/self/cgroup"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/undertaker."),
        "auto did not use the cgroup tier"
    );
}

#[test]
fn unavailable_cgroup_tier_exits_125_with_reason() {
    if !is_root() {
        return skip("needs root to switch to uid 65534 with setpriv");
    }
    let out = undertaker_as_nobody()
        .args(["run", "--tier", "cgroup", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return skip("uid 65534 has a delegated cgroup here");
    }
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("tier cgroup unavailable"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
