//! `undertaker run`: start CMD, watch it and its owner, tear the whole tree down.
//!
//! [`run`] reads as its steps: owner → choose the containment → take over the process
//! → record → spawn → wait → tear down → exit status. One thread, one poll loop over
//! a signalfd, CMD's pidfd and the owner's pidfd or pipe. What is global to the
//! process (child subreaper, signal mask and signalfd, reaping orphans, the owner
//! watch) lives here; everything about the tree itself lives in [`Tree`].

use crate::identity::TreeId;
use crate::linux::commands::heal;
use crate::linux::commands::sentinel::{self, Split};
use crate::linux::commands::tree::{Cause, Host, Tree};
use crate::linux::contain::containment::Containment;
use crate::linux::contain::dispositions::{self, OnSignal};
use crate::linux::contain::owner::Owner;
use crate::linux::contain::spawn::{cmd_gets_own_session, raise_fd_limit, Launch};
use crate::linux::kernel::poll::{self, poll_until};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::kernel::sys::{self, BlockedSignals};
use crate::linux::kernel::wait_status;
use crate::linux::proof::signal::Signaller;
use crate::{RunError, RunOptions, Tier};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::BorrowedFd;
use rustix::process::WaitOptions;
use std::time::Instant;

/// What the guardian process holds for its tree: the signalfd of the signals it
/// blocked, and the caller's soft fd limit that CMD gets back.
pub(crate) struct GuardianProcess {
    signals: BlockedSignals,
    nofile: Option<u64>,
}

impl GuardianProcess {
    /// The process that forked a guardian, taking over its tree once it died: it is
    /// a child subreaper already (see `sentinel`).
    pub(crate) fn adopting(signals: BlockedSignals) -> Self {
        Self {
            signals,
            nofile: None,
        }
    }

    /// The rest of the process-wide setup, once the signals are taken: a high fd
    /// limit (teardown holds one pidfd per member) and child subreaper (except for
    /// pidns, whose init reaps the tree).
    fn take_over(containment: &Containment, signals: BlockedSignals) -> Result<Self, RunError> {
        let nofile = raise_fd_limit();
        if !matches!(containment, Containment::Pidns) {
            rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
                .map_err(|e| RunError::Setup(format!("PR_SET_CHILD_SUBREAPER: {e}")))?;
        }
        Ok(Self { signals, nofile })
    }

    /// Waits for the end of the tree's normal life: CMD exits, the owner goes, or
    /// a teardown signal arrives. Forwards the other signals meanwhile.
    ///
    /// `heal`: once CMD has run [`heal::DELAY`], look (cheaply) for dead guardians'
    /// trees in this state dir and, only if there are some, finish a few of them on a
    /// background thread (see `heal`).
    fn watch(
        &mut self,
        tree: &mut Tree,
        owner: &mut Owner,
        signaller: &Signaller,
        heal: Option<&std::path::Path>,
    ) -> Cause {
        let mut heal_at = heal::enabled().then(|| Instant::now() + heal::DELAY);
        loop {
            let Some(root) = tree.root() else {
                return Cause::CommandExited;
            };
            let Some(got) = wait_for_event(&self.signals, root.fd(), owner, heal_at) else {
                return Cause::Terminated;
            };
            if heal_at.is_some_and(|at| Instant::now() >= at) {
                heal_at = None;
                heal::start_if_needed(heal.map(std::path::Path::to_path_buf));
            }
            for sig in got.forward {
                tree.forward(signaller, sig);
            }
            tree.reap(self);
            if got.terminate {
                return Cause::Terminated;
            }
            if tree.root_exited() {
                return Cause::CommandExited;
            }
            if owner.gone() {
                return Cause::OwnerDied;
            }
        }
    }
}

