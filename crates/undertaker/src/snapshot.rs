//! Proving a process group whose leader may be gone, from a snapshot (docs/SUPERVISE.md,
//! "A group whose leader died").
//!
//! A group is named by a number, and a number proves nothing. But the kernel never
//! hands a process-group number to a new group while the old one still has a member
//! (the number stays in use as a pgid). So one process of a snapshot taken when the
//! group was known to be ours (pid and start time), still alive with the same start
//! time and still in group N, proves that group N now is the group of the snapshot.
//! The snapshot comes from an earlier supervisor of the same owner (its record) or from
//! the host (`adopt` with `pgid` and `snapshot`, pi-crew's spawn record).
//!
//! Pure rules, like [`crate::ladder`]: they read nothing and signal nothing, so every
//! rung is a row of a table test.

use crate::ladder::{check_pid, check_process, LiveFacts, Refusal, SelfFacts};
use serde::{Deserialize, Serialize};

/// The most entries a snapshot may carry (a bound on the work one request causes).
pub const MAX_ENTRIES: usize = 1024;

/// One process as recorded while its group was known to be ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SnapshotEntry {
    pub pid: i32,
    /// /proc/PID/stat field 22, in clock ticks since boot.
    pub start_time: u64,
}

/// Rungs for the group number itself, before any entry is looked at.
pub fn check_pgid(me: &SelfFacts, pgid: i32) -> Result<(), Refusal> {
    if pgid <= 1 {
        return Err(Refusal::InvalidPgid { pgid });
    }
    if pgid == me.pgrp {
        return Err(Refusal::OwnGroup { pgid });
    }
    if me.protected_groups.contains(&pgid) {
        return Err(Refusal::ProtectedGroup { pid: pgid, pgid });
    }
    // The number of the group is its first leader's pid: ours or an ancestor's is
    // never a group we may take.
    check_pid(me, pgid)
}

/// Whether `entry` is group `pgid`'s leader, whose entry never proves anything. Start
/// times count in clock ticks (10 ms): a stranger that took the leader's number within
/// the tick the leader started in looks the same, and leads group `pgid`. A live leader
/// is proven as the owner's child instead (`register`); a snapshot proves a group only
/// through a member that is not its leader.
pub fn is_leader_entry(pgid: i32, entry: &SnapshotEntry) -> bool {
    entry.pid == pgid
}

/// Rungs for one entry against its live process (read after a pidfd to it was opened
/// and seen alive afterwards): same pid, same start time, still in `pgid`, and the
/// process rungs (our uid, not protected).
pub fn check_entry(
    me: &SelfFacts,
    pgid: i32,
    entry: &SnapshotEntry,
    live: &LiveFacts,
) -> Result<(), Refusal> {
    check_pid(me, entry.pid)?;
    if is_leader_entry(pgid, entry) {
        return Err(Refusal::UnprovenGroup {
            pgid,
            why: format!("process {pgid} leads the group: a snapshot never proves a leader"),
        });
    }
    if live.pid != entry.pid {
        return Err(Refusal::IdentityMissing { pid: entry.pid });
    }
    if live.starttime != entry.start_time {
        return Err(Refusal::StarttimeMismatch {
            pid: entry.pid,
            expected: entry.start_time,
            found: live.starttime,
        });
    }
    if live.pgid != pgid {
        return Err(Refusal::NotGroupMember {
            pid: entry.pid,
            expected: pgid,
            found: live.pgid,
        });
    }
    check_process(me, live, None)
}

