//! One guarded tree as a value: [`Tree`].

use crate::escalation::Sig;
use crate::identity::TreeId;
use crate::linux::commands::record::Recorder;
use crate::linux::contain::cgroup::CgroupTree;
use crate::linux::contain::containment::{Containment, Placement};
use crate::linux::contain::spawn::Launch;
use crate::linux::kernel::sys;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::{Delivery, Members, ProvenProcess, Signaller};
use crate::linux::proof::teardown::{
    prove_descendants, AuditEvent, Escalation, Outcome, TeardownReport, TreeSource, KILL_CAP,
};
use crate::registry::OwnerRecord;
use crate::{RunError, RunOptions, Tier};
use rustix::event::PollFlags;
use rustix::fd::BorrowedFd;
use rustix::process::Signal;
use std::time::{Duration, Instant};

/// Why a tree is being torn down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    CommandExited,
    OwnerDied,
    Terminated,
}

/// What the process holding trees does for all of them. Reaping and waiting for
/// children are process-wide (`wait(-1)`, a signalfd for SIGCHLD), so a [`Tree`] asks
/// its host instead of doing them itself.
pub trait Host {
    /// Reaps every exited child of this process, calling `exited(pid, shell status)`
    /// for each. `Some(true)` when no child is left, `Some(false)` when some are,
    /// `None` when it could not tell.
    fn reap(&mut self, exited: &mut dyn FnMut(i32, Option<i32>)) -> Option<bool>;
    /// Blocks until a child of this process may have exited, one of `fds` is ready
    /// for its flags, or `deadline` passes.
    fn wait(&mut self, deadline: Instant, fds: &[(BorrowedFd<'_>, PollFlags)]);
}

/// One guarded tree.
///
/// A `Tree` holds everything one tree needs and nothing global: its id, its record
/// (lock file, registry row, queued audit entries), its containment (a cgroup, a PID
/// namespace, or none), its root (CMD, or the namespace init, as a pid with its
/// pidfd), CMD's exit status once known, and the escalation that tears it down. Its
/// life is `record` (the row exists and the lock is held before anything runs) →
/// `spawn` (CMD starts inside the containment) → `tear_down` → `finish` (the row is
/// marked finished, the lock and cgroup removed, the exit status returned); dropping
/// a tree that never finished still closes its record. No method takes a
/// process-global action: becoming a subreaper, the signal mask and signalfd, reaping
/// children other than through the root's pidfd, and watching the owner belong to the
/// process that holds the tree, which lends them through [`Host`]. One process may
/// therefore hold many trees.
pub struct Tree {
    id: TreeId,
    grace: Duration,
    containment: Containment,
    recorder: Recorder,
    live: Live,
}

/// What a tree learns about its processes while it lives.
#[derive(Default)]
struct Live {
    placement: Option<Placement>,
    root: Option<PidRef>,
    root_status: Option<i32>,
    /// The host had no child left at its last reap.
    no_children: bool,
    /// Calls of `members()` so far (the first may skip the /proc walk, see there).
    member_rounds: usize,
    /// A descendant walk ran after the cgroup was seen empty: from then on every
    /// descendant outside it had been found (the SIGKILL rounds walk again).
    walked_after_empty: bool,
    /// The namespace init was still alive after SIGKILL and the kill cap.
    init_stuck: bool,
}

impl Live {
    fn cgroup(&self) -> Option<&CgroupTree> {
        self.placement.as_ref().and_then(Placement::cgroup)
    }

    fn in_namespace(&self) -> bool {
        matches!(self.placement, Some(Placement::Pidns(_)))
    }

    /// Collects the root's status (through its pidfd, so it is never confused with a
    /// recycled pid), then lets the host reap every other exited child.
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
        if let Some(none_left) = no_children {
            self.no_children = none_left;
        }
    }
}

impl Tree {
    /// Takes the tree's lock and writes its row, before anything is started.
    pub fn record(
        opts: &RunOptions,
        id: TreeId,
        containment: Containment,
        signaller: &Signaller,
        owner: OwnerRecord,
    ) -> Result<Self, RunError> {
        let tier = containment.tier().into();
        let recorder = Recorder::start(opts, &id, tier, signaller, owner)?;
        Ok(Tree {
            id,
            grace: opts.grace,
            containment,
            recorder,
            live: Live::default(),
        })
    }

    /// The tree of a guardian that died, taken over by the process that forked it
    /// (see `sentinel`): no root (CMD died with its guardian), the tree's cgroup when
    /// it has one, and the existing record, finished once the tree is torn down.
    pub(crate) fn adopt(
        opts: &RunOptions,
        id: TreeId,
        signaller: &Signaller,
        cgroup: Option<CgroupTree>,
    ) -> Self {
        let recorder = Recorder::adopt(opts, &id, signaller);
        let placement = match cgroup {
            Some(cg) => Placement::Cgroup(cg),
            None => Placement::Subreaper,
        };
        Tree {
            id,
            grace: opts.grace,
            containment: Containment::Subreaper,
            recorder,
            live: Live {
                placement: Some(placement),
                ..Live::default()
            },
        }
    }

    pub fn id(&self) -> &TreeId {
        &self.id
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
            self.recorder
                .set_root(launch.signaller.procfs(), root.pid());
            self.recorder.idle();
        }
        self.live.root = Some(root);
        Ok(())
    }

    /// The process whose exit ends the tree's normal life: CMD, or the namespace init.
    pub fn root(&self) -> Option<&PidRef> {
        self.live.root.as_ref()
    }

    /// Forwards `sig` to the root through its pidfd (our unreaped child: its number
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

    /// Tears the tree down: the whole tree through the escalation, or, in a PID
    /// namespace, through the init (SIGTERM, then SIGKILL, which ends the namespace).
    pub fn tear_down(&mut self, cause: Cause, signaller: &Signaller, host: &mut dyn Host) {
        if self.live.in_namespace() {
            self.tear_down_namespace(cause, signaller);
            return;
        }
        // CMD exited alone (the usual end): no "reaping" state to show, one commit less.
        let empty = Escalating {
            live: &mut self.live,
            host,
            recorder: &self.recorder,
        }
        .is_empty();
        if !empty {
            self.recorder.reaping();
        }
        let report = self.escalate(signaller, host);
        if !report.empty {
            tracing::warn!(
                stuck = report.count(Outcome::Stuck),
                "tree {} not empty after teardown",
                self.id
            );
        }
        self.live.reap(host);
        if let Some(cg) = self.live.cgroup() {
            if report.empty {
                if let Err(e) = cg.remove(Duration::from_secs(2)) {
                    tracing::warn!("cannot remove cgroup {}: {e}", cg.path.display());
                }
            }
        }
    }

    fn escalate(&mut self, signaller: &Signaller, host: &mut dyn Host) -> TeardownReport {
        let recorder = &self.recorder;
        let mut log = |event: AuditEvent| {
            match &event {
                AuditEvent::Signal { target, signal, .. } => {
                    tracing::debug!(pid = target.pid, signal = signal.name(), "signalled")
                }
                AuditEvent::Refusal { pid, refusal } => tracing::warn!(pid, %refusal, "refused"),
            }
            recorder.audit(&event);
        };
        let mut source = Escalating {
            live: &mut self.live,
            host,
            recorder,
        };
        let report = Escalation::with_grace(self.grace).run(signaller, &mut source, &mut log);
        recorder.flush_audit();
        report
    }

    /// The pidns tier: SIGTERM to the init, which TERMs its whole namespace and exits
    /// after the grace period; if it has not exited by then (plus a margin), SIGKILL
    /// it, which makes the kernel kill the namespace.
    ///
    /// Every wait here is bounded. The init exits within the grace period (at once
    /// when it finds nothing left); the margin covers its exit. An init that cannot
    /// finish exiting is waiting in the kernel for a member stuck in uninterruptible
    /// sleep: it is reported stuck, not awaited.
    fn tear_down_namespace(&mut self, cause: Cause, signaller: &Signaller) {
        let Some(init) = &self.live.root else { return };
        if self.live.root_status.is_some() {
            return;
        }
        if cause != Cause::CommandExited {
            let _ = init.signal_own_child(signaller, Signal::TERM);
        }
        let margin = Duration::from_millis(500);
        let mut exited = init.poll_until(Instant::now() + self.grace + margin);
        if !exited {
            let _ = init.signal_own_child(signaller, Signal::KILL);
            exited = init.poll_until(Instant::now() + KILL_CAP);
        }
        if !exited {
            tracing::warn!(
                "tree {}: namespace init {} still alive {} s after SIGKILL: a member is stuck in the kernel",
                self.id,
                init.pid(),
                KILL_CAP.as_secs()
            );
            self.live.init_stuck = true;
        }
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
        self.recorder.finished(live.root_status);
        live.root_status.unwrap_or(125)
    }
}

/// A tree being torn down, with the host that reaps and waits for it.
struct Escalating<'a> {
    live: &'a mut Live,
    host: &'a mut dyn Host,
    recorder: &'a Recorder,
}

