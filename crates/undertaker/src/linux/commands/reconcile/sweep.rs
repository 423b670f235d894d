//! `undertaker sweep`: finishing the trees of guardians that died, with proof.

use super::marker::{live_count, marker_scan};
use super::succession;
use super::{candidates, guardian_state, recorded_cgroup, Context, GuardianState};
use crate::identity::TreeId;
use crate::linux::commands::record::Recorder;
use crate::linux::commands::tree::Tree;
use crate::linux::contain::cgroup::{self, CgroupTree};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::Signaller;
use crate::registry::record_file::{self, LockInfo};
use crate::registry::{RecordedTier, RegistryError, TreeRecord};
use crate::report::{SweepAction, SweepReport, TreeSweep};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

mod report;

pub(super) use report::refused_target;
use report::{dry_run_of, finish_record, left_alone_if_owner_gone, targets_of, unprovable};

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
        let t = sweep.cgroup(&found.tree, &found.path);
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
    pub actor: &'static str,
}

/// What [`Sweep::plan`] found a tree to be.
enum Plan {
    /// Nothing to tear down: this report (`None`: nothing to report).
    Report(Option<TreeSweep>),
    /// A dead guardian's tree, to be torn down.
    Orphaned(Box<Orphaned>),
}

/// A dead guardian's tree: its id, its record as it is now (a tree known by its lock
/// file alone has none), the lock file's facts, and the dead guardian's start (no
/// member started before it).
struct Orphaned {
    tree: TreeId,
    rec: Option<TreeRecord>,
    info: Option<LockInfo>,
    since: u64,
}

impl Sweep<'_> {
    /// Sweeps one tree if its guardian is dead. `None`: nothing to report (a tree of
    /// another state directory, or a healthy running one). `scanned`: a marker scan
    /// the caller just made, used once instead of another.
    ///
    /// The dead guardian's tree is a [`Tree`] ([`Tree::left_behind`]): its trusted
    /// cgroup and its marked processes, and their descendants, torn down together by
    /// the one escalation (the cgroup's membership catches members that scrubbed their
    /// environment, the marker those that left the cgroup).
    pub(crate) fn tree(
        &self,
        id: &str,
        rec: Option<&TreeRecord>,
        scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
    ) -> Result<Option<TreeSweep>, RegistryError> {
        let orphaned = match self.plan(id, rec, scanned)? {
            Plan::Report(report) => return Ok(report),
            Plan::Orphaned(orphaned) => *orphaned,
        };
        let rec = orphaned.rec.as_ref();
        let (cgroup, reason) = self.trusted_cgroup(rec);
        let marked = scanned.map(|m| {
            m.get(id)
                .into_iter()
                .flatten()
                .map(|&(pid, _)| pid)
                .collect()
        });
        let recorder = self.recorder(&orphaned.tree);
        let mut tree = Tree::left_behind(
            orphaned.tree,
            cgroup,
            Some(orphaned.since),
            marked,
            self.grace,
            recorder,
        );
        let (action, targets, left_alive) = if self.dry_run {
            let (targets, would) = dry_run_of(&mut tree, &self.ctx.signaller);
            (SweepAction::WouldSweep, targets, would)
        } else {
            if rec.is_some_and(|r| r.tier == RecordedTier::Portable) {
                sweep_portable(self, &tree, orphaned.since);
            }
            let how = match tree.cgroup() {
                Some(_) => "by cgroup and marker",
                None => "by marker",
            };
            tree.note(format!("{}: {reason}; tearing down {how}", self.actor));
            let targets = targets_of(&tree.tear_down_from_outside(&self.ctx.signaller));
            let left_alive = live_count(self.ctx, id, rec);
            tree.note(format!(
                "{}: done, {} target(s), {left_alive} left alive",
                self.actor,
                targets.len()
            ));
            finish_record(self.ctx, id, rec, orphaned.info.as_ref());
            (SweepAction::Swept, targets, left_alive)
        };
        Ok(Some(TreeSweep {
            id: id.into(),
            label: rec.and_then(|r| r.label.clone()),
            action,
            reason,
            targets,
            left_alive,
        }))
    }

    /// Whether a tree is a dead guardian's, to be torn down, or what to report
    /// instead. A dead guardian's record file is folded here, so that the tree has a
    /// row to finish.
    fn plan(
        &self,
        id: &str,
        rec: Option<&TreeRecord>,
        scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
    ) -> Result<Plan, RegistryError> {
        let ctx = self.ctx;
        let label = rec.and_then(|r| r.label.clone());
        let mut lock = match guardian_state(ctx, id, rec) {
            GuardianState::Unknown => return Ok(Plan::Report(None)),
            GuardianState::Alive => {
                let report = left_alone_if_owner_gone(ctx, id, rec, label, scanned);
                return Ok(Plan::Report(report));
            }
            GuardianState::Dead(lock) => lock,
        };
        let me = ctx.signaller.me();
        // A guardian that died since this command folded: fold its record now (the
        // lock is taken again for the fold, which removes the record file: the row
        // carries the tree from here).
        let info: Option<LockInfo> = lock.as_mut().and_then(record_file::holder);
        let mut folded = None;
        if lock.take().is_some() && ctx.registry.fold_one(&ctx.dir, id, &me.boot_id) {
            folded = ctx.registry.tree(id)?;
        }
        let rec = folded.or_else(|| rec.cloned());
        if let Some(r) = rec
            .as_ref()
            .filter(|r| succession::awaits_successor(ctx, r))
        {
            return Ok(Plan::Report(Some(TreeSweep {
                id: id.into(),
                label: r.label.clone(),
                action: SweepAction::LeftAlone,
                reason: "its supervisor is gone but its owner lives: the owner's next supervisor takes it over".into(),
                targets: vec![],
                left_alive: 0,
            })));
        }
        let since = rec.as_ref().map(|r| r.guardian.starttime).or_else(|| {
            info.as_ref()
                .filter(|i| i.boot_id == me.boot_id)
                .map(|i| i.guardian_starttime)
        });
        let Some(tree) = TreeId::parse(id) else {
            return Ok(Plan::Report(None));
        };
        let Some(since) = since else {
            return Ok(Plan::Report(Some(unprovable(ctx, id, label, scanned))));
        };
        Ok(Plan::Orphaned(Box::new(Orphaned {
            tree,
            rec,
            info,
            since,
        })))
    }

    /// The tree cgroup `rec` names, opened, when this command may act on it
    /// ([`recorded_cgroup`]), and why the tree is swept (saying so when the record
    /// names a cgroup that is not to be trusted).
    fn trusted_cgroup(&self, rec: Option<&TreeRecord>) -> (Option<CgroupTree>, String) {
        let mount = cgroup::current_mount().ok();
        let trusted = rec
            .zip(mount.as_ref())
            .and_then(|(r, m)| recorded_cgroup(r, m, self.ctx.procfs()));
        let mut reason = match rec {
            Some(_) => "guardian is gone".to_string(),
            None => {
                "guardian is gone and the tree has no record (found by its lock file and marker)"
                    .to_string()
            }
        };
        let untrusted = rec
            .and_then(|r| r.cgroup_path.as_deref())
            .filter(|_| trusted.is_none());
        if let Some(path) = untrusted {
            reason.push_str(&format!(
                "; its record names cgroup {path}, not a tree cgroup of this tree (another live tree's, or no tree's): left alone"
            ));
        }
        let cgroup = trusted
            .filter(|p| p.exists())
            .and_then(|p| CgroupTree::open(p).ok());
        (cgroup, reason)
    }

    /// Tears down (or, dry, lists) everything in a dead guardian's tree cgroup found
    /// on disk, then removes the directory. `left_alive` counts processes still in
    /// the cgroup.
    pub(crate) fn cgroup(&self, tree: &TreeId, path: &Path) -> TreeSweep {
        let recorder = self.recorder(tree);
        let signaller = &self.ctx.signaller;
        sweep_cgroup(signaller, tree, path, self.dry_run, self.grace, recorder)
    }

    /// Where a swept tree's audit lines go: the database, as this sweep's actor (a
    /// dry run writes nothing).
    fn recorder(&self, tree: &TreeId) -> Recorder {
        let registry = match self.dry_run {
            true => None,
            false => (self.ctx.registry.reconnect())
                .map_err(|e| tracing::warn!("audit log: {e}"))
                .ok(),
        };
        Recorder::for_sweep(tree, self.actor, registry)
    }
}

