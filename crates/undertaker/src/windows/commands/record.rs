//! A tree's record file on Windows (docs/REGISTRY.md): the registry `ps`, `kill` and
//! `sweep` read, written as the tree's guardian or supervisor goes.

use crate::identity::TreeId;
use crate::registry::record_file::{Line, RecordWriter};
use crate::registry::{
    now_ms, state_dir, AuditEntry, GuardianRecord, OwnerRecord, RecordedTier, RootRecord,
    TreeRecord,
};
use crate::windows::commands::guardian::BOOT_ID;
use crate::windows::kernel::sys;
use crate::RunError;
use std::os::windows::io::BorrowedHandle;
use std::path::Path;

/// A tree's record file, written by its guardian (`run`) or its supervisor: coverage
/// beats bookkeeping, so a state directory that cannot be used only loses the record
/// (a warning), except an explicitly chosen unsafe one, which is a usage error.
pub struct Recorder {
    tree: TreeId,
    writer: Option<RecordWriter>,
}

impl Recorder {
    pub fn start(
        state_dir: Option<&Path>,
        label: Option<String>,
        tree: &TreeId,
        owner: OwnerRecord,
        supervisor: bool,
    ) -> Result<Self, RunError> {
        let mut rec = Recorder {
            tree: tree.clone(),
            writer: None,
        };
        let Some(dir) = state_dir::for_recording(state_dir, 0, tree.as_str())? else {
            return Ok(rec);
        };
        let guardian = GuardianRecord {
            pid: sys::current_pid() as i32,
            starttime: sys::own_creation_time().unwrap_or(0),
            pgid: 0,
            pidfs_inode: None,
            supervisor,
        };
        let record = TreeRecord::starting(
            tree.to_string(),
            BOOT_ID.into(),
            label,
            RecordedTier::Job,
            guardian,
            owner,
        );
        match RecordWriter::create(&dir, &record) {
            Ok(w) => rec.writer = Some(w),
            Err(e) => tracing::warn!("not recording tree {tree}: record file: {e}"),
        }
        Ok(rec)
    }

    pub fn write(&self, lines: &[Line]) {
        if let Some(w) = &self.writer {
            if let Err(e) = w.append(lines) {
                tracing::warn!("record of {}: {e}", self.tree);
            }
        }
    }

    pub fn root(&self, pid: u32, process: BorrowedHandle<'_>) {
        let starttime = sys::creation_time(process).unwrap_or(0);
        self.write(&[Line::Root(RootRecord {
            pid: pid as i32,
            starttime,
            pgid: pid as i32,
            sid: 0,
            uid: 0,
        })]);
    }

    pub fn note(&self, message: &str) {
        self.write(&[Line::Audit(AuditEntry {
            time_ms: now_ms(),
            actor: "guardian".into(),
            event: "note".into(),
            message: Some(message.into()),
            ..Default::default()
        })]);
    }

    pub fn finish(&mut self, exit_status: Option<i32>) {
        if let Some(w) = self.writer.take() {
            if let Err(e) = w.finish(exit_status) {
                tracing::warn!("recording end of {}: {e}", self.tree);
            }
        }
    }

    /// Closes the record as released: nothing of the tree is ours any more.
    pub fn release(&mut self) {
        if let Some(w) = self.writer.take() {
            if let Err(e) = w.release() {
                tracing::warn!("recording release of {}: {e}", self.tree);
            }
        }
    }
}

impl Drop for Recorder {
    /// Early returns (CMD could not be started) still close the record.
    fn drop(&mut self) {
        self.finish(None);
    }
}
