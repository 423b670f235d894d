//! [`HostProcess`]: what an undertaker process holding trees does for all of them —
//! its signals (one signalfd), reaping its children, waiting, and the event loop's
//! wake-ups. One implementation serves the guardian (`run`), the sentinel finishing
//! a dead guardian's tree, and the supervisor; trees reach it through [`Host`].

use crate::linux::commands::tree::Host;
use crate::linux::contain::containment::Containment;
use crate::linux::contain::dispositions::{self, OnSignal};
use crate::linux::contain::owner::Owner;
use crate::linux::contain::spawn::raise_fd_limit;
use crate::linux::kernel::poll::{self, poll_until};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::kernel::sys::BlockedSignals;
use crate::linux::kernel::wait_status;
use crate::linux::proof::signal::Signaller;
use crate::{OwnerSpec, RunError};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::BorrowedFd;
use rustix::process::WaitOptions;
use std::collections::HashMap;
use std::time::Instant;

/// What a host process holds once its first steps are done ([`begin`]).
pub(crate) struct Begun {
    pub signals: BlockedSignals,
    pub owner: Owner,
    /// Our own identity, with the owner protected: never a member.
    pub signaller: Signaller,
}

/// The first steps of every process that will hold trees (`run`'s guardian and
/// `supervise`), in this order: the signals, before anything can fork (no inherited
/// disposition may drop a signal or auto-reap a child, and no signal may end us; see
/// `dispositions`); the owner; with `own_session`, a session of our own (before our
/// identity is read: it records our group); our identity, with the owner protected.
pub(crate) fn begin(owner: &OwnerSpec, own_session: bool) -> Result<Begun, RunError> {
    let signals =
        dispositions::take_all().map_err(|e| RunError::Setup(format!("signalfd: {e}")))?;
    let owner = Owner::resolve(owner)?;
    if own_session {
        // Already a leader: nothing to do.
        let _ = rustix::process::setsid();
    }
    let mut signaller = Signaller::for_current_process(Procfs::new())
        .map_err(|e| RunError::Setup(format!("reading /proc/self: {e}")))?;
    if let Some(pid) = owner.pid() {
        signaller.protect_owner(pid);
    }
    Ok(Begun {
        signals,
        owner,
        signaller,
    })
}

/// The process-wide state of an undertaker process that holds trees.
pub(crate) struct HostProcess {
    pub signals: BlockedSignals,
    /// The soft RLIMIT_NOFILE commands get back.
    pub nofile: Option<u64>,
    /// Roots of trees this process holds, by pid: `Some(status)` once a reap took one
    /// before its tree collected it through its pidfd (one tree's teardown reaps
    /// every exited child, other trees' roots included).
    roots: HashMap<i32, Option<Option<i32>>>,
    /// A teardown signal arrived while a tree was being torn down: the next event
    /// reports it (a supervisor killing one tree must still hear its own SIGTERM).
    terminate_pending: bool,
    /// `run`'s guardian: its sentinel, alive when the teardown began. If it dies
    /// before the teardown ends, the host SIGKILLed it and waits no longer (the
    /// sentinel only ever exits after its guardian).
    pub sentinel: Option<i32>,
}

/// What one wake-up of an event loop brought.
#[derive(Debug, Default)]
pub(crate) struct Received {
    /// SIGTERM (or another teardown signal) arrived: tear down.
    pub terminate: bool,
    /// Signals to forward to CMD (`run`; a supervisor has no one command to give them).
    pub forward: Vec<i32>,
}

impl HostProcess {
    /// The rest of the process-wide setup, once the signals are taken and the
    /// containment chosen: a high fd limit (teardown holds one pidfd per member) and
    /// child subreaper (except for pidns, whose init reaps the tree).
    pub(crate) fn become_host(
        containment: &Containment,
        signals: BlockedSignals,
    ) -> Result<Self, RunError> {
        let nofile = raise_fd_limit();
        if !matches!(containment, Containment::Pidns | Containment::Portable) {
            rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
                .map_err(|e| RunError::Setup(format!("PR_SET_CHILD_SUBREAPER: {e}")))?;
        }
        Ok(Self::new(signals, nofile))
    }

