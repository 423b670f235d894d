//! The `guarded` lines of a tree's record: one per process `register` or `adopt` took
//! under guard (pid, start time, proof, what took it). They are the snapshot a
//! restarted supervisor's takeover proves from (reconcile/succession.rs); a tree writes
//! them, so they live below both.

use crate::linux::proof::signal::ProvenProcess;
use crate::registry::{now_ms, AuditEntry};
use crate::snapshot::SnapshotEntry;

/// The audit event of a process taken under guard.
pub const GUARDED: &str = "guarded";

/// What took a tree's processes under guard, as its `guarded` lines say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakenBy {
    /// `register N` (or `adopt` with a group snapshot): group N.
    Group(i32),
    /// `adopt` of one process and its descendants.
    Process,
    /// `spawn`: the root was our child; its tree's processes carry the marker.
    Spawn,
}

impl TakenBy {
    pub(crate) fn message(self) -> String {
        match self {
            TakenBy::Group(pgid) => format!("group {pgid}"),
            TakenBy::Process => "process".into(),
            TakenBy::Spawn => "spawn".into(),
        }
    }

    fn parse(message: &str) -> Option<Self> {
        match message {
            "process" => Some(TakenBy::Process),
            "spawn" => Some(TakenBy::Spawn),
            m => m
                .strip_prefix("group ")
                .and_then(|n| n.parse().ok())
                .filter(|&n: &i32| n > 1)
                .map(TakenBy::Group),
        }
    }
}

/// The `guarded` line of one process taken under guard (no tree: the record file
/// names it).
pub fn guarded_entry(member: &ProvenProcess, taken: TakenBy) -> AuditEntry {
    AuditEntry {
        time_ms: now_ms(),
        actor: "guardian".into(),
        event: GUARDED.into(),
        pid: Some(member.pid()),
        starttime: Some(member.identity.starttime),
        proof: Some(member.proof.label().into()),
        message: Some(taken.message()),
        ..Default::default()
    }
}

/// The `guarded` line of a spawned tree, written before its command is started: a
/// supervisor killed in the middle of a `spawn` leaves a tree its successor takes over
/// (the command's processes carry the marker). No pid: the root dies with its
/// supervisor (PDEATHSIG), and the tree's other processes are found by their marker.
pub fn spawn_entry() -> AuditEntry {
    AuditEntry {
        time_ms: now_ms(),
        actor: "guardian".into(),
        event: GUARDED.into(),
        proof: Some("spawn".into()),
        message: Some(TakenBy::Spawn.message()),
        ..Default::default()
    }
}

/// A tree's snapshot, from its audit entries: what took it, and every process taken
/// (oldest first, without repeats). `None` without `guarded` lines.
pub fn snapshot_of(entries: &[AuditEntry]) -> Option<(TakenBy, Vec<SnapshotEntry>)> {
    let mut taken = None;
    let mut snapshot: Vec<SnapshotEntry> = Vec::new();
    for e in entries.iter().filter(|e| e.event == GUARDED) {
        taken = taken.or_else(|| e.message.as_deref().and_then(TakenBy::parse));
        let (Some(pid), Some(start_time)) = (e.pid, e.starttime) else {
            continue;
        };
        let entry = SnapshotEntry { pid, start_time };
        if !snapshot.contains(&entry) {
            snapshot.push(entry);
        }
    }
    Some((taken?, snapshot))
}
