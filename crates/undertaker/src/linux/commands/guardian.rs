//! `undertaker run`: start CMD, watch it and its owner, tear the whole tree down.
//!
//! One thread, one poll loop over a signalfd, CMD's pidfd and the owner's pidfd or
//! pipe. The guardian is a child subreaper, so every descendant that escapes by
//! double-forking is reparented here and stays provable as our descendant. With the
//! cgroup tier the tree also lives in its own cgroup; the pidns tier hands the tree to
//! a namespace init (see `pidns`).

use crate::identity::TreeId;
use crate::linux::commands::record::Recorder;
use crate::linux::contain::cgroup::{self, CgroupTree};
use crate::linux::contain::dispositions::{self, OnSignal};
use crate::linux::contain::owner::Owner;
use crate::linux::contain::pidns;
use crate::linux::contain::spawn::{
    raise_fd_limit, spawn_directly_into, spawn_error, spawn_with_std,
};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::kernel::sys::{self, BlockedSignals};
use crate::linux::kernel::wait_status;
use crate::linux::proof::signal::{pidfd_exited, Signaller};
use crate::linux::proof::teardown::{
    prove_descendants, AuditEvent, Escalation, TeardownReport, TreeSource,
};
use crate::{RunError, RunOptions, Tier};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::process::{Signal, WaitId, WaitIdOptions, WaitOptions};
use std::time::{Duration, Instant};

/// How long SIGKILLed members may take to disappear before they count as stuck.
const KILL_CAP: Duration = Duration::from_secs(5);

/// Why the tree is being torn down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    CommandExited,
    OwnerDied,
    Terminated,
}

/// Exit status of CMD, kept as a shell would report it.
/// Everything the guardian owns while CMD runs.
struct Guardian {
    signals: BlockedSignals,
    signaller: Signaller,
    root_pid: i32,
    root_fd: OwnedFd,
    root_status: Option<i32>,
    no_children: bool,
    /// The tree's cgroup (cgroup tier).
    cgroup: Option<CgroupTree>,
    /// Calls of `members()` so far (the first may skip the /proc walk, see there).
    member_rounds: usize,
    /// A descendant walk ran after the cgroup was seen empty: from then on every
    /// descendant outside it had been found (the SIGKILL rounds walk again).
    walked_after_empty: bool,
}

