//! The guardian's bookkeeping: its lock file, its registry row and its audit lines.
//!
//! Coverage beats bookkeeping: if the registry cannot be used, the command is still
//! guarded and a warning is logged. Only an explicitly chosen state directory that is
//! unsafe (symlink, foreign owner) stops `run`, as a usage error.

use crate::audit::{audit_entry, AuditEvent};
use crate::identity::TreeId;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::Signaller;
use crate::registry::lock::{FileLock, LockInfo};
use crate::registry::{
    now_ms, state_dir, AuditEntry, GuardianRecord, Origin, OwnerRecord, RecordedTier, Registry,
    RegistryError, RootRecord, StateDir, StoredState, TreeRecord,
};
use crate::{RunError, RunOptions};
use rustix::fd::AsFd;

/// Test-only hook: milliseconds to sleep after the row is written and before CMD is
/// spawned, so tests can kill a guardian inside that window.
pub const TEST_PAUSE_ENV: &str = "UNDERTAKER_TEST_PAUSE_BEFORE_SPAWN";

pub struct Recorder {
    tree: TreeId,
    /// Who writes the audit entries: `guardian`, or `sentinel` after a takeover.
    actor: &'static str,
    registry: Option<Registry>,
    lock: Option<FileLock>,
    finished: bool,
    pending_audit: std::cell::RefCell<Vec<AuditEntry>>,
}

/// Opens the state directory and registry for `path` (None = the default chain).
/// A corrupt database is replaced and reported on stderr through tracing.
pub fn open_registry(
    path: Option<&std::path::Path>,
    uid: u32,
    boot_id: &str,
) -> Result<(StateDir, Registry), (Origin, RegistryError)> {
    open_registry_with(path, uid, boot_id, Registry::open)
}

/// [`open_registry`] for a guardian: no full integrity check up front (see
/// [`Registry::open_unchecked`]).
fn open_registry_for_guardian(
    path: Option<&std::path::Path>,
    uid: u32,
    boot_id: &str,
) -> Result<(StateDir, Registry), (Origin, RegistryError)> {
    open_registry_with(path, uid, boot_id, Registry::open_unchecked)
}

fn open_registry_with(
    path: Option<&std::path::Path>,
    uid: u32,
    boot_id: &str,
    open: fn(&StateDir, &str) -> Result<Registry, RegistryError>,
) -> Result<(StateDir, Registry), (Origin, RegistryError)> {
    let (dir, origin) = state_dir::resolve(path).map_err(|e| (Origin::Default, e))?;
    let dir = StateDir::prepare(&dir, uid).map_err(|e| (origin, e))?;
    let registry = open(&dir, boot_id).map_err(|e| (origin, e))?;
    report_recovery(&registry);
    Ok((dir, registry))
}

fn report_recovery(registry: &Registry) {
    if let Some(rec) = &registry.recovered {
        tracing::error!("{rec}");
    }
}

/// Our own identity as recorded for others to prove later.
pub fn guardian_record(signaller: &Signaller) -> Option<GuardianRecord> {
    let me = signaller.me();
    let stat = signaller.procfs().stat(me.pid).ok()?;
    let pidfs_inode = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )
    .ok()
    .and_then(|fd| crate::linux::proof::signal::pidfs_inode(fd.as_fd()));
    Some(GuardianRecord {
        pid: me.pid,
        starttime: stat.starttime,
        pgid: me.pgrp,
        pidfs_inode,
    })
}

impl Recorder {
    /// Takes the tree's lock and writes its row, before CMD exists.
    pub fn start(
        opts: &RunOptions,
        tree: &TreeId,
        tier: RecordedTier,
        signaller: &Signaller,
        owner: OwnerRecord,
    ) -> Result<Self, RunError> {
        let mut rec = Recorder {
            tree: tree.clone(),
            actor: "guardian",
            registry: None,
            lock: None,
            finished: false,
            pending_audit: Default::default(),
        };
        let me = signaller.me();
        let opened = open_registry_for_guardian(opts.state_dir.as_deref(), me.uid, &me.boot_id);
        let (dir, registry) = match opened {
            Ok(x) => x,
            Err((Origin::Explicit, e @ RegistryError::UnsafeStateDir { .. })) => {
                return Err(RunError::Usage(e.to_string()))
            }
            Err((_, e)) => {
                tracing::warn!("not recording tree {tree}: {e}");
                rec.pause_for_tests();
                return Ok(rec);
            }
        };
        let Some(guardian) = guardian_record(signaller) else {
            tracing::warn!("not recording tree {tree}: cannot read /proc/self");
            return Ok(rec);
        };
        // The lock comes first: a row without a held lock would look like a dead
        // guardian to `sweep`.
        let info = LockInfo {
            guardian_pid: guardian.pid,
            guardian_starttime: guardian.starttime,
            boot_id: me.boot_id.clone(),
        };
        match FileLock::create_held(&dir.tree_lock_path(tree.as_str()), &info) {
            Ok(lock) => rec.lock = Some(lock),
            Err(e) => {
                tracing::warn!("not recording tree {tree}: lock file: {e}");
                return Ok(rec);
            }
        }
        let now = now_ms();
        let row = TreeRecord {
            id: tree.to_string(),
            boot_id: me.boot_id.clone(),
            label: opts.label.clone(),
            tier,
            state: StoredState::Running,
            guardian,
            root: None,
            owner,
            cgroup_path: None,
            cgroup_id: None,
            created_ms: now,
            updated_ms: now,
            finished_ms: None,
            exit_status: None,
        };
        match registry.insert_tree(&row) {
            Ok(()) => rec.registry = Some(registry),
            Err(first) => {
                // Maybe damage the unchecked open did not see: reopen with the full
                // check (which moves a corrupt database aside) and try once more.
                drop(registry);
                let retried = Registry::open(&dir, &me.boot_id).and_then(|registry| {
                    report_recovery(&registry);
                    registry.insert_tree(&row).map(|()| registry)
                });
                match retried {
                    Ok(registry) => rec.registry = Some(registry),
                    Err(e) => tracing::warn!("not recording tree {tree}: {first}; {e}"),
                }
            }
        }
        rec.pause_for_tests();
        Ok(rec)
    }

