//! The process the host started stays behind as a thin sentinel; the guardian is its
//! child. Hosts stop a server by `kill -9` of the process they started, so that
//! process must not be the only one that can tear the tree down (docs/GUARANTEES.md).
//!
//! - Host kills the sentinel (or its process group): the guardian, in its own process
//!   group, gets SIGTERM through PDEATHSIG and tears the tree down as it would on its
//!   owner's death, with every proof it has (descendant walk, cgroup, pidfds).
//! - Someone kills the guardian: CMD dies with it (its own PDEATHSIG), the guardian's
//!   orphans are reparented to the sentinel (a subreaper, their nearest ancestor), and
//!   the sentinel tears down what is left, proven as its descendants or as members of
//!   the tree's cgroup.
//! - Both at once: the tree waits for `undertaker sweep`, as before.
//!
//! The split happens before anything else is set up, so the sentinel holds no
//! database, no cgroup and no spawn state: it relays signals to the guardian, waits
//! for it, and exits with its status.

use crate::identity::TreeId;
use crate::linux::commands::host::HostProcess;
use crate::linux::commands::tree::{Cause, Tree, SETTLE_AFTER};
use crate::linux::contain::cgroup::{self, CgroupTree};
use crate::linux::contain::dispositions::{self, OnSignal};
use crate::linux::kernel::poll::timespec;
use crate::linux::kernel::sys::{self, BlockedSignals, Forked};
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::{GuardOptions, RunError};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{Signal, WaitId, WaitIdOptions};
use std::time::Instant;

/// Which side of the split this process is on.
pub(crate) enum Split {
    /// The process the host started: watch the guardian.
    Sentinel(Sentinel),
    /// The new child: go on as the guardian, with facts about itself.
    Guardian(Signaller),
}

/// The sentinel's handle on its guardian.
pub(crate) struct Sentinel {
    guardian: PidRef,
}

/// Forks the guardian. Both sides return; the caller's signal mask and signalfd are
/// inherited, so no signal arriving around the fork is lost.
///
/// `portable` (docs/TIERS.md, "portable"): the pair without a subreaper or
/// PDEATHSIG, as on macOS. Each watches the other's pidfd; the sentinel finds a dead
/// guardian's tree by its member record and marker.
pub(crate) fn split(signaller: &Signaller, portable: bool) -> Result<Split, RunError> {
    let sentinel_pid = signaller.me().pid;
    // Before the fork: a guardian dying at any point hands its orphans to us.
    if !portable {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|e| RunError::Setup(format!("PR_SET_CHILD_SUBREAPER: {e}")))?;
    }
    match sys::fork_guardian() {
        Err(e) => Err(RunError::Setup(format!("cannot fork the guardian: {e}"))),
        Ok(Forked::Parent { pid, pidfd }) => Ok(Split::Sentinel(Sentinel {
            guardian: PidRef::from_parts(pid, pidfd),
        })),
        Ok(Forked::Child) => {
            // A sentinel already gone means the host stopped us: start nothing.
            sys::detach_guardian(sentinel_pid, !portable)
                .map_err(|e| RunError::Setup(format!("guardian start-up: {e}")))?;
            Ok(Split::Guardian(signaller.for_forked_child()))
        }
    }
}

/// In the guardian: the sentinel has died (we were reparented), so the host has
/// stopped undertaker. Its SIGTERM (PDEATHSIG) is pending too; this is the check
/// before CMD is spawned, when nothing reads signals yet.
pub(crate) fn gone(signaller: &Signaller) -> bool {
    let sentinel = signaller.me().ancestors.first().copied();
    rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != sentinel
}

/// In the guardian (portable tier, no PDEATHSIG): a pidfd on the sentinel, which
/// turns readable when it dies. Opened while it is still our parent, so it names it.
pub(crate) fn watch_sentinel(signaller: &Signaller) -> Result<PidRef, RunError> {
    let gone_already = || RunError::OwnerGone("the undertaker process the host started".into());
    let pid = alive(signaller).ok_or_else(gone_already)?;
    let fd =
        sys::pidfd_open(pid).map_err(|e| RunError::Setup(format!("pidfd_open({pid}): {e}")))?;
    if gone(signaller) {
        return Err(gone_already());
    }
    Ok(PidRef::from_parts(pid, fd))
}

