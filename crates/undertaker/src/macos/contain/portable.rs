//! The portable core's macOS backend (docs/PORTING.md, "macOS"): the process table
//! over libproc (flavor 18: `p_uniqueid` is the serial, `p_puniqueid` the parent
//! serial, the pid version and, on 15.4+, `p_orig_ppidversion`), the marker read from
//! `KERN_PROCARGS2`, every signal through `proof/signal.rs`, and the waker over one
//! kqueue (`EVFILT_PROC`: exit, fork, exec). Type-checked here, not yet run on a Mac.

use crate::identity::TREE_MARKER;
use crate::macos::kernel::sys::KernelEvent;
use crate::macos::kernel::{parse, sys};
use crate::macos::proof::signal;
use crate::portable::{Delivery, Facts, Member, ProcessTable, Signal, Wake, Waker};
use rustix::event::kqueue::ProcessEvents;
use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// libproc and one kqueue as a [`ProcessTable`] and [`Waker`].
pub struct MacOs {
    kq: OwnedFd,
    watched: HashSet<i32>,
    epoch: Instant,
    /// Watched signals sent to us, not yet taken.
    signalled: Vec<i32>,
    /// Watched descriptors found readable (or at end of file), not yet taken.
    readable: HashSet<RawFd>,
}

impl MacOs {
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            kq: sys::kqueue()?,
            watched: HashSet::new(),
            epoch: Instant::now(),
            signalled: Vec::new(),
            readable: HashSet::new(),
        })
    }

    /// Blocks `signals` and wakes [`Waker::wait`] when one is sent to us instead:
    /// the guardian's SIGTERM, SIGINT and SIGHUP become a teardown, never its death.
    pub fn watch_signals(&mut self, signals: &[i32]) -> io::Result<()> {
        sys::block_signals(signals)?;
        signals
            .iter()
            .try_for_each(|&s| sys::watch_signal(&self.kq, s))
    }

    /// Wakes [`Waker::wait`] when `fd` is readable or at end of file (the owner's
    /// pipe); the caller keeps it open.
    pub fn watch_readable(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        sys::watch_readable(&self.kq, fd)
    }

    /// The watched signals sent to us since the last take.
    pub fn take_signals(&mut self) -> Vec<i32> {
        std::mem::take(&mut self.signalled)
    }

    /// Whether `fd` (watched) woke a wait since its last take.
    pub fn take_readable(&mut self, fd: BorrowedFd<'_>) -> bool {
        self.readable.remove(&fd.as_raw_fd())
    }
}

impl ProcessTable for MacOs {
    fn pids(&mut self) -> Vec<i32> {
        sys::all_pids().unwrap_or_default()
    }

    fn facts(&mut self, pid: i32) -> Option<Facts> {
        sys::bsd_info(pid).ok()?.facts()
    }

    fn children(&mut self, pid: i32) -> Vec<i32> {
        sys::child_pids(pid).unwrap_or_default()
    }

    fn marker(&mut self, facts: &Facts) -> Option<Vec<u8>> {
        let buf = sys::procargs2(facts.pid).ok()?;
        let marker = parse::procargs2(&buf)
            .and_then(|args| args.env_value(TREE_MARKER))
            .map(<[u8]>::to_vec)?;
        // The environment read counts only if the number still names that process.
        let same = sys::bsd_info(facts.pid).is_ok_and(|now| now.uniqueid == facts.serial);
        same.then_some(marker)
    }

    fn deliver(&mut self, member: &Member, signal: Signal) -> Delivery {
        signal::deliver(member, signal)
    }
}

impl Waker for MacOs {
    fn watch(&mut self, member: &Member) {
        if sys::watch_process(&self.kq, member.pid, true).is_err() {
            return;
        }
        // An exit before the registration is never reported: the re-read tells
        // whether the knote sits on the member (a uniqueid never comes back).
        let same = sys::bsd_info(member.pid)
            .is_ok_and(|now| now.uniqueid == member.serial && !now.is_zombie());
        if same {
            self.watched.insert(member.pid);
        } else {
            let _ = sys::watch_process(&self.kq, member.pid, false);
        }
    }

    fn now(&mut self) -> Duration {
        self.epoch.elapsed()
    }

    fn wait(&mut self, until: Duration) -> Vec<Wake> {
        let timeout = until.saturating_sub(self.epoch.elapsed());
        let events = sys::wait_events(&self.kq, timeout).unwrap_or_default();
        let mut wakes = Vec::new();
        for event in events {
            let (pid, what) = match event {
                KernelEvent::Process(pid, what) => (pid, what),
                KernelEvent::Signal(signal) => {
                    self.signalled.push(signal);
                    continue;
                }
                KernelEvent::Readable(fd) => {
                    self.readable.insert(fd);
                    continue;
                }
            };
            if what.contains(ProcessEvents::FORK) {
                wakes.push(Wake::Forked(pid));
            }
            if what.contains(ProcessEvents::EXEC) {
                wakes.push(Wake::Execed(pid));
            }
            if what.contains(ProcessEvents::EXIT) {
                self.watched.remove(&pid);
                wakes.push(Wake::Exited(pid));
            }
        }
        wakes
    }
}
