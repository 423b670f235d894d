//! A tree's record file as a guardian without the Linux host writes it (Windows,
//! macOS; docs/REGISTRY.md): the registry `ps`, `kill` and `sweep` read, written as
//! the tree's guardian or supervisor goes. The platform says who the guardian is;
//! the rest is the same everywhere.

use super::record_file::{Line, RecordWriter};
use super::{
    now_ms, state_dir, AuditEntry, GuardianRecord, OwnerRecord, RecordedTier, RootRecord,
    TreeRecord,
};
use crate::identity::TreeId;
use crate::RunError;
use std::path::Path;

/// What a platform's guardian records about itself and its tree at start.
pub struct Start<'a> {
    pub state_dir: Option<&'a Path>,
    /// Whose state directory it is (0 where its ACL guards it instead).
    pub uid: u32,
    pub boot_id: &'a str,
    pub label: Option<String>,
    pub tier: RecordedTier,
    pub guardian: GuardianRecord,
    pub owner: OwnerRecord,
}

/// A tree's record file: coverage beats bookkeeping, so a state directory that
/// cannot be used only loses the record (a warning), except an explicitly chosen
/// unsafe one, which is a usage error.
pub struct Recorder {
    tree: TreeId,
    writer: Option<RecordWriter>,
}

impl Recorder {
    pub fn open(tree: &TreeId, start: Start<'_>) -> Result<Self, RunError> {
        let mut rec = Recorder {
            tree: tree.clone(),
            writer: None,
        };
        let Some(dir) = state_dir::for_recording(start.state_dir, start.uid, tree.as_str())? else {
            return Ok(rec);
        };
        let record = TreeRecord::starting(
            tree.to_string(),
            start.boot_id.into(),
            start.label,
            start.tier,
            start.guardian,
            start.owner,
        );
        match RecordWriter::create(&dir, &record) {
            Ok(w) => rec.writer = Some(w),
            Err(e) => tracing::warn!("not recording tree {tree}: record file: {e}"),
        }
        Ok(rec)
    }

    /// Whether a record file is being written (the state directory could be used).
    pub fn is_recording(&self) -> bool {
        self.writer.is_some()
    }

    pub fn write(&self, lines: &[Line]) {
        if let Some(w) = &self.writer {
            if let Err(e) = w.append(lines) {
                tracing::warn!("record of {}: {e}", self.tree);
            }
        }
    }

    pub fn root_record(&self, root: RootRecord) {
        self.write(&[Line::Root(root)]);
    }

    pub fn note(&self, message: &str) {
        self.note_by("guardian", message);
    }

    /// A note in the tree's audit log from `actor` (the guardian, a supervisor).
    pub fn note_by(&self, actor: &str, message: &str) {
        self.write(&[Line::Audit(AuditEntry {
            time_ms: now_ms(),
            actor: actor.into(),
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

impl Recorder {
    /// Closes the record file without a last line, as a guardian's `kill -9` does:
    /// the lock is free and the tree is a dead guardian's.
    #[cfg(test)]
    pub fn abandon(mut self) {
        drop(self.writer.take());
    }
}

impl Drop for Recorder {
    /// Early returns (CMD could not be started) still close the record.
    fn drop(&mut self) {
        self.finish(None);
    }
}
