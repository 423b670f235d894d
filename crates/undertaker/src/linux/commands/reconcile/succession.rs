//! A restarted supervisor takes over the trees of its dead predecessor (docs/SUPERVISE.md,
//! "Supervisor restarts").
//!
//! Hermes Agent restarts its death supervisor when it finds it dead and replays every
//! group it still wants reaped. The trees the dead supervisor recorded are then neither
//! orphans to heal away (the host still uses them) nor lost: the next supervisor of the
//! same owner takes them over, proven by what its predecessor recorded.
//!
//! What is recorded: every process `register` or `adopt` took under guard gets one
//! audit line (event `guarded`: pid, start time, proof, and what took it), written to
//! the tree's record with the rest of its audit and folded into the database with it.
//! Those lines are the tree's snapshot: a process alive with a recorded pid and start
//! time is the recorded process, and one of them still in group N proves group N
//! ([`crate::snapshot`]).
//!
//! Who takes over: a supervisor whose owner is the recorded owner (pid and start time),
//! of trees that are neither finished nor released, whose guardian is dead, and that
//! carry a snapshot. A tree the host released (`release`, `unregister`) keeps its
//! `guarded` lines, but its record is closed: nothing of it is ever taken back.
//! Until one does, self-healing and `sweep` leave such trees alone while their owner
//! lives ([`awaits_successor`]); once the owner is gone they are finished as before.

use crate::linux::commands::reconcile::{self, Context};
use crate::registry::{now_ms, AuditEntry, OwnerRecord, TreeRecord};
use crate::snapshot::SnapshotEntry;
use std::time::{Duration, Instant};

use crate::linux::commands::guarded::{snapshot_of, TakenBy, GUARDED};

/// Same recorded owner: both pid and start time known and equal.
pub fn same_owner(a: &OwnerRecord, b: &OwnerRecord) -> bool {
    a.pid.is_some() && a.starttime.is_some() && a.pid == b.pid && a.starttime == b.starttime
}

/// A tree the next supervisor of `owner` takes over.
pub struct Predecessor {
    pub record: TreeRecord,
    pub taken: TakenBy,
    pub snapshot: Vec<SnapshotEntry>,
}

/// The open (neither finished nor released) trees of dead guardians of `owner` that
/// carry a snapshot, read from the registry (their record files folded first).
pub fn predecessors(ctx: &Context, owner: &OwnerRecord) -> Vec<Predecessor> {
    let boot_id = &ctx.signaller.me().boot_id;
    let Ok(trees) = ctx.trees() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for rec in trees {
        if rec.state.is_closed() || &rec.boot_id != boot_id || !same_owner(&rec.owner, owner) {
            continue;
        }
        if !matches!(
            guardian_state_past_readers(ctx, &rec),
            reconcile::GuardianState::Dead(_)
        ) {
            continue;
        }
        // Its guardian died after this command opened: fold its record now.
        ctx.registry.fold_one(&ctx.dir, &rec.id, boot_id);
        let Ok(entries) = ctx.registry.audit(Some(&rec.id)) else {
            continue;
        };
        // As folded: the record file may say it was released after `trees()` was read.
        let record = ctx.registry.tree(&rec.id).ok().flatten().unwrap_or(rec);
        if record.state.is_closed() {
            continue;
        }
        if let Some((taken, snapshot)) = snapshot_of(&entries) {
            found.push(Predecessor {
                record,
                taken,
                snapshot,
            });
        }
    }
    found
}

/// How long a takeover waits for another command to let go of a dead guardian's record.
const READER_PATIENCE: Duration = Duration::from_secs(2);

