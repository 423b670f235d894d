//! `ps`, `sweep` and `kill`: reading the registry against the live system, and
//! finishing the job of guardians that died.
//!
//! Every command first folds the record files of finished and abandoned trees into
//! the database ([`Registry::fold`]); live trees are read from their record files. A
//! guardian is alive exactly while its record file is locked (see
//! [`crate::registry::lock`]). Trees of dead guardians are torn down by marker: a
//! process is a member only if it carries `UNDERTAKER_TREE=<id>`, has our uid and
//! started no earlier than the guardian, each proven through a pidfd opened first.
//! A tree whose guardian is alive is left to that guardian: it watches its owner
//! itself and will tear down when the owner dies.

use crate::audit::{audit_entry, AuditEvent};
use crate::escalation::Sig;
use crate::identity::{Identity, TreeId, TREE_MARKER};
use crate::ladder::Refusal;
use crate::linux::commands::record::open_registry;
use crate::linux::contain::cgroup;
use crate::linux::kernel::poll::poll_until;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::{Members, NotProven, ProvenProcess, Signaller};
use crate::linux::proof::teardown::{Escalation, Outcome, TeardownReport, TreeSource, KILL_CAP};
use crate::registry::lock::{FileLock, LockInfo};
use crate::registry::record_file::{self, ReadRecord};
use crate::registry::{
    now_ms, AuditEntry, GuardianRecord, OwnerKind, OwnerRecord, RecordedTier, Registry,
    RegistryError, StateDir, StoredState, TreeRecord,
};
use crate::report::{
    PsRow, SweepAction, SweepReport, SweepTarget, TargetOutcome, TreeState, TreeSweep,
};
use crate::selector::{SelectError, TreeSelector};
use crate::Error;
use rustix::event::{PollFd, PollFlags};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// Everything a reconciling command needs.
pub struct Context {
    pub signaller: Signaller,
    pub dir: StateDir,
    pub registry: Registry,
    /// Record files of live trees (their guardian holds the lock), read at open.
    pub live: Vec<ReadRecord>,
}

impl Context {
    pub fn open(state_dir: Option<&Path>) -> Result<Self, RegistryError> {
        let signaller =
            Signaller::for_current_process(Procfs::new()).map_err(|e| RegistryError::Io {
                path: "/proc/self".into(),
                msg: e.to_string(),
            })?;
        let me = signaller.me();
        let (dir, registry) =
            open_registry(state_dir, me.uid, &me.boot_id.clone()).map_err(|(_, e)| e)?;
        let live = registry.fold(&dir, &me.boot_id);
        Ok(Self {
            signaller,
            dir,
            registry,
            live,
        })
    }

    /// Every tree of this boot: the database's, then the live ones.
    pub fn trees(&self) -> Result<Vec<TreeRecord>, RegistryError> {
        let mut trees = self.registry.trees(true)?;
        trees.retain(|t| !self.live.iter().any(|l| l.tree.id == t.id));
        trees.extend(self.live.iter().map(|l| l.tree.clone()));
        Ok(trees)
    }

    /// One tree as it is now: its record file is folded first when its guardian has
    /// finished with it since this command started.
    pub fn tree(&self, id: &str) -> Result<Option<TreeRecord>, RegistryError> {
        let boot_id = &self.signaller.me().boot_id;
        if !self.registry.fold_one(&self.dir, id, boot_id) {
            if let Some(read) = record_file::read(&record_file::path_of(&self.dir, id)) {
                return Ok(Some(read.tree));
            }
        }
        self.registry.tree(id)
    }

    fn procfs(&self) -> &Procfs {
        self.signaller.procfs()
    }
}

/// Is the guardian of a tree alive?
enum GuardianState {
    Alive,
    /// Provably dead; the lock (if its file still existed) is now held by us.
    Dead(Option<FileLock>),
    /// No lock file and no record: the tree belongs to another state directory.
    Unknown,
}

