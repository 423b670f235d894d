//! The portable core as macOS's commands run it, over /proc and pidfds: the
//! guardian's watch loop and teardown, `ps` and `sweep` of a dead guardian's tree,
//! and the sentinel's takeover (docs/PORTING.md, "The macOS backend").

use super::*;

/// A scratch state directory for one test (inside the namespace our pid is 1, so
/// the tree id makes it unique), removed at the end.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the guardian watches besides CMD, for the core's watch loop: an owner
/// process, and never a stop.
struct OwnerOnly(crate::portable::owner::Watched);

impl crate::portable::tracking::Watch<LinuxOs> for OwnerOnly {
    fn owner_gone(&mut self, os: &mut LinuxOs, wakes: &[crate::portable::Wake]) -> bool {
        self.0.gone(os, wakes)
    }

    fn stop_asked(&mut self, _: &mut LinuxOs) -> bool {
        false
    }
}

/// The guardian's life as macOS runs it, over /proc and pidfds: the core's watch
/// ends when CMD exits (unreaped), the member its child forked is found while CMD
/// lived and recorded, and the teardown kills it; then again with the owner's death
/// ending the watch while CMD still runs.
#[test]
fn the_cores_watch_ends_on_cmds_exit_or_the_owners_death_and_the_teardown_follows() {
    if !isolate(
        "commands::the_cores_watch_ends_on_cmds_exit_or_the_owners_death_and_the_teardown_follows",
    ) {
        return;
    }
    use crate::identity::TreeId;
    use crate::portable::tracking::{self, Ended, Tracking};
    use std::io::BufRead;
    let procfs = Procfs::new();
    let signaller = Signaller::for_current_process(procfs.clone()).expect("signaller");
    let me = signaller.me().pid;
    let uid = signaller.me().uid;
    for owner_dies in [false, true] {
        let tree = TreeId::parse(&unique_tree()).expect("tree id");
        let scratch = Scratch(std::env::temp_dir().join(format!("ut-portable-{tree}")));
        std::fs::create_dir_all(&scratch.0).expect("scratch");
        let members = tracking::members_path_in(&scratch.0, &tree);
        let mut owner_child = Command::new("sleep").arg("320").spawn().expect("owner");
        let mut os = LinuxOs::new(signaller.clone());
        let owner_pid = owner_child.id() as i32;
        let owner = crate::portable::owner::Watched::arm(&mut os, owner_pid).expect("owner");
        let scope = tracking::scope(&mut os, &tree, uid, me, &[owner_pid], None);
        let script = if owner_dies {
            "sleep 321 & echo $!; exec sleep 322"
        } else {
            "sleep 321 & echo $!; sleep 0.5; exit 3"
        };
        let mut cmd = Command::new("sh")
            .args(["-c", script])
            .env(TREE_MARKER, tree.as_str())
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("cmd");
        let mut line = String::new();
        std::io::BufReader::new(cmd.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("grandchild pid");
        let grandchild: i32 = line.trim().parse().expect("a pid");
        let root = cmd.id() as i32;
        let mut tracking = Tracking::of_command(os, scope, root, Some(members.clone()));
        if owner_dies {
            std::thread::sleep(Duration::from_millis(300));
            kill_own(owner_pid);
        }
        let ended = tracking.watch(root, &mut OwnerOnly(owner));
        let expected = if owner_dies {
            Ended::OwnerGone
        } else {
            Ended::CmdExited
        };
        assert_eq!(ended, expected);
        let recorded = crate::portable::record::parse(
            &std::fs::read_to_string(&members).expect("member record"),
        );
        assert!(
            recorded.iter().any(|&(pid, _, _)| pid == grandchild),
            "the grandchild was recorded while CMD lived: {recorded:?}"
        );
        let report = tracking.tear_down(Duration::from_millis(300));
        assert!(report.stuck.is_empty(), "{report:?}");
        let status = cmd.wait().expect("cmd status");
        if !owner_dies {
            assert_eq!(status.code(), Some(3));
        }
        assert!(
            tracking.os().facts(grandchild).is_none(),
            "the grandchild is gone"
        );
        tracking.forget();
        assert!(!members.exists(), "the member record went with the tree");
        let _ = owner_child.kill();
        let _ = owner_child.wait();
    }
}

/// A dead guardian's tree in `state`: its record (lock free, no last line), a member
/// only its member record names (no marker) and one only its marker names (started
/// after the guardian's last look). Returns the tree, its two members, and the
/// member record's path.
fn dead_guardians_tree(
    signaller: &Signaller,
    state: &std::path::Path,
    sleeps: [&str; 2],
) -> (crate::identity::TreeId, Child, Child, std::path::PathBuf) {
    use crate::identity::TreeId;
    use crate::portable::tracking::{self, Tracking};
    use crate::registry::recorder::{Recorder, Start};
    use crate::registry::{GuardianRecord, OwnerKind, OwnerRecord, RecordedTier, StateDir};
    let (me, uid) = (signaller.me().pid, signaller.me().uid);
    let boot = signaller.me().boot_id.clone();
    let tree = TreeId::generate(&boot, rand_bytes());
    let own = signaller.procfs().stat(me).expect("own stat");
    let recorder = Recorder::open(
        &tree,
        Start {
            state_dir: Some(state),
            uid,
            boot_id: &boot,
            label: Some("dead".into()),
            tier: RecordedTier::Portable,
            guardian: GuardianRecord {
                pid: me,
                starttime: own.starttime,
                pgid: own.pgrp,
                pidfs_inode: None,
                supervisor: false,
            },
            owner: OwnerRecord {
                kind: OwnerKind::Parent,
                pid: None,
                starttime: None,
            },
        },
    )
    .expect("record");
    let trees = StateDir::prepare(state, uid).expect("state").trees_dir();
    let members = tracking::members_path_in(&trees, &tree);
    let scrubbed = Command::new("sleep")
        .arg(sleeps[0])
        .env_remove(TREE_MARKER)
        .process_group(0)
        .spawn()
        .expect("scrubbed");
    let mut os = LinuxOs::new(signaller.clone());
    let scope = tracking::scope(&mut os, &tree, uid, me, &[], None);
    drop(Tracking::of_command(
        os,
        scope,
        scrubbed.id() as i32,
        Some(members.clone()),
    ));
    let marked = spawn(&format!("exec sleep {}", sleeps[1]), tree.as_str());
    wait_for(|| sleepers(&signaller.procfs().clone(), &sleeps).len() == 2);
    // The guardian's `kill -9`.
    recorder.abandon();
    (tree, scrubbed, marked, members)
}

/// Dead guardians' trees as macOS's commands find them, through the neutral
/// reconcile over /proc and pidfds: `ps` shows one orphaned with its recorded member
/// alive; `sweep` ends its two members (one named only by the member record, one
/// only by the marker) and closes its record; a sentinel's takeover does the same to
/// another tree, and nothing to a closed one.
#[test]
fn a_dead_guardians_recorded_tree_is_shown_and_swept_by_the_neutral_reconcile() {
    if !isolate(
        "commands::a_dead_guardians_recorded_tree_is_shown_and_swept_by_the_neutral_reconcile",
    ) {
        return;
    }
    use crate::history::Context;
    use crate::portable::reconcile::Reconcile;
    use crate::report::{SweepAction, TreeState};
    let procfs = Procfs::new();
    let signaller = Signaller::for_current_process(procfs.clone()).expect("signaller");
    let (me, uid) = (signaller.me().pid, signaller.me().uid);
    let boot = signaller.me().boot_id.clone();
    let scratch = Scratch(std::env::temp_dir().join(format!("ut-portable-{}", unique_tree())));
    let (tree, mut scrubbed, mut marked, members) =
        dead_guardians_tree(&signaller, &scratch.0, ["330", "331"]);
    let reconcile = |ctx| Reconcile {
        ctx,
        uid,
        me,
        protect: vec![],
        backend: || Ok(LinuxOs::new(signaller.clone())),
    };

    let ctx = Context::open(Some(&scratch.0), uid, &boot, usize::MAX).expect("open");
    let rows = reconcile(&ctx).ps(false).expect("ps");
    let row = rows
        .iter()
        .find(|r| r.id == tree.as_str())
        .expect("the tree");
    assert_eq!(row.state, TreeState::Orphaned, "{row:?}");
    assert_eq!(row.live_processes, 1, "the recorded member: {row:?}");
    let report = reconcile(&ctx)
        .sweep(false, Duration::from_millis(300))
        .expect("sweep");
    let swept = report
        .trees
        .iter()
        .find(|t| t.id == tree.as_str())
        .expect("swept");
    assert_eq!(swept.action, SweepAction::Swept, "{swept:?}");
    assert_eq!(swept.left_alive, 0);
    assert!(killed(&mut scrubbed), "the recorded member was killed");
    assert!(killed(&mut marked), "the marked member was killed");
    assert!(!members.exists(), "the member record went with the tree");

    let (second, mut scrubbed, mut marked, members) =
        dead_guardians_tree(&signaller, &scratch.0, ["332", "333"]);
    let ctx = Context::open(Some(&scratch.0), uid, &boot, usize::MAX).expect("reopen");
    let rows = reconcile(&ctx).ps(true).expect("ps --all");
    let row = rows
        .iter()
        .find(|r| r.id == tree.as_str())
        .expect("the tree");
    assert_eq!(row.state, TreeState::Finished, "{row:?}");
    let closed = reconcile(&ctx).take_over(tree.as_str(), Duration::from_millis(300));
    assert!(
        closed.expect("take over").is_none(),
        "a closed tree is left alone"
    );
    let taken = reconcile(&ctx)
        .take_over(second.as_str(), Duration::from_millis(300))
        .expect("take over")
        .expect("the second tree is taken over");
    assert_eq!(taken.action, SweepAction::Swept, "{taken:?}");
    assert!(killed(&mut scrubbed), "the recorded member was killed");
    assert!(killed(&mut marked), "the marked member was killed");
    assert!(!members.exists(), "the member record went with the tree");
}

/// Whether the test's child `child` ended by a signal within 20 s (a survivor
/// fails the test instead of hanging it).
fn killed(child: &mut Child) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.signal().is_some();
        }
        if Instant::now() >= until {
            kill_own(child.id() as i32);
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rand_bytes() -> [u8; 12] {
    let mut b = [0u8; 12];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).expect("random");
    b
}
