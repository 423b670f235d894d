//! The portable core: the logic a platform without cgroups, a child subreaper or
//! PDEATHSIG needs (macOS; Linux's `--tier portable` runs the same code), written once
//! over two small traits. No syscalls and no `cfg(target_os)` here: a backend
//! implements [`ProcessTable`] and [`Waker`] (docs/TIERS.md, "portable";
//! docs/PORTING.md).
//!
//! - [`lineage`]: who is a member, to a fixed point, by identity (serials), never by
//!   number alone.
//! - [`snapshot`]: one look at the table that every lineage scanned on a tick shares.
//! - [`teardown`]: SIGTERM, grace, a freeze round (SIGSTOP every proven member and
//!   rescan until nothing new appears), SIGKILL: what `cgroup.kill` does elsewhere.
//! - [`owner`]: the owner watch, with the re-read that closes the register-after-exit
//!   race.
//! - [`record`]: the member stream the guardian writes (to its sentinel and to the
//!   tree's record), and the lineage a takeover or a sweep seeds from it.
//! - [`tracking`]: the guardian's members while the tree lives (the look every
//!   100 ms, the member record), its watch loop, and the sweep of a recorded tree;
//!   Linux's `--tier portable` and macOS run this one copy.
//! - [`reconcile`]: `ps`, `sweep`, `kill` and a sentinel's takeover over the
//!   registry (macOS's commands; tested on Linux).

pub(crate) mod lineage;
pub(crate) mod owner;
pub(crate) mod reconcile;
pub(crate) mod record;
pub(crate) mod snapshot;
pub(crate) mod teardown;
pub(crate) mod tracking;
#[cfg(test)]
mod xnu_model;
#[cfg(test)]
mod xnu_tests;

pub(crate) use crate::audit::Delivery;
use std::time::Duration;

/// A process's identity for the whole boot: never handed to another process (xnu's
/// `p_uniqueid`; on Linux the pidfs inode). A pid is only a number; a serial is a
/// process.
pub type Serial = u64;

/// What one look at a process said, read in one go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub uid: u32,
    /// When it started, in the backend's unit (only compared with other starts).
    pub start: u64,
    pub serial: Serial,
    /// The serial of the parent this process is linked to: xnu's `p_puniqueid` (its
    /// parent at fork, rewritten at exec to its parent then); on Linux the current
    /// parent's, read so that a reused parent number cannot pass.
    pub parent_serial: Option<Serial>,
    /// xnu's pid version (bumped at fork and at every exec); `None` elsewhere.
    pub version: Option<u32>,
    /// xnu ≥ 15.4's `p_orig_ppidversion`: the parent's version at fork, kept across
    /// reparenting and exec; `None` elsewhere.
    pub orig_parent_version: Option<u32>,
    /// Stopped: it cannot act on SIGTERM until continued.
    pub stopped: bool,
}

impl Facts {
    /// The tree's root as its record shows it (no session id: the backends do not
    /// read one).
    pub(crate) fn root_record(&self) -> crate::registry::RootRecord {
        crate::registry::RootRecord {
            pid: self.pid,
            starttime: self.start,
            pgid: self.pgid,
            sid: 0,
            uid: self.uid,
        }
    }
}

/// The signals the portable teardown sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Term,
    Cont,
    Stop,
    Kill,
}

/// A proven member: the process, by serial, and why it belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub pid: i32,
    pub serial: Serial,
    pub start: u64,
    pub why: Why,
}

/// How a member was proven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// A seed: CMD, or a serial from the record (takeover, sweep).
    Seed,
    /// Its parent serial is a proven member's.
    Lineage { parent: Serial },
    /// Its parent's version at fork is one a proven member held (xnu ≥ 15.4).
    Version { parent: Serial },
    /// It carries the tree's marker, has our uid and started no earlier than the
    /// guardian.
    Marker,
}

/// The process table of one backend: what the core reads and the one way it signals.
pub trait ProcessTable {
    /// Every pid the table shows now (a snapshot; it may be stale by the next call).
    fn pids(&mut self) -> Vec<i32>;
    /// The facts of the live process at `pid`; `None` if there is none (or a zombie).
    fn facts(&mut self, pid: i32) -> Option<Facts>;
    /// The pids of `pid`'s live children: the cheap path before a full scan.
    fn children(&mut self, pid: i32) -> Vec<i32>;
    /// The tree marker (`UNDERTAKER_TREE`'s value) the process `facts` describes
    /// carries, if any: read only while its number still names `facts.serial`.
    fn marker(&mut self, facts: &Facts) -> Option<Vec<u8>>;
    /// Sends `signal` to `member` only if the process at its pid is still that serial
    /// *when the signal is delivered* (a pidfd on Linux, the audit token's pid version
    /// on macOS): a stale member gets `AlreadyGone`, never a stranger.
    fn deliver(&mut self, member: &Member, signal: Signal) -> Delivery;
}

/// What woke a [`Waker::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A watched process exited.
    Exited(i32),
    /// A watched process forked (the child's pid is not given: rescan).
    Forked(i32),
    /// A watched process exec'd (its version changed: re-read it).
    Execed(i32),
}

/// The one wait primitive: watch processes, wait for them or a deadline.
pub trait Waker {
    /// Watches `member`'s exit, forks and execs from now on (best effort: a process
    /// already gone is simply not watched; callers re-read afterwards).
    fn watch(&mut self, member: &Member);
    /// Time since the waker was made.
    fn now(&mut self) -> Duration;
    /// Waits until something watched happens or `until` (a [`Waker::now`] value).
    fn wait(&mut self, until: Duration) -> Vec<Wake>;
}
