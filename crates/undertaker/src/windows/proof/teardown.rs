//! The escalation on Windows, over a tree's job (docs/PORTING.md, "Windows"): the
//! polite round (CTRL_BREAK to CMD's console group), up to the grace for the job to
//! empty, then `TerminateJobObject`, then up to the kill cap. Every step is audited.
//!
//! Proof is the job itself: the kernel put every member there (children join their
//! parent's job) and only the kernel removes them, so terminating the job reaches the
//! tree and nothing else. The console group is named by CMD's pid, which our handle
//! to CMD pins (a pid is not reused while a handle to its process is open).

use crate::escalation::{Escalation, MAX_RESCAN};
use crate::registry::{now_ms, AuditEntry};
use crate::windows::contain::job::Job;
use crate::windows::kernel::sys;
use std::time::{Duration, Instant};

/// The exit code `TerminateJobObject` gives every member it ends.
pub const TERMINATED_EXIT_CODE: u32 = 1;

/// How a teardown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The job was empty, or emptied within the grace after the polite round.
    Gone,
    /// The job was terminated and emptied.
    Killed,
    /// Members were still listed after the kill cap.
    Stuck(usize),
}

/// Tears down `job`, whose CMD is `cmd_pid` (its handle held by the caller).
/// `audit` receives each step as it happens.
pub fn teardown(
    job: &Job,
    cmd_pid: u32,
    esc: Escalation,
    audit: &mut dyn FnMut(AuditEntry),
) -> Outcome {
    if remaining(job) == 0 {
        return Outcome::Gone;
    }
    let polite = sys::ctrl_break(cmd_pid);
    audit(entry(
        "CTRL_BREAK",
        Some(cmd_pid),
        "job+console-group",
        &polite,
        "to CMD's console group",
    ));
    // Nothing was asked politely: waiting the grace would only delay the end.
    if polite.is_ok() && wait_empty(job, esc.grace) {
        return Outcome::Gone;
    }
    let members = remaining(job);
    if members == 0 {
        return Outcome::Gone;
    }
    let killed = job.terminate(TERMINATED_EXIT_CODE);
    audit(entry(
        "TerminateJobObject",
        None,
        "job",
        &killed,
        &format!("{members} member(s) in the job"),
    ));
    if wait_empty(job, esc.kill_cap) {
        Outcome::Killed
    } else {
        let left = remaining(job);
        audit(AuditEntry {
            time_ms: now_ms(),
            actor: "guardian".into(),
            event: "stuck".into(),
            message: Some(format!(
                "{left} member(s) still in the job after the kill cap"
            )),
            ..Default::default()
        });
        Outcome::Stuck(left)
    }
}

/// Running members of the job: the kernel's count, else its member list.
pub fn remaining(job: &Job) -> usize {
    match job.active() {
        Some(n) => n as usize,
        None => job.member_pids().len(),
    }
}

/// Waits up to `limit` for the job to have no running member.
fn wait_empty(job: &Job, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        if remaining(job) == 0 {
            return true;
        }
        let now = Instant::now();
        if now >= end {
            return false;
        }
        std::thread::sleep(pause.min(end - now));
        pause = (pause * 2).min(MAX_RESCAN);
    }
}

fn entry(
    what: &str,
    pid: Option<u32>,
    proof: &str,
    result: &std::io::Result<()>,
    message: &str,
) -> AuditEntry {
    let (outcome, message) = match result {
        Ok(()) => ("delivered".to_string(), message.to_string()),
        Err(e) => ("failed".to_string(), format!("{message}: {e}")),
    };
    AuditEntry {
        time_ms: now_ms(),
        actor: "guardian".into(),
        event: "signal".into(),
        pid: pid.map(|p| p as i32),
        signal: Some(what.into()),
        proof: Some(proof.into()),
        outcome: Some(outcome),
        message: Some(message),
        ..Default::default()
    }
}
