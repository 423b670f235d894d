//! The refusal ladder: pure rules deciding whether a target may be signalled.
//!
//! It is the fallback proof when no pidfd or cgroup proof exists, and a second check
//! on top of them. It reads nothing and signals nothing, so every rung is tested as
//! a table of cases.

use crate::identity::Identity;
use serde::Serialize;

/// Facts about the process doing the signalling, read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfFacts {
    pub pid: i32,
    /// The real process group, read from /proc (never assumed to equal the pid).
    pub pgrp: i32,
    pub uid: u32,
    /// Parent first, up to init.
    pub ancestors: Vec<i32>,
    /// The owner of the trees this process holds and the owner's ancestors, when the
    /// owner is not our parent (`--owner PID`): protected like our own ancestors,
    /// since a tree dies with its owner and an owner killed takes every tree with it.
    pub owner_line: Vec<i32>,
    pub boot_id: String,
    /// Process groups none of whose members is ever signalled besides our own: the
    /// host's group a supervisor is told about (`supervise --parent-pgid`).
    pub protected_groups: Vec<i32>,
}

/// What the target looks like right now, read after a pidfd to it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFacts {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub uid: u32,
    pub starttime: u64,
}

/// Why a signal was not sent. One variant per rung; `code()` is the stable name
/// written to the audit log and JSON output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Refusal {
    #[error("pid {pid} is not a valid target (must be > 1)")]
    InvalidPid { pid: i32 },
    #[error("pgid {pgid} is not a valid target (must be > 1)")]
    InvalidPgid { pgid: i32 },
    #[error("pid {pid} is undertaker itself")]
    OwnProcess { pid: i32 },
    #[error("group {pgid} is undertaker's own process group")]
    OwnGroup { pgid: i32 },
    #[error("pid {pid} is an ancestor of undertaker")]
    Ancestor { pid: i32 },
    #[error("pid {pid} is the owner of undertaker's trees, or an ancestor of it")]
    Owner { pid: i32 },
    #[error("pid {pid} is in group {pgid}, the host's own group")]
    ProtectedGroup { pid: i32, pgid: i32 },
    #[error("pid {pid} belongs to uid {found}, not {ours}")]
    OtherUid { pid: i32, found: u32, ours: u32 },
    #[error("no live identity for pid {pid}")]
    IdentityMissing { pid: i32 },
    #[error("pid {pid} started at {found}, recorded {expected}: a different process")]
    StarttimeMismatch { pid: i32, expected: u64, found: u64 },
    #[error("pid {pid} is in group {found}, not {expected}")]
    NotGroupMember { pid: i32, expected: i32, found: i32 },
    #[error("pid {pid} does not lead group {pgid}")]
    NotGroupLeader { pid: i32, pgid: i32 },
    #[error("record is from boot {recorded}, this is boot {current}")]
    OtherBoot { recorded: String, current: String },
    #[error("pid {pid} is not provably part of the tree ({why})")]
    NotOurs { pid: i32, why: String },
    #[error("group {pgid} has no pinned leader and no pidfd group signalling")]
    LeaderNotPinned { pgid: i32 },
    #[error("group {pgid} is not proven by its snapshot ({why})")]
    UnprovenGroup { pgid: i32, why: String },
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::InvalidPid { .. } => "invalid_pid",
            Refusal::InvalidPgid { .. } => "invalid_pgid",
            Refusal::OwnProcess { .. } => "own_process",
            Refusal::OwnGroup { .. } => "own_group",
            Refusal::Ancestor { .. } => "ancestor",
            Refusal::Owner { .. } => "owner",
            Refusal::ProtectedGroup { .. } => "protected_group",
            Refusal::OtherUid { .. } => "other_uid",
            Refusal::IdentityMissing { .. } => "identity_missing",
            Refusal::StarttimeMismatch { .. } => "starttime_mismatch",
            Refusal::NotGroupMember { .. } => "not_group_member",
            Refusal::NotGroupLeader { .. } => "not_group_leader",
            Refusal::OtherBoot { .. } => "other_boot",
            Refusal::NotOurs { .. } => "not_ours",
            Refusal::LeaderNotPinned { .. } => "leader_not_pinned",
            Refusal::UnprovenGroup { .. } => "unproven_group",
        }
    }
}

/// Rungs that hold for any target pid, before anything is read about it.
pub fn check_pid(me: &SelfFacts, pid: i32) -> Result<(), Refusal> {
    if pid <= 1 {
        return Err(Refusal::InvalidPid { pid });
    }
    if pid == me.pid {
        return Err(Refusal::OwnProcess { pid });
    }
    if me.ancestors.contains(&pid) {
        return Err(Refusal::Ancestor { pid });
    }
    if me.owner_line.contains(&pid) {
        return Err(Refusal::Owner { pid });
    }
    Ok(())
}