/// The portable tier's members that the marker cannot name (a scrubbed
/// environment whose parent died), from the tree's member record, torn down by
/// the portable core before the marker sweep (docs/TIERS.md, "portable").
fn sweep_portable(sweep: &Sweep<'_>, tree: &Tree, not_before: u64) {
    use crate::linux::commands::tree::portable::sweep_recorded;
    let (ctx, actor) = (sweep.ctx, sweep.actor);
    let trees = ctx.dir.trees_dir();
    let report = sweep_recorded(&ctx.signaller, tree.id(), &trees, not_before, sweep.grace);
    tree.note(format!(
        "{actor}: portable tier: {} member(s) from the member record, lineage and marker SIGKILLed ({} signals delivered, {} stuck)",
        report.killed(),
        report.delivered.len(),
        report.stuck.len()
    ));
}

/// [`Sweep::cgroup`], its audit lines to `recorder`.
fn sweep_cgroup(
    signaller: &Signaller,
    tree: &TreeId,
    path: &Path,
    dry_run: bool,
    grace: Duration,
    recorder: Recorder,
) -> TreeSweep {
    let base = TreeSweep {
        id: tree.to_string(),
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
    let Ok(cg) = CgroupTree::open(path) else {
        return base;
    };
    let mut left = Tree::left_behind(tree.clone(), Some(cg), None, None, grace, recorder);
    if dry_run {
        let (targets, left_alive) = dry_run_of(&mut left, signaller);
        return TreeSweep {
            left_alive,
            targets,
            ..base
        };
    }
    let torn = left.tear_down_from_outside(signaller);
    let left_alive = match CgroupTree::open(path) {
        Ok(t) if t.is_populated() => t.members(signaller).proven.len().max(1),
        _ => 0,
    };
    TreeSweep {
        targets: targets_of(&torn),
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
        // No registry: the audit lines go nowhere (the teardown logs each signal).
        let recorder = Recorder::for_sweep(&found.tree, "sweep", None);
        let t = sweep_cgroup(
            &signaller,
            &found.tree,
            &found.path,
            dry_run,
            grace,
            recorder,
        );
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
