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
