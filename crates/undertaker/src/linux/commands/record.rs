//! The guardian's bookkeeping: its tree's record file (record, facts, audit lines, and
//! the liveness lock), and the registry opening the commands share.
//!
//! Coverage beats bookkeeping: if the registry cannot be used, the command is still
//! guarded and a warning is logged. Only an explicitly chosen state directory that is
//! unsafe (symlink, foreign owner) stops `run`, as a usage error.

use crate::audit::{audit_entry, AuditEvent};
use crate::identity::TreeId;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::kernel::sys;
use crate::linux::proof::signal::Signaller;
use crate::registry::record_file::{Line, RecordWriter};
use crate::registry::{
    now_ms, state_dir, GuardianRecord, OwnerRecord, RecordedTier, Registry, RootRecord, StateDir,
    TreeRecord,
};
use crate::{GuardOptions, RunError};
use rustix::fd::BorrowedFd;

/// Test-only hooks: milliseconds to sleep after the record file is written and
/// before CMD is spawned, and before the finished mark, so tests can kill a guardian
/// inside those windows.
pub const TEST_PAUSE_ENV: &str = "UNDERTAKER_TEST_PAUSE_BEFORE_SPAWN";
pub const TEST_PAUSE_BEFORE_FINISH_ENV: &str = "UNDERTAKER_TEST_PAUSE_BEFORE_FINISH";

/// The guardian's side of the registry: its tree's record file, never the database
/// (docs/REGISTRY.md). Facts are appended as they become known; audit entries are
/// queued and written in one append before every wait.
pub struct Recorder {
    tree: TreeId,
    /// Who writes the audit entries: `guardian`, or `sentinel` finishing an orphaned tree.
    actor: &'static str,
    writer: Option<RecordWriter>,
    /// A swept tree's audit lines go to the database instead (its record file was
    /// folded): [`Recorder::for_sweep`].
    registry: Option<Registry>,
    pending_audit: std::cell::RefCell<Vec<Line>>,
}

/// What kind of guardian records a tree: `kill` signals `run`'s guardian, and asks a
/// supervisor instead (it holds other trees too).
#[derive(Debug, Clone, Copy)]
pub enum GuardianKind<'a> {
    Run,
    /// `unreachable`: why `undertaker kill` cannot ask this supervisor (its control
    /// socket could not be made), written to each tree's log.
    Supervisor {
        unreachable: Option<&'a str>,
    },
}

/// Our own identity as recorded for others to prove later.
pub fn guardian_record(signaller: &Signaller) -> Option<GuardianRecord> {
    let me = signaller.me();
    let stat = signaller.own_stat().ok()?;
    let pidfs_inode = crate::linux::proof::pidref::PidRef::open(me.pid)
        .ok()
        .and_then(|own| crate::linux::proof::signal::pidfs_inode(own.fd()));
    Some(GuardianRecord {
        pid: me.pid,
        starttime: stat.starttime,
        pgid: me.pgrp,
        pidfs_inode,
        supervisor: false,
    })
}

