//! `undertaker run` on Windows, as named steps: owner → job → record → spawn
//! (suspended, assigned, resumed) → watch → tear down → exit status
//! (docs/PORTING.md, "Windows").
//!
//! The job is created with kill-on-close and only the guardian holds its handle, so
//! when the guardian dies, however it dies, the kernel terminates the tree: no
//! sentinel and no sweep are needed.

use crate::escalation::Escalation;
use crate::identity::{TreeId, TREE_MARKER};
use crate::registry::now_ms;
use crate::registry::record_file::Line;
use crate::windows::commands::record::{Recorder, BOOT_ID};
use crate::windows::contain::job::{Job, StartError};
use crate::windows::contain::owner::{self, Owner};
use crate::windows::kernel::sys;
use crate::windows::proof::teardown::{self, Outcome};
use crate::{RunError, RunOptions, Tier};
use std::os::windows::io::{AsHandle, OwnedHandle};

/// The named event `kill` sets to ask tree `id`'s guardian to tear down.
pub fn stop_event_name(tree: &str) -> String {
    format!("Local\\undertaker.{tree}.stop")
}

/// Why the watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    CmdExited,
    OwnerGone,
    Stop,
}

pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    if opts.guard.tier != Tier::Auto {
        return Err(RunError::TierUnavailable {
            tier: opts.guard.tier,
            why: "Linux only; Windows uses a Job Object (--tier auto)".into(),
        });
    }
    // 1. The owner, proven before anything starts.
    let (owner, owner_record) = owner::resolve(&opts.guard.owner)?;
    // 2. The tree's job, and the event `kill` uses to stop it.
    let mut random = [0u8; 12];
    sys::random_bytes(&mut random).map_err(|e| RunError::Setup(e.to_string()))?;
    let tree = TreeId::generate(BOOT_ID, random);
    let job =
        Job::create(tree.as_str()).map_err(|e| RunError::Setup(format!("job object: {e}")))?;
    let stop = sys::create_event(Some(&stop_event_name(tree.as_str())))
        .map_err(|e| RunError::Setup(format!("stop event: {e}")))?;
    if let Ok(console_stop) = stop.try_clone() {
        if let Err(e) = sys::install_console_handler(console_stop) {
            tracing::debug!("console handler: {e}");
        }
    }
    // 3. The record file (holding the liveness lock), before CMD exists.
    let mut record = Recorder::start(
        opts.guard.state_dir.as_deref(),
        opts.guard.label.clone(),
        &tree,
        owner_record,
        false,
    )?;
    // 4. CMD, in the job before its first instruction.
    let started = job
        .spawn(&opts.command, &[(TREE_MARKER, tree.as_str())])
        .map_err(|e| start_error(&opts.command, e))?;
    let mut child = started.child;
    record.root(started.pid, child.as_handle());
    // 5. Watch CMD, the owner and the stop event.
    let why = watch(&child, &owner, &stop)?;
    // 6. Tear down what is left of the tree.
    record.write(&[Line::Reaping { time_ms: now_ms() }]);
    if why != Why::CmdExited {
        record.note(match why {
            Why::OwnerGone => "owner gone: tearing the tree down",
            _ => "asked to stop: tearing the tree down",
        });
    }
    let mut entries = Vec::new();
    let outcome = teardown::teardown(
        &job,
        started.pid,
        Escalation::with_grace(opts.guard.grace),
        &mut |e| entries.push(Line::Audit(e)),
    );
    record.write(&entries);
    // 7. CMD's exit code is ours.
    let status = child.wait().ok().and_then(|s| s.code()).unwrap_or(125);
    if let Outcome::Stuck(n) = outcome {
        tracing::error!("{n} process(es) of tree {tree} still alive after the kill cap");
        record.finish(Some(125));
        return Ok(125);
    }
    record.finish(Some(status));
    drop(job);
    Ok(status)
}

fn start_error(command: &[std::ffi::OsString], e: StartError) -> RunError {
    let name = command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    match e {
        StartError::Spawn(e) if e.kind() == std::io::ErrorKind::NotFound => {
            RunError::NotFound(name)
        }
        StartError::Spawn(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            RunError::NotExecutable(name, e.to_string())
        }
        StartError::Spawn(e) => RunError::Setup(format!("{name}: {e}")),
        StartError::Contain(why) => RunError::Setup(why),
    }
}

fn watch(child: &std::process::Child, owner: &Owner, stop: &OwnedHandle) -> Result<Why, RunError> {
    let mut handles = vec![child.as_handle(), stop.as_handle()];
    handles.extend(owner.waitable());
    match sys::wait_any(&handles, None) {
        Ok(Some(0)) => Ok(Why::CmdExited),
        Ok(Some(1)) => Ok(Why::Stop),
        Ok(Some(_)) => Ok(Why::OwnerGone),
        Ok(None) => Ok(Why::Stop),
        Err(e) => {
            // Cannot watch: tear down now rather than leave the tree unguarded.
            tracing::error!("waiting on CMD and the owner: {e}");
            Ok(Why::Stop)
        }
    }
}