/// In the guardian: the sentinel's pid while it is still our parent.
pub(crate) fn alive(signaller: &Signaller) -> Option<i32> {
    (!gone(signaller)).then(|| signaller.me().ancestors.first().copied())?
}

impl Sentinel {
    /// Relays signals to the guardian until it exits, then returns its exit status.
    /// A guardian killed by a signal is replaced: its tree is torn down here.
    pub(crate) fn watch(
        self,
        opts: &GuardOptions,
        tree: &TreeId,
        signaller: Signaller,
        signals: BlockedSignals,
    ) -> i32 {
        let gfd = self.guardian.fd();
        // The sentinel idles as long as the tree lives: once it has idled a moment,
        // what start-up left (freed heap, the stack and code argument parsing used)
        // goes back to the kernel. A run that ends sooner does not wait for that.
        let mut settle_at = Some(Instant::now() + SETTLE_AFTER);
        while !self.guardian.exited() {
            {
                let sfd = signals.fd();
                let mut fds = [
                    PollFd::new(&sfd, PollFlags::IN),
                    PollFd::new(&gfd, PollFlags::IN),
                ];
                let timeout =
                    settle_at.map(|at| timespec(at.saturating_duration_since(Instant::now())));
                match poll(&mut fds, timeout.as_ref()) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    // Nothing to wait on: block in waitid below instead of spinning.
                    Err(_) => break,
                }
            }
            if settle_at.is_some_and(|at| Instant::now() >= at) {
                settle_at = None;
                sys::settle_idle();
            }
            for sig in signals.drain().unwrap_or_default() {
                // The guardian gives each signal its fate (see `dispositions`); the
                // ones that tear down reach it as SIGTERM.
                let relayed = match dispositions::on_signal(sig) {
                    OnSignal::Reap => continue,
                    OnSignal::Teardown => Some(Signal::TERM),
                    OnSignal::Forward => sys::any_signal(sig),
                };
                if let Some(sig) = relayed {
                    let _ = self.guardian.signal_own_child(&signaller, sig);
                }
            }
        }
        let status = loop {
            match rustix::process::waitid(WaitId::PidFd(gfd), WaitIdOptions::EXITED) {
                Ok(Some(st)) => break st,
                Ok(None) | Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::error!("waiting for the guardian: {e}");
                    return 125;
                }
            }
        };
        if let Some(code) = status.exit_status() {
            return crate::exit_status::exited_with(code);
        }
        let sig = status.terminating_signal().unwrap_or(libc::SIGKILL);
        tracing::warn!("guardian killed by signal {sig}; tearing tree {tree} down here");
        finish_orphaned_tree(opts, tree, signaller, signals);
        crate::exit_status::killed_by(sig)
    }
}

/// Tears down the tree of a guardian that died: its orphans are our descendants now
/// (we are their nearest subreaper), and the cgroup tier's cgroup names the tree.
fn finish_orphaned_tree(
    opts: &GuardOptions,
    id: &TreeId,
    signaller: Signaller,
    signals: BlockedSignals,
) {
    if opts.tier == crate::Tier::Portable {
        let mut host = HostProcess::new(signals, None);
        let mut tree = Tree::orphaned_portable(opts, id.clone(), &signaller);
        tree.tear_down(Cause::Terminated, &signaller, &mut host);
        tree.finish();
        sys::reclaim_foreground(signaller.host_pgrp());
        return;
    }
    let cgroup = cgroup::list_tree_cgroups(signaller.procfs())
        .into_iter()
        .find(|found| found.tree == *id)
        .and_then(|found| CgroupTree::open(&found.path).ok());
    let mut host = HostProcess::new(signals, None);
    let mut tree = Tree::orphaned(opts, id.clone(), &signaller, cgroup);
    tree.tear_down(Cause::Terminated, &signaller, &mut host);
    tree.finish();
    sys::reclaim_foreground(signaller.host_pgrp());
}