impl TreeSource for Escalating<'_> {
    fn members(&mut self, signaller: &Signaller) -> Members {
        self.live.reap(self.host);
        let live = &mut *self.live;
        let Some(placement) = live.placement.as_ref().filter(|p| p.cgroup().is_some()) else {
            return prove_descendants(signaller);
        };
        // Both views: a member that left our descendants (setsid + reparenting
        // elsewhere) is still in the cgroup, and one that moved out of the cgroup is
        // still our descendant. The cgroup is read from cgroup.procs; the descendant
        // walk costs a scan of all of /proc, so the first (SIGTERM) round skips it while
        // the cgroup is populated. Nothing is lost: a descendant outside the cgroup
        // becomes our child (we are its subreaper) once its in-cgroup ancestors die, and
        // then `needs_rescan` asks for a walk; every SIGKILL round walks anyway.
        let mut members = placement.members(signaller);
        let populated = placement.is_populated();
        let walk = live.member_rounds > 0 || !populated;
        live.member_rounds += 1;
        if walk {
            live.walked_after_empty |= !populated;
            members.merge(prove_descendants(signaller));
        }
        members
    }

    fn first_strike(
        &mut self,
        signaller: &Signaller,
        audit: &mut dyn FnMut(AuditEvent),
    ) -> Option<i32> {
        self.live.reap(self.host);
        // CMD is unreaped (no status yet), so its number is still its own; prove_child
        // pins it with a fresh pidfd and re-checks it is our child. The kernel then
        // resolves the group from that process (PIDFD_SIGNAL_PROCESS_GROUP), never
        // from a number that could have been recycled.
        if self.live.root_status.is_some() {
            return None;
        }
        let root_pid = self.live.root.as_ref()?.pid();
        let root = signaller.prove_child(None, root_pid).ok()?;
        // Only a group that cannot hold a stranger gets a group-wide signal: CMD's own
        // group in CMD's own session (no terminal involved). A process can only join a
        // group of its own session, and only CMD's descendants are ever in that one.
        // In the guardian's session (a terminal) any process of the session could have
        // joined: members are then proven and signalled one by one.
        if root.identity.pgid != root.pid() || root.identity.sid != root.pid() {
            return None;
        }
        match signaller.signal_group(&root, Signal::TERM) {
            Ok(delivery) => {
                audit(AuditEvent::Signal {
                    target: root.identity.clone(),
                    signal: Sig::Term,
                    proof: root.proof.clone(),
                    delivery,
                });
                (delivery == Delivery::Delivered).then_some(root.identity.pgid)
            }
            // Older kernels: the member walk signals everyone one by one anyway.
            Err(refusal) => {
                tracing::debug!(%refusal, "no process-group first strike");
                None
            }
        }
    }

    fn watches_members(&self) -> bool {
        // Emptiness is "no children and an unpopulated cgroup": SIGCHLD (signalfd) and
        // cgroup.events wake us for both. A member that is not our child exits
        // without either, but then its parent, a member too, is still there.
        false
    }

    fn needs_rescan(&mut self) -> bool {
        // A child of ours that is alive while the cgroup is empty lives outside it.
        let live = &*self.live;
        let Some(cg) = live.cgroup() else {
            return false;
        };
        !live.walked_after_empty && !live.no_children && !cg.is_populated()
    }

    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
        // Queued audit entries are written before anything blocks.
        self.recorder.flush_audit();
        let mut fds: Vec<(BorrowedFd<'_>, PollFlags)> = Vec::with_capacity(watch.len() + 1);
        if let Some(cg) = self.live.cgroup() {
            // Reading re-arms the POLLPRI notification.
            let _ = cg.is_populated();
            fds.push((cg.events_fd(), PollFlags::PRI));
        }
        fds.extend(watch.iter().map(|p| (p.pidfd(), PollFlags::IN)));
        self.host.wait(deadline, &fds);
        drop(fds);
        self.live.reap(self.host);
    }

    fn is_empty(&mut self) -> bool {
        self.live.reap(self.host);
        let populated = self
            .live
            .placement
            .as_ref()
            .is_some_and(Placement::is_populated);
        self.live.no_children && !populated
    }

    fn kill_all(&mut self) -> bool {
        self.live.cgroup().is_some_and(CgroupTree::kill)
    }
}

