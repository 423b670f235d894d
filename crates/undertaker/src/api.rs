//! The library's commands, one function each, the same on every platform: each is the
//! platform-neutral checks, then one call to the platform chosen once in lib.rs
//! (`crate::os`; `Unsupported` where it has no implementation yet). The CLI is these
//! calls plus argument parsing and printing.

use crate::registry::AuditEntry;
use crate::report::{DoctorReport, PsRow, SweepReport, TreeSweep};
use crate::{history, os};
use crate::{Error, RunError, RunOptions, SuperviseOptions};
use std::path::Path;
use std::time::Duration;

/// Longest label `run` and `supervise` accept, in bytes: labels are for people
/// reading `ps`.
pub const MAX_LABEL: usize = 256;

/// A label longer than [`MAX_LABEL`] is a usage error, before anything starts.
fn check_label(label: Option<&str>) -> Result<(), RunError> {
    match label {
        Some(l) if l.len() > MAX_LABEL => Err(RunError::Usage(format!(
            "--label is {} bytes long; at most {MAX_LABEL} are allowed",
            l.len()
        ))),
        _ => Ok(()),
    }
}

/// Runs `opts.command` under guard, taking over the calling process (child subreaper,
/// signal mask, reaping, the fd limit) until the tree is gone; returns the status to
/// exit with: CMD's own, or 128 + the signal that ended it.
pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    check_label(opts.guard.label.as_deref())?;
    if opts.replace && opts.guard.label.is_none() {
        return Err(RunError::Usage(
            "--replace needs --label: it replaces the tree of that label".into(),
        ));
    }
    os::run(opts)
}

/// Serves `undertaker supervise` on standard input and output, taking over the calling
/// process like [`run`], until the input ends, the owner dies or SIGTERM; every tree
/// is then torn down. Returns the status to exit with (0).
pub fn supervise(opts: &SuperviseOptions) -> Result<i32, RunError> {
    check_label(opts.guard.label.as_deref())?;
    os::supervise(opts)
}

/// The guarded trees of `state_dir` (`None`: the default), with finished ones if `all`.
pub fn ps(state_dir: Option<&Path>, all: bool) -> Result<Vec<PsRow>, Error> {
    os::ps(state_dir, all)
}

/// Finishes the job of dead guardians: tears their trees down (`grace` between
/// SIGTERM and SIGKILL), with proof; `dry_run` signals nothing.
pub fn sweep(
    state_dir: Option<&Path>,
    dry_run: bool,
    grace: Duration,
) -> Result<SweepReport, Error> {
    os::sweep(state_dir, dry_run, grace)
}

/// Tears down the tree `tree` names (its id, a unique prefix of at least four hex
/// digits, or the label of exactly one live tree) now.
pub fn kill(state_dir: Option<&Path>, tree: &str, grace: Duration) -> Result<TreeSweep, Error> {
    let mut done = kill_named(state_dir, tree, false, grace)?;
    Ok(done.remove(0))
}

/// Tears down now the trees `name` names: the tree of an id or prefix, or the live
/// trees of a label (more than one only with `all`; else a usage error naming them).
pub fn kill_named(
    state_dir: Option<&Path>,
    name: &str,
    all: bool,
    grace: Duration,
) -> Result<Vec<TreeSweep>, Error> {
    os::kill_named(state_dir, name, all, grace)
}

/// One page of the audit log: the newest `limit` entries below id `before` (all when
/// absent), oldest first, of `tree` when given. Reads only that page from the database.
pub fn log_page(
    state_dir: Option<&Path>,
    tree: Option<&str>,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, Error> {
    let state = os::open_state(state_dir)?;
    history::log_named(&state.history(), tree, Some((before, limit)))
}

/// The audit log, oldest first: every signal sent and every refusal. With `tree`,
/// only that tree's entries.
pub fn log(state_dir: Option<&Path>, tree: Option<&str>) -> Result<Vec<AuditEntry>, Error> {
    history::log_named(&os::open_state(state_dir)?.history(), tree, None)
}

/// Probes which kernel mechanisms and containment tiers work here, and whether the
/// state directory can be used. Creates and removes a probe cgroup and briefly forks
/// children.
pub fn doctor(state_dir: Option<&Path>) -> Result<DoctorReport, Error> {
    os::doctor(state_dir)
}
