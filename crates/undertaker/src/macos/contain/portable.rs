//! The portable core's macOS backend (docs/PORTING.md, "macOS"): the process table
//! over libproc (flavor 18: `p_uniqueid` is the serial, `p_puniqueid` the parent
//! serial, the pid version and, on 15.4+, `p_orig_ppidversion`), the marker read from
//! `KERN_PROCARGS2`, every signal through `proof/signal.rs`, and the waker over one
//! kqueue (`EVFILT_PROC`: exit, fork, exec). Type-checked here, not yet run on a Mac.

use crate::identity::TREE_MARKER;
use crate::macos::kernel::{parse, sys};
use crate::macos::proof::signal;
use crate::portable::{Delivery, Facts, Member, ProcessTable, Signal, Wake, Waker};
use rustix::event::kqueue::ProcessEvents;
use std::collections::HashSet;
use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// libproc and one kqueue as a [`ProcessTable`] and [`Waker`].
pub struct MacOs {
    kq: OwnedFd,
    watched: HashSet<i32>,
    epoch: Instant,
}

impl MacOs {
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            kq: sys::kqueue()?,
            watched: HashSet::new(),
            epoch: Instant::now(),
        })
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

    fn carries_marker(&mut self, facts: &Facts, tree: &str) -> bool {
        let Ok(buf) = sys::procargs2(facts.pid) else {
            return false;
        };
        let marked = parse::procargs2(&buf)
            .and_then(|args| args.env_value(TREE_MARKER))
            .is_some_and(|v| v == tree.as_bytes());
        // The environment read counts only if the number still names that process.
        marked && sys::bsd_info(facts.pid).is_ok_and(|now| now.uniqueid == facts.serial)
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
        let events = sys::wait_processes(&self.kq, timeout).unwrap_or_default();
        let mut wakes = Vec::new();
        for (pid, what) in events {
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
