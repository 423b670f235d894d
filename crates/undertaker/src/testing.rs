//! For the integration tests only: a few facts about tree cgroups that the tests check
//! and the public API has no reason to offer. Hidden from the documented API.

use crate::linux::contain::cgroup::{self, GuardianState};
use crate::linux::kernel::procfs::Procfs;
use std::path::PathBuf;

/// `Ok` when this process could create tree cgroups, else why not.
pub fn cgroup_tier_available() -> Result<(), String> {
    cgroup::locate().map(|_| ())
}

/// Where the cgroup2 filesystem is mounted, when this process could create tree
/// cgroups.
pub fn cgroup2_mount_point() -> Result<PathBuf, String> {
    cgroup::locate().map(|loc| loc.mount.mount_point)
}

/// Tree cgroups on disk of tree `tree` (its id, as its record file is named). Unlike a
/// guardian pid, which a later PID namespace reuses, the id names one tree only.
pub fn tree_cgroups_of_tree(tree: &str) -> Vec<PathBuf> {
    cgroup::list_tree_cgroups(&Procfs::new())
        .into_iter()
        .filter(|f| f.tree.to_string() == tree)
        .map(|f| f.path)
        .collect()
}

/// Tree cgroups on disk whose guardian runs now as pid `guardian` in this PID
/// namespace (a dead guardian's pid may be a reused one: see [`tree_cgroups_of_tree`]).
pub fn tree_cgroups_of_live_guardian(guardian: i32) -> Vec<PathBuf> {
    cgroup::list_tree_cgroups(&Procfs::new())
        .into_iter()
        .filter(|f| f.guardian_pid == guardian && f.guardian == GuardianState::Alive)
        .map(|f| f.path)
        .collect()
}

/// Whether `name` is a tree cgroup's directory name.
pub fn is_tree_cgroup_name(name: &str) -> bool {
    cgroup::parse_dir_name(name).is_some()
}

/// Tree cgroups on disk whose directory is called `name`.
pub fn tree_cgroups_named(name: &str) -> Vec<PathBuf> {
    cgroup::list_tree_cgroups(&Procfs::new())
        .into_iter()
        .map(|f| f.path)
        .filter(|p| p.ends_with(name))
        .collect()
}

/// Writes a finished tree labelled `label` straight into the registry of `state_dir`,
/// as older versions could (labels longer than today's limit): what `ps` must cope with.
pub fn insert_finished_tree(state_dir: &std::path::Path, id: &str, boot_id: &str, label: &str) {
    use crate::registry::*;
    let dir = StateDir::prepare(state_dir, rustix::process::getuid().as_raw()).unwrap();
    let reg = Registry::open(&dir, boot_id).unwrap();
    let now = now_ms();
    reg.insert_tree(&TreeRecord {
        id: id.into(),
        boot_id: boot_id.into(),
        label: Some(label.into()),
        tier: RecordedTier::Subreaper,
        state: StoredState::Finished,
        guardian: GuardianRecord {
            pid: 999_999,
            starttime: 1,
            pgid: 999_999,
            pidfs_inode: None,
            supervisor: false,
        },
        root: None,
        owner: OwnerRecord {
            kind: OwnerKind::Parent,
            pid: None,
            starttime: None,
        },
        cgroup_path: None,
        cgroup_id: None,
        created_ms: now,
        updated_ms: now,
        finished_ms: Some(now),
        exit_status: Some(0),
        start: None,
    })
    .unwrap();
}
