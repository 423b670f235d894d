//! One guarded tree as a value: [`Tree`], the one tree model behind `run` (one tree,
//! anchored on CMD) and `supervise` (many trees in one process).

mod host;
mod members;
mod namespace;
mod orphaned;
pub(crate) mod portable;
mod taken;
mod teardown;

use crate::identity::TreeId;
use crate::linux::commands::record::{GuardianKind, Recorder};
use crate::linux::contain::cgroup::CgroupTree;
use crate::linux::contain::containment::{Containment, Placement};
use crate::linux::contain::spawn::Launch;
use crate::linux::kernel::sys;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::{ProvenProcess, Signaller};
use crate::registry::OwnerRecord;
use crate::{GuardOptions, RunError, Tier};
use rustix::fd::BorrowedFd;
use std::time::Duration;

use host::Bystander;
pub use host::{Cause, Host};
pub(crate) use members::{Anchors, Orphans};
pub(crate) use portable::TRACK_EVERY;
pub(crate) use teardown::{tear_down_together, Torn};

/// How long a host waits, idle beside a new tree, before it returns start-up's freed
/// heap to the kernel ([`Tree::settle`]; the sentinel likewise).
pub(crate) const SETTLE_AFTER: Duration = Duration::from_millis(20);

/// One guarded tree.
///
/// A `Tree` holds everything one tree needs and nothing global: its id, its record
/// (lock file, registry row, queued audit entries), its containment (a cgroup, a PID
/// namespace, or none), its anchors (CMD as a pid with its pidfd, or the processes a
/// host handed over), CMD's exit status once known, and the escalation that tears it
/// down. Its life is `create` (the row exists and the lock is held before anything
/// runs) → `spawn` (CMD starts inside the containment) or `take` (handed-over
/// processes move into it) → `tear_down` → `finish` (the row is marked finished, the
/// lock and cgroup removed, the exit status returned); dropping a tree that never
/// finished still closes its record. No method takes a process-global action:
/// becoming a subreaper, the signal mask and signalfd, reaping children other than
/// through the root's pidfd, and watching the owner belong to the process that holds
/// the tree, which lends them through [`Host`]. One process may therefore hold many
/// trees; each finds its members through its own [`Anchors`].
pub struct Tree {
    id: TreeId,
    label: Option<String>,
    grace: Duration,
    containment: Containment,
    recorder: Recorder,
    anchors: Anchors,
    live: Live,
}

/// What a tree learns about its processes while it lives.
#[derive(Default)]
struct Live {
    placement: Option<Placement>,
    root: Option<PidRef>,
    root_status: Option<i32>,
    /// Nothing of the tree started before this (the marker proof's lower bound).
    root_starttime: u64,
    /// The host had no child left at its last reap.
    no_children: bool,
    /// Calls of `members()` so far (the first may skip the /proc walk, see there).
    member_rounds: usize,
    /// A descendant walk ran after the cgroup was seen empty: from then on every
    /// descendant outside it had been found (the SIGKILL rounds walk again).
    walked_after_empty: bool,
    /// A process in the tree's cgroup was refused (a dead guardian's tree only: see
    /// [`Anchors::Left`]): no cgroup.kill then.
    refused_in_cgroup: bool,
    /// The namespace init was still alive after SIGKILL and the kill cap.
    init_stuck: bool,
    /// The root's exit (or the taken leader's) was handled by the host.
    root_done: bool,
    /// The tree's cgroup was removed (teardown's end, then `finish`, ask once each).
    cgroup_removed: bool,
    /// The root's status went out (a supervisor's `exited` event is sent once).
    exit_announced: bool,
    /// The portable tier: where its member record goes, then what the core tracks.
    member_record: Option<std::path::PathBuf>,
    portable: Option<portable::Tracking>,
}

impl Live {
    fn cgroup(&self) -> Option<&CgroupTree> {
        self.placement.as_ref().and_then(Placement::cgroup)
    }

    fn in_namespace(&self) -> bool {
        matches!(self.placement, Some(Placement::Pidns(_)))
    }