fn guardian_state(ctx: &Context, id: &str, rec: Option<&TreeRecord>) -> GuardianState {
    match FileLock::try_acquire(&record_file::path_of(&ctx.dir, id)) {
        Ok(None) => GuardianState::Alive,
        Ok(Some(lock)) => GuardianState::Dead(Some(lock)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match rec {
            // A record file is folded only once its lock is free, so a missing file
            // on an unfinished row means the guardian died; still, a guardian that is
            // provably the recorded process is never called dead.
            Some(r) if r.state != StoredState::Finished => {
                match ctx.procfs().stat(r.guardian.pid) {
                    Ok(s) if s.starttime == r.guardian.starttime && s.state != 'Z' => {
                        GuardianState::Alive
                    }
                    _ => GuardianState::Dead(None),
                }
            }
            Some(_) => GuardianState::Dead(None),
            None => GuardianState::Unknown,
        },
        // Cannot tell: assume alive, never sweep on a guess.
        Err(_) => GuardianState::Alive,
    }
}

fn owner_alive(procfs: &Procfs, owner: &OwnerRecord) -> Option<bool> {
    let (pid, starttime) = (owner.pid?, owner.starttime?);
    Some(matches!(procfs.stat(pid), Ok(s) if s.starttime == starttime && s.state != 'Z'))
}

/// Live (non-zombie) processes of uid `uid` carrying a tree marker, by tree id.
///
/// Two reads per process, like `ps -e`: stat (zombies have no environment to read),
/// then environ. The real uid (status) is read only for the few marked processes;
/// every candidate is proven afresh before any signal anyway.
pub fn marker_scan(procfs: &Procfs, uid: u32) -> BTreeMap<String, Vec<(i32, u64)>> {
    let mut out: BTreeMap<String, Vec<(i32, u64)>> = BTreeMap::new();
    for pid in procfs.pids().unwrap_or_default() {
        let Ok(stat) = procfs.stat(pid) else { continue };
        if stat.state == 'Z' || stat.state == 'X' {
            continue;
        }
        let Ok(Some(v)) = procfs.environ_value(pid, TREE_MARKER) else {
            continue;
        };
        let Some(id) = std::str::from_utf8(&v).ok().and_then(TreeId::parse) else {
            continue;
        };
        if procfs.real_uid(pid).ok() != Some(uid) {
            continue;
        }
        out.entry(id.to_string())
            .or_default()
            .push((pid, stat.starttime));
    }
    out
}

/// Live processes of a tree: those carrying its marker, and those in its cgroup
/// (members that scrubbed their environment still count).
fn live_count(ctx: &Context, id: &str, rec: Option<&TreeRecord>) -> usize {
    let markers = marker_scan(ctx.procfs(), ctx.signaller.me().uid);
    let mount = cgroup::current_mount().ok();
    live_pids(id, rec, &markers, mount.as_ref()).len()
}

/// [`live_count`]'s set, from a marker scan the caller already made.
fn live_pids(
    id: &str,
    rec: Option<&TreeRecord>,
    markers: &BTreeMap<String, Vec<(i32, u64)>>,
    mount: Option<&cgroup::CgroupMount>,
) -> BTreeSet<i32> {
    let mut pids: BTreeSet<i32> = markers
        .get(id)
        .map(|v| v.iter().map(|&(pid, _)| pid).collect())
        .unwrap_or_default();
    if let (Some(path), Some(mount)) = (rec.and_then(|r| r.cgroup_path.as_deref()), mount) {
        pids.extend(cgroup::CgroupTree::pids_at(mount, Path::new(path)));
    }
    pids
}

pub fn ps(ctx: &Context, all: bool) -> Result<Vec<PsRow>, RegistryError> {
    let markers = marker_scan(ctx.procfs(), ctx.signaller.me().uid);
    // Read once for every row (it was once per tree cgroup: 1 000 mountinfo reads).
    let mount = cgroup::current_mount().ok();
    let rows = ctx.trees()?;
    let now = now_ms();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for r in &rows {
        seen.insert(r.id.clone());
        // Marked processes and the tree cgroup's processes (members that scrubbed
        // their environment count too).
        let live = live_pids(&r.id, Some(r), &markers, mount.as_ref()).len();
        if r.state == StoredState::Finished && live == 0 && !all {
            continue;
        }
        let guardian = if r.state == StoredState::Finished && live == 0 {
            GuardianState::Dead(None)
        } else {
            guardian_state(ctx, &r.id, Some(r))
        };
        let guardian_alive = matches!(guardian, GuardianState::Alive);
        let state = TreeState::derive(
            r.state,
            guardian_alive,
            owner_alive(ctx.procfs(), &r.owner),
            live,
        );
        out.push(PsRow {
            id: r.id.clone(),
            label: r.label.clone(),
            tier: Some(r.tier),
            state,
            guardian_pid: Some(r.guardian.pid),
            guardian_alive,
            owner_kind: Some(r.owner.kind),
            owner_pid: r.owner.pid,
            root_pid: r.root.as_ref().map(|x| x.pid),
            live_processes: live,
            created_ms: Some(r.created_ms),
            age_ms: Some(now - r.created_ms),
            exit_status: r.exit_status,
            recorded: true,
        });
    }
    for (id, procs) in &markers {
        if seen.contains(id) {
            continue;
        }
        let (state, guardian_alive, info) = match guardian_state(ctx, id, None) {
            GuardianState::Unknown => continue,
            GuardianState::Alive => (TreeState::Running, true, None),
            GuardianState::Dead(mut lock) => (
                TreeState::Orphaned,
                false,
                lock.as_mut().and_then(|l| l.info()),
            ),
        };
        out.push(PsRow {
            id: id.clone(),
            label: None,
            tier: None,
            state,
            guardian_pid: info.map(|i| i.guardian_pid),
            guardian_alive,
            owner_kind: None,
            owner_pid: None,
            root_pid: None,
            live_processes: procs.len(),
            created_ms: None,
            age_ms: None,
            exit_status: None,
            recorded: false,
        });
    }
    Ok(out)
}

/// Members of a tree whose guardian is gone: marked processes, proven one by one.
struct MarkerSource<'a> {
    procfs: &'a Procfs,
    tree: TreeId,
    not_before: u64,
    uid: u32,
    /// Candidates from a scan the caller just made: used once instead of rescanning.
    scanned: Option<Vec<i32>>,
}

