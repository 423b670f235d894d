//! A process as one value: its number and the pidfd that pins it (systemd's `PidRef`
//! is the model). Whoever holds a `PidRef` can ask whether the process has exited,
//! collect its status if it is our child, and wait for its exit with a deadline;
//! signals go through [`Signaller`], the one signal path.

use crate::linux::kernel::poll::{poll_until, readable_now};
use crate::linux::kernel::wait_status;
use crate::linux::proof::signal::{Delivery, Signaller};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::process::{Signal, WaitId, WaitIdOptions};
use std::time::Instant;

/// A pid and the pidfd opened for it.
#[derive(Debug)]
pub struct PidRef {
    pid: i32,
    fd: OwnedFd,
}

impl PidRef {
    /// Opens a pidfd for `pid`. Only sound for a process whose number cannot have been
    /// reused yet (our unreaped child) or one that is proven afterwards.
    pub(crate) fn open(pid: i32) -> std::io::Result<Self> {
        let fd = crate::linux::kernel::sys::pidfd_open(pid)?;
        Ok(Self { pid, fd })
    }

    /// The pidfd alone, for code that keeps its own pid.
    pub(crate) fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// A pid with the pidfd already opened for it.
    pub(crate) fn from_parts(pid: i32, fd: OwnedFd) -> Self {
        Self { pid, fd }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// True once the process has exited (zombie or reaped): its pidfd polls readable.
    pub fn exited(&self) -> bool {
        readable_now(self.fd.as_fd())
    }

    /// Signals our own unreaped child (see [`Signaller::signal_own_child`]).
    pub(crate) fn signal_own_child(&self, signaller: &Signaller, sig: Signal) -> Delivery {
        signaller.signal_own_child(self.fd.as_fd(), sig)
    }

    /// Reaps our child if it has exited; its shell status then. `None`: still running,
    /// already reaped, or not our child.
    pub(crate) fn try_wait_status(&self) -> Option<i32> {
        match rustix::process::waitid(
            WaitId::PidFd(self.fd.as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        ) {
            Ok(Some(status)) => wait_status::of_waitid(&status),
            _ => None,
        }
    }

    /// Blocks until our child exits, reaps it and returns its shell status.
    pub(crate) fn wait_status(&self) -> Option<i32> {
        loop {
            match rustix::process::waitid(WaitId::PidFd(self.fd.as_fd()), WaitIdOptions::EXITED) {
                Ok(Some(status)) => return wait_status::of_waitid(&status),
                Ok(None) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return None,
            }
        }
    }

    /// Waits until the process exits or `deadline` passes. True if it exited.
    pub(crate) fn poll_until(&self, deadline: Instant) -> bool {
        loop {
            if self.exited() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            poll_until(&mut fds, Some(deadline));
        }
    }
}
