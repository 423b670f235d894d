//! The delivery rule against a fake kernel that checks the token as xnu's
//! `proc_find_audit_token` does: the pid's current version must equal `val[7]`.

use super::*;
use crate::portable::Why;

/// One process at one pid, and what happens around the signal calls.
struct Fake {
    at_pid: Option<BsdInfo>,
    token_call_exists: bool,
    /// Execs that happen between the read and each token call (one per call).
    execs_before_signal: usize,
    /// An errno the token call answers other than the version check (EPERM).
    refuse_with: Option<i32>,
    token_calls: usize,
    delivered: Vec<(u32, Signal)>,
    killed: Vec<Signal>,
}

fn info(uniqueid: u64, version: u32, status: u32) -> BsdInfo {
    BsdInfo {
        pid: 4242,
        ppid: 1,
        pgid: 4242,
        uid: 501,
        status,
        start_us: 1,
        uniqueid,
        puniqueid: 1,
        version,
        orig_ppidversion: 0,
    }
}

impl Fake {
    fn new(at_pid: Option<BsdInfo>) -> Self {
        Self {
            at_pid,
            token_call_exists: true,
            execs_before_signal: 0,
            refuse_with: None,
            token_calls: 0,
            delivered: Vec::new(),
            killed: Vec::new(),
        }
    }
}

impl Kernel for Fake {
    fn read(&mut self, _pid: i32) -> Option<BsdInfo> {
        self.at_pid.clone()
    }

    fn signal_by_token(
        &mut self,
        _pid: i32,
        version: u32,
        signal: Signal,
    ) -> Option<Result<(), i32>> {
        if !self.token_call_exists {
            return None;
        }
        self.token_calls += 1;
        if self.execs_before_signal > 0 {
            self.execs_before_signal -= 1;
            if let Some(p) = self.at_pid.as_mut() {
                p.version += 1;
            }
        }
        if let Some(errno) = self.refuse_with {
            return Some(Err(errno));
        }
        match &self.at_pid {
            Some(p) if p.version == version && !p.is_zombie() => {
                self.delivered.push((version, signal));
                Some(Ok(()))
            }
            _ => Some(Err(ESRCH)),
        }
    }

    fn kill(&mut self, _pid: i32, signal: Signal) -> bool {
        self.killed.push(signal);
        self.at_pid.is_some()
    }
}

fn member(serial: u64) -> Member {
    Member {
        pid: 4242,
        serial,
        start: 1,
        why: Why::Seed,
    }
}

#[test]
fn the_member_gets_the_signal_bound_to_the_version_just_read() {
    let mut k = Fake::new(Some(info(9001, 70, 3)));
    assert_eq!(
        deliver(&mut k, &member(9001), Signal::Term),
        Delivery::Delivered
    );
    assert_eq!(k.delivered, [(70, Signal::Term)]);
    assert!(k.killed.is_empty());
}

#[test]
fn another_process_at_the_number_gets_nothing() {
    // The number was reused: another uniqueid. Neither call is made.
    for token in [true, false] {
        let mut k = Fake::new(Some(info(5555, 70, 3)));
        k.token_call_exists = token;
        assert_eq!(
            deliver(&mut k, &member(9001), Signal::Kill),
            Delivery::AlreadyGone
        );
        assert_eq!((k.token_calls, k.killed.len()), (0, 0));
    }
}

#[test]
fn a_zombie_or_an_empty_number_is_already_gone() {
    let mut k = Fake::new(Some(info(9001, 70, 5)));
    assert_eq!(
        deliver(&mut k, &member(9001), Signal::Kill),
        Delivery::AlreadyGone
    );
    let mut k = Fake::new(None);
    assert_eq!(
        deliver(&mut k, &member(9001), Signal::Kill),
        Delivery::AlreadyGone
    );
    assert_eq!(k.token_calls, 0);
}

#[test]
fn an_exec_between_the_read_and_the_signal_is_retried_with_the_new_version() {
    let mut k = Fake::new(Some(info(9001, 70, 3)));
    k.execs_before_signal = 1;
    assert_eq!(
        deliver(&mut k, &member(9001), Signal::Term),
        Delivery::Delivered
    );
    assert_eq!(k.token_calls, 2);
    assert_eq!(k.delivered, [(71, Signal::Term)]);
}

#[test]
fn a_process_that_keeps_exec_ing_is_not_signalled_blind() {
    let mut k = Fake::new(Some(info(9001, 70, 3)));
    k.execs_before_signal = usize::MAX;
    assert_eq!(
        deliver(&mut k, &member(9001), Signal::Kill),
        Delivery::AlreadyGone
    );
    assert_eq!(k.token_calls, MAX_TRIES);
    assert!(k.delivered.is_empty() && k.killed.is_empty());
}

#[test]
fn a_refusal_other_than_esrch_is_not_retried() {
    let mut k = Fake::new(Some(info(9001, 70, 3)));
    k.refuse_with = Some(1); // EPERM
    assert_eq!(
        deliver(&mut k, &member(9001), Signal::Kill),
        Delivery::AlreadyGone
    );
    assert_eq!(k.token_calls, 1);
    assert!(k.killed.is_empty());
}

#[test]
fn below_14_4_kill_follows_the_re_read() {
    let mut k = Fake::new(Some(info(9001, 70, 3)));
    k.token_call_exists = false;
    assert_eq!(
        deliver(&mut k, &member(9001), Signal::Stop),
        Delivery::Delivered
    );
    assert_eq!(k.killed, [Signal::Stop]);
}
