//! The proofs of `supervise`'s snapshots and `--parent-pgid` (docs/SUPERVISE.md, "A
//! group whose leader died"): a group whose leader may be gone is proven by one
//! process of a recorded snapshot, still alive with its start time and still in the
//! group; the rest of the group through that process.

use super::{NotProven, Opened, ProvenProcess, Signaller};
use crate::audit::Proof;
use crate::ladder::{self, LiveFacts, Refusal};
use crate::linux::kernel::poll::readable_now;
use crate::snapshot::{self, SnapshotEntry};
use rustix::fd::AsFd;

/// How many 2 ms naps [`Signaller::past_their_start_tick`] takes at most for the
/// clock to leave a tick (one tick is 10 ms; the bound only guards against a clock
/// that does not move).
const TICK_WAITS: u32 = 50;

impl Signaller {
    /// Never signals a member of group `pgid` (a supervisor's `--parent-pgid`).
    pub fn protect_group(&mut self, pgid: i32) {
        if !self.me.protected_groups.contains(&pgid) {
            self.me.protected_groups.push(pgid);
        }
    }

    /// Proves `pid` is in group `anchor.identity.pgid` when the anchor is a proven
    /// member that does not lead it (the leader is gone: a snapshot proved the group,
    /// docs/SUPERVISE.md). The anchor pins the number only while it stays in the
    /// group, so its group is read again after the candidate's, with its pidfd alive.
    pub fn prove_in_group_of_member(
        &self,
        pid: i32,
        anchor: &ProvenProcess,
    ) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(pid)?;
        let pgid = anchor.identity.pgid;
        if opened.live.pgid != pgid {
            return Err(Refusal::NotGroupMember {
                pid,
                expected: pgid,
                found: opened.live.pgid,
            }
            .into());
        }
        ladder::check_process(&self.me, &opened.live, None)?;
        let still_in = self
            .procfs
            .stat(anchor.pid())
            .is_ok_and(|s| s.pgrp == pgid && s.starttime == anchor.identity.starttime);
        if !still_in || anchor.has_exited() {
            return Err(NotProven::Gone);
        }
        Ok(opened.proven(Proof::Group { leader: pgid }))
    }

    /// Proves the process of a snapshot entry is the one recorded: alive with the
    /// recorded start time (pid and start time name one process for the boot), ours by
    /// uid and not protected.
    pub fn prove_snapshot_entry(&self, entry: &SnapshotEntry) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(entry.pid)?;
        if opened.live.starttime != entry.start_time {
            return Err(Refusal::StarttimeMismatch {
                pid: entry.pid,
                expected: entry.start_time,
                found: opened.live.starttime,
            }
            .into());
        }
        ladder::check_process(&self.me, &opened.live, None)?;
        Ok(opened.proven(Proof::Snapshot))
    }

    /// The processes of `members` that a snapshot entry (pid, start time) names and
    /// nothing else: each seen alive through its pidfd in a later clock tick than the
    /// one it started in. One that died within its start tick shares its entry with
    /// whatever takes its number in that same tick, so it is left out (it is gone:
    /// nothing of it needs proving later). Waits for the next tick at most once (10 ms,
    /// only for processes born this tick).
    pub fn past_their_start_tick<'a>(
        &self,
        members: &'a [ProvenProcess],
    ) -> Vec<&'a ProvenProcess> {
        let newest = members.iter().map(|m| m.identity.starttime).max();
        let mut now = self.procfs.now_ticks();
        for _ in 0..TICK_WAITS {
            if newest.is_none_or(|n| now > n) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            now = self.procfs.now_ticks();
        }
        // The clock first, then the pidfds: alive after `now` began.
        members
            .iter()
            .filter(|m| m.identity.starttime < now && !m.has_exited())
            .collect()
    }

    /// Proves group `pgid` by a snapshot (docs/SUPERVISE.md): the first entry whose
    /// process is alive with the recorded start time and still in the group (read
    /// after its pidfd was opened) is returned, proven. None: `unproven_group`.
    pub fn prove_group_by_snapshot(
        &self,
        pgid: i32,
        entries: &[SnapshotEntry],
    ) -> Result<ProvenProcess, NotProven> {
        snapshot::check_pgid(&self.me, pgid)?;
        let mut opened: Vec<Option<Opened>> = Vec::new();
        for entry in entries.iter().take(snapshot::MAX_ENTRIES + 1) {
            opened.push(self.open_then_read(entry.pid).ok());
        }
        let seen: Vec<Option<LiveFacts>> = opened
            .iter()
            .map(|o| o.as_ref().map(|o| o.live.clone()))
            .collect();
        let i = snapshot::prove_group(&self.me, pgid, entries, &seen)?;
        let chosen = opened.swap_remove(i).ok_or(NotProven::Gone)?;
        // Still alive after every read: the facts checked were its own.
        if readable_now(chosen.fd.as_fd()) {
            return Err(Refusal::UnprovenGroup {
                pgid,
                why: "the proving process exited meanwhile".into(),
            }
            .into());
        }
        Ok(chosen.proven(Proof::Snapshot))
    }
}
