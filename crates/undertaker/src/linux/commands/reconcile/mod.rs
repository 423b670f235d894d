//! `ps`, `sweep` and `kill`: reading the registry against the live system, and
//! finishing the job of guardians that died.
//!
//! Every command first folds the record files of finished and abandoned trees into
//! the database ([`Registry::fold`]); live trees are read from their record files. A
//! guardian is alive exactly while its record file is locked (see
//! [`crate::registry::lock`]). A dead guardian's tree is a `Tree` of its own
//! (`Tree::left_behind`), torn down by the one escalation every tree goes through: its
//! members are what its trusted cgroup holds, the processes that carry
//! `UNDERTAKER_TREE=<id>`, have our uid and started no earlier than the guardian, and
//! their descendants, each proven through a pidfd opened first.
//! A tree whose guardian is alive is left to that guardian: it watches its owner
//! itself and will tear down when the owner dies.
//!
//! One file per command ([`ps`](ps()), [`sweep`](sweep()), [`kill`](kill()); `log`
//! reads the neutral [`crate::history`]); which trees a sweep or a self-healing round examines is decided in
//! one place, [`candidates`].

mod candidates;
mod kill;
mod marker;
mod ps;
pub(crate) mod succession;
mod sweep;
#[cfg(test)]
mod tests;

pub(crate) use candidates::candidates;
pub use kill::kill;
pub(crate) use marker::marker_scan;
pub use ps::ps;
pub(crate) use sweep::Sweep;
pub use sweep::{sweep, sweep_found_cgroups};

use crate::history;
use crate::linux::contain::cgroup::{self, CgroupMount};
use crate::linux::contain::cgroup_place;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::Signaller;
use crate::registry::lock::FileLock;
use crate::registry::record_file;
use crate::registry::{OwnerRecord, RegistryError, StoredState, TreeRecord};
use std::path::Path;

/// Everything a reconciling command needs: the opened state directory every platform
/// reads ([`history::Context`], its fields reached through this one), and the
/// signaller that proves what it signals.
pub struct Context {
    pub signaller: Signaller,
    state: history::Context,
}

impl std::ops::Deref for Context {
    type Target = history::Context;

    fn deref(&self) -> &history::Context {
        &self.state
    }
}

impl Context {
    pub fn open(state_dir: Option<&Path>) -> Result<Self, RegistryError> {
        Self::open_folding_at_most(state_dir, usize::MAX)
    }

    /// [`Context::open`] that folds at most `limit` record files (see
    /// [`crate::registry::Registry::fold_at_most`]).
    pub fn open_folding_at_most(
        state_dir: Option<&Path>,
        limit: usize,
    ) -> Result<Self, RegistryError> {
        let signaller =
            Signaller::for_current_process(Procfs::new()).map_err(|e| RegistryError::Io {
                path: "/proc/self".into(),
                msg: e.to_string(),
            })?;
        let me = signaller.me();
        let state = history::Context::open(state_dir, me.uid, &me.boot_id, limit)?;
        Ok(Self { signaller, state })
    }

    /// One tree as it is now: its record file is folded first when its guardian has
    /// finished with it since this command started.
    pub fn tree(&self, id: &str) -> Result<Option<TreeRecord>, RegistryError> {
        let boot_id = &self.signaller.me().boot_id;
        if !self.registry.fold_one(&self.dir, id, boot_id) {
            if let Some(read) = record_file::read(&record_file::path_of(&self.dir, id)) {
                return Ok(Some(read.tree));
            }
        }
        self.registry.tree(id)
    }

    pub(crate) fn procfs(&self) -> &Procfs {
        self.signaller.procfs()
    }

    /// The opened state directory alone, for what reads without signalling (`log`).
    pub(crate) fn into_state(self) -> history::Context {
        self.state
    }
}

/// Is the guardian of a tree alive?
pub(crate) enum GuardianState {
    Alive,
    /// Provably dead; the lock (if its file still existed) is now held by us.
    Dead(Option<FileLock>),
    /// No lock file and no record: the tree belongs to another state directory.
    Unknown,
}

pub(crate) fn guardian_state(ctx: &Context, id: &str, rec: Option<&TreeRecord>) -> GuardianState {
    match FileLock::try_acquire(&record_file::path_of(&ctx.dir, id)) {
        Ok(None) => GuardianState::Alive,
        Ok(Some(lock)) => GuardianState::Dead(Some(lock)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match rec {
            // A record file is folded only once its lock is free, so a missing file
            // on an unfinished row means the guardian died; still, a guardian that is
            // provably the recorded process is never called dead.
            Some(r) if !matches!(r.state, StoredState::Finished | StoredState::Released) => {
                match recorded_guardian_alive(ctx.procfs(), r) {
                    true => GuardianState::Alive,
                    false => GuardianState::Dead(None),
                }
            }
            Some(_) => GuardianState::Dead(None),
            None => GuardianState::Unknown,
        },
        // Cannot tell: assume alive, never sweep on a guess.
        Err(_) => GuardianState::Alive,
    }
}

/// Is the process the record names as its guardian (pid and start time) alive?
pub(crate) fn recorded_guardian_alive(procfs: &Procfs, rec: &TreeRecord) -> bool {
    matches!(procfs.stat(rec.guardian.pid),
        Ok(s) if s.starttime == rec.guardian.starttime && s.state != 'Z')
}

/// The tree cgroup a record names, when it is one this command may act on: a tree
/// cgroup in a place that may hold trees ([`cgroup_place::is_tree_cgroup_path`]), of
/// that record's own tree, or else one whose own guardian (named in it) is not alive
/// here (a supervisor that took over a dead predecessor's tree keeps its cgroup, which
/// cgroup v2 cannot rename). The path in a record is never trusted as such: an edited
/// record could name a stranger's cgroup or another live tree's.
pub(crate) fn recorded_cgroup<'a>(
    rec: &'a TreeRecord,
    mount: &CgroupMount,
    procfs: &Procfs,
) -> Option<&'a Path> {
    let path = Path::new(rec.cgroup_path.as_deref()?);
    let facts = cgroup::parse_dir_name(path.file_name()?.to_str()?)?;
    let named_guardian_alive = || {
        cgroup::own_pidns() == Some(facts.pidns)
            && procfs.stat(facts.guardian_pid).is_ok_and(|s| {
                s.starttime == facts.guardian_starttime && !matches!(s.state, 'Z' | 'X')
            })
    };
    let ours = facts.tree.as_str() == rec.id || !named_guardian_alive();
    (ours && cgroup_place::is_tree_cgroup_path(mount, path)).then_some(path)
}

pub(crate) fn owner_alive(procfs: &Procfs, owner: &OwnerRecord) -> Option<bool> {
    let (pid, starttime) = (owner.pid?, owner.starttime?);
    Some(matches!(procfs.stat(pid), Ok(s) if s.starttime == starttime && s.state != 'Z'))
}
