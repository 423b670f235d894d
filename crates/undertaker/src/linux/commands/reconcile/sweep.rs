//! `undertaker sweep`: finishing the trees of guardians that died, with proof.

use super::marker::{marker_scan, MarkerSource};
use super::succession;
use super::{candidates, guardian_state, owner_alive, recorded_cgroup, Context, GuardianState};
use crate::audit::{audit_entry, AuditEvent, Delivery};
use crate::identity::TreeId;
use crate::ladder::Refusal;
use crate::linux::contain::cgroup;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::{Members, Signaller};
use crate::linux::proof::teardown::{Escalation, Outcome, TeardownReport, TreeSource};
use crate::registry::record_file::{self, LockInfo};
use crate::registry::{
    now_ms, AuditEntry, GuardianRecord, OwnerKind, OwnerRecord, RecordedTier, RegistryError,
    StoredState, TreeRecord,
};
use crate::report::{SweepAction, SweepReport, SweepTarget, TargetOutcome, TreeSweep};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// Reconciles every tree: finishes those whose guardian died.
pub fn sweep(ctx: &Context, dry_run: bool, grace: Duration) -> Result<SweepReport, RegistryError> {
    let markers = marker_scan(ctx.procfs(), ctx.signaller.me().uid);
    let candidates = candidates(ctx, Some(&markers))?;
    let mut trees = Vec::new();
    let sweep = Sweep {
        ctx,
        dry_run,
        grace,
        actor: "sweep",
    };
    for (id, rec) in &candidates.records {
        if let Some(t) = sweep.tree(id, rec.as_ref(), Some(&markers))? {
            trees.push(t);
        }
    }
    for found in candidates.orphan_cgroups(ctx) {
        let id = found.tree.to_string();
        let t = sweep.cgroup(&id, &found.path);
        match trees.iter_mut().find(|t| t.id == id) {
            Some(existing) => {
                existing.targets.extend(t.targets);
                existing.left_alive += t.left_alive;
            }
            None => trees.push(TreeSweep {
                reason: found_reason(&found, "found by its cgroup"),
                ..t
            }),
        }
    }
    Ok(SweepReport::of(dry_run, trees))
}

/// One reconciling pass over dead guardians' trees (`sweep`, `kill` of a dead
/// guardian's tree, self-healing): the command's context, whether anything is
/// signalled, the grace between SIGTERM and SIGKILL, and who acts in the audit log.
pub(crate) struct Sweep<'a> {
    pub ctx: &'a Context,
    pub dry_run: bool,
    pub grace: Duration,
    pub actor: &'a str,
}

impl Sweep<'_> {
    /// Sweeps one tree if its guardian is dead. `None`: nothing to report (a tree of
    /// another state directory, or a healthy running one). `scanned`: a marker scan
    /// the caller just made, used once instead of another.
    pub(crate) fn tree(
        &self,
        id: &str,
        rec: Option<&TreeRecord>,
        scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
    ) -> Result<Option<TreeSweep>, RegistryError> {
        sweep_tree(self, id, rec, scanned)
    }

    /// Tears down (or, dry, lists) everything in a dead guardian's tree cgroup, then
    /// removes the directory. `left_alive` counts processes still in the cgroup.
    pub(crate) fn cgroup(&self, id: &str, path: &Path) -> TreeSweep {
        let registry = &self.ctx.registry;
        let actor = self.actor;
        let mut audit = |event: &AuditEvent| {
            if let Err(e) = registry.append_audit(&audit_entry(id, actor, event)) {
                tracing::warn!("audit log: {e}");
            }
        };
        sweep_cgroup_with(
            &self.ctx.signaller,
            id,
            path,
            self.dry_run,
            self.grace,
            &mut audit,
        )
    }
}

