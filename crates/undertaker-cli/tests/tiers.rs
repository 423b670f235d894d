//! The cgroup and pidns tiers against the escape zoo, with real kill -9 of the owner
//! and of the guardian. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod support_tiers;

use std::process::Command;
use std::time::Duration;
use support_tiers::*;

fn cgroup_available() -> Result<(), String> {
    undertaker::linux::cgroup::locate().map(|_| ())
}

/// Asked of the binary: the probe forks, which the multi-threaded test harness may not.
fn pidns_available() -> Result<(), String> {
    let out = Command::new(bin())
        .args(["run", "--tier", "pidns", "--", "true"])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

enum Victim {
    Owner,
    Guardian,
}

/// Starts the zoo under `tier`, kill -9s the owner or the guardian, and returns the
/// guardian's pid once the zoo is torn down (or left to a sweep).
fn zoo_then_kill(tier: &str, victim: Victim, as_nobody: bool, name: &str) -> i32 {
    let dir = scratch(name);
    let mut owner = spawn_owner();
    let mut guardian = spawn_guarded_zoo(tier, owner.id() as i32, &dir, as_nobody);
    assert!(
        wait_for_file(&dir.join("ready"), Duration::from_secs(20)),
        "zoo never became ready"
    );
    assert!(
        survivors().len() >= 8,
        "zoo did not start: {:?}",
        survivors()
    );
    let gpid = guardian.id() as i32;
    match victim {
        Victim::Owner => {
            owner.kill().unwrap();
            owner.wait().unwrap();
            let st = wait_child(&mut guardian, Duration::from_secs(30));
            assert!(st.is_some(), "guardian did not finish after owner death");
        }
        Victim::Guardian => {
            guardian.kill().unwrap();
            guardian.wait().unwrap();
            owner.kill().unwrap();
            owner.wait().unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    gpid
}

fn assert_no_survivors(limit: Duration) {
    let left = survivors_after(limit);
    assert!(left.is_empty(), "survivors: {left:#?}");
}

#[test]
fn cgroup_owner_kill9_leaves_no_survivor_and_no_cgroup() {
    if let Err(why) = cgroup_available() {
        return skip(&format!("cgroup tier unavailable: {why}"));
    }
    if !in_private_pidns("cgroup_owner_kill9_leaves_no_survivor_and_no_cgroup") {
        return;
    }
    let gpid = zoo_then_kill("cgroup", Victim::Owner, false, "cg-owner");
    assert_no_survivors(Duration::from_secs(5));
    assert_eq!(tree_cgroups_of(gpid), Vec::<std::path::PathBuf>::new());
}

#[test]
fn cgroup_guardian_kill9_then_one_sweep_leaves_no_survivor() {
    if let Err(why) = cgroup_available() {
        return skip(&format!("cgroup tier unavailable: {why}"));
    }
    if !in_private_pidns("cgroup_guardian_kill9_then_one_sweep_leaves_no_survivor") {
        return;
    }
    let gpid = zoo_then_kill("cgroup", Victim::Guardian, false, "cg-guardian");
    assert!(!survivors().is_empty(), "nothing left for the sweep to do?");
    assert_eq!(
        tree_cgroups_of(gpid).len(),
        1,
        "the orphaned cgroup is findable"
    );
    let out = Command::new(bin()).arg("sweep").output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_survivors(Duration::from_secs(5));
    assert_eq!(tree_cgroups_of(gpid), Vec::<std::path::PathBuf>::new());
}

#[test]
fn pidns_owner_kill9_leaves_no_survivor() {
    if let Err(why) = pidns_available() {
        return skip(&format!("pidns tier unavailable: {why}"));
    }
    if !in_private_pidns("pidns_owner_kill9_leaves_no_survivor") {
        return;
    }
    zoo_then_kill("pidns", Victim::Owner, false, "ns-owner");
    assert_no_survivors(Duration::from_secs(5));
}

#[test]
fn pidns_guardian_kill9_leaves_no_survivor_without_sweep() {
    if let Err(why) = pidns_available() {
        return skip(&format!("pidns tier unavailable: {why}"));
    }
    if !in_private_pidns("pidns_guardian_kill9_leaves_no_survivor_without_sweep") {
        return;
    }
    zoo_then_kill("pidns", Victim::Guardian, false, "ns-guardian");
    // No sweep: the kernel kills the namespace when its init dies.
    assert_no_survivors(Duration::from_secs(5));
}

#[test]
fn pidns_as_normal_user_guardian_kill9_leaves_no_survivor() {
    if !is_root() {
        return skip("needs root to switch to uid 65534 with setpriv");
    }
    if !in_private_pidns("pidns_as_normal_user_guardian_kill9_leaves_no_survivor") {
        return;
    }
    let probe = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["run", "--tier", "pidns", "--", "true"])
        .status()
        .unwrap();
    if !probe.success() {
        return skip("user namespaces are not available to uid 65534 here");
    }
    zoo_then_kill("pidns", Victim::Guardian, true, "ns-user");
    assert_no_survivors(Duration::from_secs(5));
}

#[test]
fn pidns_as_normal_user_owner_kill9_leaves_no_survivor() {
    if !is_root() {
        return skip("needs root to switch to uid 65534 with setpriv");
    }
    if !in_private_pidns("pidns_as_normal_user_owner_kill9_leaves_no_survivor") {
        return;
    }
    let probe = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["run", "--tier", "pidns", "--", "true"])
        .status()
        .unwrap();
    if !probe.success() {
        return skip("user namespaces are not available to uid 65534 here");
    }
    zoo_then_kill("pidns", Victim::Owner, true, "ns-user-owner");
    assert_no_survivors(Duration::from_secs(5));
}

#[test]
fn pidns_shows_its_own_proc_and_passes_the_exit_status() {
    if let Err(why) = pidns_available() {
        return skip(&format!("pidns tier unavailable: {why}"));
    }
    let out = Command::new(bin())
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
    if let Err(why) = cgroup_available() {
        return skip(&format!("cgroup tier unavailable: {why}"));
    }
    let child = Command::new(bin())
        .args(["run", "--tier", "cgroup", "--", "sh", "-c"])
        .arg("grep '^0::' /proc/self/cgroup; sleep 1000 & exit 5")
        .stdout(std::process::Stdio::piped())
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
    assert!(
        undertaker::linux::cgroup::parse_dir_name(parsed).is_some(),
        "{parsed}"
    );
    assert_eq!(tree_cgroups_of(gpid), Vec::<std::path::PathBuf>::new());
}

#[test]
fn auto_picks_cgroup_where_writable() {
    if let Err(why) = cgroup_available() {
        return skip(&format!("cgroup tier unavailable: {why}"));
    }
    let out = Command::new(bin())
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
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
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