impl Host for GuardianProcess {
    fn reap(&mut self, exited: &mut dyn FnMut(i32, Option<i32>)) -> Option<bool> {
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some((pid, st))) => {
                    exited(pid.as_raw_nonzero().get(), wait_status::of_wait(&st))
                }
                Ok(None) => return Some(false),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::CHILD) => return Some(true),
                Err(_) => return None,
            }
        }
    }

    fn wait(&mut self, deadline: Instant, fds: &[(BorrowedFd<'_>, PollFlags)]) {
        if Instant::now() < deadline {
            let sfd = self.signals.fd();
            let mut polled = Vec::with_capacity(fds.len() + 1);
            polled.push(PollFd::new(&sfd, PollFlags::IN));
            polled.extend(fds.iter().map(|(fd, flags)| PollFd::new(fd, *flags)));
            poll_until(&mut polled, Some(deadline));
        }
        // Signals that arrive during teardown change nothing: it is already running.
        let _ = self.signals.drain();
    }
}

/// A fresh tree id: the boot id's prefix and 96 random bits.
fn new_tree_id(signaller: &Signaller) -> Result<TreeId, RunError> {
    let mut random = [0u8; 12];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
        .map_err(|e| RunError::Setup(format!("getrandom: {e}")))?;
    Ok(TreeId::generate(&signaller.me().boot_id, random))
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
    until: Option<Instant>,
) -> Option<Received> {
    let sfd = signals.fd();
    let mut fds = Vec::with_capacity(3);
    fds.push(PollFd::new(&sfd, PollFlags::IN));
    fds.push(PollFd::new(&child, PollFlags::IN));
    if let Some(p) = owner.poll_fd() {
        fds.push(p);
    }
    let timeout = until.map(|at| poll::timespec(at.saturating_duration_since(Instant::now())));
    match poll(&mut fds, timeout.as_ref()) {
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
    let mut owner = Owner::resolve(&opts.owner)?;
    let signaller = Signaller::for_current_process(Procfs::new())
        .map_err(|e| RunError::Setup(format!("reading /proc/self: {e}")))?;
    let id = new_tree_id(&signaller)?;
    // The process the host started stays behind; from here on we are its guardian.
    let signaller = match sentinel::split(&signaller)? {
        Split::Sentinel(sentinel) => return Ok(sentinel.watch(opts, &id, signaller, signals)),
        Split::Guardian(signaller) => signaller,
    };
    let containment = Containment::choose(opts.tier)?;
    tracing::debug!(tier = %containment.tier(), "tier chosen");
    let mut process = GuardianProcess::take_over(&containment, signals)?;
    let owner_record = owner.record(&opts.owner, signaller.procfs());
    let mut tree = Tree::record(opts, id.clone(), containment, &signaller, owner_record)?;
    // Last check before starting anything: a dead owner means CMD must never run.
    if owner.gone() {
        return Err(RunError::OwnerGone(owner.describe()));
    }
    // The host stopped the process it started while we set up: start nothing.
    if sentinel::gone(&signaller) {
        return Err(RunError::OwnerGone(
            "the undertaker process the host started".into(),
        ));
    }
    tree.spawn(&Launch {
        opts,
        tree: &id,
        signaller: &signaller,
        nofile: process.nofile,
        signals: &process.signals,
        own_session: cmd_gets_own_session(signaller.procfs()),
    })?;
    tracing::debug!(tree = %tree.id(), root_pid = tree.root().map(|r| r.pid()), owner = %owner.describe(), label = ?opts.label, "guarding");

    let cause = process.watch(&mut tree, &mut owner, &signaller, opts.state_dir.as_deref());
    tracing::debug!(?cause, "tearing down tree {}", tree.id());
    // The terminal goes back to our group before the tree is signalled; a namespace
    // init hands it back itself, so there we take it once the init is gone.
    let in_namespace = tree.tier() == Tier::Pidns;
    if !in_namespace {
        sys::reclaim_foreground(signaller.host_pgrp());
    }
    tree.tear_down(cause, &signaller, &mut process);
    if in_namespace {
        sys::reclaim_foreground(signaller.host_pgrp());
    }
    Ok(tree.finish())
}