impl MarkerSource<'_> {
    fn candidates(&mut self) -> Vec<i32> {
        if let Some(pids) = self.scanned.take() {
            return pids;
        }
        marker_scan(self.procfs, self.uid)
            .remove(self.tree.as_str())
            .unwrap_or_default()
            .into_iter()
            .map(|(pid, _)| pid)
            .collect()
    }
}

impl TreeSource for MarkerSource<'_> {
    fn members(&mut self, signaller: &Signaller) -> Members {
        let (tree, not_before) = (self.tree.clone(), self.not_before);
        let mut members = Members::collect(self.candidates(), |pid| {
            signaller.prove_by_marker(pid, &tree, not_before)
        });
        // A live child of a proven member is a member by parentage, marker or not
        // (proven while its parent is still alive, so its ppid means that parent):
        // this finds members that scrubbed their environment while their parent lives.
        let mut seen: std::collections::HashSet<i32> =
            members.proven.iter().map(|p| p.pid()).collect();
        let mut next = 0;
        while next < members.proven.len() {
            let parent_pid = members.proven[next].pid();
            for child in self.procfs.children(parent_pid).unwrap_or_default() {
                if seen.insert(child) {
                    let proven = signaller.prove_child(Some(&members.proven[next]), child);
                    members.add(child, proven);
                }
            }
            next += 1;
        }
        members
    }

    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
        // Rescan at least every 50 ms: a member may fork without any pidfd changing.
        let until = deadline.min(Instant::now() + Duration::from_millis(50));
        let fds: Vec<_> = watch.iter().map(|p| p.pidfd()).collect();
        let mut polls: Vec<PollFd<'_>> = fds
            .iter()
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        poll_until(&mut polls, Some(until));
    }

    fn is_empty(&mut self) -> bool {
        self.candidates().is_empty()
    }
}

