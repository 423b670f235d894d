//! The durable registry of guarded trees and the audit log (docs/DESIGN.md §2, promise 3).
//!
//! One SQLite database per state directory, `registry.db`, opened in WAL mode by every
//! guardian and every `sweep`/`ps`/`kill`/`log`. See docs/REGISTRY.md for the schema,
//! the concurrency rules and why writes are not fsynced.

mod fold;
pub mod lock;
pub mod record_file;
pub mod state_dir;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
}

impl StoredState {
    pub fn as_str(self) -> &'static str {
        match self {
            StoredState::Running => "running",
            StoredState::Reaping => "reaping",
            StoredState::Finished => "finished",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "running" => StoredState::Running,
            "reaping" => StoredState::Reaping,
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

crate::report::names!(OwnerKind {
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
    /// Not recorded (a tree known only from its lock file).
    Unknown,
}

crate::report::names!(RecordedTier {
    Cgroup => "cgroup",
    Pidns => "pidns",
    Subreaper => "subreaper",
    Unknown => "unknown",
});

impl RecordedTier {
    fn parse(s: &str) -> Self {
        match s {
            "cgroup" => RecordedTier::Cgroup,
            "pidns" => RecordedTier::Pidns,
            "subreaper" => RecordedTier::Subreaper,
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

/// Longest wait for another process's recovery of a corrupt database (moving a file
/// aside and creating a fresh one takes milliseconds, even for a crowd).
const RECOVERY_WAIT: Duration = Duration::from_secs(5);

/// A corrupt database that was moved aside on open.
#[derive(Debug, Clone)]
pub struct Recovered {
    pub file: PathBuf,
    pub moved_to: PathBuf,
    pub why: String,
}

impl std::fmt::Display for Recovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "registry {} is corrupt ({}); moved it to {} and started a fresh registry",
            self.file.display(),
            self.why,
            self.moved_to.display()
        )
    }
}

pub struct Registry {
    conn: Connection,
    path: PathBuf,
    /// Set when this open found the database corrupt and replaced it.
    pub recovered: Option<Recovered>,
}

/// Schema steps; `user_version` = number of steps applied.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE trees (
    id TEXT PRIMARY KEY,
    boot_id TEXT NOT NULL,
    label TEXT,
    tier TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'reaping', 'finished')),
    guardian_pid INTEGER NOT NULL,
    guardian_starttime INTEGER NOT NULL,
    guardian_pgid INTEGER NOT NULL,
    guardian_pidfs_inode INTEGER,
    root_pid INTEGER,
    root_starttime INTEGER,
    root_pgid INTEGER,
    root_sid INTEGER,
    root_uid INTEGER,
    owner_kind TEXT NOT NULL,
    owner_pid INTEGER,
    owner_starttime INTEGER,
    cgroup_path TEXT,
    cgroup_id INTEGER,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    finished_ms INTEGER,
    exit_status INTEGER
);
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_ms INTEGER NOT NULL,
    tree_id TEXT,
    actor TEXT NOT NULL,
    event TEXT NOT NULL,
    target_pid INTEGER,
    target_starttime INTEGER,
    signal TEXT,
    proof TEXT,
    outcome TEXT,
    refusal_code TEXT,
    message TEXT
);
CREATE INDEX audit_by_tree ON audit (tree_id, id);
"#,
    r#"
ALTER TABLE audit ADD COLUMN seq INTEGER;
CREATE UNIQUE INDEX audit_by_tree_seq ON audit (tree_id, seq);
"#,
];

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

fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
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

/// The first problem `PRAGMA quick_check` reports, and how many more: its full
/// output is one line per damaged cell, and an error message is one line.
fn quick_check_summary(check: &str) -> String {
    let mut problems = check
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("***"));
    let first = problems.next().unwrap_or("damaged");
    match problems.count() {
        0 => format!("quick_check: {first}"),
        more => format!("quick_check: {first}, and {more} more problem(s)"),
    }
}

enum OpenFailure {
    Corrupt(String),
    Other(rusqlite::Error),
}

impl Registry {
    /// Opens (creating if needed) the registry in `dir`, purges records of other boots,
    /// and replaces a corrupt database with a fresh one (see [`Registry::recovered`]).
    pub fn open(dir: &StateDir, boot_id: &str) -> Result<Self, RegistryError> {
        Self::open_checked(dir, boot_id, true)
    }