    pub(crate) fn new(signals: BlockedSignals, nofile: Option<u64>) -> Self {
        Self {
            signals,
            nofile,
            roots: HashMap::new(),
            terminate_pending: false,
            sentinel: None,
        }
    }

    /// Blocks until the signalfd or one of `fds` is ready, or `until`; then drains
    /// our signals. `None` if poll itself failed: the caller tears down rather than
    /// spin.
    pub(crate) fn next_event(
        &mut self,
        fds: &[(BorrowedFd<'_>, PollFlags)],
        until: Option<Instant>,
    ) -> Option<Received> {
        let sfd = self.signals.fd();
        let mut polled = Vec::with_capacity(fds.len() + 1);
        polled.push(PollFd::new(&sfd, PollFlags::IN));
        polled.extend(fds.iter().map(|(fd, flags)| PollFd::new(fd, *flags)));
        let timeout = until.map(|at| poll::timespec(at.saturating_duration_since(Instant::now())));
        match poll(&mut polled, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                tracing::error!("poll failed: {e}; tearing down");
                return None;
            }
        }
        drop(polled);
        let mut got = Received {
            terminate: std::mem::take(&mut self.terminate_pending),
            forward: Vec::new(),
        };
        for sig in self.signals.drain().unwrap_or_default() {
            match dispositions::on_signal(sig) {
                OnSignal::Reap => {}
                OnSignal::Teardown => got.terminate = true,
                OnSignal::Forward => got.forward.push(sig),
            }
        }
        Some(got)
    }

    /// True (once) when a teardown signal arrived during a tree's teardown.
    pub(crate) fn take_terminate(&mut self) -> bool {
        std::mem::take(&mut self.terminate_pending)
    }

    /// Keeps the status of `pid` (a tree's root) if a reap takes it.
    pub(crate) fn add_root(&mut self, pid: i32) {
        self.roots.insert(pid, None);
    }

    /// Forgets a root whose tree is gone.
    pub(crate) fn forget_root(&mut self, pid: i32) {
        self.roots.remove(&pid);
    }
}

impl Host for HostProcess {
    fn reap(&mut self, exited: &mut dyn FnMut(i32, Option<i32>)) -> Option<bool> {
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some((pid, st))) => {
                    let pid = pid.as_raw_nonzero().get();
                    let status = wait_status::of_wait(&st);
                    if let Some(slot) = self.roots.get_mut(&pid) {
                        *slot = Some(status);
                    }
                    exited(pid, status)
                }
                Ok(None) => return Some(false),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::CHILD) => return Some(true),
                Err(_) => return None,
            }
        }
    }

    fn out_of_patience(&mut self) -> bool {
        // The sentinel is our parent while it lives.
        self.sentinel.is_some_and(|pid| {
            rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(pid)
        })
    }

    fn reaped_status(&mut self, pid: i32) -> Option<Option<i32>> {
        self.roots.get(&pid).copied().flatten()
    }

    fn wait(&mut self, deadline: Instant, fds: &[(BorrowedFd<'_>, PollFlags)]) {
        if Instant::now() < deadline {
            let sfd = self.signals.fd();
            let mut polled = Vec::with_capacity(fds.len() + 1);
            polled.push(PollFd::new(&sfd, PollFlags::IN));
            polled.extend(fds.iter().map(|(fd, flags)| PollFd::new(fd, *flags)));
            poll_until(&mut polled, Some(deadline));
        }
        // Signals forwarded to CMD are dropped during a teardown (CMD is going);
        // a teardown signal is kept for the next event (see `terminate_pending`).
        for sig in self.signals.drain().unwrap_or_default() {
            if dispositions::on_signal(sig) == OnSignal::Teardown {
                self.terminate_pending = true;
            }
        }
    }
}