/// Reconciles every tree: finishes those whose guardian died.
pub fn sweep(ctx: &Context, dry_run: bool, grace: Duration) -> Result<SweepReport, RegistryError> {
    let markers = marker_scan(ctx.procfs(), ctx.signaller.me().uid);
    let rows = ctx.trees()?;
    let mut ids: BTreeMap<String, Option<TreeRecord>> = BTreeMap::new();
    for r in rows {
        if r.state != StoredState::Finished || markers.contains_key(&r.id) {
            ids.insert(r.id.clone(), Some(r));
        }
    }
    for id in markers.keys() {
        ids.entry(id.clone()).or_insert(None);
    }
    // Cgroups the records lead to are swept with their tree below: the walk over all
    // tree cgroups must not list (or count) their members a second time.
    let recorded_cgroups: BTreeSet<std::path::PathBuf> = ids
        .values()
        .flatten()
        .filter_map(|r| r.cgroup_path.as_deref().map(std::path::PathBuf::from))
        .collect();
    let mut trees = Vec::new();
    for (id, rec) in ids {
        if let Some(t) = sweep_tree(
            ctx,
            &id,
            rec.as_ref(),
            dry_run,
            grace,
            "sweep",
            Some(&markers),
        )? {
            trees.push(t);
        }
    }
    // Tree cgroups whose guardian is dead and that no record led us to (another state
    // dir, a lost registry): the cgroup itself proves membership, markers or not.
    for found in cgroup::list_tree_cgroups(ctx.procfs()) {
        if found.guardian != cgroup::GuardianState::Dead
            || !found.path.exists()
            || recorded_cgroups.contains(&found.path)
        {
            continue;
        }
        let id = found.tree.to_string();
        let t = sweep_cgroup(ctx, &id, &found.path, dry_run, grace, "sweep");
        match trees.iter_mut().find(|t| t.id == id) {
            Some(existing) => {
                existing.targets.extend(t.targets);
                existing.left_alive += t.left_alive;
            }
            None => trees.push(TreeSweep {
                reason: "guardian is gone (found by its cgroup)".into(),
                ..t
            }),
        }
    }
    Ok(SweepReport::of(dry_run, trees))
}

/// Self-healing, one bounded round: finishes at most `max_trees` trees of dead
/// guardians, with the proofs `sweep` uses (records of unfinished trees first, then
/// tree cgroups of dead guardians found on disk, which are emptied and removed).
/// Trees known only by their markers are left to `sweep` (finding them costs a scan of
/// every process). Returns how many trees it finished.
pub fn heal(ctx: &Context, max_trees: usize, grace: Duration) -> Result<usize, RegistryError> {
    let mut done = 0;
    let rows = ctx.registry.trees(false)?;
    let recorded_cgroups: BTreeSet<std::path::PathBuf> = rows
        .iter()
        .filter_map(|r| r.cgroup_path.as_deref().map(std::path::PathBuf::from))
        .collect();
    for r in &rows {
        if done >= max_trees {
            return Ok(done);
        }
        // A live guardian holds its lock: skipped at the cost of one open and flock.
        if !matches!(guardian_state(ctx, &r.id, Some(r)), GuardianState::Dead(_)) {
            continue;
        }
        let swept = sweep_tree(ctx, &r.id, Some(r), false, grace, "heal", None)?;
        if swept.is_some_and(|t| matches!(t.action, SweepAction::Swept)) {
            done += 1;
        }
    }
    for found in cgroup::list_tree_cgroups(ctx.procfs()) {
        if done >= max_trees {
            break;
        }
        if found.guardian != cgroup::GuardianState::Dead
            || !found.path.exists()
            || recorded_cgroups.contains(&found.path)
        {
            continue;
        }
        let id = found.tree.to_string();
        sweep_cgroup(ctx, &id, &found.path, false, grace, "heal");
        done += 1;
    }
    Ok(done)
}

