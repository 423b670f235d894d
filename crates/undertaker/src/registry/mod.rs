//! The durable registry of guarded trees and the audit log (docs/DESIGN.md §2, promise 3).
//!
//! One SQLite database per state directory, `registry.db`, opened in WAL mode by every
//! guardian and every `sweep`/`ps`/`kill`/`log`. See docs/REGISTRY.md for the schema,
//! the concurrency rules and why writes are not fsynced.

mod fold;
pub mod lock;
mod open;
pub mod record_file;
// The guardians without Linux's host (Windows, macOS); Linux's tree writes its own.
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub mod recorder;
pub(crate) mod refusal_log;
mod rows;
pub mod state_dir;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use open::{open_registry, Recovered};
use rows::{audit_row, insert_audit_row, insert_tree_row, row_to_tree};
pub use state_dir::{Origin, StateDir};

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("no state directory: set --state-dir, $UNDERTAKER_STATE_DIR or $HOME")]
    NoStateDir,
    #[error("refusing state directory {}: {why}", path.display())]
    UnsafeStateDir { path: PathBuf, why: String },
    #[error("{}: {msg}", path.display())]
    Io { path: PathBuf, msg: String },
    #[error("registry {}: {msg}", path.display())]
    Db { path: PathBuf, msg: String },
}

/// Lifecycle state as stored. `orphaned` is never stored: it is derived at read time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoredState {
    Running,
    Reaping,
    Finished,
    /// A supervisor stopped guarding the tree (`release`, `unregister`): its
    /// processes are the host's again, never a candidate for `sweep` or `kill`.
    Released,
}

impl StoredState {
    pub fn as_str(self) -> &'static str {
        match self {
            StoredState::Running => "running",
            StoredState::Reaping => "reaping",
            StoredState::Finished => "finished",
            StoredState::Released => "released",
        }
    }

    /// Finished or released: the record is closed, its guardian is done with it, and
    /// nothing (a successor, `sweep`, self-healing, `kill`) may take it up again.
    pub fn is_closed(self) -> bool {
        matches!(self, StoredState::Finished | StoredState::Released)
    }

    fn parse(s: &str) -> Self {
        match s {
            "running" => StoredState::Running,
            "reaping" => StoredState::Reaping,
            "released" => StoredState::Released,
            _ => StoredState::Finished,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardianRecord {
    pub pid: i32,
    pub starttime: u64,
    pub pgid: i32,
    pub pidfs_inode: Option<u64>,
    /// The guardian is a supervisor holding many trees: `kill` asks it over its
    /// control socket and never signals it (docs/SUPERVISE.md). Absent in records
    /// written before it existed, and in the database (whose rows are for trees whose
    /// guardian is gone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub supervisor: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootRecord {
    pub pid: i32,
    pub starttime: u64,
    pub pgid: i32,
    pub sid: i32,
    pub uid: u32,
}

/// How a tree's owner was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerKind {
    /// undertaker's parent (the default).
    Parent,
    /// `--owner PID`.
    Pid,
    /// `--owner-fd N`.
    Fd,
    /// No owner: the guardian is PID 1 of a namespace.
    None,
    /// Not recorded (a tree known only from its lock file).
    Unknown,
}

crate::names::names!(OwnerKind {
    Parent => "parent",
    Pid => "pid",
    Fd => "fd",
    None => "none",
    Unknown => "unknown",
});

impl OwnerKind {
    fn parse(s: &str) -> Self {
        match s {
            "parent" => OwnerKind::Parent,
            "pid" => OwnerKind::Pid,
            "fd" => OwnerKind::Fd,
            "none" => OwnerKind::None,
            _ => OwnerKind::Unknown,
        }
    }
}

/// The containment a tree got, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordedTier {
    Cgroup,
    Pidns,
    Subreaper,
    /// The portable core's lineage and marker (docs/TIERS.md, "portable").
    Portable,
    /// A Windows Job Object with kill-on-close.
    Job,
    /// Not recorded (a tree known only from its lock file).
    Unknown,
}

crate::names::names!(RecordedTier {
    Cgroup => "cgroup",
    Pidns => "pidns",
    Subreaper => "subreaper",
    Portable => "portable",
    Job => "job",
    Unknown => "unknown",
});

impl RecordedTier {
    fn parse(s: &str) -> Self {
        match s {
            "cgroup" => RecordedTier::Cgroup,
            "pidns" => RecordedTier::Pidns,
            "subreaper" => RecordedTier::Subreaper,
            "portable" => RecordedTier::Portable,
            "job" => RecordedTier::Job,
            _ => RecordedTier::Unknown,
        }
    }
}

