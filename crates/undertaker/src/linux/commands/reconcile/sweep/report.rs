//! What a sweep reports of a tree (its targets, or why it left the tree alone) and
//! the row it finishes.

use super::super::marker::marker_scan;
use super::super::{owner_alive, Context};
use crate::ladder::Refusal;
use crate::linux::commands::tree::{Torn, Tree};
use crate::linux::proof::signal::Signaller;
use crate::linux::proof::teardown::Outcome;
use crate::registry::record_file::LockInfo;
use crate::registry::{
    now_ms, GuardianRecord, OwnerKind, OwnerRecord, RecordedTier, StoredState, TreeRecord,
};
use crate::report::{SweepAction, SweepTarget, TargetOutcome, TreeSweep};
use std::collections::BTreeMap;

/// How many live processes carry the tree's marker, from the caller's scan if it
/// made one.
fn marked_count(
    ctx: &Context,
    id: &str,
    scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
) -> usize {
    let count = |m: &BTreeMap<String, Vec<(i32, u64)>>| m.get(id).map_or(0, Vec::len);
    match scanned {
        Some(m) => count(m),
        None => count(&marker_scan(ctx.procfs(), ctx.signaller.me().uid)),
    }
}

/// A dead guardian's tree whose start is unknown: without it, no marked process can
/// be proven to have started after the tree, so nothing is signalled.
pub(super) fn unprovable(
    ctx: &Context,
    id: &str,
    label: Option<String>,
    scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
) -> TreeSweep {
    TreeSweep {
        id: id.into(),
        label,
        action: SweepAction::Refused,
        reason: "no record of when the guardian started: membership cannot be proven".into(),
        targets: vec![],
        left_alive: marked_count(ctx, id, scanned),
    }
}

/// A tree whose guardian is alive is its guardian's; it is reported when its guardian
/// is stopped (nothing tears it down until someone continues the guardian, and its
/// sentinel may be gone too) or its owner is gone (the guardian tears down itself).
pub(super) fn left_alone_if_owner_gone(
    ctx: &Context,
    id: &str,
    rec: Option<&TreeRecord>,
    label: Option<String>,
    scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
) -> Option<TreeSweep> {
    let rec = rec?;
    let guardian = ctx
        .procfs()
        .stat(rec.guardian.pid)
        .ok()
        .filter(|s| s.starttime == rec.guardian.starttime);
    if guardian.is_some_and(|s| matches!(s.state, 'T' | 't')) {
        let left_alive = marked_count(ctx, id, scanned);
        return Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::LeftAlone,
            reason: format!(
                "the guardian (pid {}) is stopped and holds the tree: nothing tears it down \
                 until it is continued (`undertaker kill {id}` continues it and has it tear down)",
                rec.guardian.pid
            ),
            targets: vec![],
            left_alive,
        });
    }
    let owner_dead = owner_alive(ctx.procfs(), &rec.owner) == Some(false);
    owner_dead.then(|| TreeSweep {
        id: id.into(),
        label,
        action: SweepAction::LeftAlone,
        reason: "owner is gone but the guardian is alive and tears the tree down itself".into(),
        targets: vec![],
        left_alive: 0,
    })
}

/// Marks a swept tree finished; a tree known only from its lock file gets a row.
pub(super) fn finish_record(
    ctx: &Context,
    id: &str,
    rec: Option<&TreeRecord>,
    info: Option<&LockInfo>,
) {
    let result = match (rec, info) {
        (Some(_), _) => ctx.registry.set_finished(id, None),
        (None, Some(info)) => {
            let now = now_ms();
            ctx.registry.insert_tree(&TreeRecord {
                id: id.into(),
                boot_id: info.boot_id.clone(),
                label: None,
                tier: RecordedTier::Unknown,
                state: StoredState::Finished,
                guardian: GuardianRecord {
                    pid: info.guardian_pid,
                    starttime: info.guardian_starttime,
                    pgid: 0,
                    pidfs_inode: None,
                    supervisor: false,
                },
                root: None,
                owner: OwnerRecord {
                    kind: OwnerKind::Unknown,
                    pid: None,
                    starttime: None,
                },
                cgroup_path: None,
                cgroup_id: None,
                created_ms: now,
                updated_ms: now,
                finished_ms: Some(now),
                exit_status: None,
                start: None,
            })
        }
        (None, None) => Ok(()),
    };
    if let Err(e) = result {
        tracing::warn!("recording end of {id}: {e}");
    }
}

/// What a dry run of a tree reports: each proven member as "would_signal", then each
/// refusal, each pid once (a process refused by two rules, its cgroup's and the
/// marker's, is one process); and how many it would signal.
pub(super) fn dry_run_of(tree: &mut Tree, signaller: &Signaller) -> (Vec<SweepTarget>, usize) {
    let members = tree.members(signaller, &mut None);
    let mut targets: Vec<SweepTarget> = (members.proven.iter())
        .map(|p| SweepTarget {
            pid: p.pid(),
            starttime: p.identity.starttime,
            outcome: TargetOutcome::WouldSignal,
            proof: Some(p.proof.label().into()),
            refusal_code: None,
            refusal: None,
        })
        .collect();
    for (pid, r) in &members.refused {
        if !targets.iter().any(|t| t.pid == *pid) {
            targets.push(refused_target(*pid, r));
        }
    }
    (targets, members.proven.len())
}

pub(in super::super) fn refused_target(pid: i32, r: &Refusal) -> SweepTarget {
    SweepTarget {
        pid,
        starttime: 0,
        outcome: TargetOutcome::Refused,
        proof: None,
        refusal_code: Some(r.code().into()),
        refusal: Some(r.to_string()),
    }
}

/// The report's targets as a sweep reports them: a member that exited before SIGKILL
/// was needed is `terminated` when our SIGTERM reached it, `gone` when nothing did.
pub(super) fn targets_of(torn: &Torn) -> Vec<SweepTarget> {
    (torn.report)
        .targets
        .iter()
        .map(|t| match &t.refusal {
            Some(r) => refused_target(t.pid, r),
            None => SweepTarget {
                pid: t.pid,
                starttime: t.starttime,
                outcome: match t.outcome {
                    Outcome::Gone if torn.reached.contains(&(t.pid, t.starttime)) => {
                        TargetOutcome::Terminated
                    }
                    Outcome::Gone => TargetOutcome::Gone,
                    Outcome::Killed => TargetOutcome::Killed,
                    Outcome::Stuck => TargetOutcome::Stuck,
                    Outcome::Refused => TargetOutcome::Refused,
                },
                proof: t.proof.as_ref().map(|p| p.label().into()),
                refusal_code: None,
                refusal: None,
            },
        })
        .collect()
}