impl Guardian {
    /// Collects CMD's status (through its pidfd, so it is never confused with a
    /// recycled pid) and reaps every other zombie that was reparented to us.
    fn reap(&mut self) {
        if self.root_status.is_none() {
            if let Ok(Some(st)) = rustix::process::waitid(
                WaitId::PidFd(self.root_fd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            ) {
                self.root_status = wait_status::of_waitid(&st);
            }
        }
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some((pid, st))) => {
                    // CMD was unreaped until this very call, so its number is its own.
                    if pid.as_raw_nonzero().get() == self.root_pid && self.root_status.is_none() {
                        self.root_status = wait_status::of_wait(&st);
                    }
                }
                Ok(None) => {
                    self.no_children = false;
                    return;
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::CHILD) => {
                    self.no_children = true;
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Forwards a signal to CMD through its pidfd (our unreaped child: its number
    /// cannot have been reused).
    fn forward(&self, sig: i32) {
        if self.root_status.is_some() {
            return;
        }
        if let Some(sig) = sys::any_signal(sig) {
            let _ = self.signaller.signal_own_child(self.root_fd.as_fd(), sig);
        }
    }
}

impl TreeSource for Guardian {
    fn members(
        &mut self,
        signaller: &Signaller,
    ) -> (
        Vec<crate::linux::proof::signal::ProvenProcess>,
        Vec<(i32, crate::ladder::Refusal)>,
    ) {
        self.reap();
        let Some(cg) = &self.cgroup else {
            return prove_descendants(signaller);
        };
        // Both views: a member that left our descendants (setsid + reparenting
        // elsewhere) is still in the cgroup, and one that moved out of the cgroup is
        // still our descendant. The cgroup is read from cgroup.procs; the descendant
        // walk costs a scan of all of /proc, so the first (SIGTERM) round skips it while
        // the cgroup is populated. Nothing is lost: a descendant outside the cgroup
        // becomes our child (we are its subreaper) once its in-cgroup ancestors die, and
        // then `needs_rescan` asks for a walk; every SIGKILL round walks anyway.
        let (mut proven, mut refused) = cg.members(signaller);
        let populated = cg.is_populated();
        let walk = self.member_rounds > 0 || !populated;
        self.member_rounds += 1;
        if walk {
            self.walked_after_empty |= !populated;
            let (descendants, d_refused) = prove_descendants(signaller);
            for p in descendants {
                if !proven.iter().any(|q| q.pid() == p.pid()) {
                    proven.push(p);
                }
            }
            refused.extend(d_refused);
        }
        (proven, refused)
    }

    fn first_strike(
        &mut self,
        signaller: &Signaller,
        audit: &mut dyn FnMut(AuditEvent),
    ) -> Option<i32> {
        self.reap();
        // CMD is unreaped (no status yet), so its number is still its own; prove_child
        // pins it with a fresh pidfd and re-checks it is our child. The kernel then
        // resolves the group from that process (PIDFD_SIGNAL_PROCESS_GROUP), never
        // from a number that could have been recycled.
        if self.root_status.is_some() {
            return None;
        }
        let root = signaller.prove_child(None, self.root_pid).ok()?;
        if root.identity.pgid != root.pid() {
            return None;
        }
        match signaller.signal_group(&root, Signal::TERM) {
            Ok(delivery) => {
                audit(AuditEvent::Signal {
                    target: root.identity.clone(),
                    signal: "SIGTERM",
                    proof: root.proof.clone(),
                    delivery,
                });
                (delivery == crate::linux::proof::signal::Delivery::Delivered)
                    .then_some(root.identity.pgid)
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
        let Some(cg) = &self.cgroup else {
            return false;
        };
        !self.walked_after_empty && !self.no_children && !cg.is_populated()
    }

    fn wait(&mut self, deadline: Instant, watch: &[&crate::linux::proof::signal::ProvenProcess]) {
        let now = Instant::now();
        if now < deadline {
            let timeout = deadline - now;
            let ts = rustix::time::Timespec {
                tv_sec: timeout.as_secs() as i64,
                tv_nsec: timeout.subsec_nanos() as i64,
            };
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(watch.len() + 2);
            let sfd = self.signals.fd();
            fds.push(PollFd::new(&sfd, PollFlags::IN));
            let events = self.cgroup.as_ref().map(|cg| {
                // Reading re-arms the POLLPRI notification.
                let _ = cg.is_populated();
                cg.events_fd()
            });
            if let Some(fd) = &events {
                fds.push(PollFd::new(fd, PollFlags::PRI));
            }
            let pidfds: Vec<_> = watch.iter().map(|p| p.pidfd()).collect();
            for fd in &pidfds {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            let _ = poll(&mut fds, Some(&ts));
        }
        let _ = self.signals.drain();
        self.reap();
    }

    fn is_empty(&mut self) -> bool {
        self.reap();
        self.no_children && self.cgroup.as_ref().is_none_or(|cg| !cg.is_populated())
    }

    fn kill_all(&mut self) -> bool {
        self.cgroup.as_ref().is_some_and(|cg| cg.kill())
    }
}

/// The containment actually used for a tree.
enum Chosen {
    Cgroup(cgroup::Location),
    Pidns,
    Subreaper,
}

impl Chosen {
    fn tier(&self) -> Tier {
        match self {
            Chosen::Cgroup(_) => Tier::Cgroup,
            Chosen::Pidns => Tier::Pidns,
            Chosen::Subreaper => Tier::Subreaper,
        }
    }
}

/// Picks the tier: `auto` is cgroup where a writable cgroup v2 place exists, else
/// subreaper; pidns is opt-in. An explicit tier that is unavailable is an error.
fn choose_tier(requested: Tier) -> Result<Chosen, RunError> {
    match requested {
        Tier::Subreaper => Ok(Chosen::Subreaper),
        Tier::Auto => match cgroup::locate() {
            Ok(loc) => Ok(Chosen::Cgroup(loc)),
            Err(why) => {
                tracing::debug!("cgroup tier unavailable ({why}); using subreaper");
                Ok(Chosen::Subreaper)
            }
        },
        Tier::Cgroup => {
            cgroup::locate()
                .map(Chosen::Cgroup)
                .map_err(|why| RunError::TierUnavailable {
                    tier: Tier::Cgroup,
                    why,
                })
        }
        Tier::Pidns => {
            pidns::probe()
                .map(|()| Chosen::Pidns)
                .map_err(|why| RunError::TierUnavailable {
                    tier: Tier::Pidns,
                    why,
                })
        }
    }
}

/// What one wake-up of the guardian's loop brought.
struct Received {
    /// SIGTERM (or another teardown signal) arrived: tear the tree down.
    terminate: bool,
    /// Signals to forward to CMD.
    forward: Vec<i32>,
}

/// Blocks until our signalfd, `child` (CMD, or the namespace init) or the owner is
/// ready, then drains our signals. `None` if poll itself failed: the caller tears
/// down rather than spin.
fn wait_for_event(
    signals: &BlockedSignals,
    child: BorrowedFd<'_>,
    owner: &Owner,
) -> Option<Received> {
    let sfd = signals.fd();
    let mut fds = Vec::with_capacity(3);
    fds.push(PollFd::new(&sfd, PollFlags::IN));
    fds.push(PollFd::new(&child, PollFlags::IN));
    if let Some(p) = owner.poll_fd() {
        fds.push(p);
    }
    match poll(&mut fds, None) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(e) => {
            tracing::error!("poll failed: {e}; tearing down");
            return None;
        }
    }
    let mut got = Received {
        terminate: false,
        forward: Vec::new(),
    };
    for sig in signals.drain().unwrap_or_default() {
        match dispositions::on_signal(sig) {
            OnSignal::Reap => {}
            OnSignal::Teardown => got.terminate = true,
            OnSignal::Forward => got.forward.push(sig),
        }
    }
    Some(got)
}

/// Runs CMD under guard and returns the exit status undertaker should exit with.
pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    // First, before anything can fork: no inherited disposition may drop a signal or
    // auto-reap CMD, and no signal may end the guardian (see `dispositions`).
    let signals =
        dispositions::take_all().map_err(|e| RunError::Setup(format!("signalfd: {e}")))?;
    let procfs = Procfs::new();
    let mut owner = Owner::resolve(&opts.owner)?;
    let signaller = Signaller::for_current_process(procfs.clone())
        .map_err(|e| RunError::Setup(format!("reading /proc/self: {e}")))?;
    let boot_id = signaller.me().boot_id.clone();
    let mut random = [0u8; 12];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
        .map_err(|e| RunError::Setup(format!("getrandom: {e}")))?;
    let tree = TreeId::generate(&boot_id, random);

    let chosen = choose_tier(opts.tier)?;
    tracing::debug!(tier = %chosen.tier(), "tier chosen");
    let nofile = raise_fd_limit();
    if !matches!(chosen, Chosen::Pidns) {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|e| RunError::Setup(format!("PR_SET_CHILD_SUBREAPER: {e}")))?;
    }

    let owner_record = owner.record(&opts.owner, &procfs);
    let mut recorder = Recorder::start(
        opts,
        &tree,
        chosen.tier().as_str(),
        &signaller,
        owner_record,
    )?;

    // Last check before starting anything: a dead owner means CMD must never run.
    if owner.gone() {
        return Err(RunError::OwnerGone(owner.describe()));
    }

    let cgroup_tree = match &chosen {
        Chosen::Pidns => {
            recorder.idle();
            let result = run_pidns(opts, &tree, &mut owner, signaller, signals, nofile);
            if let Ok(code) = &result {
                recorder.finished(Some(*code));
            }
            return result;
        }
        Chosen::Subreaper => None,
        Chosen::Cgroup(loc) => {
            let me = signaller.me().pid;
            let starttime = procfs
                .stat(me)
                .map_err(|e| RunError::Setup(format!("reading /proc/self/stat: {e}")))?
                .starttime;
            let cg = CgroupTree::create(loc, &tree, me, starttime).map_err(|why| {
                RunError::TierUnavailable {
                    tier: Tier::Cgroup,
                    why,
                }
            })?;
            recorder.set_cgroup(&cg.path, cg.id);
            tracing::debug!(path = %cg.path.display(), id = cg.id, "tree cgroup created");
            Some(cg)
        }
    };
    let (program, _) = opts
        .command
        .split_first()
        .ok_or_else(|| RunError::Usage("no command given".into()))?;
    let direct = match &cgroup_tree {
        Some(cg) => {
            spawn_directly_into(cg, opts, &tree, signaller.me().pgrp, nofile).map_err(|e| {
                let _ = cg.remove(Duration::ZERO);
                spawn_error(program, e)
            })?
        }
        None => None,
    };
    let join_fd = match &cgroup_tree {
        _ if direct.is_some() => None,
        Some(cg) => Some(cg.open_procs_for_join().map_err(|e| {
            let _ = cg.remove(Duration::ZERO);
            RunError::Setup(format!("opening {}/cgroup.procs: {e}", cg.path.display()))
        })?),
        None => None,
    };

    let (root_pid, root_fd) = match direct {
        Some(spawned) => spawned,
        None => spawn_with_std(opts, &tree, &signaller, nofile, &cgroup_tree, join_fd)?,
    };
    recorder.set_root(&procfs, root_pid);
    recorder.idle();
    tracing::debug!(tree = %tree, root_pid, owner = %owner.describe(), label = ?opts.label, "guarding");

    let mut guardian = Guardian {
        signals,
        signaller,
        root_pid,
        root_fd,
        root_status: None,
        no_children: false,
        cgroup: cgroup_tree,
        member_rounds: 0,
        walked_after_empty: false,
    };

    let cause = loop {
        let Some(got) = wait_for_event(&guardian.signals, guardian.root_fd.as_fd(), &owner) else {
            break Cause::Terminated;
        };
        for sig in got.forward {
            guardian.forward(sig);
        }
        guardian.reap();
        if got.terminate {
            break Cause::Terminated;
        }
        if guardian.root_status.is_some() || pidfd_exited(guardian.root_fd.as_fd()) {
            break Cause::CommandExited;
        }
        if owner.gone() {
            break Cause::OwnerDied;
        }
    };
    tracing::debug!(?cause, "tearing down tree {tree}");
    sys::reclaim_foreground(guardian.signaller.me().pgrp);

    // CMD exited alone (the usual end): no "reaping" state to show, one commit less.
    if !guardian.is_empty() {
        recorder.reaping();
    }
    let report = teardown(&mut guardian, opts.grace, &recorder);
    if !report.empty {
        tracing::warn!(
            stuck = report.count(crate::linux::proof::teardown::Outcome::Stuck),
            "tree {tree} not empty after teardown"
        );
    }
    guardian.reap();
    if let Some(cg) = &guardian.cgroup {
        if report.empty {
            if let Err(e) = cg.remove(Duration::from_secs(2)) {
                tracing::warn!("cannot remove cgroup {}: {e}", cg.path.display());
            }
        }
    }
    recorder.finished(guardian.root_status);
    // Only a CMD stuck in the kernel past the kill cap leaves no status to report.
    Ok(guardian.root_status.unwrap_or(125))
}

fn teardown(guardian: &mut Guardian, grace: Duration, recorder: &Recorder) -> TeardownReport {
    let escalation = Escalation {
        grace,
        kill_cap: KILL_CAP,
    };
    let signaller = guardian.signaller.clone();
    let mut log = |event: AuditEvent| {
        match &event {
            AuditEvent::Signal { target, signal, .. } => {
                tracing::debug!(pid = target.pid, signal, "signalled")
            }
            AuditEvent::Refusal { pid, refusal } => tracing::warn!(pid, %refusal, "refused"),
        }
        recorder.audit(&event);
    };
    let report = escalation.run(
        &signaller,
        &mut FlushBeforeWait {
            inner: guardian,
            recorder,
        },
        &mut log,
    );
    recorder.flush_audit();
    report
}

/// The guardian as a tree source, writing queued audit entries before every wait.
struct FlushBeforeWait<'a> {
    inner: &'a mut Guardian,
    recorder: &'a Recorder,
}

impl TreeSource for FlushBeforeWait<'_> {
    fn members(
        &mut self,
        signaller: &Signaller,
    ) -> (
        Vec<crate::linux::proof::signal::ProvenProcess>,
        Vec<(i32, crate::ladder::Refusal)>,
    ) {
        self.inner.members(signaller)
    }
    fn wait(&mut self, deadline: Instant, watch: &[&crate::linux::proof::signal::ProvenProcess]) {
        self.recorder.flush_audit();
        self.inner.wait(deadline, watch)
    }
    fn is_empty(&mut self) -> bool {
        self.inner.is_empty()
    }
    fn kill_all(&mut self) -> bool {
        self.inner.kill_all()
    }
    fn first_strike(
        &mut self,
        signaller: &Signaller,
        audit: &mut dyn FnMut(AuditEvent),
    ) -> Option<i32> {
        self.inner.first_strike(signaller, audit)
    }
    fn needs_rescan(&mut self) -> bool {
        self.inner.needs_rescan()
    }
    fn watches_members(&self) -> bool {
        self.inner.watches_members()
    }
}

/// The pidns tier: the init (PID 1 of the tree's namespace) runs CMD; we watch the
/// init, the owner and our signals. Teardown: SIGTERM to the init, which TERMs its
/// whole namespace and exits after the grace period; if it has not exited by then
/// (plus a margin), SIGKILL it, which makes the kernel kill the namespace.
fn run_pidns(
    opts: &RunOptions,
    tree: &TreeId,
    owner: &mut Owner,
    signaller: Signaller,
    signals: BlockedSignals,
    nofile: Option<u64>,
) -> Result<i32, RunError> {
    let spec = pidns::InitSpec {
        command: &opts.command,
        tree,
        grace: opts.grace,
        nofile,
    };
    if opts.command.is_empty() {
        return Err(RunError::Usage("no command given".into()));
    }
    let init = pidns::start(&spec, &signals).map_err(|why| RunError::TierUnavailable {
        tier: Tier::Pidns,
        why,
    })?;
    tracing::debug!(tree = %tree, init_pid = init.pid, owner = %owner.describe(), "guarding in a pid namespace");
    let cause = loop {
        let Some(got) = wait_for_event(&signals, init.pidfd.as_fd(), owner) else {
            break Cause::Terminated;
        };
        // The init forwards these to CMD.
        for sig in got.forward.into_iter().filter_map(sys::any_signal) {
            let _ = signaller.signal_own_child(init.pidfd.as_fd(), sig);
        }
        if got.terminate {
            break Cause::Terminated;
        }
        if pidfd_exited(init.pidfd.as_fd()) {
            break Cause::CommandExited;
        }
        if owner.gone() {
            break Cause::OwnerDied;
        }
    };
    tracing::debug!(?cause, "tearing down tree {tree}");
    // Every wait here is bounded. The init TERMs its namespace and exits within the
    // grace period (at once when it finds nothing left); the margin covers its exit.
    // An init that cannot finish exiting is waiting in the kernel for a member stuck
    // in uninterruptible sleep: it is reported stuck, not awaited.
    if cause != Cause::CommandExited {
        let _ = signaller.signal_own_child(init.pidfd.as_fd(), Signal::TERM);
    }
    let mut exited = wait_exit(&init.pidfd, opts.grace + Duration::from_millis(500));
    if !exited {
        let _ = signaller.signal_own_child(init.pidfd.as_fd(), Signal::KILL);
        exited = wait_exit(&init.pidfd, KILL_CAP);
    }
    sys::reclaim_foreground(signaller.me().pgrp);
    if !exited {
        tracing::warn!(
            "tree {tree}: namespace init {} still alive {} s after SIGKILL: a member is stuck in the kernel",
            init.pid,
            KILL_CAP.as_secs()
        );
        return Ok(125);
    }
    // The init's status is CMD's (or 128+N if the init itself was killed).
    Ok(pidns::wait_pidfd(&init.pidfd).unwrap_or(125))
}

/// Waits until the process behind `pidfd` exits, up to `limit`. True if it did.
fn wait_exit(pidfd: &OwnedFd, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    loop {
        if pidfd_exited(pidfd.as_fd()) {
            return true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let ts = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        let _ = poll(&mut fds, Some(&ts));
    }
}