impl Recorder {
    /// Creates the tree's record file (holding its liveness lock), before CMD exists.
    pub fn start(
        opts: &GuardOptions,
        tree: &TreeId,
        tier: RecordedTier,
        signaller: &Signaller,
        owner: OwnerRecord,
        kind: GuardianKind<'_>,
    ) -> Result<Self, RunError> {
        let mut rec = Recorder {
            tree: tree.clone(),
            actor: "guardian",
            writer: None,
            registry: None,
            pending_audit: Default::default(),
        };
        let me = signaller.me();
        let Some(dir) = state_dir::for_recording(opts.state_dir.as_deref(), me.uid, tree.as_str())?
        else {
            pause_for_tests(TEST_PAUSE_ENV);
            return Ok(rec);
        };
        let Some(mut guardian) = guardian_record(signaller) else {
            tracing::warn!("not recording tree {tree}: cannot read /proc/self");
            return Ok(rec);
        };
        guardian.supervisor = matches!(kind, GuardianKind::Supervisor { .. });
        let record = TreeRecord::starting(
            tree.to_string(),
            me.boot_id.clone(),
            opts.label.clone(),
            tier,
            guardian,
            owner,
        );
        match RecordWriter::create(&dir, &record) {
            Ok(writer) => rec.writer = Some(writer),
            Err(e) => tracing::warn!("not recording tree {tree}: record file: {e}"),
        }
        if let GuardianKind::Supervisor {
            unreachable: Some(why),
        } = kind
        {
            // In the tree's log, where `undertaker log` shows it: a supervisor's
            // stderr is often read by no one.
            rec.audit_line(crate::registry::AuditEntry {
                actor: rec.actor.into(),
                event: "note".into(),
                pid: Some(me.pid),
                message: Some(format!(
                    "`undertaker kill` cannot ask this supervisor to end the tree: {why}"
                )),
                ..Default::default()
            });
            rec.flush_audit();
        }
        pause_for_tests(TEST_PAUSE_ENV);
        Ok(rec)
    }

    /// The record of a tree whose guardian died, for the sentinel that tears it down:
    /// its record file is reopened (the dead guardian's lock is free) and finished
    /// once the tree is torn down.
    pub fn adopt(opts: &GuardOptions, tree: &TreeId, signaller: &Signaller) -> Self {
        let mut rec = Recorder {
            tree: tree.clone(),
            actor: "sentinel",
            writer: None,
            registry: None,
            pending_audit: Default::default(),
        };
        let me = signaller.me();
        let adopted = state_dir::resolve(opts.state_dir.as_deref())
            .and_then(|(path, _)| StateDir::prepare(&path, me.uid))
            .map_err(|e| e.to_string())
            .and_then(|dir| RecordWriter::adopt(&dir, tree.as_str()).map_err(|e| e.to_string()));
        match adopted {
            Ok(writer) => rec.writer = writer,
            Err(e) => tracing::warn!("not recording the end of tree {tree}: {e}"),
        }
        rec
    }

    /// The record of a dead guardian's tree that `actor` (`sweep`, `kill`, `heal`)
    /// tears down: its audit lines go to the database through `registry`, one append
    /// before every wait, as a guardian's go to its record file; nowhere without one
    /// (a sweep that could not open the registry). The row is the caller's to finish.
    pub fn for_sweep(tree: &TreeId, actor: &'static str, registry: Option<Registry>) -> Self {
        Recorder {
            tree: tree.clone(),
            actor,
            writer: None,
            registry,
            pending_audit: Default::default(),
        }
    }

    /// True when audit entries go somewhere.
    fn records(&self) -> bool {
        self.writer.is_some() || self.registry.is_some()
    }

    fn write(&self, lines: &[Line]) {
        if let Some(w) = &self.writer {
            if let Err(e) = w.append(lines) {
                tracing::warn!("record of {}: {e}", self.tree);
            }
        }
    }

    /// Records who started the tree and with what (before CMD is spawned).
    pub fn set_start(&self, start: &crate::registry::StartRecord) {
        self.write(&[Line::Start(start.clone())]);
    }

    /// Records CMD's identity, read right after spawn (its pidfd is already open).
    /// The real uid comes through `pidfd` when the kernel tells it (Linux 6.13):
    /// `/proc/PID/status`, read otherwise, is the largest file start-up reads.
    pub fn set_root(&self, procfs: &Procfs, pid: i32, pidfd: Option<BorrowedFd<'_>>) {
        if self.writer.is_none() {
            return;
        }
        let Ok(stat) = procfs.stat(pid) else {
            return;
        };
        let told = pidfd.and_then(|fd| sys::pidfd_get_info(fd).ok().flatten());
        let uid = match told {
            Some(info) if info.pid == pid => Ok(info.ruid),
            _ => procfs.real_uid(pid),
        };
        let Ok(uid) = uid else {
            return;
        };
        self.write(&[Line::Root(RootRecord {
            pid,
            starttime: stat.starttime,
            pgid: stat.pgrp,
            sid: stat.session,
            uid,
        })]);
    }

