//! What a tree asks of the process that holds it ([`Host`]), and why a tree is torn
//! down ([`Cause`]).

use crate::linux::kernel::poll::poll_until;
use rustix::event::{PollFd, PollFlags};
use rustix::fd::BorrowedFd;
use std::time::Instant;

/// Why a tree is being torn down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    CommandExited,
    OwnerDied,
    /// No writer left on stdin and no reader on stdout: the host holding them is gone
    /// (see `owner::StdioPeer`).
    StdioPeerGone,
    Terminated,
}

impl Cause {
    /// What happened, in words (log lines).
    pub fn describe(self) -> &'static str {
        match self {
            Cause::CommandExited => "the command exited",
            Cause::OwnerDied => "the owner died",
            Cause::StdioPeerGone => "the stdio peer is gone",
            Cause::Terminated => "asked to terminate",
        }
    }

    /// The audit log's note for a cause the log would not show otherwise.
    pub(super) fn audit_note(self) -> Option<&'static str> {
        match self {
            Cause::StdioPeerGone => {
                Some("stdio peer gone: no writer left on stdin, no reader on stdout; tearing down")
            }
            Cause::CommandExited | Cause::OwnerDied | Cause::Terminated => None,
        }
    }
}

/// What the process holding trees does for all of them. Reaping and waiting for
/// children are process-wide (`wait(-1)`, a signalfd for SIGCHLD), so a [`Tree`] asks
/// its host instead of doing them itself.
pub trait Host {
    /// Reaps every exited child of this process, calling `exited(pid, shell status)`
    /// for each. `Some(true)` when no child is left, `Some(false)` when some are,
    /// `None` when it could not tell.
    fn reap(&mut self, exited: &mut dyn FnMut(i32, Option<i32>)) -> Option<bool>;
    /// The status of `pid`, a tree's root, if an earlier reap took it on the tree's
    /// behalf (a host holding many trees reaps for all of them).
    fn reaped_status(&mut self, _pid: i32) -> Option<Option<i32>> {
        None
    }
    /// Blocks until a child of this process may have exited, one of `fds` is ready
    /// for its flags, or `deadline` passes.
    fn wait(&mut self, deadline: Instant, fds: &[(BorrowedFd<'_>, PollFlags)]);
    /// True once the host's own host has stopped waiting for the teardown (the
    /// process it started was SIGKILLed): the tree gets no more grace.
    fn out_of_patience(&mut self) -> bool {
        false
    }
}

/// The host of a dead guardian's tree torn down by a process that is neither its
/// guardian nor its parent (`sweep`, `kill`, self-healing on a guardian's thread): it
/// reaps nothing (its own children are not the tree's, and a guardian's CMD is the
/// guardian's to reap) and waits on the fds it is given.
pub(crate) struct Bystander;

impl Host for Bystander {
    fn reap(&mut self, _exited: &mut dyn FnMut(i32, Option<i32>)) -> Option<bool> {
        None
    }

    fn wait(&mut self, deadline: Instant, fds: &[(BorrowedFd<'_>, PollFlags)]) {
        let mut polled: Vec<_> = (fds.iter()).map(|(fd, f)| PollFd::new(fd, *f)).collect();
        poll_until(&mut polled, Some(deadline));
    }
}
