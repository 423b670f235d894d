//! Opening the registry: the schema and its migrations, WAL without fsync, and the
//! recovery of a corrupt database (docs/REGISTRY.md, "Corruption").

use super::{lock, now_ms, retry, Registry, RegistryError, StateDir};
use rusqlite::{Connection, ErrorCode};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    // A state for trees a supervisor released: SQLite changes a CHECK only by
    // rebuilding the table.
    r#"
CREATE TABLE trees_v3 (
    id TEXT PRIMARY KEY,
    boot_id TEXT NOT NULL,
    label TEXT,
    tier TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'reaping', 'finished', 'released')),
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
INSERT INTO trees_v3 SELECT * FROM trees;
DROP TABLE trees;
ALTER TABLE trees_v3 RENAME TO trees;
"#,
    // Who started the tree (`StartRecord`), as JSON: only ever read back whole.
    r#"
ALTER TABLE trees ADD COLUMN start TEXT;
"#,
];

fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    )
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

    /// Another connection to this database, already opened, checked and migrated
    /// through `self`: for a writer beside the one that opened it (a swept tree's
    /// recorder writes its audit lines while the sweep reads on).
    pub(crate) fn reconnect(&self) -> Result<Self, RegistryError> {
        let db_err = |e: rusqlite::Error| RegistryError::Db {
            path: self.path.clone(),
            msg: e.to_string(),
        };
        let conn = Connection::open(&self.path).map_err(db_err)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(db_err)?;
        conn.pragma_update(None, "synchronous", "OFF")
            .map_err(db_err)?;
        Ok(Registry {
            conn,
            path: self.path.clone(),
            recovered: None,
        })
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
}

/// Opens the state directory and registry for `path` (None = the default chain).
/// A corrupt database is replaced and reported on stderr through tracing.
pub fn open_registry(
    path: Option<&Path>,
    uid: u32,
    boot_id: &str,
) -> Result<(StateDir, Registry), (super::Origin, RegistryError)> {
    let (dir, origin) = super::state_dir::resolve_and_prepare(path, uid)?;
    let registry = Registry::open(&dir, boot_id).map_err(|e| (origin, e))?;
    if let Some(rec) = &registry.recovered {
        tracing::error!("{rec}");
    }
    Ok((dir, registry))
}
