//! The escalation on Windows, over a tree's job (docs/PORTING.md, "Windows"): the
//! polite round (CTRL_BREAK to CMD's console group), up to the grace for the job to
//! empty, then `TerminateJobObject`, then up to the kill cap. Every step is audited.
//!
//! Proof is the job itself: the kernel put every member there (children join their
//! parent's job) and only the kernel removes them, so terminating the job reaches the
//! tree and nothing else. The console group is named by CMD's pid, which our handle
//! to CMD pins (a pid is not reused while a handle to its process is open).
//!
//! The job reaches this layer as [`JobMembers`] (implemented by `contain::job::Job`):
//! proof stacks on the kernel only, as on Linux (docs/PORTING.md).

use crate::escalation::{Escalation, MAX_RESCAN};
use crate::registry::{now_ms, AuditEntry};
use crate::windows::kernel::sys;
use std::time::{Duration, Instant};

/// What the escalation needs of a tree's job: the kernel's count of its running
/// members, its member list, and the one kill that reaches them all.
pub trait JobMembers {
    /// How many members are still running (`None`: the job could not be asked).
    fn active(&self) -> Option<u32>;
    /// The members' pids, as the job lists them.
    fn member_pids(&self) -> Vec<u32>;
    /// `TerminateJobObject`: every member ends with `code`.
    fn terminate(&self, code: u32) -> std::io::Result<()>;
}

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
pub fn teardown<J: JobMembers>(
    job: &J,
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

/// Tears down several trees at once (`supervise` at end of input or owner death):
/// one polite round to every tree, one grace for all, then `TerminateJobObject` for
/// what is left and one kill cap for all. `audit(i, entry)` names tree `i` of `trees`
/// (each a job and its root's pid, which names its console group).
pub fn teardown_together<J: JobMembers>(
    trees: &[(&J, u32)],
    esc: Escalation,
    audit: &mut dyn FnMut(usize, AuditEntry),
) -> Vec<Outcome> {
    let all_empty = || trees.iter().all(|(job, _)| remaining(*job) == 0);
    let mut asked = false;
    for (i, (job, root)) in trees.iter().enumerate() {
        if remaining(*job) > 0 {
            let polite = sys::ctrl_break(*root);
            asked |= polite.is_ok();
            audit(
                i,
                entry(
                    "CTRL_BREAK",
                    Some(*root),
                    "job+console-group",
                    &polite,
                    "to the root's console group",
                ),
            );
        }
    }
    if asked {
        wait_until(&all_empty, esc.grace);
    }
    let mut terminated = vec![false; trees.len()];
    for (i, (job, _)) in trees.iter().enumerate() {
        let members = remaining(*job);
        if members > 0 {
            let killed = job.terminate(TERMINATED_EXIT_CODE);
            terminated[i] = true;
            let what = format!("{members} member(s) in the job");
            audit(i, entry("TerminateJobObject", None, "job", &killed, &what));
        }
    }
    wait_until(&all_empty, esc.kill_cap);
    trees
        .iter()
        .zip(terminated)
        .map(|((job, _), killed)| match (remaining(*job), killed) {
            (0, true) => Outcome::Killed,
            (0, false) => Outcome::Gone,
            (n, _) => Outcome::Stuck(n),
        })
        .collect()
}

/// Running members of the job: the kernel's count, else its member list.
pub fn remaining(job: &impl JobMembers) -> usize {
    match job.active() {
        Some(n) => n as usize,
        None => job.member_pids().len(),
    }
}

/// Waits up to `limit` for the job to have no running member.
fn wait_empty(job: &impl JobMembers, limit: Duration) -> bool {
    wait_until(&|| remaining(job) == 0, limit)
}

/// Waits up to `limit` for `done`, checking at growing intervals.
fn wait_until(done: &dyn Fn() -> bool, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        if done() {
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
