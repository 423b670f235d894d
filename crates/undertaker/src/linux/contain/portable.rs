//! The portable core's Linux backend (docs/TIERS.md, "portable"): the process table
//! over /proc and pidfds, the waker over pidfd polls. It gives Linux the macOS shape
//! (no cgroup, no subreaper, no PDEATHSIG) so the core runs with real processes here.
//!
//! Linux has no `p_puniqueid`: a process's parent serial is its *current* parent's,
//! so an orphan's link is lost at once (macOS keeps it until the orphan execs). The
//! backend is pessimistic there; docs/GUARANTEES.md lists what that costs.

use crate::identity::TREE_MARKER;
use crate::linux::kernel::poll::{poll_until, readable_now};
use crate::linux::kernel::sys;
use crate::linux::proof::signal::{serial_of, Signaller};
use crate::portable::{Delivery, Facts, Member, ProcessTable, Signal, Wake, Waker};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// /proc and pidfds as a [`ProcessTable`] and [`Waker`].
pub struct LinuxOs {
    signaller: Signaller,
    watched: Vec<(i32, OwnedFd)>,
    epoch: Instant,
}

impl LinuxOs {
    pub fn new(signaller: Signaller) -> Self {
        Self {
            signaller,
            watched: Vec::new(),
            epoch: Instant::now(),
        }
    }

    /// The serial and start of the process at `pid`, if it is alive and not a zombie.
    fn serial_and_start(&self, pid: i32) -> Option<(u64, u64)> {
        let (identity, _, state) = self.signaller.identify(pid).ok()?;
        (state != 'Z' && state != 'X').then(|| (serial_of(&identity), identity.starttime))
    }
}

fn raw(signal: Signal) -> rustix::process::Signal {
    match signal {
        Signal::Term => rustix::process::Signal::TERM,
        Signal::Cont => rustix::process::Signal::CONT,
        Signal::Stop => rustix::process::Signal::STOP,
        Signal::Kill => rustix::process::Signal::KILL,
    }
}

impl ProcessTable for LinuxOs {
    fn pids(&mut self) -> Vec<i32> {
        self.signaller.procfs().pids().unwrap_or_default()
    }

    fn facts(&mut self, pid: i32) -> Option<Facts> {
        let (identity, ppid, state) = self.signaller.identify(pid).ok()?;
        if state == 'Z' || state == 'X' {
            return None;
        }
        // The parent's serial counts only if the parent is older than the child and
        // the child still has that parent afterwards (a reused parent number would
        // be younger; a reparented child would show another parent).
        let parent_serial = self
            .serial_and_start(ppid)
            .filter(|&(_, start)| start <= identity.starttime)
            .map(|(serial, _)| serial)
            .filter(|_| {
                self.signaller.identify(pid).is_ok_and(|(again, p, _)| {
                    p == ppid && serial_of(&again) == serial_of(&identity)
                })
            });
        Some(Facts {
            pid,
            ppid,
            pgid: identity.pgid,
            uid: identity.uid,
            start: identity.starttime,
            serial: serial_of(&identity),
            parent_serial,
            version: None,
            orig_parent_version: None,
            stopped: matches!(state, 'T' | 't'),
        })
    }

    fn children(&mut self, pid: i32) -> Vec<i32> {
        self.signaller.procfs().children(pid).unwrap_or_default()
    }

    fn marker(&mut self, facts: &Facts) -> Option<Vec<u8>> {
        let marker = (self.signaller.procfs())
            .environ_value(facts.pid, TREE_MARKER)
            .ok()??;
        // The environment read counts only if the number still names that process.
        let same =
            (self.serial_and_start(facts.pid)).is_some_and(|(serial, _)| serial == facts.serial);
        same.then_some(marker)
    }

    /// Through a pidfd opened and proven for this serial at delivery time.
    fn deliver(&mut self, member: &Member, signal: Signal) -> Delivery {
        match self.signaller.prove_by_serial(member.pid, member.serial) {
            Ok(proven) => self
                .signaller
                .signal(&proven, raw(signal))
                .unwrap_or(Delivery::AlreadyGone),
            Err(why) => {
                tracing::debug!(pid = member.pid, ?why, "not signalled");
                Delivery::AlreadyGone
            }
        }
    }
}

impl Waker for LinuxOs {
    fn watch(&mut self, member: &Member) {
        let Ok(fd) = sys::pidfd_open(member.pid) else {
            return;
        };
        // The pidfd counts only if it names the member (opened before the re-read).
        if self.serial_and_start(member.pid).map(|(s, _)| s) == Some(member.serial)
            && !readable_now(fd.as_fd())
        {
            self.watched.push((member.pid, fd));
        }
    }

    fn now(&mut self) -> Duration {
        self.epoch.elapsed()
    }

    fn wait(&mut self, until: Duration) -> Vec<Wake> {
        let deadline = self.epoch + until;
        let mut fds: Vec<PollFd<'_>> = self
            .watched
            .iter()
            .map(|(_, fd)| PollFd::new(fd, PollFlags::IN))
            .collect();
        if fds.is_empty() {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            return Vec::new();
        }
        poll_until(&mut fds, Some(deadline));
        drop(fds);
        let mut wakes = Vec::new();
        self.watched.retain(|(pid, fd)| {
            let exited = readable_now(fd.as_fd());
            if exited {
                wakes.push(Wake::Exited(*pid));
            }
            !exited
        });
        wakes
    }
}

#[cfg(test)]
mod tests;
