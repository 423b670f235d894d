//! `undertaker kill`: one tree, now; its live guardian is asked, a dead one's tree is
//! swept.

use super::marker::{live_count, marker_scan};
use super::sweep::{refused_target, Sweep};
use super::{guardian_state, Context, GuardianState};
use crate::audit::{audit_entry, AuditEvent};
use crate::escalation::Sig;
use crate::identity::Identity;
use crate::linux::commands::control;
use crate::linux::kernel::poll::poll_until;
use crate::linux::proof::signal::{NotProven, ProvenProcess};
use crate::linux::proof::teardown::KILL_CAP;
use crate::registry::{record_file, RegistryError, StoredState, TreeRecord};
use crate::report::{SweepAction, TreeSweep};
use rustix::event::{PollFd, PollFlags};
use std::time::{Duration, Instant};

/// `undertaker kill`: a live guardian is asked to tear down (SIGTERM, proven by its
/// recorded identity) and awaited; a dead one's tree is swept here.
pub fn kill(
    ctx: &Context,
    id: &str,
    rec: Option<&TreeRecord>,
    grace: Duration,
) -> Result<TreeSweep, RegistryError> {
    let label = rec.and_then(|r| r.label.clone());
    let live = marker_scan(ctx.procfs(), ctx.signaller.me().uid)
        .get(id)
        .map_or(0, Vec::len);
    if rec.is_some_and(|r| r.state == StoredState::Released) {
        return Ok(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::LeftAlone,
            reason: "its supervisor released the tree: its processes are not guarded".into(),
            targets: vec![],
            left_alive: live,
        });
    }
    if rec.is_some_and(|r| r.state == StoredState::Finished) && live == 0 {
        return Ok(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::Finished,
            reason: "the tree is already finished".into(),
            targets: vec![],
            left_alive: 0,
        });
    }
    if let (Some(r), GuardianState::Alive) = (rec, guardian_state(ctx, id, rec)) {
        if held_by_a_supervisor(ctx, id, r) {
            return Ok(ask_supervisor(ctx, id, r, label));
        }
        if let Some(done) = kill_live_guardian(ctx, id, r, label.clone(), grace)? {
            return Ok(done);
        }
        // The guardian died without finishing: fall through and sweep.
    }
    let rec_now = ctx.tree(id)?;
    let sweep = Sweep {
        ctx,
        dry_run: false,
        grace,
        actor: "kill",
    };
    match sweep.tree(id, rec_now.as_ref().or(rec), None)? {
        Some(t) => Ok(t),
        None => Ok(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::LeftAlone,
            reason: "tree is finished or not ours".into(),
            targets: vec![],
            left_alive: live_count(ctx, id, rec_now.as_ref().or(rec)),
        }),
    }
}

/// Whether a tree's live guardian is a supervisor: its record says so, or (a record
/// written before the mark existed, by a supervisor still running an older binary) the
/// tree has `guarded` lines, which only a supervisor writes.
fn held_by_a_supervisor(ctx: &Context, id: &str, r: &TreeRecord) -> bool {
    r.guardian.supervisor
        || record_file::read(&record_file::path_of(&ctx.dir, id)).is_some_and(|file| {
            (file.audit.iter()).any(|(_, e)| e.event == crate::linux::commands::guarded::GUARDED)
        })
}

/// `kill` of a tree a live supervisor holds: the supervisor is asked over its
/// control socket to end that one tree, and never signalled (that would end every
/// tree it holds). One it cannot reach is not worked around either: the tree is left
/// to it, and `kill` says so (`supervisor_unreachable`, exit status 3).
fn ask_supervisor(ctx: &Context, id: &str, r: &TreeRecord, label: Option<String>) -> TreeSweep {
    // The protocol's own request type, written as a client writes it (protocol/encode.rs).
    let request = match crate::identity::TreeId::parse(id) {
        Some(tree) => {
            serde_json::to_string(&crate::protocol::Request::Kill { tree }).unwrap_or_default()
        }
        None => String::new(),
    };
    // Its own grace period and kill cap, with room to spare on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(60) + KILL_CAP;
    let uid = ctx.signaller.me().uid;
    let left = || marker_scan(ctx.procfs(), uid).get(id).map_or(0, Vec::len);
    let (action, reason, left_alive) =
        match control::ask(&ctx.dir, &r.guardian, uid, &request, deadline) {
            control::Asked::Answered(reply) if reply["ok"] == true => (
                SweepAction::GuardianTerminated,
                format!("its supervisor {} tore the tree down", r.guardian.pid),
                reply["live"].as_u64().map_or_else(left, |n| n as usize),
            ),
            control::Asked::Answered(reply) => (
                SweepAction::GuardianUnresponsive,
                format!(
                    "its supervisor {} refused: {}",
                    r.guardian.pid,
                    reply["error"]["message"]
                        .as_str()
                        .unwrap_or("no reason given")
                ),
                left(),
            ),
            control::Asked::Failed(why) => (SweepAction::GuardianUnresponsive, why, left()),
            control::Asked::Unreachable(why) => (
                SweepAction::SupervisorUnreachable,
                format!("{why}; nothing was signalled (the tree is its supervisor's to end)"),
                left(),
            ),
        };
    TreeSweep {
        id: id.into(),
        label,
        action,
        reason,
        targets: vec![],
        left_alive,
    }
}

