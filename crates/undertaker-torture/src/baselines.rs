//! The designs undertaker replaces, reproduced faithfully so they can be measured.
//!
//! These baselines call raw `kill(-pgid)` / `killpg` on remembered numbers: that is the
//! very thing being measured. This module is the ONLY place in the project allowed to
//! do so, and it only ever runs inside the harness's private PID namespace (see
//! `ns.rs`), where the only processes that exist are the trial's own.
//!
//! Grace periods are shortened (milliseconds instead of seconds) so trials are cheap;
//! the order of checks and signals is the designs' own.

use process_wrap::std::ChildWrapper;
use rustix::process::{kill_process_group, test_kill_process_group, Pid, Signal};
use std::time::{Duration, Instant};

/// Baseline grace between SIGTERM and SIGKILL (Hermes: 3 s, pi-crew: 2 s).
pub const GRACE: Duration = Duration::from_millis(20);
/// Baseline liveness probe interval (Hermes: 100 ms, pi-crew: 20 ms).
const PROBE_EVERY: Duration = Duration::from_millis(2);

fn killpg(pgid: i32, sig: Signal) -> rustix::io::Result<()> {
    match Pid::from_raw(pgid) {
        Some(p) => kill_process_group(p, sig),
        None => Err(rustix::io::Errno::INVAL),
    }
}

/// Signal 0 to the group. EPERM counts as alive, as both originals do (docs/RELIABILITY.md).
fn group_alive(pgid: i32) -> bool {
    matches!(
        Pid::from_raw(pgid).map(test_kill_process_group),
        Some(Ok(())) | Some(Err(rustix::io::Errno::PERM))
    )
}

/// Probes until the group is gone or the grace period ends; true if it is gone.
fn wait_group_gone(pgid: i32, grace: Duration) -> bool {
    let end = Instant::now() + grace;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(PROBE_EVERY);
    }
}

/// naive: remember the pgid at spawn; at owner death `kill -- -PGID`, then
/// `kill -9 -- -PGID` if the group is still there.
pub fn naive_teardown(pgid: i32, pause: &mut dyn FnMut()) {
    pause();
    let _ = killpg(pgid, Signal::TERM);
    if !wait_group_gone(pgid, GRACE) {
        let _ = killpg(pgid, Signal::KILL);
    }
}

/// prune: the Hermes death supervisor (docs/RELIABILITY.md, "prune"). A set of
/// registered pgids; on every registration change each gets signal 0: ESRCH drops it,
/// EPERM or anything else keeps it. At owner death (pipe EOF): killpg(TERM) each,
/// probe up to the grace, killpg(KILL) what remains. Documented residual: a group can
/// die and its number be recycled between two probes.
#[derive(Default)]
pub struct Prune {
    registered: Vec<i32>,
}

impl Prune {
    pub fn register(&mut self, pgid: i32) {
        if pgid > 1 && !self.registered.contains(&pgid) {
            self.registered.push(pgid);
        }
        self.registration_changed();
    }

    /// The prune pass run on every registration change.
    pub fn registration_changed(&mut self) {
        self.registered.retain(|&pgid| {
            !matches!(
                Pid::from_raw(pgid).map(test_kill_process_group),
                Some(Err(rustix::io::Errno::SRCH))
            )
        });
    }

    pub fn owner_died(&mut self, pause: &mut dyn FnMut()) {
        pause();
        for &pgid in &self.registered {
            let _ = killpg(pgid, Signal::TERM);
        }
        let end = Instant::now() + GRACE;
        for &pgid in &self.registered {
            let left = end.saturating_duration_since(Instant::now());
            if !wait_group_gone(pgid, left) {
                let _ = killpg(pgid, Signal::KILL);
            }
        }
        self.registered.clear();
    }
}

/// The /proc identity pi-crew records at spawn and compares at reap time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcIdentity {
    pub pid: i32,
    pub pgid: i32,
    /// stat field 22, kept as the exact string.
    pub starttime: String,
    pub uid: u32,
}

impl ProcIdentity {
    pub fn read(pid: i32) -> Option<ProcIdentity> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, after) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(ProcIdentity {
            pid,
            pgid: fields.get(2)?.parse().ok()?,
            starttime: fields.get(19)?.to_string(),
            uid,
        })
    }
}

/// Why the ladder refused (pi-crew's closed union, trimmed to the rungs exercised).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LadderRefusal {
    PgidInvalid,
    PgidInitOrSelf,
    IdentityMissing,
    UidMismatch,
    NotGroupMember,
    StarttimeMismatch,
}

/// ladder: pi-crew's `reap-group.ts` refusal ladder over a recorded /proc identity,
/// then `kill(-pgid)`. The check and the signal are two steps: the documented TOCTOU
/// ("MINOR #7", closable only with a pidfd-style handle).
pub struct Ladder {
    pub record: ProcIdentity,
}

impl Ladder {
    pub fn check(&self) -> Result<(), LadderRefusal> {
        let r = &self.record;
        let pgid = r.pgid;
        // Rung 2: pgid > 1.
        if pgid <= 1 {
            return Err(LadderRefusal::PgidInvalid);
        }
        // Rung 3: never our own pid, ppid or real pgrp.
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let ppid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        // The real pgrp, from /proc as pi-crew reads it (unknown: refuse).
        let Some(own) = ProcIdentity::read(me) else {
            return Err(LadderRefusal::IdentityMissing);
        };
        if pgid == me || pgid == ppid || pgid == own.pgid {
            return Err(LadderRefusal::PgidInitOrSelf);
        }
        let my_uid = rustix::process::getuid().as_raw();
        // Rung 4: live identity, or leader proof for a dead leader.
        let Some(live) = ProcIdentity::read(pgid) else {
            let leader_proof = r.pid == r.pgid && !r.starttime.is_empty() && r.uid == my_uid;
            // Gone: allowed only while the group has members.
            return if leader_proof && group_alive(pgid) {
                Ok(())
            } else {
                Err(LadderRefusal::IdentityMissing)
            };
        };
        // Rungs 5-8 on the live leader.
        if live.uid != my_uid {
            return Err(LadderRefusal::UidMismatch);
        }
        if live.pgid != pgid {
            return Err(LadderRefusal::NotGroupMember);
        }
        if live.starttime.is_empty() {
            return Err(LadderRefusal::IdentityMissing);
        }
        if live.starttime != r.starttime {
            return Err(LadderRefusal::StarttimeMismatch);
        }
        Ok(())
    }

    /// TERM → grace → re-run the whole ladder → KILL.
    pub fn owner_died(&self, pause: &mut dyn FnMut()) {
        if self.check().is_err() {
            return;
        }
        pause();
        let pgid = self.record.pgid;
        if killpg(pgid, Signal::TERM).is_err() {
            return;
        }
        if wait_group_gone(pgid, GRACE) {
            return;
        }
        if self.check().is_ok() {
            let _ = killpg(pgid, Signal::KILL);
        }
    }
}

/// process-wrap: the real crate (v10, std, `ProcessGroup::leader()`), driven as rmcp
/// drives it: the child is waited for, and dropped with `start_kill()`, which is
/// `killpg(pgid, SIGKILL)` on the pgid remembered at spawn.
pub fn process_wrap_teardown(child: &mut dyn ChildWrapper, pause: &mut dyn FnMut()) {
    // The only "check" the design has: is the child still running?
    let running = matches!(child.try_wait(), Ok(None));
    if running {
        pause();
    }
    let _ = child.start_kill();
    let _ = child.wait();
}
