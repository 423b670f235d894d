//! The owner watch without PDEATHSIG: read the owner's identity, watch it, read it
//! again. An exit before the watch was armed is never reported (kqueue's
//! register-after-exit), so the second read is what tells: a changed or missing
//! serial means the owner is already gone. The sentinel pair uses the same watch,
//! each side on the other.

use super::{Member, ProcessTable, Serial, Wake, Waker, Why};

/// A watched owner (or the other half of the sentinel pair).
#[derive(Debug, Clone)]
pub struct Watched {
    pub pid: i32,
    pub serial: Serial,
}

/// Why the watch could not be armed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerGone {
    /// Nothing at that number, or our parent is already init/launchd (pid 1).
    Missing,
    /// The number now names another process.
    Replaced,
}

impl Watched {
    /// Arms the watch on `pid`. `pid == 1` is refused: a process whose parent is
    /// pid 1 was orphaned before it looked.
    pub fn arm<O: ProcessTable + Waker>(os: &mut O, pid: i32) -> Result<Self, OwnerGone> {
        if pid <= 1 {
            return Err(OwnerGone::Missing);
        }
        let before = os.facts(pid).ok_or(OwnerGone::Missing)?;
        let watched = Self {
            pid,
            serial: before.serial,
        };
        os.watch(&Member {
            pid,
            serial: before.serial,
            start: before.start,
            why: Why::Seed,
        });
        match os.facts(pid) {
            Some(after) if after.serial == before.serial => Ok(watched),
            Some(_) => Err(OwnerGone::Replaced),
            None => Err(OwnerGone::Missing),
        }
    }

    /// True once `wakes` report its exit or the table no longer shows its serial.
    pub fn gone(&self, table: &mut impl ProcessTable, wakes: &[Wake]) -> bool {
        wakes.contains(&Wake::Exited(self.pid))
            || table
                .facts(self.pid)
                .is_none_or(|f| f.serial != self.serial)
    }
}