/// The snapshot's proof of group `pgid`: the index of the first entry whose live
/// process passes [`check_entry`]. `seen[i]` is what entry `i`'s pid looks like now
/// (`None`: no such process). No entry passing is [`Refusal::UnprovenGroup`], with the
/// last entry's own refusal as the detail.
pub fn prove_group(
    me: &SelfFacts,
    pgid: i32,
    entries: &[SnapshotEntry],
    seen: &[Option<LiveFacts>],
) -> Result<usize, Refusal> {
    check_pgid(me, pgid)?;
    let mut why = if entries.is_empty() {
        "the snapshot is empty".to_string()
    } else if entries.len() > MAX_ENTRIES {
        return Err(Refusal::UnprovenGroup {
            pgid,
            why: format!("the snapshot has more than {MAX_ENTRIES} entries"),
        });
    } else {
        "no process of the snapshot is alive".to_string()
    };
    for (i, entry) in entries.iter().enumerate() {
        let Some(live) = seen.get(i).and_then(Option::as_ref) else {
            continue;
        };
        match check_entry(me, pgid, entry, live) {
            Ok(()) => return Ok(i),
            Err(r) => why = r.to_string(),
        }
    }
    Err(Refusal::UnprovenGroup { pgid, why })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> SelfFacts {
        SelfFacts {
            pid: 100,
            pgrp: 100,
            uid: 1000,
            ancestors: vec![80, 1],
            owner_line: vec![60],
            boot_id: "boot-a".into(),
            protected_groups: vec![70],
        }
    }

    fn entry(pid: i32) -> SnapshotEntry {
        SnapshotEntry {
            pid,
            start_time: 5000 + pid as u64,
        }
    }

    /// The live process of `entry(pid)`, in group `pgid`.
    fn live(pid: i32, pgid: i32) -> LiveFacts {
        LiveFacts {
            pid,
            ppid: 1,
            pgid,
            uid: 1000,
            starttime: 5000 + pid as u64,
        }
    }

    /// name, pgid, snapshot, what each entry's pid is now, expected: Ok(index) or the
    /// refusal code.
    #[test]
    fn group_proof_table() {
        type Case = (
            &'static str,
            i32,
            Vec<SnapshotEntry>,
            Vec<Option<LiveFacts>>,
            Result<usize, &'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "leader alive: never proven by a snapshot (a stranger can share its tick)",
                200,
                vec![entry(200)],
                vec![Some(live(200, 200))],
                Err("unproven_group"),
            ),
            (
                "leader alive and a member alive: the member proves the group",
                200,
                vec![entry(200), entry(201)],
                vec![Some(live(200, 200)), Some(live(201, 200))],
                Ok(1),
            ),
            (
                "leader gone, a member alive in the group",
                200,
                vec![entry(200), entry(201)],
                vec![None, Some(live(201, 200))],
                Ok(1),
            ),
            (
                "nothing alive",
                200,
                vec![entry(200), entry(201)],
                vec![None, None],
                Err("unproven_group"),
            ),
            ("empty snapshot", 200, vec![], vec![], Err("unproven_group")),
            (
                "a reused number: another start time",
                200,
                vec![entry(200)],
                vec![Some(LiveFacts {
                    starttime: 1,
                    ..live(200, 200)
                })],
                Err("unproven_group"),
            ),
            (
                "the member left the group",
                200,
                vec![entry(200), entry(201)],
                vec![None, Some(live(201, 300))],
                Err("unproven_group"),
            ),
            (
                "a member of another uid",
                200,
                vec![entry(201)],
                vec![Some(LiveFacts {
                    uid: 0,
                    ..live(201, 200)
                })],
                Err("unproven_group"),
            ),
            (
                "a first entry fails, a later one proves",
                200,
                vec![entry(202), entry(201)],
                vec![Some(live(202, 300)), Some(live(201, 200))],
                Ok(1),
            ),
            ("pgid 1", 1, vec![entry(1)], vec![None], Err("invalid_pgid")),
            ("pgid 0", 0, vec![entry(5)], vec![None], Err("invalid_pgid")),
            (
                "our own group",
                100,
                vec![entry(101)],
                vec![Some(live(101, 100))],
                Err("own_group"),
            ),
            (
                "the host's group (--parent-pgid)",
                70,
                vec![entry(71)],
                vec![Some(live(71, 70))],
                Err("protected_group"),
            ),
            (
                "an ancestor's group",
                80,
                vec![entry(81)],
                vec![Some(live(81, 80))],
                Err("ancestor"),
            ),
            (
                "an entry naming an ancestor",
                200,
                vec![entry(80)],
                vec![Some(live(80, 200))],
                Err("unproven_group"),
            ),
        ];
        let m = me();
        for (name, pgid, entries, seen, want) in cases {
            let got = prove_group(&m, pgid, &entries, &seen).map_err(|r| r.code());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn an_oversized_snapshot_is_refused_before_anything_is_read() {
        let entries = vec![entry(200); MAX_ENTRIES + 1];
        let seen = vec![Some(live(200, 200)); MAX_ENTRIES + 1];
        let got = prove_group(&me(), 200, &entries, &seen).map_err(|r| r.code());
        assert_eq!(got, Err("unproven_group"));
    }

    #[test]
    fn snapshot_entries_use_the_wire_names() {
        let e: SnapshotEntry = serde_json::from_str(r#"{"pid":7,"start_time":99}"#).unwrap();
        assert_eq!(
            e,
            SnapshotEntry {
                pid: 7,
                start_time: 99
            }
        );
    }
}
