//! Where tree cgroups go (docs/TIERS.md, "Placement"): beneath undertaker's own cgroup
//! when it may write there, so a systemd unit's limits, accounting and stop still
//! cover the tree. A cgroup created here plays a `Delegate=yes` unit
//! (docs/INTEGRATIONS.md, "systemd").
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The unit's cgroup; on drop (a failed test too) everything in it is killed and its
/// directories are removed, children first, as systemd does when a unit stops.
struct Unit(PathBuf);

/// The random part of a scratch dir's name, for names that must be unique on the
/// machine (cgroups).
fn tag(scratch: &Scratch) -> String {
    let name = scratch.path().file_name().unwrap().to_string_lossy();
    name.rsplit('-').next().unwrap().to_owned()
}

impl Unit {
    fn create(mount: &Path, name: &str) -> Self {
        let dir = mount.join(name);
        std::fs::create_dir(&dir).expect("create the unit's cgroup");
        Unit(dir)
    }

    /// A shell command that moves itself into the unit, then execs `undertaker ARGS`.
    fn start(&self, state: &Path, args: &str) -> std::process::Child {
        let script = format!(
            "echo $$ > '{}/cgroup.procs' && exec '{UNDERTAKER}' --state-dir '{}' {args}",
            self.0.display(),
            state.display()
        );
        undertaker_in_sh(&script)
    }

    fn populated(&self) -> bool {
        std::fs::read_to_string(self.0.join("cgroup.events"))
            .map_or(true, |e| !e.lines().any(|l| l == "populated 0"))
    }

    fn subdirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.0)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        wait_until(Duration::from_secs(60), || {
            reap_zombies();
            !self.populated()
        });
        for dir in self.subdirs() {
            let _ = std::fs::remove_dir(dir);
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn undertaker_in_sh(script: &str) -> std::process::Child {
    let mut c = std::process::Command::new("sh");
    c.args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .env_remove("UNDERTAKER_TREE")
        .env_remove("UNDERTAKER_CGROUP_ROOT");
    with_test_state(&mut c);
    c.spawn().expect("start sh")
}

/// The cgroup2 mount, where this test may create cgroups (as root); skips otherwise.
fn cgroup_mount_as_root() -> Option<PathBuf> {
    if !is_root() {
        skip("creating a cgroup that plays a unit needs root");
        return None;
    }
    undertaker::testing::cgroup2_mount_point()
        .map_err(|why| skip(&format!("cgroup tier unavailable: {why}")))
        .ok()
}

#[test]
fn tree_lands_beneath_a_delegated_unit_and_the_units_cgroup_kill_leaves_nothing() {
    let Some(mount) = cgroup_mount_as_root() else {
        return;
    };
    if !isolate("tree_lands_beneath_a_delegated_unit_and_the_units_cgroup_kill_leaves_nothing") {
        return;
    }
    let scratch = Scratch::new("placement");
    let state = scratch.path().join("state");
    // Named after the scratch dir (random): cgroups are the whole machine's, and
    // inside `isolate` every test's pid is 1.
    let unit = Unit::create(
        &mount,
        &format!("undertaker-test-agent.{}.service", tag(&scratch)),
    );
    // What systemd does for Delegate=yes (since v251): mark the unit's cgroup.
    rustix::fs::setxattr(
        &unit.0,
        "trusted.delegate",
        b"1",
        rustix::fs::XattrFlags::empty(),
    )
    .expect("mark the unit delegated");

    // doctor, run inside the unit, names the unit as the place and says why.
    let doctor = unit
        .start(&state, "doctor --json")
        .wait_with_output()
        .unwrap();
    assert!(doctor.status.success());
    let v: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let place = &v["cgroup_placement"];
    assert_eq!(place["path"], unit.0.display().to_string(), "{v}");
    assert_eq!(place["kind"], "delegated", "{v}");
    assert!(
        place["reason"].as_str().unwrap().contains("delegated"),
        "{v}"
    );

    // A tree with a setsid daemon and a process that ignores SIGTERM.
    let mut host = unit.start(
        &state,
        "run --grace 30s -- sh -c 'trap \"\" TERM; setsid sleep 1000 & sleep 1000 & echo ready; wait'",
    );
    let mut out = host.stdout.take().unwrap();
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut ready).expect("the tree started");
    let trees: Vec<PathBuf> = unit
        .subdirs()
        .into_iter()
        .filter(|d| {
            undertaker::testing::is_tree_cgroup_name(&d.file_name().unwrap().to_string_lossy())
        })
        .collect();
    assert_eq!(
        trees.len(),
        1,
        "one tree cgroup beneath the unit: {trees:?}"
    );
    let members = std::fs::read_to_string(trees[0].join("cgroup.procs")).unwrap();
    assert_eq!(members.lines().count(), 3, "sh and both sleeps: {members}");
    // Nothing at the hierarchy root.
    let at_root = mount.join("undertaker");
    let name = trees[0].file_name().unwrap();
    assert!(!at_root.join(name).exists());

    // `systemctl stop` of a KillMode=control-group unit: cgroup.kill on the unit.
    std::fs::write(unit.0.join("cgroup.kill"), "1").unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || {
            reap_zombies();
            !unit.populated()
        }),
        "the unit still holds processes after cgroup.kill"
    );
    let _ = host.wait();
    assert_nothing_left();
    drop(unit);
    assert!(
        !trees[0].exists(),
        "the tree cgroup was removed with the unit"
    );
}

#[test]
fn cgroup_root_flag_places_trees_where_asked() {
    let Some(mount) = cgroup_mount_as_root() else {
        return;
    };
    let scratch = Scratch::new("placement-asked");
    let asked = Unit::create(&mount, &format!("undertaker-test-asked.{}", tag(&scratch)));
    let out = undertaker()
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .arg("--cgroup-root")
        .arg(&asked.0)
        .args([
            "run",
            "--tier",
            "cgroup",
            "--",
            "sh",
            "-c",
            "grep '^0::' /proc/self/cgroup",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let rel = format!(
        "0::/{}/undertaker.",
        asked.0.file_name().unwrap().to_string_lossy()
    );
    assert!(text.starts_with(&rel), "CMD ran in {text}, not under {rel}");
    assert_eq!(
        asked.subdirs(),
        Vec::<PathBuf>::new(),
        "the tree cgroup was removed"
    );
    // A place outside the cgroup2 mount is refused, with the reason.
    let out = undertaker()
        .args([
            "--cgroup-root",
            "/tmp",
            "run",
            "--tier",
            "cgroup",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cgroup-root"));
}