    /// The record of a tree whose guardian died, for the sentinel that tears it down:
    /// the row exists (or was never written); the dead guardian's lock is taken over so
    /// it can be removed once the tree is finished.
    pub fn adopt(opts: &RunOptions, tree: &TreeId, signaller: &Signaller) -> Self {
        let mut rec = Recorder {
            tree: tree.clone(),
            actor: "sentinel",
            registry: None,
            lock: None,
            finished: false,
            pending_audit: Default::default(),
        };
        let me = signaller.me();
        match open_registry(opts.state_dir.as_deref(), me.uid, &me.boot_id) {
            Ok((dir, registry)) => {
                rec.lock = FileLock::try_acquire(&dir.tree_lock_path(tree.as_str()))
                    .ok()
                    .flatten();
                rec.registry = Some(registry);
            }
            Err((_, e)) => tracing::warn!("not recording the end of tree {tree}: {e}"),
        }
        rec
    }

    fn pause_for_tests(&self) {
        if let Some(ms) = std::env::var(TEST_PAUSE_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }

    /// Records CMD's identity, read right after spawn (its pidfd is already open).
    pub fn set_root(&self, procfs: &Procfs, pid: i32) {
        let Some(reg) = &self.registry else { return };
        let (Ok(stat), Ok(uid)) = (procfs.stat(pid), procfs.real_uid(pid)) else {
            return;
        };
        let root = RootRecord {
            pid,
            starttime: stat.starttime,
            pgid: stat.pgrp,
            sid: stat.session,
            uid,
        };
        if let Err(e) = reg.set_root(self.tree.as_str(), &root) {
            tracing::warn!("recording root of {}: {e}", self.tree);
        }
    }

    /// Before the guardian starts idling: frees SQLite's page cache and returns free
    /// heap to the kernel, so an idle guardian's resident set is its code and little
    /// else. The next write re-reads the few pages it needs.
    pub fn idle(&self) {
        if let Some(reg) = &self.registry {
            reg.release_memory();
        }
        crate::linux::kernel::sys::trim_heap();
    }

    /// Records where the cgroup tier put the tree, so `sweep` can kill it there.
    pub fn set_cgroup(&self, path: &std::path::Path, cgroup_id: u64) {
        let Some(reg) = &self.registry else { return };
        if let Err(e) = reg.set_cgroup(self.tree.as_str(), &path.to_string_lossy(), cgroup_id) {
            tracing::warn!("recording cgroup of {}: {e}", self.tree);
        }
    }

    pub fn reaping(&self) {
        if let Some(reg) = &self.registry {
            if let Err(e) = reg.set_reaping(self.tree.as_str()) {
                tracing::warn!("recording teardown of {}: {e}", self.tree);
            }
        }
    }

    /// Queues an audit entry (stamped now); [`Recorder::flush_audit`] writes the queue.
    pub fn audit(&self, event: &AuditEvent) {
        if self.registry.is_some() {
            let mut entry = audit_entry(self.tree.as_str(), self.actor, event);
            entry.time_ms = now_ms();
            self.pending_audit.borrow_mut().push(entry);
        }
    }

    /// Writes the queued audit entries in one transaction. Teardown calls it before
    /// every wait, so signals are logged before anything blocks, without one commit
    /// per signal on the path between the owner's death and the tree's.
    pub fn flush_audit(&self) {
        let pending = std::mem::take(&mut *self.pending_audit.borrow_mut());
        if let Some(reg) = &self.registry {
            if let Err(e) = reg.append_audit_batch(&pending) {
                tracing::warn!("audit log: {e}");
            }
        }
    }

    /// Marks the tree finished, then releases and deletes the lock file.
    pub fn finished(&mut self, exit_status: Option<i32>) {
        if self.finished {
            return;
        }
        self.flush_audit();
        self.finished = true;
        if let Some(reg) = &self.registry {
            if let Err(e) = reg.set_finished(self.tree.as_str(), exit_status) {
                tracing::warn!("recording end of {}: {e}", self.tree);
            }
        }
        if let Some(lock) = self.lock.take() {
            lock.remove();
        }
    }
}

impl Drop for Recorder {
    /// Early returns (CMD could not be started, setup failed) still close the record.
    fn drop(&mut self) {
        self.finished(None);
    }
}