    /// Before the guardian starts idling: returns free heap to the kernel, so an idle
    /// guardian's resident set is its code and little else.
    pub fn idle(&self) {
        crate::linux::kernel::sys::settle_heap();
    }

    /// Records where the cgroup tier put the tree, so `sweep` can kill it there.
    pub fn set_cgroup(&self, path: &std::path::Path, cgroup_id: u64) {
        self.write(&[Line::Cgroup {
            path: path.to_string_lossy().into_owned(),
            id: cgroup_id,
        }]);
    }

    /// Queues the "teardown started" line: it is written with the first batch of
    /// audit entries, after the first strike, so no bookkeeping delays the signals.
    pub fn reaping(&self) {
        if self.writer.is_some() {
            self.pending_audit
                .borrow_mut()
                .push(Line::Reaping { time_ms: now_ms() });
        }
    }

    /// Queues an audit entry (stamped now); [`Recorder::flush_audit`] writes the queue.
    pub fn audit(&self, event: &AuditEvent) {
        if self.records() {
            let mut entry = audit_entry(self.tree.as_str(), self.actor, event);
            entry.time_ms = now_ms();
            // The file names the tree: no need to repeat it on every line.
            entry.tree = None;
            self.pending_audit.borrow_mut().push(Line::Audit(entry));
        }
    }

    /// Queues an audit entry the caller built (`supervise`'s `guarded` lines, see
    /// `reconcile::succession`), stamped now.
    pub fn audit_line(&self, mut entry: crate::registry::AuditEntry) {
        if self.records() {
            entry.time_ms = now_ms();
            entry.tree = None;
            self.pending_audit.borrow_mut().push(Line::Audit(entry));
        }
    }

    /// Writes a note from this recorder's actor now, after the queued entries.
    pub fn note(&self, message: String) {
        self.audit_line(crate::registry::AuditEntry {
            actor: self.actor.into(),
            event: "note".into(),
            message: Some(message),
            ..Default::default()
        });
        self.flush_audit();
    }

    /// Writes the queued audit entries in one append. Teardown calls it before every
    /// wait, so signals are logged before anything blocks, with one `write` per batch
    /// on the path between the owner's death and the tree's.
    pub fn flush_audit(&self) {
        let pending = std::mem::take(&mut *self.pending_audit.borrow_mut());
        let Some(registry) = &self.registry else {
            self.write(&pending);
            return;
        };
        // The database holds every tree's lines: each names its tree.
        let entries: Vec<_> = (pending.into_iter())
            .filter_map(|line| match line {
                Line::Audit(mut e) => {
                    e.tree = Some(self.tree.to_string());
                    Some(e)
                }
                _ => None,
            })
            .collect();
        if let Err(e) = registry.append_audit_batch(&entries) {
            tracing::warn!("audit log: {e}");
        }
    }

    /// Marks the tree released by its supervisor (the record file's last line: its
    /// processes live on, the host's again) and releases its lock.
    pub fn released(&mut self) {
        self.flush_audit();
        if let Some(writer) = self.writer.take() {
            if let Err(e) = writer.release() {
                tracing::warn!("recording the release of {}: {e}", self.tree);
            }
        }
    }

    /// Marks the tree finished (the record file's last line) and releases its lock.
    pub fn finished(&mut self, exit_status: Option<i32>) {
        self.flush_audit();
        if let Some(writer) = self.writer.take() {
            pause_for_tests(TEST_PAUSE_BEFORE_FINISH_ENV);
            if let Err(e) = writer.finish(exit_status) {
                tracing::warn!("recording end of {}: {e}", self.tree);
            }
        }
    }
}

fn pause_for_tests(var: &str) {
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

impl Drop for Recorder {
    /// Early returns (CMD could not be started, setup failed) still close the record.
    fn drop(&mut self) {
        self.finished(None);
    }
}
