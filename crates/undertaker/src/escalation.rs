//! The escalation's policy, the same on every platform: how long each phase may last
//! and which signals a member gets in each round (docs/DESIGN.md §4). The
//! Linux engine that proves members and sends the signals is
//! `linux/proof/teardown.rs`.

use serde::Serialize;
use std::time::Duration;

/// How long SIGKILLed members may take to disappear before they count as stuck.
pub const KILL_CAP: Duration = Duration::from_secs(5);

/// Longest gap between rescans while killing: a member forked just before its parent
/// died has no event of its own to wake us.
pub const MAX_RESCAN: Duration = Duration::from_millis(100);

/// SIGTERM, a grace period, SIGKILL, then up to a cap for the kernel to finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escalation {
    pub grace: Duration,
    pub kill_cap: Duration,
}

impl Escalation {
    /// `grace` between SIGTERM and SIGKILL, then the standard [`KILL_CAP`].
    pub fn with_grace(grace: Duration) -> Self {
        Self {
            grace,
            kill_cap: KILL_CAP,
        }
    }
}

/// The signals undertaker itself sends (what it relays to CMD travels as a number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Sig {
    #[serde(rename = "SIGTERM")]
    Term,
    #[serde(rename = "SIGCONT")]
    Cont,
    #[serde(rename = "SIGKILL")]
    Kill,
}

impl Sig {
    /// The name written to the audit log.
    pub fn name(self) -> &'static str {
        match self {
            Sig::Term => "SIGTERM",
            Sig::Cont => "SIGCONT",
            Sig::Kill => "SIGKILL",
        }
    }
}

/// Which round of the escalation is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// SIGTERM to members not yet signalled, except those of the group the first
    /// strike already reached.
    Term { struck_group: Option<i32> },
    /// SIGKILL to every member still there.
    Kill,
}

/// What a round knows about one member when it decides what to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberState {
    /// Seen in an earlier round; `Some(true)` if it was already sent SIGKILL.
    pub seen: Option<bool>,
    /// Stopped (`T`/`t`): it cannot act on SIGTERM until continued.
    pub stopped: bool,
    pub pgid: i32,
}

/// The signals one member gets in `phase`, in order. Every member gets one SIGTERM at
/// most (many programs read a second as "quit now, skip the cleanup"); members of the
/// group the first strike reached already have theirs. A running member needs no
/// SIGCONT.
pub fn signals_for(phase: Phase, member: MemberState) -> &'static [Sig] {
    let MemberState {
        seen,
        stopped,
        pgid,
    } = member;
    match phase {
        Phase::Term { .. } if seen.is_some() => &[],
        Phase::Term { struck_group } if struck_group == Some(pgid) => match stopped {
            true => &[Sig::Cont],
            false => &[],
        },
        Phase::Term { .. } if stopped => &[Sig::Term, Sig::Cont],
        Phase::Term { .. } => &[Sig::Term],
        Phase::Kill if seen == Some(true) => &[],
        Phase::Kill => &[Sig::Kill],
    }
}

/// Final state of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Exited before SIGKILL was needed.
    Gone,
    /// Received SIGKILL and is gone.
    Killed,
    /// Still alive after the kill cap (e.g. uninterruptible sleep).
    Stuck,
    /// Never signalled: it could not be proven a member.
    Refused,
}

impl Outcome {
    /// The outcome of a member that was signalled.
    pub fn of_member(exited: bool, killed: bool) -> Self {
        match (exited, killed) {
            (false, _) => Outcome::Stuck,
            (true, true) => Outcome::Killed,
            (true, false) => Outcome::Gone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(seen: Option<bool>, stopped: bool, pgid: i32) -> MemberState {
        MemberState {
            seen,
            stopped,
            pgid,
        }
    }

    #[test]
    fn term_round_reaches_each_member_once() {
        let term = Phase::Term { struck_group: None };
        assert_eq!(signals_for(term, member(None, false, 5)), &[Sig::Term]);
        assert_eq!(
            signals_for(term, member(None, true, 5)),
            &[Sig::Term, Sig::Cont]
        );
        // Seen in an earlier TERM round: nothing again.
        assert!(signals_for(term, member(Some(false), false, 5)).is_empty());
        assert!(signals_for(term, member(Some(false), true, 5)).is_empty());
    }

    #[test]
    fn the_struck_group_gets_no_second_term() {
        let term = Phase::Term {
            struck_group: Some(5),
        };
        assert!(signals_for(term, member(None, false, 5)).is_empty());
        assert_eq!(signals_for(term, member(None, true, 5)), &[Sig::Cont]);
        assert_eq!(signals_for(term, member(None, false, 6)), &[Sig::Term]);
    }

    #[test]
    fn kill_round_kills_each_member_once() {
        assert_eq!(
            signals_for(Phase::Kill, member(Some(false), false, 5)),
            &[Sig::Kill]
        );
        assert_eq!(
            signals_for(Phase::Kill, member(None, true, 5)),
            &[Sig::Kill]
        );
        assert!(signals_for(Phase::Kill, member(Some(true), false, 5)).is_empty());
    }

    #[test]
    fn outcomes() {
        assert_eq!(Outcome::of_member(false, true), Outcome::Stuck);
        assert_eq!(Outcome::of_member(true, true), Outcome::Killed);
        assert_eq!(Outcome::of_member(true, false), Outcome::Gone);
    }
}
