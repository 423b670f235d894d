//! `ps`, `sweep`, `kill`, `log` on Windows, over the same registry as Linux
//! (docs/REGISTRY.md; docs/PORTING.md, "Windows").
//!
//! A guardian is alive exactly while its record file is locked. Its tree lives in a
//! kill-on-close job that only the guardian holds, so a dead guardian's tree died with
//! it: `sweep` has nothing to terminate and only closes the record. `kill` of a live
//! tree sets the tree's stop event, which its guardian waits on, and waits for the
//! guardian to finish (or, a supervisor, to close that tree's record); a guardian that does not finish in time is terminated through a
//! handle proven by its recorded pid and creation time, and its job's kill-on-close
//! ends the tree.

use crate::escalation::KILL_CAP;
use crate::history;
use crate::registry::{now_ms, AuditEntry, OwnerRecord, RegistryError, StoredState, TreeRecord};
use crate::report::{PsRow, SweepAction, SweepReport, TreeState, TreeSweep};
use crate::selector::TreeSelector;
use crate::windows::commands::guardian::stop_event_name;
use crate::windows::commands::record::BOOT_ID;
use crate::windows::contain::job;
use crate::windows::kernel::sys;
use crate::Error;
use std::os::windows::io::AsHandle;
use std::path::Path;
use std::time::Duration;

/// Everything a reconciling command needs: the opened state directory (Windows
/// signals nothing without its handles, so it adds nothing to it).
pub use crate::history::Context;

/// Opens `state_dir` as every Windows command does (no uid: the directory's ACL
/// guards it).
pub fn open(state_dir: Option<&Path>) -> Result<Context, RegistryError> {
    Context::open(state_dir, 0, BOOT_ID, usize::MAX)
}

/// Whether the recorded process still runs: same pid and same creation time.
fn process_alive(pid: Option<i32>, started: Option<u64>) -> Option<bool> {
    let (pid, started) = (u32::try_from(pid?).ok()?, started?);
    let alive = sys::open_process(pid, sys::Access::Watch)
        .ok()
        .filter(|h| sys::creation_time(h.as_handle()).ok() == Some(started))
        .is_some_and(|h| sys::exit_code(h.as_handle()).is_none());
    Some(alive)
}

fn owner_alive(owner: &OwnerRecord) -> Option<bool> {
    process_alive(owner.pid, owner.starttime)
}

pub fn ps(ctx: &Context, all: bool) -> Result<Vec<PsRow>, RegistryError> {
    let now = now_ms();
    let mut out = Vec::new();
    for r in ctx.trees()? {
        let guardian_alive = r.state != StoredState::Finished && ctx.guardian_alive(&r.id);
        // The job exists while its guardian holds it: its running members.
        let live = if guardian_alive {
            job::live_members_of(&r.id).unwrap_or(0) as usize
        } else {
            0
        };
        if r.state == StoredState::Finished && !all {
            continue;
        }
        let state = TreeState::derive(r.state, guardian_alive, owner_alive(&r.owner), live);
        out.push(PsRow::recorded(&r, state, guardian_alive, live, now));
    }
    Ok(out)
}

/// Closes the records of trees whose guardian died: their jobs closed with them.
pub fn sweep(ctx: &Context, dry_run: bool) -> Result<SweepReport, RegistryError> {
    let mut trees = Vec::new();
    for r in ctx.trees()? {
        if r.state == StoredState::Finished || ctx.guardian_alive(&r.id) {
            continue;
        }
        trees.push(close_dead(ctx, &r, dry_run, "sweep")?);
    }
    Ok(SweepReport::of(dry_run, trees))
}

/// A dead guardian's tree: its job closed when the guardian died, so the kernel
/// terminated every member (kill on close); only the record is left to close.
fn close_dead(
    ctx: &Context,
    r: &TreeRecord,
    dry_run: bool,
    actor: &str,
) -> Result<TreeSweep, RegistryError> {
    let left = job::live_members_of(&r.id).unwrap_or(0) as usize;
    let reason = if left == 0 {
        "its guardian is dead and its job closed with it (kill on close): nothing left".into()
    } else {
        // Someone else holds a handle to the job: never guess whose processes these are.
        format!("its guardian is dead but its job is still open with {left} member(s)")
    };
    if !dry_run {
        ctx.registry.append_audit(&AuditEntry {
            time_ms: now_ms(),
            tree: Some(r.id.clone()),
            actor: actor.into(),
            event: "note".into(),
            message: Some(reason.clone()),
            ..Default::default()
        })?;
        if left == 0 {
            ctx.registry.set_finished(&r.id, None)?;
        }
    }
    Ok(TreeSweep {
        id: r.id.clone(),
        label: r.label.clone(),
        action: if dry_run {
            SweepAction::WouldSweep
        } else {
            SweepAction::Swept
        },
        reason,
        targets: vec![],
        left_alive: left,
    })
}

