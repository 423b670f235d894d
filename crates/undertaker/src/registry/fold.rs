//! The fold: record files of trees whose guardian finished or died go into the
//! database, and only then away (docs/REGISTRY.md, "The fold").
//!
//! A command folds a file only while holding its lock, so two commands never fold the
//! same file at once, and a live guardian's file (its lock held) is only read. The
//! tree row and the audit entries go in one transaction; the file is removed after
//! the commit. A command killed before the commit leaves the file for the next one;
//! one killed after the commit leaves a file whose second fold changes nothing: the
//! row is replaced by the same row and every entry carries its line number, which the
//! database keeps unique per tree.

use super::lock::{FileLock, Probe};
use super::record_file::{self, ReadRecord};
use super::{insert_audit_row, insert_tree_row, retry, Registry, RegistryError, StateDir};

/// Test-only hooks: milliseconds to pause inside the fold's transaction (before the
/// commit) and after the commit (before the file is removed), so tests can kill a
/// folding command at either point.
pub const TEST_PAUSE_IN_FOLD_ENV: &str = "UNDERTAKER_TEST_PAUSE_IN_FOLD";
pub const TEST_PAUSE_AFTER_FOLD_ENV: &str = "UNDERTAKER_TEST_PAUSE_AFTER_FOLD";

fn pause_for_tests(var: &str) {
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

impl Registry {
    /// Folds every record file whose lock is free into the database and removes it;
    /// returns the records of live trees (lock held), read as they are now. A file of
    /// another boot is removed unfolded: its processes are gone, and the database
    /// keeps only this boot's trees.
    #[cfg(test)]
    pub fn fold(&self, dir: &StateDir, boot_id: &str) -> Vec<ReadRecord> {
        self.fold_at_most(dir, boot_id, usize::MAX)
    }

    /// [`Registry::fold`] of the first `limit` record files of the directory only (a
    /// self-healing round's share: bounded work, however many runs finished).
    pub fn fold_at_most(&self, dir: &StateDir, boot_id: &str, limit: usize) -> Vec<ReadRecord> {
        let mut live = Vec::new();
        for (_, path) in record_file::list_at_most(dir, limit) {
            match FileLock::probe(&path) {
                Ok(Probe::Held(file)) => live.extend(record_file::read_open(file, &path)),
                Ok(Probe::Replaced) => live.extend(record_file::read(&path)),
                Ok(Probe::Free(lock)) => {
                    if let Err(e) = self.fold_locked(lock, boot_id) {
                        tracing::warn!("folding {}: {e}", path.display());
                    }
                }
                // Gone meanwhile: another command folded it.
                Err(_) => {}
            }
        }
        live.sort_by(|a, b| (a.tree.created_ms, &a.tree.id).cmp(&(b.tree.created_ms, &b.tree.id)));
        live
    }

    /// Folds the record file of tree `id` if its lock is free. True when the file is
    /// gone afterwards (folded now or before).
    pub fn fold_one(&self, dir: &StateDir, id: &str, boot_id: &str) -> bool {
        match FileLock::try_acquire(&record_file::path_of(dir, id)) {
            Ok(None) => false,
            Ok(Some(lock)) => self.fold_locked(lock, boot_id).is_ok(),
            Err(_) => true,
        }
    }

    fn fold_locked(&self, mut lock: FileLock, boot_id: &str) -> Result<(), RegistryError> {
        let bytes = lock.read_all().map_err(|e| RegistryError::Io {
            path: lock.path().to_path_buf(),
            msg: e.to_string(),
        })?;
        // A file with no readable record says nothing the markers do not: keep it for
        // a human rather than guess. One whose record is of another tree than its name
        // says (a planted hard link or copy) is not a record at all: its name goes.
        let Some(read) = record_file::parse_at(&bytes, lock.path()) else {
            if record_file::parse(&bytes).is_some() {
                lock.remove();
            }
            return Ok(());
        };
        if read.tree.boot_id == boot_id {
            self.store(&read)?;
            pause_for_tests(TEST_PAUSE_AFTER_FOLD_ENV);
        }
        lock.remove();
        Ok(())
    }

    /// The tree row and its entries, in one transaction.
    fn store(&self, read: &ReadRecord) -> Result<(), RegistryError> {
        retry(|| {
            let tx = self.conn.unchecked_transaction()?;
            insert_tree_row(&tx, "INSERT OR REPLACE", &read.tree)?;
            for (seq, entry) in &read.audit {
                insert_audit_row(&tx, entry, Some(*seq))?;
            }
            pause_for_tests(TEST_PAUSE_IN_FOLD_ENV);
            tx.commit()
        })
        .map_err(|e| self.err(e))
    }
}
