//! A live tree's record file, `trees/<id>.tree`: what its guardian writes instead of
//! opening the database (docs/REGISTRY.md, "Record files").
//!
//! The first line is the tree's record, written under a temporary name, locked and
//! renamed into place in one step, so nobody ever sees the file unlocked or without
//! its record. The open file description holds the liveness lock (see
//! [`super::lock`]) for as long as the guardian lives. Every later fact is one JSON
//! line appended with `O_APPEND`: where the cgroup is, who the root is, that teardown
//! started, the audit entries (one `write` per batch), and last that the tree is
//! finished. The commands read these files for live trees and fold finished or
//! abandoned ones into the database (see [`super::Registry::fold`]).

use super::lock::FileLock;
use super::{now_ms, AuditEntry, RootRecord, StartRecord, StateDir, StoredState, TreeRecord};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// One line of a record file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// The first line: the tree as recorded before anything was started.
    Tree(TreeRecord),
    /// Who started the tree and with what, written right after the first line
    /// (before CMD starts); older readers skip it.
    Start(StartRecord),
    /// Where the cgroup tier put the tree.
    Cgroup { path: String, id: u64 },
    /// CMD's identity, read right after it was spawned.
    Root(RootRecord),
    /// Teardown started.
    Reaping { time_ms: i64 },
    /// A signal sent, a refusal, or a note.
    Audit(AuditEntry),
    /// The last line: the tree is gone (or left as stuck) and its guardian is done;
    /// or, `released`, a supervisor stopped guarding it and its processes are the
    /// host's again.
    Finished {
        time_ms: i64,
        exit_status: Option<i32>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        released: bool,
    },
}

impl Line {
    fn render(&self, out: &mut Vec<u8>) {
        // Serializing these plain structs cannot fail; a line that did would be lost,
        // never half-written.
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }
}

/// Where the record file of tree `id` lives.
pub fn path_of(dir: &StateDir, id: &str) -> PathBuf {
    dir.trees_dir().join(format!("{id}.tree"))
}

/// The tree id a record file's name gives, if it is one.
pub fn id_of(file_name: &str) -> Option<&str> {
    file_name.strip_suffix(".tree")
}

/// The writer of one tree's record file. A process that holds many trees (e.g. a
/// supervisor) keeps one writer per tree; each holds its tree's liveness lock.
#[derive(Debug)]
pub struct RecordWriter {
    lock: FileLock,
}

impl RecordWriter {
    /// Creates the record file of `tree`, locked, in one step (temporary name, lock,
    /// first line, rename).
    pub fn create(dir: &StateDir, tree: &TreeRecord) -> io::Result<Self> {
        let mut first = Vec::with_capacity(512);
        Line::Tree(tree.clone()).render(&mut first);
        let lock = FileLock::create_held_with(&path_of(dir, &tree.id), &first)?;
        Ok(Self { lock })
    }

