//! The SQL rows of trees and audit entries.

use super::{
    now_ms, AuditEntry, GuardianRecord, OwnerKind, OwnerRecord, RecordedTier, RootRecord,
    StoredState, TreeRecord,
};
use rusqlite::{params, Connection};

pub(super) fn audit_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditEntry> {
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
pub(super) fn insert_tree_row(
    conn: &Connection,
    verb: &str,
    t: &TreeRecord,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(&format!(
        "{verb} INTO trees (id, boot_id, label, tier, state, guardian_pid,
            guardian_starttime, guardian_pgid, guardian_pidfs_inode, root_pid,
            root_starttime, root_pgid, root_sid, root_uid, owner_kind, owner_pid,
            owner_starttime, cgroup_path, cgroup_id, created_ms, updated_ms,
            finished_ms, exit_status, start)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
            ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)"
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
        t.start.as_ref().and_then(|s| serde_json::to_string(s).ok()),
    ])
}

/// Writes one audit entry; `seq` (its line in a record file) makes a second fold of
/// the same file a no-op for it.
pub(super) fn insert_audit_row(
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

pub(super) fn row_to_tree(r: &rusqlite::Row<'_>) -> rusqlite::Result<TreeRecord> {
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
            supervisor: false,
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
        // Unreadable JSON is an unknown start, never a failed row.
        start: r
            .get::<_, Option<String>>("start")?
            .and_then(|s| serde_json::from_str(&s).ok()),
    })
}