/// The guardian's state, past a reader that holds its record's lock. A busy lock
/// means a live guardian, except while another command (`ps`, `sweep`, self-healing)
/// holds it to fold a dead guardian's record, which takes milliseconds: when the
/// recorded guardian is provably gone, the lock is asked again until it is free (or
/// the file folded away). Without this a `ps` at the wrong moment made the successor
/// skip that tree for good, and its processes went unguarded while the host lived.
fn guardian_state_past_readers(ctx: &Context, rec: &TreeRecord) -> reconcile::GuardianState {
    let deadline = Instant::now() + READER_PATIENCE;
    loop {
        let state = reconcile::guardian_state(ctx, &rec.id, Some(rec));
        if !matches!(state, reconcile::GuardianState::Alive)
            || Instant::now() >= deadline
            || reconcile::recorded_guardian_alive(ctx.procfs(), rec)
        {
            return state;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Marks a predecessor's tree finished (its successor carries it on as `successor`).
pub fn hand_over(ctx: &Context, old: &str, successor: Option<&str>) {
    let note = AuditEntry {
        time_ms: now_ms(),
        tree: Some(old.into()),
        actor: "supervise".into(),
        event: "note".into(),
        pid: Some(ctx.signaller.me().pid),
        message: Some(match successor {
            Some(new) => format!("taken over by the owner's next supervisor as tree {new}"),
            None => "taken over by the owner's next supervisor: nothing of it is left".into(),
        }),
        ..Default::default()
    };
    if let Err(e) = ctx.registry.append_audit(&note) {
        tracing::warn!("takeover of {old} not logged: {e}");
    }
    if let Err(e) = ctx.registry.set_finished(old, None) {
        tracing::warn!("takeover of {old} not recorded: {e}");
    }
}

/// For self-healing and `sweep`: a dead guardian's registered or adopted tree (it
/// carries a snapshot) whose recorded owner lives is its owner's next supervisor's to
/// take over, not an orphan (docs/SUPERVISE.md, "Supervisor restarts"). A spawned
/// tree is not held back: its root died with the supervisor (PDEATHSIG), so it is
/// finished as `run` finishes a tree whose command ended, unless a successor already
/// took it over.
pub fn awaits_successor(ctx: &Context, rec: &TreeRecord) -> bool {
    let spawn = TakenBy::Spawn.message();
    !rec.state.is_closed()
        && reconcile::owner_alive(ctx.signaller.procfs(), &rec.owner) == Some(true)
        && ctx.registry.audit(Some(&rec.id)).is_ok_and(|entries| {
            entries
                .iter()
                .any(|e| e.event == GUARDED && e.message.as_deref() != Some(spawn.as_str()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::commands::guarded::spawn_entry;
    use crate::registry::OwnerKind;

    fn guarded(pid: i32, start: u64, message: &str) -> AuditEntry {
        AuditEntry {
            event: GUARDED.into(),
            pid: Some(pid),
            starttime: Some(start),
            message: Some(message.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_snapshot_is_read_back_from_guarded_lines_only() {
        let signal = AuditEntry {
            event: "signal".into(),
            pid: Some(9),
            starttime: Some(9),
            ..Default::default()
        };
        let entries = vec![
            guarded(200, 10, "group 200"),
            signal,
            guarded(201, 11, "group 200"),
            guarded(200, 10, "group 200"),
        ];
        let (taken, snapshot) = snapshot_of(&entries).unwrap();
        assert_eq!(taken, TakenBy::Group(200));
        assert_eq!(
            snapshot,
            [
                SnapshotEntry {
                    pid: 200,
                    start_time: 10
                },
                SnapshotEntry {
                    pid: 201,
                    start_time: 11
                }
            ]
        );
        assert_eq!(
            snapshot_of(&[guarded(5, 1, "process")]).map(|s| s.0),
            Some(TakenBy::Process)
        );
        assert!(snapshot_of(&[]).is_none());
        // A spawn's line names no process: the tree is taken over by its marker.
        assert_eq!(
            snapshot_of(&[spawn_entry()]),
            Some((TakenBy::Spawn, vec![]))
        );
        assert!(snapshot_of(&[guarded(5, 1, "group 1")]).is_none());
        assert!(snapshot_of(&[guarded(5, 1, "nonsense")]).is_none());
    }

    #[test]
    fn the_same_owner_needs_pid_and_start_time() {
        let owner = |pid, starttime| OwnerRecord {
            kind: OwnerKind::Parent,
            pid,
            starttime,
        };
        assert!(same_owner(
            &owner(Some(5), Some(7)),
            &owner(Some(5), Some(7))
        ));
        assert!(!same_owner(
            &owner(Some(5), Some(7)),
            &owner(Some(5), Some(8))
        ));
        assert!(!same_owner(&owner(Some(5), None), &owner(Some(5), None)));
        assert!(!same_owner(&owner(None, Some(7)), &owner(None, Some(7))));
    }
}
