//! A tree's life without privileges: record → spawn → finish, in the subreaper
//! tier, with a host that lends nothing process-wide (this test binary's other
//! children are not ours to reap).
use super::*;
use crate::linux::contain::spawn::CommandSpec;
use crate::linux::kernel::poll::poll_until;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::kernel::sys::BlockedSignals;
use crate::registry::lock::FileLock;
use crate::registry::record_file;
use crate::registry::{OwnerKind, Registry, StateDir, StoredState};
use crate::OwnerSpec;
use rustix::event::PollFd;
use rustix::event::PollFlags;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Instant;

/// Reaps nothing and reports no other child: the tree's root is reaped through
/// its own pidfd, which is all a CMD that exits by itself needs.
struct LendingNothing;

impl Host for LendingNothing {
    fn reap(&mut self, _exited: &mut dyn FnMut(i32, Option<i32>)) -> Option<bool> {
        Some(true)
    }

    fn wait(&mut self, deadline: Instant, fds: &[(BorrowedFd<'_>, PollFlags)]) {
        let mut polled: Vec<_> = fds.iter().map(|(fd, f)| PollFd::new(fd, *f)).collect();
        poll_until(&mut polled, Some(deadline));
    }
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn record_spawn_finish() {
    let scratch =
        Scratch(std::env::temp_dir().join(format!("undertaker-tree-life-{}", std::process::id())));
    let state = scratch.0.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let signaller = Signaller::for_current_process(Procfs::new()).unwrap();
    let me = signaller.me();
    let opts = GuardOptions {
        label: Some("life".into()),
        grace: Duration::from_secs(1),
        owner: OwnerSpec::Parent,
        stdio_owner: true,
        tier: Tier::Subreaper,
        state_dir: Some(state.clone()),
    };
    let command = CommandSpec::plain(["sh", "-c", "exit 3"].map(Into::into).to_vec());
    let id = TreeId::generate(&me.boot_id, [7; 12]);
    let owner = OwnerRecord {
        kind: OwnerKind::Pid,
        pid: None,
        starttime: None,
    };
    let dir = StateDir::prepare(&state, me.uid).unwrap();
    let file = record_file::path_of(&dir, id.as_str());
    let row = || record_file::read(&file).unwrap().tree;

    // Recorded before anything runs: a record file, its lock held.
    let mut tree = Tree::create(
        &opts,
        id.clone(),
        Containment::Subreaper,
        &signaller,
        owner,
        GuardianKind::Run,
    )
    .unwrap();
    assert_eq!(row().state, StoredState::Running);
    assert!(FileLock::try_acquire(&file).unwrap().is_none(), "lock held");

    let signals = BlockedSignals::new(&[]).unwrap();
    tree.spawn(&Launch {
        command: &command,
        grace: opts.grace,
        tree: &id,
        signaller: &signaller,
        nofile: None,
        signals: &signals,
        own_session: false,
    })
    .unwrap();
    let root = tree.root().map(PidRef::pid).unwrap();
    assert_eq!(row().root.map(|r| r.pid), Some(root));

    let mut host = LendingNothing;
    let exited = tree
        .root()
        .unwrap()
        .poll_until(Instant::now() + Duration::from_secs(30));
    assert!(exited, "CMD did not exit");
    tree.reap(&mut host);
    assert!(tree.root_exited());
    tree.tear_down(Cause::CommandExited, &signaller, &mut host);
    assert_eq!(tree.finish(), 3);

    assert_eq!(row().state, StoredState::Finished);
    // Finished: the lock is free, and the next command folds the file into a row.
    let registry = Registry::open(&dir, &me.boot_id).unwrap();
    assert!(registry.fold(&dir, &me.boot_id).is_empty());
    assert!(!file.exists());
    let done = registry.tree(id.as_str()).unwrap().unwrap();
    assert_eq!(done.state, StoredState::Finished);
    assert_eq!(done.exit_status, Some(3));
}

/// A process of ours, started with `marker` in its environment, once its exec has
/// made the marker readable (setup, not a verdict), with its start time.
fn marked_sleeper(procfs: &Procfs, marker: &TreeId) -> (std::process::Child, u64) {
    let child = std::process::Command::new("sleep")
        .arg("1000")
        .env(crate::identity::TREE_MARKER, marker.as_str())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(30);
    while procfs
        .environ_value(pid, crate::identity::TREE_MARKER)
        .ok()
        .flatten()
        != Some(marker.as_str().as_bytes().to_vec())
    {
        assert!(Instant::now() < deadline, "{pid} never showed its marker");
        std::thread::sleep(Duration::from_millis(5));
    }
    (child, procfs.stat(pid).unwrap().starttime)
}

/// Processes a test started, killed and reaped on drop (a failed assertion leaves
/// none behind).
struct Started(Vec<std::process::Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A dead guardian's tree as a sweep finds it (`Tree::left_behind`, no cgroup): the
/// processes carrying its marker that started no earlier than the dead guardian are
/// torn down, each reported as reached by SIGTERM; one with its marker that started
/// before, and one with another tree's marker, are left alone.
#[test]
fn a_left_behind_tree_is_its_marked_processes_since_the_guardians_start() {
    let signaller = Signaller::for_current_process(Procfs::new()).unwrap();
    let procfs = signaller.procfs();
    let id = TreeId::generate(&signaller.me().boot_id, [9; 12]);
    let other = TreeId::generate(&signaller.me().boot_id, [10; 12]);
    let mut started = Started(Vec::new());
    let (early, early_start) = marked_sleeper(procfs, &id);
    started.0.push(early);
    // The member must start at a later clock tick than `early` (start times count ticks).
    let since = loop {
        let (member, start) = marked_sleeper(procfs, &id);
        started.0.push(member);
        if start > early_start {
            break start;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stranger, _) = marked_sleeper(procfs, &other);
    started.0.push(stranger);
    let [early, .., member, stranger] = &mut started.0[..] else {
        unreachable!()
    };

    let recorder = Recorder::for_sweep(&id, "sweep", None);
    let grace = Duration::from_secs(20);
    let mut tree = Tree::left_behind(id, None, Some(since), None, grace, recorder);
    let torn = tree.tear_down_from_outside(&signaller);

    let member_pid = member.id() as i32;
    let status = member.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    let target = (torn.report.targets.iter())
        .find(|t| t.pid == member_pid)
        .expect("the member is in the report");
    assert_eq!(target.outcome, crate::escalation::Outcome::Gone);
    assert!(torn.reached.contains(&(member_pid, since)));
    assert!(torn.report.empty);
    for bystander in [early, stranger] {
        assert!(bystander.try_wait().unwrap().is_none(), "a non-member died");
        let pid = bystander.id() as i32;
        assert!(
            !(torn.report.targets.iter()).any(|t| t.pid == pid && t.refusal.is_none()),
            "{pid} was treated as a member: {:?}",
            torn.report
        );
    }
}