/// [`Sweep::tree`].
fn sweep_tree(
    sweep: &Sweep<'_>,
    id: &str,
    rec: Option<&TreeRecord>,
    scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
) -> Result<Option<TreeSweep>, RegistryError> {
    let (ctx, dry_run) = (sweep.ctx, sweep.dry_run);
    let label = rec.and_then(|r| r.label.clone());
    let mut lock = match guardian_state(ctx, id, rec) {
        GuardianState::Unknown => return Ok(None),
        GuardianState::Alive => return Ok(left_alone_if_owner_gone(ctx, id, rec, label, scanned)),
        GuardianState::Dead(lock) => lock,
    };
    let me = ctx.signaller.me();
    // A guardian that died since this command folded: fold its record now, so the
    // tree has a row to finish (the lock is taken again for the fold, which removes the
    // record file: the row carries the tree from here).
    let info: Option<LockInfo> = lock.as_mut().and_then(record_file::holder);
    let mut folded = None;
    if lock.take().is_some() && ctx.registry.fold_one(&ctx.dir, id, &me.boot_id) {
        folded = ctx.registry.tree(id)?;
    }
    let rec = folded.as_ref().or(rec);
    if let Some(r) = rec.filter(|r| succession::awaits_successor(ctx, r)) {
        return Ok(Some(TreeSweep {
            id: id.into(),
            label: r.label.clone(),
            action: SweepAction::LeftAlone,
            reason: "its supervisor is gone but its owner lives: the owner's next supervisor takes it over".into(),
            targets: vec![],
            left_alive: 0,
        }));
    }
    let not_before = rec.map(|r| r.guardian.starttime).or_else(|| {
        info.as_ref()
            .filter(|i| i.boot_id == me.boot_id)
            .map(|i| i.guardian_starttime)
    });
    let Some(tree) = TreeId::parse(id) else {
        return Ok(None);
    };
    let Some(not_before) = not_before else {
        return Ok(Some(unprovable(ctx, id, label, scanned)));
    };
    // The cgroup tier: the kernel's membership beats markers, so kill the cgroup first
    // (this catches members that scrubbed their environment), then look for marked
    // processes that left it.
    let mount = cgroup::current_mount().ok();
    let trusted = rec
        .zip(mount.as_ref())
        .and_then(|(r, m)| recorded_cgroup(r, m, ctx.procfs()));
    let cgroup_sweep = trusted.filter(|p| p.exists()).map(|p| sweep.cgroup(id, p));
    let untrusted = rec
        .and_then(|r| r.cgroup_path.as_deref())
        .filter(|_| trusted.is_none());
    let mut source = MarkerSource {
        procfs: ctx.procfs(),
        tree: tree.clone(),
        not_before,
        uid: me.uid,
        scanned: scanned.map(|m| {
            m.get(id)
                .map(|v| v.iter().map(|&(pid, _)| pid).collect())
                .unwrap_or_default()
        }),
    };
    let mut reason = if rec.is_some() {
        "guardian is gone".to_string()
    } else {
        "guardian is gone and the tree has no record (found by its lock file and marker)"
            .to_string()
    };
    if let Some(path) = untrusted {
        reason.push_str(&format!(
            "; its record names cgroup {path}, not a tree cgroup of this tree (another live tree's, or no tree's): left alone"
        ));
    }
    if dry_run {
        let (targets, left_alive) = dry_sweep(ctx, &mut source, cgroup_sweep);
        return Ok(Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::WouldSweep,
            reason,
            left_alive,
            targets,
        }));
    }
    if rec.is_some_and(|r| r.tier == RecordedTier::Portable) {
        sweep_portable(sweep, &tree, not_before);
    }
    let (targets, left_alive) = tear_down_by_marker(sweep, id, &reason, &mut source, cgroup_sweep);
    finish_record(ctx, id, rec, info.as_ref());
    Ok(Some(TreeSweep {
        id: id.into(),
        label,
        action: SweepAction::Swept,
        reason,
        targets,
        left_alive,
    }))
}

/// A dead guardian's tree whose start is unknown: without it, no marked process can
/// be proven to have started after the tree, so nothing is signalled.
fn unprovable(
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
        left_alive: match scanned {
            Some(m) => m.get(id).map_or(0, Vec::len),
            None => marker_scan(ctx.procfs(), ctx.signaller.me().uid)
                .get(id)
                .map_or(0, Vec::len),
        },
    }
}