impl From<crate::Tier> for RecordedTier {
    fn from(tier: crate::Tier) -> Self {
        match tier {
            crate::Tier::Cgroup => RecordedTier::Cgroup,
            crate::Tier::Pidns => RecordedTier::Pidns,
            crate::Tier::Subreaper => RecordedTier::Subreaper,
            crate::Tier::Portable => RecordedTier::Portable,
            // A request, never a recorded choice.
            crate::Tier::Auto => RecordedTier::Unknown,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    pub kind: OwnerKind,
    pub pid: Option<i32>,
    pub starttime: Option<u64>,
}

/// How the host of a tree was found (docs/GUARANTEES.md, "Which host a tree belongs
/// to").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostEvidence {
    /// The nearest ancestor holding the far end of undertaker's stdin or stdout (the
    /// write end of its stdin pipe, the read end of its stdout pipe, or the process
    /// that made its stdio socket pair): launchers between them only inherit the ends
    /// undertaker has.
    Stdio,
    /// undertaker's parent: stdio are no pipe or socket, or no ancestor holds their
    /// far end (a shell pipeline's other side is a sibling).
    Parent,
}

crate::names::names!(HostEvidence {
    Stdio => "stdio",
    Parent => "parent",
});

/// The process a person knows as the one that started a tree (an agent host, a
/// shell), proven at start as an ancestor with this start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub pid: i32,
    pub starttime: u64,
    /// Its `comm` when undertaker started.
    pub name: String,
    pub found_by: HostEvidence,
}

/// Who started a tree and with what: `ps`'s PID, HOST and COMMAND, and the scope of
/// `run --replace`. Absent from records written before it existed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StartRecord {
    /// The undertaker process the host's launch made (what `$!` names when the host
    /// starts undertaker itself); the guardian is its child.
    pub pid: Option<i32>,
    /// The host's own child on the way to undertaker: undertaker itself, or the first
    /// launcher (`npx`, `uvx`, `sh -c`).
    pub host_child_pid: Option<i32>,
    pub host: Option<HostRecord>,
    /// CMD and its arguments (non-UTF-8 bytes replaced).
    pub command: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeRecord {
    pub id: String,
    pub boot_id: String,
    pub label: Option<String>,
    pub tier: RecordedTier,
    pub state: StoredState,
    pub guardian: GuardianRecord,
    pub root: Option<RootRecord>,
    pub owner: OwnerRecord,
    pub cgroup_path: Option<String>,
    pub cgroup_id: Option<u64>,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub finished_ms: Option<i64>,
    pub exit_status: Option<i32>,
    /// Who started the tree (`None` in records older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<StartRecord>,
}

impl TreeRecord {
    /// A tree as its guardian records it before anything is started: running, no
    /// root yet (the same on every platform).
    pub fn starting(
        id: String,
        boot_id: String,
        label: Option<String>,
        tier: RecordedTier,
        guardian: GuardianRecord,
        owner: OwnerRecord,
    ) -> Self {
        let now = now_ms();
        TreeRecord {
            id,
            boot_id,
            label,
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
            start: None,
        }
    }
}

/// One audit log line: a signal sent, a refusal, or a note.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditEntry {
    pub id: i64,
    pub time_ms: i64,
    pub tree: Option<String>,
    /// `guardian`, `sweep` or `kill`.
    pub actor: String,
    /// `signal`, `refusal` or `note`.
    pub event: String,
    pub pid: Option<i32>,
    pub starttime: Option<u64>,
    pub signal: Option<String>,
    /// How the target was proven a member, e.g. `pidfd+descendant`, `pidfd+marker`.
    pub proof: Option<String>,
    /// `delivered` or `already_gone` for signals.
    pub outcome: Option<String>,
    pub refusal_code: Option<String>,
    pub message: Option<String>,
}

pub struct Registry {
    conn: Connection,
    path: PathBuf,
    /// Set when this open found the database corrupt and replaced it.
    pub recovered: Option<Recovered>,
}