/// `kill` of a tree whose guardian is alive: the guardian, proven by its recorded
/// identity, is asked to tear down and awaited. `None`: it died without finishing,
/// so the caller sweeps.
fn kill_live_guardian(
    ctx: &Context,
    id: &str,
    r: &TreeRecord,
    label: Option<String>,
    grace: Duration,
) -> Result<Option<TreeSweep>, RegistryError> {
    let me = ctx.signaller.me();
    let expected = Identity {
        boot_id: r.boot_id.clone(),
        pid: r.guardian.pid,
        starttime: r.guardian.starttime,
        pgid: r.guardian.pgid,
        sid: 0,
        uid: me.uid,
        pidfs_inode: r.guardian.pidfs_inode,
    };
    let mut unresponsive = false;
    let refusal = match ctx.signaller.prove_by_snapshot(&expected) {
        Ok(guardian) => {
            unresponsive = !terminate_guardian(ctx, id, &guardian, grace);
            None
        }
        Err(NotProven::Gone) => None,
        Err(NotProven::Refused(r)) => Some(r),
    };
    if let Some(r) = refusal {
        let _ = ctx.registry.append_audit(&audit_entry(
            id,
            "kill",
            &AuditEvent::Refusal {
                pid: expected.pid,
                refusal: r.clone(),
            },
        ));
        return Ok(Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::Refused,
            reason: format!("guardian not proven: {r}"),
            targets: vec![refused_target(expected.pid, &r)],
            left_alive: marker_scan(ctx.procfs(), me.uid)
                .get(id)
                .map_or(0, Vec::len),
        }));
    }
    let now = ctx.tree(id)?;
    if now
        .as_ref()
        .is_some_and(|t| t.state == StoredState::Finished)
    {
        return Ok(Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::GuardianTerminated,
            reason: "the guardian tore the tree down".into(),
            targets: vec![],
            left_alive: marker_scan(ctx.procfs(), me.uid)
                .get(id)
                .map_or(0, Vec::len),
        }));
    }
    if unresponsive {
        // Alive and holding its lock, so its tree is not ours to sweep: say so,
        // with the true count, rather than claim success.
        return Ok(Some(TreeSweep {
            id: id.into(),
            label,
            action: SweepAction::GuardianUnresponsive,
            reason: format!(
                "the guardian (pid {}) did not finish within {} s of SIGTERM",
                expected.pid,
                guardian_patience(grace).as_secs()
            ),
            targets: vec![],
            left_alive: live_count(ctx, id, now.as_ref().or(Some(r))),
        }));
    }
    Ok(None)
}

/// How long `kill` waits for a live guardian: its grace and kill cap, plus generous
/// slack.
fn guardian_patience(grace: Duration) -> Duration {
    grace + KILL_CAP + Duration::from_secs(10)
}

/// Sends a proven guardian SIGTERM (and SIGCONT when it is stopped: a stopped
/// guardian would hold SIGTERM pending forever), then waits for it to exit, up to its
/// grace and kill cap plus generous slack. True if it exited.
fn terminate_guardian(ctx: &Context, id: &str, guardian: &ProvenProcess, grace: Duration) -> bool {
    let stopped = matches!(guardian.state, 'T' | 't');
    let signals: &[Sig] = if stopped {
        &[Sig::Term, Sig::Cont]
    } else {
        &[Sig::Term]
    };
    for &sig in signals {
        let event = match ctx.signaller.signal(guardian, sig.into()) {
            Ok(delivery) => AuditEvent::Signal {
                target: guardian.identity.clone(),
                signal: sig,
                proof: guardian.proof.clone(),
                delivery,
            },
            Err(r) => AuditEvent::Refusal {
                pid: guardian.pid(),
                refusal: r,
            },
        };
        let _ = ctx.registry.append_audit(&audit_entry(id, "kill", &event));
    }
    let deadline = Instant::now() + guardian_patience(grace);
    while !guardian.has_exited() && Instant::now() < deadline {
        let fd = guardian.pidfd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        poll_until(&mut fds, Some(Instant::now() + Duration::from_millis(100)));
    }
    guardian.has_exited()
}