    fn open_checked(dir: &StateDir, boot_id: &str, check: bool) -> Result<Self, RegistryError> {
        let path = dir.db_path();
        let db_err = |e: rusqlite::Error| RegistryError::Db {
            path: path.clone(),
            msg: e.to_string(),
        };
        match Self::try_open(&path, boot_id, check) {
            Ok(reg) => return Ok(reg),
            Err(OpenFailure::Other(e)) => return Err(db_err(e)),
            Err(OpenFailure::Corrupt(_)) => {}
        }
        // Corrupt. Only one process may move the file aside, and it must re-check under
        // the lock: another one may already have replaced it with a fresh database.
        // Bounded: a holder that is stopped or stuck must not hold up a guardian's
        // CMD (which then runs unrecorded) or a sweep (which then sweeps tree cgroups).
        let lock_path = dir.recovery_lock_path();
        let _guard = lock::FileLock::acquire_within(&lock_path, RECOVERY_WAIT)
            .map_err(|e| RegistryError::Io {
                path: lock_path.clone(),
                msg: e.to_string(),
            })?
            .ok_or_else(|| RegistryError::Db {
                path: path.clone(),
                msg: format!(
                    "corrupt, and another process has been recovering it for over {} s ({} is locked)",
                    RECOVERY_WAIT.as_secs(),
                    lock_path.display()
                ),
            })?;
        let why = match Self::try_open(&path, boot_id, true) {
            Ok(reg) => return Ok(reg),
            Err(OpenFailure::Other(e)) => return Err(db_err(e)),
            Err(OpenFailure::Corrupt(why)) => why,
        };
        let moved_to = PathBuf::from(format!("{}.corrupt-{}", path.display(), now_ms()));
        std::fs::rename(&path, &moved_to).map_err(|e| RegistryError::Io {
            path: path.clone(),
            msg: format!("moving corrupt registry aside: {e}"),
        })?;
        for suffix in ["-wal", "-shm"] {
            let side = PathBuf::from(format!("{}{suffix}", path.display()));
            let _ = std::fs::rename(&side, format!("{}{suffix}", moved_to.display()));
        }
        let mut reg = match Self::try_open(&path, boot_id, true) {
            Ok(reg) => reg,
            Err(OpenFailure::Other(e)) => return Err(db_err(e)),
            Err(OpenFailure::Corrupt(why)) => {
                return Err(RegistryError::Db {
                    path: path.clone(),
                    msg: format!("fresh registry is corrupt too: {why}"),
                })
            }
        };
        reg.recovered = Some(Recovered {
            file: path,
            moved_to,
            why,
        });
        Ok(reg)
    }

    fn try_open(path: &Path, boot_id: &str, check: bool) -> Result<Self, OpenFailure> {
        let classify = |e: rusqlite::Error| {
            if is_corrupt(&e) {
                OpenFailure::Corrupt(e.to_string())
            } else {
                OpenFailure::Other(e)
            }
        };
        let conn = Connection::open(path).map_err(classify)?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(classify)?;
        // WAL: readers never block the writer and vice versa. synchronous=OFF: no
        // fsync at all (NORMAL still synced a new WAL's header, its directory, and
        // WAL + database at the closing checkpoint: four fsyncs per guardian). The
        // registry must survive process crashes (a kill -9ed guardian), which WAL gives
        // without fsync; after a power loss every guarded process is gone, records of
        // the previous boot are purged, and a database damaged by the loss is moved
        // aside and replaced (see "Corruption" in docs/REGISTRY.md).
        retry(|| {
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
        })
        .map_err(classify)?;
        conn.pragma_update(None, "synchronous", "OFF")
            .map_err(classify)?;
        if check {
            let check: String = retry(|| conn.query_row("PRAGMA quick_check", [], |r| r.get(0)))
                .map_err(classify)?;
            if check != "ok" {
                return Err(OpenFailure::Corrupt(quick_check_summary(&check)));
            }
        }
        let reg = Registry {
            conn,
            path: path.to_path_buf(),
            recovered: None,
        };
        reg.migrate().map_err(classify)?;
        retry(|| {
            reg.conn
                .execute("DELETE FROM trees WHERE boot_id != ?1", [boot_id])
        })
        .map_err(classify)?;
        Ok(reg)
    }