/// Sweeps one tree if its guardian is dead. `None`: nothing to report (a tree of
/// another state directory, or a healthy running one).
fn sweep_tree(
    ctx: &Context,
    id: &str,
    rec: Option<&TreeRecord>,
    dry_run: bool,
    grace: Duration,
    actor: &str,
    scanned: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
) -> Result<Option<TreeSweep>, RegistryError> {
    let label = rec.and_then(|r| r.label.clone());
    let mut lock = match guardian_state(ctx, id, rec) {
        GuardianState::Unknown => return Ok(None),
        GuardianState::Alive => return Ok(left_alone_if_owner_gone(ctx, id, rec, label)),
        GuardianState::Dead(lock) => lock,
    };
    let me = ctx.signaller.me();
    // A guardian that died since this command folded: fold its record now, so the
    // tree has a row to finish (the lock is taken again for the fold, which removes the
    // record file: the row carries the tree from here).
    let info: Option<LockInfo> = lock.as_mut().and_then(|l| l.info());
    let mut folded = None;
    if lock.take().is_some() && ctx.registry.fold_one(&ctx.dir, id, &me.boot_id) {
        folded = ctx.registry.tree(id)?;
    }
    let rec = folded.as_ref().or(rec);
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
    let cgroup_sweep = rec
        .and_then(|r| r.cgroup_path.as_deref())
        .map(Path::new)
        .filter(|p| p.exists())
        .map(|p| sweep_cgroup(ctx, id, p, dry_run, grace, actor));
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
    let reason = if rec.is_some() {
        "guardian is gone".to_string()
    } else {
        "guardian is gone and the tree has no record (found by its lock file and marker)"
            .to_string()
    };
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
    let (targets, left_alive) =
        tear_down_by_marker(ctx, id, actor, &reason, grace, &mut source, cgroup_sweep);
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

/// A tree whose guardian is alive is its guardian's; it is reported only when its
/// owner is gone (the guardian tears it down itself).
fn left_alone_if_owner_gone(
    ctx: &Context,
    id: &str,
    rec: Option<&TreeRecord>,
    label: Option<String>,
) -> Option<TreeSweep> {
    let owner_dead = rec.and_then(|r| owner_alive(ctx.procfs(), &r.owner)) == Some(false);
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

/// Tears a dead guardian's tree down by marker (its cgroup, if any, was swept
/// already), with notes before and after in the audit log. Returns the targets and
/// how many guarded processes are left alive.
fn tear_down_by_marker(
    ctx: &Context,
    id: &str,
    actor: &str,
    reason: &str,
    grace: Duration,
    source: &mut MarkerSource<'_>,
    cgroup_sweep: Option<TreeSweep>,
) -> (Vec<SweepTarget>, usize) {
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
    let escalation = Escalation::with_grace(grace);
    let mut audit = |event: AuditEvent| {
        if let Err(e) = registry.append_audit(&audit_entry(id, actor, &event)) {
            tracing::warn!("audit log: {e}");
        }
    };
    let report = escalation.run(&ctx.signaller, source, &mut audit);
    let mut left_alive = marker_scan(ctx.procfs(), me.uid)
        .get(id)
        .map_or(0, Vec::len);
    let mut targets = targets_of(&report);
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

/// Tears down (or, dry, lists) everything in a dead guardian's tree cgroup, then
/// removes the directory. `left_alive` counts processes still in the cgroup.
fn sweep_cgroup(
    ctx: &Context,
    id: &str,
    path: &Path,
    dry_run: bool,
    grace: Duration,
    actor: &str,
) -> TreeSweep {
    let registry = &ctx.registry;
    let mut audit = |event: &AuditEvent| {
        if let Err(e) = registry.append_audit(&audit_entry(id, actor, event)) {
            tracing::warn!("audit log: {e}");
        }
    };
    sweep_cgroup_with(&ctx.signaller, id, path, dry_run, grace, &mut audit)
}

/// [`sweep_cgroup`] with every signal and refusal passed to `audit`.
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
    let report = cgroup::sweep_orphaned_cgroup(signaller, path, &escalation, &mut |e| audit(&e));
    let left_alive = match cgroup::CgroupTree::open(path) {
        Ok(t) if t.is_populated() => t.members(signaller).proven.len().max(1),
        _ => 0,
    };
    TreeSweep {
        targets: targets_of(&report),
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
            reason: "guardian is gone (found by its cgroup; no registry)".into(),
            ..t
        });
    }
    Ok(SweepReport::of(dry_run, trees))
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

fn refused_target(pid: i32, r: &Refusal) -> SweepTarget {
    SweepTarget {
        pid,
        starttime: 0,
        outcome: TargetOutcome::Refused,
        proof: None,
        refusal_code: Some(r.code().into()),
        refusal: Some(r.to_string()),
    }
}

fn targets_of(report: &TeardownReport) -> Vec<SweepTarget> {
    report
        .targets
        .iter()
        .map(|t| match &t.refusal {
            Some(r) => refused_target(t.pid, r),
            None => SweepTarget {
                pid: t.pid,
                starttime: t.starttime,
                outcome: match t.outcome {
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

/// Finds the tree `selector` names among recorded trees and unrecorded lock files.
pub fn resolve_tree(
    ctx: &Context,
    selector: &TreeSelector,
) -> Result<(String, Option<TreeRecord>), Error> {
    let mut found: BTreeMap<String, Option<TreeRecord>> = ctx
        .registry
        .trees_by_prefix(selector.as_str())?
        .into_iter()
        .chain(ctx.live.iter().map(|l| l.tree.clone()))
        .map(|r| (r.id.clone(), Some(r)))
        .collect();
    // Record files that appeared since the fold, or that did not parse.
    for (id, _) in record_file::list(&ctx.dir) {
        if TreeId::parse(&id).is_some() {
            found.entry(id).or_insert(None);
        }
    }
    let id = selector.pick(found.keys().map(String::as_str))?.to_owned();
    let rec = found.remove(&id).flatten();
    Ok((id, rec))
}

/// The audit log, oldest first; with a selector, only that tree's entries. A tree
/// that is recorded but has nothing logged yet gives an empty log, not an error.
/// One page of the audit log: the newest `limit` entries (of the selected tree) below
/// id `before`, oldest first, without reading the rest. The entries of live trees are
/// still in their record files (no id yet): they are the newest, so they belong to the
/// first page (`before` absent).
pub fn log_page(
    ctx: &Context,
    tree: Option<&TreeSelector>,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, Error> {
    let id = match tree {
        None => None,
        Some(selector) => {
            let mut ids: BTreeSet<String> = ctx
                .registry
                .audit_trees_by_prefix(selector.as_str())?
                .into_iter()
                .collect();
            ids.extend(
                ctx.live
                    .iter()
                    .filter(|l| !l.audit.is_empty())
                    .map(|l| l.tree.id.clone()),
            );
            match selector.pick(ids.iter().map(String::as_str)) {
                Ok(id) => Some(id.to_owned()),
                Err(SelectError::Unknown(_)) => {
                    return match resolve_tree(ctx, selector) {
                        Ok(_) => Ok(Vec::new()),
                        Err(_) => Err(SelectError::Unknown(selector.as_str().into()).into()),
                    };
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let mut page = ctx.registry.audit_page(id.as_deref(), before, limit)?;
    if before.is_none() {
        let mut live: Vec<AuditEntry> = ctx
            .live
            .iter()
            .filter(|l| id.as_deref().is_none_or(|id| l.tree.id == id))
            .flat_map(|l| l.audit.iter().map(|(_, e)| e.clone()))
            .collect();
        live.sort_by_key(|e| e.time_ms);
        page.extend(live);
        let extra = page.len().saturating_sub(limit);
        page.drain(..extra);
    }
    Ok(page)
}

pub fn log(ctx: &Context, tree: Option<&TreeSelector>) -> Result<Vec<AuditEntry>, Error> {
    let mut entries = ctx.registry.audit(None)?;
    // Live trees' entries are still in their record files.
    let mut live: Vec<AuditEntry> = ctx
        .live
        .iter()
        .flat_map(|l| l.audit.iter().map(|(_, e)| e.clone()))
        .collect();
    live.sort_by_key(|e| e.time_ms);
    entries.extend(live);
    let Some(selector) = tree else {
        return Ok(entries);
    };
    let ids: BTreeSet<&str> = entries.iter().filter_map(|e| e.tree.as_deref()).collect();
    let id = match selector.pick(ids) {
        Ok(id) => id.to_owned(),
        Err(SelectError::Unknown(_)) => {
            return match resolve_tree(ctx, selector) {
                Ok(_) => Ok(Vec::new()),
                Err(_) => Err(SelectError::Unknown(selector.as_str().into()).into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    Ok(entries
        .into_iter()
        .filter(|e| e.tree.as_deref() == Some(id.as_str()))
        .collect())
}

/// `undertaker kill`: a live guardian is asked to tear down (SIGTERM, proven by its
/// recorded identity) and awaited; a dead one's tree is swept here.
pub fn kill(
    ctx: &Context,
    id: &str,
    rec: Option<&TreeRecord>,
    grace: Duration,
) -> Result<TreeSweep, RegistryError> {
    let label = rec.and_then(|r| r.label.clone());
    let live = marker_scan(ctx.procfs(), ctx.signaller.me().uid)
        .get(id)
        .map_or(0, Vec::len);
    if rec.is_some_and(|r| r.state == StoredState::Finished) && live == 0 {
        return Ok(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::Finished,
            reason: "the tree is already finished".into(),
            targets: vec![],
            left_alive: 0,
        });
    }
    if let (Some(r), GuardianState::Alive) = (rec, guardian_state(ctx, id, rec)) {
        if let Some(done) = kill_live_guardian(ctx, id, r, label.clone(), grace)? {
            return Ok(done);
        }
        // The guardian died without finishing: fall through and sweep.
    }
    let rec_now = ctx.tree(id)?;
    match sweep_tree(
        ctx,
        id,
        rec_now.as_ref().or(rec),
        false,
        grace,
        "kill",
        None,
    )? {
        Some(t) => Ok(t),
        None => Ok(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::LeftAlone,
            reason: "tree is finished or not ours".into(),
            targets: vec![],
            left_alive: live_count(ctx, id, rec_now.as_ref().or(rec)),
        }),
    }
}

/// `kill` of a tree whose guardian is alive: the guardian, proven by its recorded
/// identity, is asked to tear down and awaited. `None`: it died without finishing,
/// so the caller sweeps.
fn kill_live_guardian(
    ctx: &Context,
    id: &str,
    r: &TreeRecord,
    label: Option<String>,
    grace: Duration,
) -> Result<Option<TreeSweep>, RegistryError> {
    let me = ctx.signaller.me();
    let expected = Identity {
        boot_id: r.boot_id.clone(),
        pid: r.guardian.pid,
        starttime: r.guardian.starttime,
        pgid: r.guardian.pgid,
        sid: 0,
        uid: me.uid,
        pidfs_inode: r.guardian.pidfs_inode,
    };
    let mut unresponsive = false;
    let refusal = match ctx.signaller.prove_by_snapshot(&expected) {
        Ok(guardian) => {
            unresponsive = !terminate_guardian(ctx, id, &guardian, grace);
            None
        }
        Err(NotProven::Gone) => None,
        Err(NotProven::Refused(r)) => Some(r),
    };
    if let Some(r) = refusal {
        let _ = ctx.registry.append_audit(&audit_entry(
            id,
            "kill",
            &AuditEvent::Refusal {
                pid: expected.pid,
                refusal: r.clone(),
            },
        ));
        return Ok(Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::Refused,
            reason: format!("guardian not proven: {r}"),
            targets: vec![refused_target(expected.pid, &r)],
            left_alive: marker_scan(ctx.procfs(), me.uid)
                .get(id)
                .map_or(0, Vec::len),
        }));
    }
    let now = ctx.tree(id)?;
    if now
        .as_ref()
        .is_some_and(|t| t.state == StoredState::Finished)
    {
        return Ok(Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::GuardianTerminated,
            reason: "the guardian tore the tree down".into(),
            targets: vec![],
            left_alive: marker_scan(ctx.procfs(), me.uid)
                .get(id)
                .map_or(0, Vec::len),
        }));
    }
    if unresponsive {
        // Alive and holding its lock, so its tree is not ours to sweep: say so,
        // with the true count, rather than claim success.
        return Ok(Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::GuardianUnresponsive,
            reason: format!(
                "the guardian (pid {}) did not finish within {} s of SIGTERM",
                expected.pid,
                guardian_patience(grace).as_secs()
            ),
            targets: vec![],
            left_alive: live_count(ctx, id, now.as_ref().or(Some(r))),
        }));
    }
    Ok(None)
}

/// How long `kill` waits for a live guardian: its grace and kill cap, plus generous
/// slack.
fn guardian_patience(grace: Duration) -> Duration {
    grace + KILL_CAP + Duration::from_secs(10)
}

/// Sends a proven guardian SIGTERM (and SIGCONT when it is stopped: a stopped
/// guardian would hold SIGTERM pending forever), then waits for it to exit, up to its
/// grace and kill cap plus generous slack. True if it exited.
fn terminate_guardian(ctx: &Context, id: &str, guardian: &ProvenProcess, grace: Duration) -> bool {
    let stopped = matches!(guardian.state, 'T' | 't');
    let signals: &[Sig] = if stopped {
        &[Sig::Term, Sig::Cont]
    } else {
        &[Sig::Term]
    };
    for &sig in signals {
        let event = match ctx.signaller.signal(guardian, sig.into()) {
            Ok(delivery) => AuditEvent::Signal {
                target: guardian.identity.clone(),
                signal: sig,
                proof: guardian.proof.clone(),
                delivery,
            },
            Err(r) => AuditEvent::Refusal {
                pid: guardian.pid(),
                refusal: r,
            },
        };
        let _ = ctx.registry.append_audit(&audit_entry(id, "kill", &event));
    }
    let deadline = Instant::now() + guardian_patience(grace);
    while !guardian.has_exited() && Instant::now() < deadline {
        let fd = guardian.pidfd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        poll_until(&mut fds, Some(Instant::now() + Duration::from_millis(100)));
    }
    guardian.has_exited()
}

#[cfg(test)]
mod tests {
    //! The sweep's decisions against a fake /proc: which processes count as a tree's
    //! members, and whether an owner is still the recorded one.
    use super::*;
    use std::path::PathBuf;

    struct FakeProc(PathBuf);

    impl FakeProc {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "undertaker-reconcile-{}-{name}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            FakeProc(dir)
        }

        /// A process with a state, a start time, a real uid and an environment.
        fn process(&self, pid: i32, state: char, starttime: u64, uid: u32, env: &[u8]) {
            let dir = self.0.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let zeros = vec!["0"; 30].join(" ");
            let stat = format!(
                "{pid} (p) {state} 1 {pid} {pid} 0 -1 4194560 1370 0 0 0 2 1 0 0 20 0 1 0 \
                 {starttime} {zeros}\n"
            );
            std::fs::write(dir.join("stat"), stat).unwrap();
            let status = format!("Name:\tp\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
            std::fs::write(dir.join("status"), status).unwrap();
            std::fs::write(dir.join("environ"), env).unwrap();
        }

        fn procfs(&self) -> Procfs {
            Procfs::at(&self.0)
        }
    }

    impl Drop for FakeProc {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn marked(id: &str) -> Vec<u8> {
        format!("PATH=/bin\0{TREE_MARKER}={id}\0HOME=/x\0").into_bytes()
    }

    #[test]
    fn marker_scan_counts_live_marked_processes_of_our_uid_only() {
        let a = "ab".repeat(16);
        let b = "cd".repeat(16);
        let fake = FakeProc::new("markers");
        fake.process(10, 'S', 100, 1000, &marked(&a));
        fake.process(11, 'S', 101, 0, &marked(&a)); // another uid
        fake.process(12, 'Z', 102, 1000, &marked(&a)); // a zombie
        fake.process(13, 'S', 103, 1000, &marked("not-a-tree-id"));
        fake.process(14, 'S', 104, 1000, b"PATH=/bin\0");
        fake.process(15, 'R', 105, 1000, &marked(&b));
        fake.process(16, 'T', 106, 1000, &marked(&a)); // stopped still counts
        let found = marker_scan(&fake.procfs(), 1000);
        let expected: BTreeMap<String, Vec<(i32, u64)>> = [
            (a.clone(), vec![(10, 100), (16, 106)]),
            (b.clone(), vec![(15, 105)]),
        ]
        .into_iter()
        .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn an_owner_is_alive_only_as_the_recorded_process() {
        let fake = FakeProc::new("owner");
        fake.process(20, 'S', 500, 1000, b"");
        fake.process(21, 'Z', 501, 1000, b"");
        let procfs = fake.procfs();
        let owner = |pid: Option<i32>, starttime: Option<u64>| OwnerRecord {
            kind: OwnerKind::Pid,
            pid,
            starttime,
        };
        assert_eq!(
            owner_alive(&procfs, &owner(Some(20), Some(500))),
            Some(true)
        );
        // The number now belongs to a process that started later: the owner is gone.
        assert_eq!(
            owner_alive(&procfs, &owner(Some(20), Some(499))),
            Some(false)
        );
        assert_eq!(
            owner_alive(&procfs, &owner(Some(21), Some(501))),
            Some(false)
        );
        assert_eq!(owner_alive(&procfs, &owner(Some(22), Some(1))), Some(false));
        // Nothing recorded (an --owner-fd pipe): unknown, never "dead".
        assert_eq!(owner_alive(&procfs, &owner(None, None)), None);
    }
}