/// A tree whose guardian is alive is its guardian's; it is reported when its guardian
/// is stopped (nothing tears it down until someone continues the guardian, and its
/// sentinel may be gone too) or its owner is gone (the guardian tears down itself).
fn left_alone_if_owner_gone(
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
        let left_alive = match scanned {
            Some(m) => m.get(id).map_or(0, Vec::len),
            None => marker_scan(ctx.procfs(), ctx.signaller.me().uid)
                .get(id)
                .map_or(0, Vec::len),
        };
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

/// What a dry run of one tree would signal: its marked members, then its cgroup's.
fn dry_sweep(
    ctx: &Context,
    source: &mut MarkerSource<'_>,
    cgroup_sweep: Option<TreeSweep>,
) -> (Vec<SweepTarget>, usize) {
    let members = source.members(&ctx.signaller);
    let mut targets = dry_run_targets(&members);
    if let Some(cg) = cgroup_sweep {
        // A marked member in the cgroup is one process, listed once.
        for t in cg.targets {
            if !targets.iter().any(|x| x.pid == t.pid) {
                targets.push(t);
            }
        }
    }
    let left_alive = targets
        .iter()
        .filter(|t| matches!(t.outcome, TargetOutcome::WouldSignal))
        .count();
    (targets, left_alive)
}

/// The portable tier's members that the marker cannot name (a scrubbed
/// environment whose parent died), from the tree's member record, torn down by
/// the portable core before the marker sweep (docs/TIERS.md, "portable").
fn sweep_portable(sweep: &Sweep<'_>, tree: &TreeId, not_before: u64) {
    use crate::linux::commands::tree::portable::sweep_recorded;
    let (ctx, actor) = (sweep.ctx, sweep.actor);
    let trees = ctx.dir.trees_dir();
    let report = sweep_recorded(&ctx.signaller, tree, &trees, not_before, sweep.grace);
    let _ = ctx.registry.append_audit(&AuditEntry {
        tree: Some(tree.to_string()),
        actor: actor.into(),
        event: "note".into(),
        message: Some(format!(
            "{actor}: portable tier: {} member(s) from the member record, lineage and marker SIGKILLed ({} signals delivered, {} stuck)",
            report.killed(),
            report.delivered.len(),
            report.stuck.len()
        )),
        ..Default::default()
    });
}

/// Tears a dead guardian's tree down by marker (its cgroup, if any, was swept
/// already), with notes before and after in the audit log. Returns the targets and
/// how many guarded processes are left alive.
fn tear_down_by_marker(
    sweep: &Sweep<'_>,
    id: &str,
    reason: &str,
    source: &mut MarkerSource<'_>,
    cgroup_sweep: Option<TreeSweep>,
) -> (Vec<SweepTarget>, usize) {
    let (ctx, actor) = (sweep.ctx, sweep.actor);
    let me = ctx.signaller.me();
    let registry = &ctx.registry;
    let note = |message: String| {
        let _ = registry.append_audit(&AuditEntry {
            tree: Some(id.into()),
            actor: actor.into(),
            event: "note".into(),
            message: Some(message),
            ..Default::default()
        });
    };
    note(format!("{actor}: {reason}; tearing down by marker"));
    let escalation = Escalation::with_grace(sweep.grace);
    let mut delivered = Delivered::default();
    let mut audit = |event: AuditEvent| {
        delivered.note(&event);
        if let Err(e) = registry.append_audit(&audit_entry(id, actor, &event)) {
            tracing::warn!("audit log: {e}");
        }
    };
    let report = escalation.run(&ctx.signaller, source, &mut audit);
    let mut left_alive = marker_scan(ctx.procfs(), me.uid)
        .get(id)
        .map_or(0, Vec::len);
    let mut targets = targets_of(&report, &delivered);
    if let Some(cg) = cgroup_sweep {
        targets.extend(cg.targets);
        left_alive += cg.left_alive;
    }
    note(format!(
        "{actor}: done, {} target(s), {left_alive} left alive",
        report.targets.len()
    ));
    (targets, left_alive)
}

/// [`Sweep::cgroup`] with every signal and refusal passed to `audit`.
fn sweep_cgroup_with(
    signaller: &Signaller,
    id: &str,
    path: &Path,
    dry_run: bool,
    grace: Duration,
    audit: &mut dyn FnMut(&AuditEvent),
) -> TreeSweep {
    let base = TreeSweep {
        id: id.into(),
        label: None,
        action: if dry_run {
            SweepAction::WouldSweep
        } else {
            SweepAction::Swept
        },
        reason: "guardian is gone".into(),
        targets: vec![],
        left_alive: 0,
    };
    let Ok(tree) = cgroup::CgroupTree::open(path) else {
        return base;
    };
    if dry_run {
        let members = tree.members(signaller);
        let targets = dry_run_targets(&members);
        return TreeSweep {
            left_alive: members.proven.len(),
            targets,
            ..base
        };
    }
    let escalation = Escalation::with_grace(grace);
    let mut delivered = Delivered::default();
    let report = cgroup::sweep_orphaned_cgroup(signaller, path, &escalation, &mut |e| {
        delivered.note(&e);
        audit(&e)
    });
    let left_alive = match cgroup::CgroupTree::open(path) {
        Ok(t) if t.is_populated() => t.members(signaller).proven.len().max(1),
        _ => 0,
    };
    TreeSweep {
        targets: targets_of(&report, &delivered),
        left_alive,
        ..base
    }
}

/// The sweep that needs no registry: the tree cgroups of dead guardians found on disk
/// (the cgroup proves membership by itself). For when the registry cannot be opened
/// (a directory in its place, a read-only state dir): whatever can be found is still
/// swept; the caller reports the registry error. Signals and refusals go to the log.
pub fn sweep_found_cgroups(dry_run: bool, grace: Duration) -> Result<SweepReport, String> {
    let signaller = Signaller::for_current_process(Procfs::new())
        .map_err(|e| format!("reading /proc/self: {e}"))?;
    let mut trees = Vec::new();
    for found in cgroup::list_tree_cgroups(signaller.procfs()) {
        if found.guardian != cgroup::GuardianState::Dead || !found.path.exists() {
            continue;
        }
        let id = found.tree.to_string();
        let mut audit = |event: &AuditEvent| match event {
            AuditEvent::Signal { target, signal, .. } => {
                tracing::info!(tree = %id, pid = target.pid, signal = signal.name(), "signalled")
            }
            AuditEvent::Refusal { pid, refusal } => {
                tracing::warn!(tree = %id, pid, %refusal, "refused")
            }
        };
        let t = sweep_cgroup_with(&signaller, &id, &found.path, dry_run, grace, &mut audit);
        trees.push(TreeSweep {
            reason: found_reason(&found, "found by its cgroup; no registry"),
            ..t
        });
    }
    Ok(SweepReport::of(dry_run, trees))
}

/// Why the tree of a dead guardian's cgroup found on disk was swept.
fn found_reason(found: &cgroup::FoundTreeCgroup, how: &str) -> String {
    if cgroup::own_pidns() == Some(found.guardian_pidns) {
        format!("guardian is gone ({how})")
    } else {
        format!(
            "guardian is gone: its PID namespace ({}) has no process left ({how})",
            found.guardian_pidns
        )
    }
}

/// Marks a swept tree finished; a tree known only from its lock file gets a row.
fn finish_record(ctx: &Context, id: &str, rec: Option<&TreeRecord>, info: Option<&LockInfo>) {
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

/// What a dry run reports: each proven member as "would_signal", then each refusal.
fn dry_run_targets(members: &Members) -> Vec<SweepTarget> {
    members
        .proven
        .iter()
        .map(|p| SweepTarget {
            pid: p.pid(),
            starttime: p.identity.starttime,
            outcome: TargetOutcome::WouldSignal,
            proof: Some(p.proof.label().into()),
            refusal_code: None,
            refusal: None,
        })
        .chain(
            members
                .refused
                .iter()
                .map(|(pid, r)| refused_target(*pid, r)),
        )
        .collect()
}

pub(super) fn refused_target(pid: i32, r: &Refusal) -> SweepTarget {
    SweepTarget {
        pid,
        starttime: 0,
        outcome: TargetOutcome::Refused,
        proof: None,
        refusal_code: Some(r.code().into()),
        refusal: Some(r.to_string()),
    }
}

/// The processes a teardown's signals reached (delivered, not already gone).
#[derive(Default)]
struct Delivered(BTreeSet<(i32, u64)>);

impl Delivered {
    fn note(&mut self, event: &AuditEvent) {
        if let AuditEvent::Signal {
            target,
            delivery: Delivery::Delivered,
            ..
        } = event
        {
            self.0.insert((target.pid, target.starttime));
        }
    }
}

/// The report's targets as a sweep reports them: a member that exited before SIGKILL
/// was needed is `terminated` when our SIGTERM reached it, `gone` when nothing did.
fn targets_of(report: &TeardownReport, delivered: &Delivered) -> Vec<SweepTarget> {
    report
        .targets
        .iter()
        .map(|t| match &t.refusal {
            Some(r) => refused_target(t.pid, r),
            None => SweepTarget {
                pid: t.pid,
                starttime: t.starttime,
                outcome: match t.outcome {
                    Outcome::Gone if delivered.0.contains(&(t.pid, t.starttime)) => {
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