    /// Takes over the record file of a tree whose writer died (its lock is free).
    /// `Ok(None)`: the writer is alive, or the file is gone (already folded).
    pub fn adopt(dir: &StateDir, id: &str) -> io::Result<Option<Self>> {
        match FileLock::try_acquire_appending(&path_of(dir, id)) {
            Ok(lock) => Ok(lock.map(|lock| Self { lock })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Appends `lines` with one `write` (`O_APPEND`: whole lines, never interleaved).
    pub fn append(&self, lines: &[Line]) -> io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(256 * lines.len());
        for line in lines {
            line.render(&mut buf);
        }
        self.lock.append(&buf)
    }

    /// Writes the last line and releases the lock. The file stays for the next
    /// command to fold into the database.
    pub fn finish(self, exit_status: Option<i32>) -> io::Result<()> {
        self.append(&[Line::Finished {
            time_ms: now_ms(),
            exit_status,
            released: false,
        }])
    }

    /// The same last line for a tree released alive: nothing may ever sweep it.
    pub fn release(self) -> io::Result<()> {
        self.append(&[Line::Finished {
            time_ms: now_ms(),
            exit_status: None,
            released: true,
        }])
    }
}

/// A record file as read back: the tree with every later fact applied, and its audit
/// entries with their line numbers (which make folding them idempotent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    pub tree: TreeRecord,
    /// `(line number, entry)`, oldest first.
    pub audit: Vec<(u64, AuditEntry)>,
    pub finished: bool,
}

/// Parses a record file's bytes. `None` without a readable first line. A last line
/// with no newline is a write cut short (a full disk) and is ignored, as is any line
/// that does not parse.
pub fn parse(bytes: &[u8]) -> Option<ReadRecord> {
    let mut lines = bytes.split_inclusive(|&b| b == b'\n');
    let first = lines.next().filter(|l| l.ends_with(b"\n"))?;
    let Ok(Line::Tree(tree)) = serde_json::from_slice::<Line>(first) else {
        return None;
    };
    let mut read = ReadRecord {
        tree,
        audit: Vec::new(),
        finished: false,
    };
    for (n, line) in lines.enumerate() {
        if !line.ends_with(b"\n") {
            break;
        }
        let Ok(line) = serde_json::from_slice::<Line>(line) else {
            continue;
        };
        let t = &mut read.tree;
        match line {
            Line::Tree(_) => {}
            Line::Start(start) => t.start = Some(start),
            Line::Cgroup { path, id } => {
                t.cgroup_path = Some(path);
                t.cgroup_id = Some(id);
            }
            Line::Root(root) => t.root = Some(root),
            Line::Reaping { time_ms } => {
                if t.state == StoredState::Running {
                    t.state = StoredState::Reaping;
                }
                t.updated_ms = time_ms;
            }
            Line::Audit(mut entry) => {
                entry.tree = Some(t.id.clone());
                read.audit.push((n as u64 + 1, entry));
            }
            Line::Finished {
                time_ms,
                exit_status,
                released,
            } => {
                t.state = match released {
                    true => StoredState::Released,
                    false => StoredState::Finished,
                };
                t.updated_ms = time_ms;
                t.finished_ms = Some(time_ms);
                t.exit_status = exit_status.or(t.exit_status);
                read.finished = true;
            }
        }
    }
    Some(read)
}

/// Parses the bytes of the record file at `path`: `None` also when the record is of
/// another tree than the file's name says (a hard link or a copy planted under another
/// name: one tree is listed once, under its own name).
pub fn parse_at(bytes: &[u8], path: &Path) -> Option<ReadRecord> {
    let read = parse(bytes)?;
    let named = path.file_name()?.to_str().and_then(id_of)?;
    (named == read.tree.id).then_some(read)
}

/// Reads and parses the record file at `path` (see [`parse_at`]). Only a regular file
/// is read, opened without following a symlink and without blocking (a FIFO planted
/// in `trees/` would block the open until someone writes to it).
pub fn read(path: &Path) -> Option<ReadRecord> {
    read_open(super::lock::open_for_reading(path).ok()?, path)
}

/// Reads and parses the record file `file`, opened at `path` (see [`parse_at`]) and at
/// offset 0.
pub fn read_open(mut file: std::fs::File, path: &Path) -> Option<ReadRecord> {
    use std::io::Read;
    // Without std's size probe (a stat and a seek per file), and one read for most:
    // the file is a regular one (the open checked), so a short read is its end.
    let mut bytes = vec![0; 4096];
    let mut len = 0;
    loop {
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        if len < bytes.len() {
            break;
        }
        bytes.resize(bytes.len() * 2, 0);
    }
    bytes.truncate(len);
    parse_at(&bytes, path)
}

/// The record files in the state directory, as (tree id, path).
pub fn list(dir: &StateDir) -> Vec<(String, PathBuf)> {
    list_at_most(dir, usize::MAX)
}

/// The first `limit` record files of the directory (in directory order), read no
/// further than that.
pub fn list_at_most(dir: &StateDir, limit: usize) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir.trees_dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let id = id_of(name.to_str()?)?.to_owned();
            Some((id, e.path()))
        })
        .take(limit)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{GuardianRecord, OwnerKind, OwnerRecord, RecordedTier};

    fn tree() -> TreeRecord {
        TreeRecord {
            id: "ab".into(),
            boot_id: "b".into(),
            label: Some("x\ny".into()),
            tier: RecordedTier::Cgroup,
            state: StoredState::Running,
            guardian: GuardianRecord {
                pid: 5,
                starttime: 6,
                pgid: 5,
                pidfs_inode: None,
                supervisor: false,
            },
            root: None,
            owner: OwnerRecord {
                kind: OwnerKind::Parent,
                pid: Some(1),
                starttime: Some(2),
            },
            cgroup_path: None,
            cgroup_id: None,
            created_ms: 10,
            updated_ms: 10,
            finished_ms: None,
            exit_status: None,
            start: None,
        }
    }

    fn render(lines: &[Line]) -> Vec<u8> {
        let mut out = Vec::new();
        for l in lines {
            l.render(&mut out);
        }
        out
    }

    #[test]
    fn lines_fold_into_the_tree_and_numbered_audit() {
        let audit = AuditEntry {
            actor: "guardian".into(),
            event: "signal".into(),
            pid: Some(9),
            ..Default::default()
        };
        let bytes = render(&[
            Line::Tree(tree()),
            Line::Cgroup {
                path: "/c".into(),
                id: 3,
            },
            Line::Audit(audit.clone()),
            Line::Reaping { time_ms: 11 },
            Line::Audit(audit.clone()),
            Line::Finished {
                time_ms: 12,
                exit_status: Some(0),
                released: false,
            },
        ]);
        let read = parse(&bytes).unwrap();
        assert!(read.finished);
        assert_eq!(read.tree.state, StoredState::Finished);
        assert_eq!(read.tree.cgroup_path.as_deref(), Some("/c"));
        assert_eq!(read.tree.exit_status, Some(0));
        assert_eq!(read.tree.label.as_deref(), Some("x\ny"));
        let seqs: Vec<u64> = read.audit.iter().map(|(n, _)| *n).collect();
        assert_eq!(seqs, [2, 4]);
        assert_eq!(read.audit[0].1.tree.as_deref(), Some("ab"));
    }

    // Linux: the uid comes from rustix, which only Linux builds link.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_torn_line_is_skipped_and_the_finished_mark_after_it_counts() {
        let dir = std::env::temp_dir().join(format!("ut-tornrec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = StateDir::prepare(&dir, rustix::process::getuid().as_raw()).unwrap();
        let writer = RecordWriter::create(&state, &tree()).unwrap();
        // An audit batch cut short by a full disk, then space returns.
        writer
            .lock
            .append(br#"{"audit":{"actor":"guardian","ev"#)
            .unwrap();
        writer.finish(Some(3)).unwrap();
        let read = read(&path_of(&state, "ab")).unwrap();
        assert!(
            read.finished,
            "the finished mark was glued onto the torn line"
        );
        assert_eq!(read.tree.exit_status, Some(3));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_cut_last_line_is_ignored_and_a_missing_record_is_no_record() {
        let mut bytes = render(&[Line::Tree(tree()), Line::Reaping { time_ms: 11 }]);
        let whole = bytes.len();
        bytes.extend_from_slice(br#"{"finished":{"time_ms":1"#);
        let read = parse(&bytes).unwrap();
        assert!(!read.finished);
        assert_eq!(read.tree.state, StoredState::Reaping);
        assert!(parse(&bytes[..10]).is_none());
        assert!(parse(b"").is_none());
        assert!(parse(&bytes[..whole]).is_some());
    }
}