    fn is_populated(&self) -> bool {
        self.placement.as_ref().is_some_and(Placement::is_populated)
    }

    /// Collects the root's status (through its pidfd, so it is never confused with a
    /// recycled pid, or as the host reaped it for us), then lets the host reap every
    /// other exited child.
    fn reap(&mut self, host: &mut dyn Host) {
        if self.root_status.is_none() {
            self.root_status = self.root.as_ref().and_then(PidRef::try_wait_status);
        }
        let root_pid = self.root.as_ref().map(PidRef::pid);
        let status = &mut self.root_status;
        let no_children = host.reap(&mut |pid, st| {
            // The root was unreaped until this very call, so its number is its own.
            if Some(pid) == root_pid && status.is_none() {
                *status = st;
            }
        });
        if let (None, Some(pid)) = (self.root_status, root_pid) {
            self.root_status = host.reaped_status(pid).flatten();
        }
        if let Some(none_left) = no_children {
            self.no_children = none_left;
        }
    }
}

impl Tree {
    /// Takes the tree's lock and writes its row, before anything is started. The
    /// tree is anchored on the command it will `spawn`, alone in its host; see
    /// [`Tree::among_many`] and [`Tree::take`] for the other member rules.
    pub fn create(
        opts: &GuardOptions,
        id: TreeId,
        containment: Containment,
        signaller: &Signaller,
        owner: OwnerRecord,
        kind: GuardianKind<'_>,
    ) -> Result<Self, RunError> {
        let tier = containment.tier().into();
        let recorder = Recorder::start(opts, &id, tier, signaller, owner, kind)?;
        let member_record = matches!(containment, Containment::Portable)
            .then(|| portable::members_path(opts.state_dir.as_deref(), &id))
            .flatten();
        Ok(Tree {
            id,
            label: opts.label.clone(),
            grace: opts.grace,
            containment,
            recorder,
            anchors: Anchors::Command(Orphans::AllOfHost),
            live: Live {
                member_record,
                ..Live::default()
            },
        })
    }

    /// The same tree in a host that holds others: its orphans are the ones that
    /// carry its marker.
    pub(crate) fn among_many(mut self) -> Self {
        self.anchors = Anchors::Command(Orphans::Marked);
        self
    }

    /// The portable tier: one look for new members (the guardian calls it every
    /// [`TRACK_EVERY`] while the tree lives); `false` in the other tiers.
    pub(crate) fn track(&mut self) -> bool {
        self.live
            .portable
            .as_mut()
            .map(portable::Tracking::track)
            .is_some()
    }

    /// A fresh tree id: the boot id's prefix and 96 random bits.
    pub(crate) fn new_id(signaller: &Signaller) -> std::io::Result<TreeId> {
        let mut random = [0u8; 12];
        rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
        Ok(TreeId::generate(&signaller.me().boot_id, random))
    }

    pub fn id(&self) -> &TreeId {
        &self.id
    }

    /// Records who started the tree (see [`Recorder::set_start`]).
    pub(crate) fn record_start(&self, start: &crate::registry::StartRecord) {
        self.recorder.set_start(start);
    }

    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    pub fn tier(&self) -> Tier {
        self.containment.tier()
    }

    /// Sets up the containment and starts CMD inside it (`launch.tree` is this tree's
    /// id). Before CMD runs the record says where the tree lives; right after, who
    /// its root is.
    pub fn spawn(&mut self, launch: &Launch<'_>) -> Result<(), RunError> {
        let mut placement = Placement::set_up(&self.containment, &self.id, launch.signaller)?;
        if let Some(cg) = placement.cgroup() {
            self.recorder.set_cgroup(&cg.path, cg.id);
        }
        let namespace = matches!(placement, Placement::Pidns(_));
        if namespace {
            // The init is forked from us: let it start small.
            self.recorder.idle();
        }
        let root = placement.spawn(launch)?;
        self.live.placement = Some(placement);
        if !namespace {
            let procfs = launch.signaller.procfs();
            self.recorder.set_root(procfs, root.pid(), Some(root.fd()));
            if self.anchors_marked_orphans() {
                self.live.root_starttime = procfs.stat(root.pid()).map_or(0, |s| s.starttime);
            }
        }
        if matches!(self.live.placement, Some(Placement::Portable)) {
            let record = self.live.member_record.clone();
            let tracking =
                portable::Tracking::start(launch.signaller, &self.id, root.pid(), None, record);
            self.live.portable = Some(tracking);
        }
        self.live.root = Some(root);
        Ok(())
    }