/// How long a writer keeps retrying a busy database before giving up. Far above any
/// real contention: 100 guardians each write a handful of short rows.
const BUSY_BUDGET: Duration = Duration::from_secs(60);

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Runs `f` again while SQLite reports the database busy. busy_timeout already waits
/// inside SQLite, but some paths (WAL recovery, lock upgrades in a read transaction,
/// switching journal mode) return SQLITE_BUSY at once, so writers retry with jitter.
fn retry<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match f() {
            Err(e) if is_busy(&e) && start.elapsed() < BUSY_BUDGET => {
                // Jitter, so processes woken together do not collide again in step.
                let jitter = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos())
                    ^ std::process::id().wrapping_mul(2_654_435_761);
                std::thread::sleep(pause + Duration::from_micros(u64::from(jitter % 5000)));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

impl Registry {
    fn err(&self, e: rusqlite::Error) -> RegistryError {
        RegistryError::Db {
            path: self.path.clone(),
            msg: e.to_string(),
        }
    }

    /// Records a new tree before its command starts (root unknown yet).
    pub fn insert_tree(&self, t: &TreeRecord) -> Result<(), RegistryError> {
        retry(|| insert_tree_row(&self.conn, "INSERT", t))
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    #[cfg(test)]
    pub fn set_root(&self, id: &str, root: &RootRecord) -> Result<(), RegistryError> {
        self.update(
            "UPDATE trees SET root_pid = ?2, root_starttime = ?3, root_pgid = ?4,
                root_sid = ?5, root_uid = ?6, updated_ms = ?7 WHERE id = ?1",
            params![
                id,
                root.pid,
                root.starttime as i64,
                root.pgid,
                root.sid,
                root.uid,
                now_ms()
            ],
        )
    }

    #[cfg(test)]
    pub fn set_reaping(&self, id: &str) -> Result<(), RegistryError> {
        self.update(
            "UPDATE trees SET state = 'reaping', updated_ms = ?2
             WHERE id = ?1 AND state NOT IN ('finished', 'released')",
            params![id, now_ms()],
        )
    }

    /// Marks a tree finished; a released tree stays released (its processes are the
    /// host's, marked or not: a finished tree's marked processes are a sweep's).
    pub fn set_finished(&self, id: &str, exit_status: Option<i32>) -> Result<(), RegistryError> {
        let now = now_ms();
        self.update(
            "UPDATE trees SET state = 'finished', updated_ms = ?2, finished_ms = ?2,
                exit_status = COALESCE(?3, exit_status) WHERE id = ?1 AND state != 'released'",
            params![id, now, exit_status],
        )
    }

    fn update(&self, sql: &str, p: impl rusqlite::Params + Clone) -> Result<(), RegistryError> {
        retry(|| self.conn.execute(sql, p.clone()))
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Trees of this boot, oldest first.
    pub fn trees(&self, include_finished: bool) -> Result<Vec<TreeRecord>, RegistryError> {
        let sql = if include_finished {
            "SELECT * FROM trees ORDER BY created_ms, id"
        } else {
            "SELECT * FROM trees WHERE state NOT IN ('finished', 'released') ORDER BY created_ms, id"
        };
        retry(|| {
            let mut st = self.conn.prepare(sql)?;
            let rows = st.query_map([], row_to_tree)?;
            rows.collect()
        })
        .map_err(|e| self.err(e))
    }

    pub fn tree(&self, id: &str) -> Result<Option<TreeRecord>, RegistryError> {
        retry(|| {
            self.conn
                .query_row("SELECT * FROM trees WHERE id = ?1", [id], row_to_tree)
                .optional()
        })
        .map_err(|e| self.err(e))
    }

    /// Trees whose id starts with `prefix`.
    pub fn trees_by_prefix(&self, prefix: &str) -> Result<Vec<TreeRecord>, RegistryError> {
        let all = self.trees(true)?;
        Ok(all
            .into_iter()
            .filter(|t| t.id.starts_with(prefix))
            .collect())
    }

    pub fn append_audit(&self, e: &AuditEntry) -> Result<(), RegistryError> {
        self.append_audit_batch(std::slice::from_ref(e))
    }

    /// Appends many entries in one transaction: one WAL commit instead of one per
    /// entry (a 1 000-member teardown logs 1 000+ signals).
    pub fn append_audit_batch(&self, entries: &[AuditEntry]) -> Result<(), RegistryError> {
        if entries.is_empty() {
            return Ok(());
        }
        retry(|| {
            let tx = self.conn.unchecked_transaction()?;
            for e in entries {
                insert_audit_row(&tx, e, None)?;
            }
            tx.commit()
        })
        .map_err(|e| self.err(e))
    }

    /// One page of the audit log: the newest `limit` entries (of `tree` when given)
    /// whose id is below `before` when given, oldest first. Reads only that page.
    pub fn audit_page(
        &self,
        tree: Option<&str>,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, RegistryError> {
        let mut page = retry(|| {
            let mut st = self.conn.prepare_cached(
                "SELECT id, time_ms, tree_id, actor, event, target_pid, target_starttime,
                    signal, proof, outcome, refusal_code, message FROM audit
                 WHERE (?1 IS NULL OR tree_id = ?1) AND (?2 IS NULL OR id < ?2)
                 ORDER BY id DESC LIMIT ?3",
            )?;
            let rows = st.query_map(params![tree, before, limit as i64], audit_row)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(|e| self.err(e))?;
        page.reverse();
        Ok(page)
    }

    /// The distinct tree ids in the audit log that start with `prefix`.
    pub fn audit_trees_by_prefix(&self, prefix: &str) -> Result<Vec<String>, RegistryError> {
        retry(|| {
            let mut st = self.conn.prepare_cached(
                "SELECT DISTINCT tree_id FROM audit
                 WHERE tree_id >= ?1 AND tree_id < ?1 || 'g'",
            )?;
            let rows = st.query_map([prefix], |r| r.get::<_, String>(0))?;
            rows.collect()
        })
        .map_err(|e| self.err(e))
    }

    /// The audit log, oldest first; only `tree`'s entries when given.
    pub fn audit(&self, tree: Option<&str>) -> Result<Vec<AuditEntry>, RegistryError> {
        retry(|| {
            let mut st = self.conn.prepare(
                "SELECT id, time_ms, tree_id, actor, event, target_pid, target_starttime,
                    signal, proof, outcome, refusal_code, message FROM audit
                 WHERE ?1 IS NULL OR tree_id = ?1 ORDER BY id",
            )?;
            let rows = st.query_map([tree], audit_row)?;
            rows.collect()
        })
        .map_err(|e| self.err(e))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
