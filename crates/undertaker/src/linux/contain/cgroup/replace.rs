//! Handing a tree's cgroup to a new guardian (a supervisor's takeover, docs/SUPERVISE.md).
//!
//! The name of a tree cgroup says whose tree it is, and cgroup v2 refuses every rename
//! (EPERM). So the cgroup is replaced: a new one named for the new guardian, beside the
//! old one, and the old one's processes moved into it with both frozen. A frozen
//! process cannot fork, so none is born in the old cgroup during the move; a process
//! moved into a frozen cgroup stays stopped, so none runs (or forks) until all are
//! moved, and a failed move can be undone whole.

use super::{dir_name, own_pidns, remove_dir, CgroupTree};
use crate::identity::TreeId;
use crate::linux::proof::signal::{NotProven, ProvenProcess, Signaller};
use rustix::fs::Mode;
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest a replacement waits for the old cgroup to freeze and to empty: a
/// process in an uninterruptible sleep may hold the freeze up.
const PATIENCE: Duration = Duration::from_secs(5);

/// Writes `cgroup.freeze` of `dir` (Linux ≥ 5.2).
fn set_frozen(dir: &Path, frozen: bool) -> std::io::Result<()> {
    std::fs::write(dir.join("cgroup.freeze"), if frozen { "1" } else { "0" })
}

impl CgroupTree {
    /// This cgroup replaced by one named for `tree` and its guardian, holding every
    /// process this one held (see the module doc). Whatever fails, this cgroup is
    /// returned unfrozen with its processes, as it was.
    pub fn replace(
        self,
        tree: &TreeId,
        guardian_pid: i32,
        guardian_starttime: u64,
        signaller: &Signaller,
    ) -> Self {
        let Some(parent) = self.path.parent() else {
            return self;
        };
        let pidns = own_pidns().unwrap_or(0);
        let path = parent.join(dir_name(tree, pidns, guardian_pid, guardian_starttime));
        if let Err(e) = rustix::fs::mkdir(&path, Mode::from_raw_mode(0o755)) {
            tracing::warn!("cannot create cgroup {}: {e}", path.display());
            return self;
        }
        let new = match CgroupTree::open(&path) {
            Ok(new) => new,
            Err(e) => {
                tracing::warn!("cannot open cgroup {}: {e}", path.display());
                let _ = rustix::fs::rmdir(&path);
                return self;
            }
        };
        let moved = self
            .move_all(&new, signaller)
            .and_then(|()| set_frozen(&new.path, false).map_err(|e| e.to_string()));
        match moved {
            Ok(()) => {
                let _ = set_frozen(&self.path, false);
                // Left behind, it is empty: any sweep removes it.
                if let Err(e) = remove_dir(&self.path, Instant::now() + Duration::from_secs(2)) {
                    tracing::warn!("cannot remove cgroup {}: {e}", self.path.display());
                }
                new
            }
            Err(why) => {
                tracing::warn!(
                    "cgroup {} kept under its old name: {why}",
                    self.path.display()
                );
                // Moved back (still frozen, so none forked), or there is nothing to move.
                let moved_any = new.procs().map_or(true, |pids| !pids.is_empty());
                if moved_any {
                    if let Err(why) = new.move_all(&self, signaller) {
                        tracing::warn!(
                            "cannot move the processes of cgroup {} back: {why}",
                            new.path.display()
                        );
                    }
                }
                let _ = set_frozen(&self.path, false);
                let _ = set_frozen(&new.path, false);
                let _ = remove_dir(&new.path, Instant::now() + Duration::from_secs(2));
                self
            }
        }
    }

    /// Freezes `to`, then this cgroup, and moves every process of this cgroup into
    /// `to`, each proven a member of this cgroup first. Both are left frozen.
    fn move_all(&self, to: &CgroupTree, signaller: &Signaller) -> Result<(), String> {
        let end = Instant::now() + PATIENCE;
        set_frozen(&to.path, true).map_err(|e| format!("cannot freeze: {e}"))?;
        set_frozen(&self.path, true).map_err(|e| format!("cannot freeze: {e}"))?;
        while !self.events_say("frozen 1") {
            if Instant::now() >= end {
                return Err("not frozen in time".into());
            }
            self.wait(end.min(Instant::now() + Duration::from_millis(50)), &[]);
        }
        // Only this cgroup's own processes are moved: one below it would be left.
        if rustix::fs::stat(&self.path).map_or(true, |st| st.st_nlink != 2) {
            return Err("it has cgroups below it".into());
        }
        loop {
            let pids = self.procs().map_err(|e| format!("cannot list: {e}"))?;
            if pids.is_empty() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err("not emptied in time".into());
            }
            for pid in pids {
                let proven = match signaller.prove_in_cgroup(pid, &self.path, self.id, &self.rel) {
                    Ok(proven) => proven,
                    Err(NotProven::Gone) => continue,
                    Err(NotProven::Refused(r)) => return Err(format!("{pid}: {r:?}")),
                };
                self.move_proven(to, &proven)?;
            }
        }
    }

    /// Moves a proven member into `to` by its number.
    fn move_proven(&self, to: &CgroupTree, proven: &ProvenProcess) -> Result<(), String> {
        match to.move_in(proven.pid()) {
            Ok(()) if proven.has_exited() => {
                // Frozen, it can only have died of a kill from outside; its number
                // may have been taken by then (the window is the write itself).
                tracing::warn!("{} died while it was moved", proven.pid());
                Ok(())
            }
            Ok(()) => Ok(()),
            Err(_) if proven.has_exited() => Ok(()),
            Err(e) => Err(format!("cannot move {}: {e}", proven.pid())),
        }
    }

    /// Pids of this cgroup's own `cgroup.procs`; an unreadable list is an error, never
    /// "empty".
    fn procs(&self) -> std::io::Result<Vec<i32>> {
        Self::try_pids_of_at(rustix::fs::CWD, &self.path)
    }
}