    /// Before the host idles beside the tree: returns free heap to the kernel, so an
    /// idle host's resident set is its code and little else. Hosts call it once the
    /// tree has lived a moment ([`SETTLE_AFTER`]), so a command that ends at once
    /// does not wait for it.
    pub(crate) fn settle(&self) {
        self.recorder.idle();
    }

    fn anchors_marked_orphans(&self) -> bool {
        matches!(self.anchors, Anchors::Command(Orphans::Marked))
    }

    /// The process whose exit ends the tree's normal life: CMD, or the namespace init.
    pub fn root(&self) -> Option<&PidRef> {
        self.live.root.as_ref()
    }

    /// The pid the tree is known by: its root, or the leader it was taken with.
    pub(crate) fn root_pid(&self) -> Option<i32> {
        match &self.anchors {
            Anchors::Command(_) | Anchors::Left { .. } => self.live.root.as_ref().map(PidRef::pid),
            Anchors::Taken { proven, .. } => proven.first().map(ProvenProcess::pid),
        }
    }

    /// The group a `register` took, if this tree was registered.
    pub(crate) fn group(&self) -> Option<i32> {
        match &self.anchors {
            Anchors::Taken { group, .. } => *group,
            Anchors::Command(_) | Anchors::Left { .. } => None,
        }
    }

    /// True for a tree the host handed over (`register`/`adopt`).
    pub(crate) fn is_taken(&self) -> bool {
        matches!(self.anchors, Anchors::Taken { .. })
    }

    /// True when `pid` is this tree's root or one of its live taken processes.
    pub(crate) fn anchors_pid(&self, pid: i32) -> bool {
        match &self.anchors {
            Anchors::Command(_) | Anchors::Left { .. } => self.root_pid() == Some(pid),
            Anchors::Taken { proven, .. } => {
                proven.iter().any(|a| a.pid() == pid && !a.has_exited())
            }
        }
    }

    /// True once every taken process has exited (never for a command's tree).
    pub(crate) fn taken_all_exited(&self) -> bool {
        match &self.anchors {
            Anchors::Taken { proven, .. } => proven.iter().all(ProvenProcess::has_exited),
            Anchors::Command(_) | Anchors::Left { .. } => false,
        }
    }