/// `undertaker kill`: the live guardian is asked through the tree's stop event and
/// awaited; one that does not finish is terminated (its job then ends the tree).
pub fn kill(ctx: &Context, selector: &str, grace: Duration) -> Result<TreeSweep, Error> {
    let (id, rec) = history::resolve_tree(&ctx.history(), &TreeSelector::parse(selector)?)?;
    let Some(r) = rec else {
        return Ok(done(
            &id,
            None,
            SweepAction::LeftAlone,
            "not a recorded tree",
            0,
        ));
    };
    if r.state == StoredState::Finished {
        return Ok(done(
            &id,
            &r,
            SweepAction::Finished,
            "the tree is already finished",
            0,
        ));
    }
    if !ctx.guardian_alive(&id) {
        return Ok(close_dead(ctx, &r, false, "kill")?);
    }
    let audit = |event: &str, message: String| {
        let _ = ctx.registry.append_audit(&AuditEntry {
            time_ms: now_ms(),
            tree: Some(id.clone()),
            actor: "kill".into(),
            event: event.into(),
            pid: Some(r.guardian.pid),
            starttime: Some(r.guardian.starttime),
            message: Some(message),
            ..Default::default()
        });
    };
    // The guardian, proven by its recorded pid and creation time through the handle.
    let guardian = u32::try_from(r.guardian.pid)
        .ok()
        .and_then(|pid| sys::open_process(pid, sys::Access::Terminate).ok())
        .filter(|h| sys::creation_time(h.as_handle()).ok() == Some(r.guardian.starttime));
    let Some(guardian) = guardian else {
        audit(
            "refusal",
            "the recorded guardian could not be proven (pid and creation time)".into(),
        );
        return Ok(done(
            &id,
            &r,
            SweepAction::Refused,
            "the guardian could not be proven",
            0,
        ));
    };
    let asked = sys::open_event(&stop_event_name(&id)).map(|e| sys::set_event(e.as_handle()));
    audit(
        "signal",
        match &asked {
            Some(Ok(())) => "stop event set: the guardian tears the tree down".into(),
            Some(Err(e)) => format!("stop event: {e}"),
            None => "the tree has no stop event".into(),
        },
    );
    let patience = grace + KILL_CAP + Duration::from_secs(1);
    // Done when the guardian exits (`run`) or closes the tree's record, releasing its
    // lock (a supervisor, which lives on with its other trees).
    let wait = |limit: Duration| {
        let end = std::time::Instant::now() + limit;
        loop {
            let step = end
                .saturating_duration_since(std::time::Instant::now())
                .min(Duration::from_millis(50));
            if matches!(
                sys::wait_any(&[guardian.as_handle()], Some(step)),
                Ok(Some(0))
            ) || !ctx.guardian_alive(&id)
            {
                return true;
            }
            if std::time::Instant::now() >= end {
                return false;
            }
        }
    };
    if matches!(asked, Some(Ok(()))) && wait(patience) {
        let reason = "the guardian tore the tree down";
        return Ok(done(&id, &r, SweepAction::GuardianTerminated, reason, 0));
    }
    let terminated = sys::terminate_process(guardian.as_handle(), 1);
    audit(
        "signal",
        match &terminated {
            Ok(()) => "guardian terminated: its job's kill-on-close ends the tree".into(),
            Err(e) => format!("terminating the guardian: {e}"),
        },
    );
    if terminated.is_ok() && wait(KILL_CAP) {
        let reason =
            "the guardian did not finish in time and was terminated; kill on close ended the tree";
        return Ok(done(&id, &r, SweepAction::GuardianTerminated, reason, 0));
    }
    let reason = "the guardian could not be stopped";
    Ok(done(&id, &r, SweepAction::GuardianUnresponsive, reason, 0))
}

fn done<'a>(
    id: &str,
    r: impl Into<Option<&'a TreeRecord>>,
    action: SweepAction,
    reason: &str,
    left_alive: usize,
) -> TreeSweep {
    TreeSweep {
        id: id.into(),
        label: r.into().and_then(|r| r.label.clone()),
        action,
        reason: reason.into(),
        targets: vec![],
        left_alive,
    }
}
