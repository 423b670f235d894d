//! What is global to the supervisor process: its signals (one signalfd), reaping its
//! children, and waiting. Trees never do these themselves.

use crate::linux::contain::dispositions::{self, OnSignal};
use crate::linux::kernel::poll::poll_until;
use crate::linux::kernel::sys::BlockedSignals;
use crate::linux::kernel::wait_status;
use rustix::event::{PollFd, PollFlags};
use rustix::fd::BorrowedFd;
use rustix::process::WaitOptions;
use std::collections::HashMap;
use std::time::Instant;

pub(super) struct Process {
    pub signals: BlockedSignals,
    /// The soft RLIMIT_NOFILE spawned commands get back.
    pub nofile: Option<u64>,
    /// Spawned roots by pid: `Some(status)` once `wait` reaped one before its tree
    /// collected it through its pidfd.
    roots: HashMap<i32, Option<Option<i32>>>,
    /// A teardown signal (SIGTERM, ...) arrived: every tree goes.
    pub terminate: bool,
}

impl Process {
    pub(super) fn new(signals: BlockedSignals, nofile: Option<u64>) -> Self {
        Self {
            signals,
            nofile,
            roots: HashMap::new(),
            terminate: false,
        }
    }

    pub(super) fn add_root(&mut self, pid: i32) {
        self.roots.insert(pid, None);
    }

    /// Forgets a root once its tree is gone; returns a status reaped on its behalf.
    pub(super) fn take_root(&mut self, pid: i32) -> Option<i32> {
        self.roots.remove(&pid).flatten().flatten()
    }

    /// A status reaped for root `pid` before its tree asked.
    pub(super) fn reaped_status(&self, pid: i32) -> Option<Option<i32>> {
        self.roots.get(&pid).copied().flatten()
    }

    /// Reaps every exited child (orphans reparented to us, roots whose tree has not
    /// looked yet). True when no child is left.
    pub(super) fn reap(&mut self) -> bool {
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some((pid, st))) => {
                    let pid = pid.as_raw_nonzero().get();
                    if let Some(slot) = self.roots.get_mut(&pid) {
                        *slot = Some(wait_status::of_wait(&st));
                    }
                }
                Ok(None) => return false,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return true,
            }
        }
    }

    /// Waits until one of `fds` is ready for its flags, a signal arrives, or
    /// `deadline` (`None`: no deadline); then takes the signals.
    pub(super) fn wait(
        &mut self,
        deadline: impl Into<Option<Instant>>,
        fds: &[(BorrowedFd<'_>, PollFlags)],
    ) {
        let sfd = self.signals.fd();
        let mut polled = Vec::with_capacity(fds.len() + 1);
        polled.push(PollFd::new(&sfd, PollFlags::IN));
        polled.extend(fds.iter().map(|(fd, flags)| PollFd::new(fd, *flags)));
        let deadline = deadline.into();
        if deadline.is_none_or(|d| Instant::now() < d) {
            poll_until(&mut polled, deadline);
        }
        drop(polled);
        self.take_signals();
    }

    /// Reads the signalfd. SIGTERM and the fault-class signals tear everything down;
    /// the signals `run` would forward to its one CMD (SIGINT, SIGHUP, ...) have no one
    /// command to go to here and are ignored: a dying terminal must not end the trees.
    pub(super) fn take_signals(&mut self) {
        for sig in self.signals.drain().unwrap_or_default() {
            if dispositions::on_signal(sig) == OnSignal::Teardown {
                self.terminate = true;
            }
        }
    }
}