/// Rungs for a live process: the pid rungs, same uid, and, when a recorded identity
/// is the proof, the same boot, starttime and group.
pub fn check_process(
    me: &SelfFacts,
    live: &LiveFacts,
    expected: Option<&Identity>,
) -> Result<(), Refusal> {
    check_pid(me, live.pid)?;
    if me.protected_groups.contains(&live.pgid) {
        return Err(Refusal::ProtectedGroup {
            pid: live.pid,
            pgid: live.pgid,
        });
    }
    if live.uid != me.uid {
        return Err(Refusal::OtherUid {
            pid: live.pid,
            found: live.uid,
            ours: me.uid,
        });
    }
    if let Some(exp) = expected {
        if exp.boot_id != me.boot_id {
            return Err(Refusal::OtherBoot {
                recorded: exp.boot_id.clone(),
                current: me.boot_id.clone(),
            });
        }
        if exp.pid != live.pid {
            return Err(Refusal::IdentityMissing { pid: exp.pid });
        }
        if exp.starttime != live.starttime {
            return Err(Refusal::StarttimeMismatch {
                pid: live.pid,
                expected: exp.starttime,
                found: live.starttime,
            });
        }
        if exp.pgid != live.pgid {
            return Err(Refusal::NotGroupMember {
                pid: live.pid,
                expected: exp.pgid,
                found: live.pgid,
            });
        }
    }
    Ok(())
}

/// Rungs for signalling a whole group through its live leader (the group is named by
/// the leader's pidfd, so a leader that is gone cannot be used).
pub fn check_group(me: &SelfFacts, pgid: i32, leader: &LiveFacts) -> Result<(), Refusal> {
    if pgid <= 1 {
        return Err(Refusal::InvalidPgid { pgid });
    }
    if pgid == me.pgrp {
        return Err(Refusal::OwnGroup { pgid });
    }
    if me.protected_groups.contains(&pgid) {
        return Err(Refusal::ProtectedGroup {
            pid: leader.pid,
            pgid,
        });
    }
    check_pid(me, pgid)?;
    check_process(me, leader, None)?;
    if leader.pgid != pgid || leader.pid != pgid {
        return Err(Refusal::NotGroupLeader {
            pid: leader.pid,
            pgid,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> SelfFacts {
        SelfFacts {
            pid: 100,
            pgrp: 90,
            uid: 1000,
            ancestors: vec![80, 1],
            owner_line: vec![70, 60],
            boot_id: "boot-a".into(),
            protected_groups: vec![75],
        }
    }

    fn live(pid: i32) -> LiveFacts {
        LiveFacts {
            pid,
            ppid: 100,
            pgid: pid,
            uid: 1000,
            starttime: 5000,
        }
    }

    fn rec(pid: i32) -> Identity {
        Identity {
            boot_id: "boot-a".into(),
            pid,
            starttime: 5000,
            pgid: pid,
            sid: 90,
            uid: 1000,
            pidfs_inode: None,
        }
    }

    #[test]
    fn process_rungs_table() {
        let m = me();
        let other_boot = Identity {
            boot_id: "boot-b".into(),
            ..rec(200)
        };
        let cases: Vec<(&str, LiveFacts, Option<Identity>, Option<&str>)> = vec![
            ("plain member", live(200), None, None),
            ("snapshot matches", live(200), Some(rec(200)), None),
            ("pid 0", live(0), None, Some("invalid_pid")),
            ("pid 1", live(1), None, Some("invalid_pid")),
            ("negative", live(-5), None, Some("invalid_pid")),
            ("self", live(100), None, Some("own_process")),
            ("parent", live(80), None, Some("ancestor")),
            ("the owner", live(70), None, Some("owner")),
            ("the owner's parent", live(60), None, Some("owner")),
            (
                "other uid",
                LiveFacts {
                    uid: 0,
                    ..live(200)
                },
                None,
                Some("other_uid"),
            ),
            (
                "reused pid",
                LiveFacts {
                    starttime: 9999,
                    ..live(200)
                },
                Some(rec(200)),
                Some("starttime_mismatch"),
            ),
            (
                "moved group",
                LiveFacts {
                    pgid: 300,
                    ..live(200)
                },
                Some(rec(200)),
                Some("not_group_member"),
            ),
            (
                "other boot",
                live(200),
                Some(other_boot),
                Some("other_boot"),
            ),
            (
                "in the host's group",
                LiveFacts {
                    pgid: 75,
                    ..live(200)
                },
                None,
                Some("protected_group"),
            ),
        ];
        for (name, l, e, want) in cases {
            let got = check_process(&m, &l, e.as_ref()).err().map(|r| r.code());
            assert_eq!(got, want, "{name}");
        }
    }

    /// name, pgid, live leader, expected refusal code
    #[test]
    fn group_rungs_table() {
        let m = me();
        let cases: Vec<(&str, i32, LiveFacts, Option<&str>)> = vec![
            ("live leader", 200, live(200), None),
            ("pgid 0", 0, live(200), Some("invalid_pgid")),
            ("pgid -1", -1, live(200), Some("invalid_pgid")),
            ("pgid 1", 1, live(200), Some("invalid_pgid")),
            ("own group", 90, live(90), Some("own_group")),
            ("ancestor group", 80, live(80), Some("ancestor")),
            ("owner's group", 70, live(70), Some("owner")),
            (
                "the host's group",
                75,
                LiveFacts {
                    pgid: 75,
                    ..live(75)
                },
                Some("protected_group"),
            ),
            (
                "not leader",
                200,
                LiveFacts {
                    pgid: 200,
                    ..live(201)
                },
                Some("not_group_leader"),
            ),
            (
                "leader of another uid",
                200,
                LiveFacts {
                    uid: 0,
                    ..live(200)
                },
                Some("other_uid"),
            ),
        ];
        for (name, pgid, leader, want) in cases {
            let got = check_group(&m, pgid, &leader).err().map(|r| r.code());
            assert_eq!(got, want, "{name}");
        }
    }
}