#[cfg(test)]
mod tests {
    //! A tree's life without privileges: record → spawn → finish, in the subreaper
    //! tier, with a host that lends nothing process-wide (this test binary's other
    //! children are not ours to reap).
    use super::*;
    use crate::linux::kernel::poll::poll_until;
    use crate::linux::kernel::procfs::Procfs;
    use crate::linux::kernel::sys::BlockedSignals;
    use crate::registry::lock::FileLock;
    use crate::registry::record_file;
    use crate::registry::{OwnerKind, Registry, StateDir, StoredState};
    use crate::OwnerSpec;
    use rustix::event::PollFd;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    /// Reaps nothing and reports no other child: the tree's root is reaped through
    /// its own pidfd, which is all a CMD that exits by itself needs.
    struct LendingNothing;

    impl Host for LendingNothing {
        fn reap(&mut self, _exited: &mut dyn FnMut(i32, Option<i32>)) -> Option<bool> {
            Some(true)
        }

        fn wait(&mut self, deadline: Instant, fds: &[(BorrowedFd<'_>, PollFlags)]) {
            let mut polled: Vec<_> = fds.iter().map(|(fd, f)| PollFd::new(fd, *f)).collect();
            poll_until(&mut polled, Some(deadline));
        }
    }

    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn record_spawn_finish() {
        let scratch = Scratch(
            std::env::temp_dir().join(format!("undertaker-tree-life-{}", std::process::id())),
        );
        let state = scratch.0.join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        let signaller = Signaller::for_current_process(Procfs::new()).unwrap();
        let me = signaller.me();
        let opts = RunOptions {
            command: ["sh", "-c", "exit 3"].map(Into::into).to_vec(),
            label: Some("life".into()),
            grace: Duration::from_secs(1),
            owner: OwnerSpec::Parent,
            tier: Tier::Subreaper,
            state_dir: Some(state.clone()),
        };
        let id = TreeId::generate(&me.boot_id, [7; 12]);
        let owner = OwnerRecord {
            kind: OwnerKind::Pid,
            pid: None,
            starttime: None,
        };
        let dir = StateDir::prepare(&state, me.uid).unwrap();
        let file = record_file::path_of(&dir, id.as_str());
        let row = || record_file::read(&file).unwrap().tree;

        // Recorded before anything runs: a record file, its lock held.
        let mut tree =
            Tree::record(&opts, id.clone(), Containment::Subreaper, &signaller, owner).unwrap();
        assert_eq!(row().state, StoredState::Running);
        assert!(FileLock::try_acquire(&file).unwrap().is_none(), "lock held");

        let signals = BlockedSignals::new(&[]).unwrap();
        tree.spawn(&Launch {
            opts: &opts,
            tree: &id,
            signaller: &signaller,
            nofile: None,
            signals: &signals,
            own_session: false,
        })
        .unwrap();
        let root = tree.root().map(PidRef::pid).unwrap();
        assert_eq!(row().root.map(|r| r.pid), Some(root));

        let mut host = LendingNothing;
        let exited = tree
            .root()
            .unwrap()
            .poll_until(Instant::now() + Duration::from_secs(30));
        assert!(exited, "CMD did not exit");
        tree.reap(&mut host);
        assert!(tree.root_exited());
        tree.tear_down(Cause::CommandExited, &signaller, &mut host);
        assert_eq!(tree.finish(), 3);

        assert_eq!(row().state, StoredState::Finished);
        // Finished: the lock is free, and the next command folds the file into a row.
        let registry = Registry::open(&dir, &me.boot_id).unwrap();
        assert!(registry.fold(&dir, &me.boot_id).is_empty());
        assert!(!file.exists());
        let done = registry.tree(id.as_str()).unwrap().unwrap();
        assert_eq!(done.state, StoredState::Finished);
        assert_eq!(done.exit_status, Some(3));
    }
}