    /// The fd whose readability means the root (or the taken leader) exited, until
    /// the host has handled that exit ([`Tree::root_handled`]).
    pub(crate) fn root_fd(&self) -> Option<BorrowedFd<'_>> {
        if self.live.root_done {
            return None;
        }
        match &self.anchors {
            Anchors::Command(_) | Anchors::Left { .. } => self.live.root.as_ref().map(PidRef::fd),
            Anchors::Taken { proven, .. } => proven.first().map(ProvenProcess::pidfd),
        }
    }

    pub(crate) fn root_handled(&mut self) {
        self.live.root_done = true;
    }

    /// The tree's cgroup, in the cgroup tier.
    pub(crate) fn cgroup(&self) -> Option<&CgroupTree> {
        self.live.cgroup()
    }

    /// True while the tree's cgroup reports live members.
    pub(crate) fn is_populated(&self) -> bool {
        self.live.is_populated()
    }

    /// cannot have been reused). The namespace init passes it on to CMD.
    pub fn forward(&self, signaller: &Signaller, sig: i32) {
        if self.live.root_status.is_some() {
            return;
        }
        if let (Some(root), Some(sig)) = (&self.live.root, sys::any_signal(sig)) {
            let _ = root.signal_own_child(signaller, sig);
        }
    }

    /// Collects the root's status through its pidfd, then lets the host reap every
    /// other exited child.
    pub fn reap(&mut self, host: &mut dyn Host) {
        self.live.reap(host);
    }

    /// True once the root has exited.
    pub fn root_exited(&self) -> bool {
        self.live.root_status.is_some() || self.live.root.as_ref().is_some_and(PidRef::exited)
    }

    /// The root's pid and status, once collected, the first time they are asked for
    /// (a supervisor announces a root's exit once, as soon as it knows it).
    pub(crate) fn exit_to_announce(&mut self) -> Option<(i32, i32)> {
        let pid = self.live.root.as_ref().map(PidRef::pid)?;
        let status = self
            .live
            .root_status
            .filter(|_| !self.live.exit_announced)?;
        self.live.exit_announced = true;
        Some((pid, status))
    }

    /// Tears the tree down: the whole tree through the escalation, or, in a PID
    /// namespace, through the init (SIGTERM, then SIGKILL, which ends the namespace).
    /// Returns the members still alive afterwards.
    pub fn tear_down(&mut self, cause: Cause, signaller: &Signaller, host: &mut dyn Host) -> usize {
        self.note_cause(cause);
        if self.live.in_namespace() {
            self.tear_down_namespace(cause, signaller, host);
            return usize::from(self.live.init_stuck);
        }
        if let Some(tracking) = self.live.portable.as_mut() {
            let report = tracking.tear_down(self.grace);
            return self.torn_portable(&report, host);
        }
        let grace = self.grace;
        tear_down_together(&mut [self], false, grace, signaller, host).left()
    }

    /// Why the tree is torn down, in its audit log (queued: written with the first
    /// batch of signals, not before them).
    fn note_cause(&self, cause: Cause) {
        if let Some(note) = cause.audit_note() {
            self.recorder.audit_line(crate::registry::AuditEntry {
                actor: "guardian".into(),
                event: "note".into(),
                message: Some(note.into()),
                ..Default::default()
            });
        }
    }

    fn remove_cgroup(&mut self) {
        if self.live.cgroup_removed {
            return;
        }
        if let Some(cg) = self.live.cgroup() {
            // The usual end, an emptied leaf, takes one rmdir; the kernel refuses it
            // (EBUSY) while a process or a child cgroup is left, and then the careful
            // way below decides.
            if matches!(
                rustix::fs::rmdir(&cg.path),
                Ok(()) | Err(rustix::io::Errno::NOENT)
            ) {
                self.live.cgroup_removed = true;
                return;
            }
            if cg.path.exists() && !cg.is_populated() {
                match cg.remove(Duration::from_secs(2)) {
                    Ok(()) => self.live.cgroup_removed = true,
                    Err(e) => tracing::warn!("cannot remove cgroup {}: {e}", cg.path.display()),
                }
            }
        }
    }

    /// Stops guarding the tree, signalling nothing: its record says released (never
    /// a candidate for `sweep` or `kill`); an emptied cgroup is removed (the caller
    /// moved the members out).
    pub(crate) fn release(mut self) {
        self.remove_cgroup();
        self.recorder.released();
    }

    /// Records the end and returns the status undertaker exits with: CMD's (the
    /// namespace init's is CMD's, or 128+N if the init itself was killed). Only a
    /// root stuck in the kernel past the kill cap leaves no status: then 125.
    pub fn finish(mut self) -> i32 {
        let live = &self.live;
        if live.in_namespace() {
            let status = match live.init_stuck {
                true => None,
                false => live
                    .root_status
                    .or_else(|| live.root.as_ref().and_then(PidRef::wait_status)),
            };
            let code = status.unwrap_or(125);
            self.recorder.finished(Some(code));
            return code;
        }
        self.remove_cgroup();
        let live = &self.live;
        if let Some(tracking) = &live.portable {
            tracking.forget();
        }
        self.recorder.finished(live.root_status);
        live.root_status.unwrap_or(125)
    }
}

#[cfg(test)]
mod tests;