    fn migrate(&self) -> rusqlite::Result<()> {
        let current: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if current as usize >= MIGRATIONS.len() {
            return Ok(());
        }
        retry(|| {
            // IMMEDIATE: take the write lock first, then re-read the version, so two
            // processes creating a fresh database do not both run a step.
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            let result = (|| {
                let v: i64 = self
                    .conn
                    .query_row("PRAGMA user_version", [], |r| r.get(0))?;
                for (i, step) in MIGRATIONS.iter().enumerate().skip(v.max(0) as usize) {
                    self.conn.execute_batch(step)?;
                    self.conn
                        .pragma_update(None, "user_version", (i + 1) as i64)?;
                }
                Ok(())
            })();
            match result {
                Ok(()) => self.conn.execute_batch("COMMIT"),
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        })
    }

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

    /// For the cgroup tier: where the tree's cgroup is.
    pub fn set_cgroup(&self, id: &str, path: &str, cgroup_id: u64) -> Result<(), RegistryError> {
        self.update(
            "UPDATE trees SET cgroup_path = ?2, cgroup_id = ?3, updated_ms = ?4 WHERE id = ?1",
            params![id, path, cgroup_id as i64, now_ms()],
        )
    }

    pub fn set_reaping(&self, id: &str) -> Result<(), RegistryError> {
        self.update(
            "UPDATE trees SET state = 'reaping', updated_ms = ?2
             WHERE id = ?1 AND state != 'finished'",
            params![id, now_ms()],
        )
    }

    pub fn set_finished(&self, id: &str, exit_status: Option<i32>) -> Result<(), RegistryError> {
        let now = now_ms();
        self.update(
            "UPDATE trees SET state = 'finished', updated_ms = ?2, finished_ms = ?2,
                exit_status = COALESCE(?3, exit_status) WHERE id = ?1",
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
            "SELECT * FROM trees WHERE state != 'finished' ORDER BY created_ms, id"
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

    /// Gives SQLite's page cache back (a guardian idles for hours between writes).
    pub fn release_memory(&self) {
        let _ = self.conn.release_memory();
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

fn audit_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditEntry> {
    Ok(AuditEntry {
        id: r.get(0)?,
        time_ms: r.get(1)?,
        tree: r.get(2)?,
        actor: r.get(3)?,
        event: r.get(4)?,
        pid: r.get(5)?,
        starttime: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
        signal: r.get(7)?,
        proof: r.get(8)?,
        outcome: r.get(9)?,
        refusal_code: r.get(10)?,
        message: r.get(11)?,
    })
}

/// Writes a tree row; `verb` is `INSERT` or `INSERT OR REPLACE` (the fold).
fn insert_tree_row(conn: &Connection, verb: &str, t: &TreeRecord) -> rusqlite::Result<usize> {
    conn.prepare_cached(&format!(
        "{verb} INTO trees (id, boot_id, label, tier, state, guardian_pid,
            guardian_starttime, guardian_pgid, guardian_pidfs_inode, root_pid,
            root_starttime, root_pgid, root_sid, root_uid, owner_kind, owner_pid,
            owner_starttime, cgroup_path, cgroup_id, created_ms, updated_ms,
            finished_ms, exit_status)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
            ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)"
    ))?
    .execute(params![
        t.id,
        t.boot_id,
        t.label,
        t.tier.as_str(),
        t.state.as_str(),
        t.guardian.pid,
        t.guardian.starttime as i64,
        t.guardian.pgid,
        t.guardian.pidfs_inode.map(|v| v as i64),
        t.root.as_ref().map(|r| r.pid),
        t.root.as_ref().map(|r| r.starttime as i64),
        t.root.as_ref().map(|r| r.pgid),
        t.root.as_ref().map(|r| r.sid),
        t.root.as_ref().map(|r| r.uid),
        t.owner.kind.as_str(),
        t.owner.pid,
        t.owner.starttime.map(|v| v as i64),
        t.cgroup_path,
        t.cgroup_id.map(|v| v as i64),
        t.created_ms,
        t.updated_ms,
        t.finished_ms,
        t.exit_status,
    ])
}

/// Writes one audit entry; `seq` (its line in a record file) makes a second fold of
/// the same file a no-op for it.
fn insert_audit_row(
    conn: &Connection,
    e: &AuditEntry,
    seq: Option<u64>,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO audit (time_ms, tree_id, actor, event, target_pid,
            target_starttime, signal, proof, outcome, refusal_code, message, seq)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        if e.time_ms == 0 { now_ms() } else { e.time_ms },
        e.tree,
        e.actor,
        e.event,
        e.pid,
        e.starttime.map(|v| v as i64),
        e.signal,
        e.proof,
        e.outcome,
        e.refusal_code,
        e.message,
        seq.map(|v| v as i64),
    ])
}

fn row_to_tree(r: &rusqlite::Row<'_>) -> rusqlite::Result<TreeRecord> {
    let root_pid: Option<i32> = r.get("root_pid")?;
    let root = match root_pid {
        Some(pid) => Some(RootRecord {
            pid,
            starttime: r.get::<_, Option<i64>>("root_starttime")?.unwrap_or(0) as u64,
            pgid: r.get::<_, Option<i32>>("root_pgid")?.unwrap_or(0),
            sid: r.get::<_, Option<i32>>("root_sid")?.unwrap_or(0),
            uid: r.get::<_, Option<u32>>("root_uid")?.unwrap_or(0),
        }),
        None => None,
    };
    Ok(TreeRecord {
        id: r.get("id")?,
        boot_id: r.get("boot_id")?,
        label: r.get("label")?,
        tier: RecordedTier::parse(&r.get::<_, String>("tier")?),
        state: StoredState::parse(&r.get::<_, String>("state")?),
        guardian: GuardianRecord {
            pid: r.get("guardian_pid")?,
            starttime: r.get::<_, i64>("guardian_starttime")? as u64,
            pgid: r.get("guardian_pgid")?,
            pidfs_inode: r
                .get::<_, Option<i64>>("guardian_pidfs_inode")?
                .map(|v| v as u64),
        },
        root,
        owner: OwnerRecord {
            kind: OwnerKind::parse(&r.get::<_, String>("owner_kind")?),
            pid: r.get("owner_pid")?,
            starttime: r
                .get::<_, Option<i64>>("owner_starttime")?
                .map(|v| v as u64),
        },
        cgroup_path: r.get("cgroup_path")?,
        cgroup_id: r.get::<_, Option<i64>>("cgroup_id")?.map(|v| v as u64),
        created_ms: r.get("created_ms")?,
        updated_ms: r.get("updated_ms")?,
        finished_ms: r.get("finished_ms")?,
        exit_status: r.get("exit_status")?,
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
