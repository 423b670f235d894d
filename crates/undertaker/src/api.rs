//! The library's commands, one function each, the same on every platform: where the
//! platform has no implementation yet they return `Unsupported`. The CLI is these
//! calls plus argument parsing and printing.

use crate::registry::AuditEntry;
use crate::report::{DoctorReport, PsRow, SweepReport, TreeSweep};
use crate::{Error, RunError, RunOptions, SuperviseOptions};
use std::path::Path;
use std::time::Duration;

#[cfg(target_os = "linux")]
use crate::linux::commands::{doctor as doctor_linux, guardian, reconcile};
#[cfg(windows)]
use crate::windows::commands::reconcile as win;

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
    #[cfg(target_os = "linux")]
    return guardian::run(opts);
    #[cfg(windows)]
    if opts.replace {
        return Err(RunError::Setup(
            "--replace is not available on Windows yet".into(),
        ));
    }
    #[cfg(windows)]
    return crate::windows::commands::guardian::run(opts);
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = opts;
        Err(RunError::Unsupported)
    }
}

/// Serves `undertaker supervise` on standard input and output, taking over the calling
/// process like [`run`], until the input ends, the owner dies or SIGTERM; every tree
/// is then torn down. Returns the status to exit with (0).
pub fn supervise(opts: &SuperviseOptions) -> Result<i32, RunError> {
    check_label(opts.guard.label.as_deref())?;
    #[cfg(target_os = "linux")]
    return crate::linux::commands::supervise::run(opts);
    #[cfg(windows)]
    return crate::windows::commands::supervise::run(opts);
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = opts;
        Err(RunError::Unsupported)
    }
}

/// The guarded trees of `state_dir` (`None`: the default), with finished ones if `all`.
pub fn ps(state_dir: Option<&Path>, all: bool) -> Result<Vec<PsRow>, Error> {
    #[cfg(target_os = "linux")]
    return Ok(reconcile::ps(&reconcile::Context::open(state_dir)?, all)?);
    #[cfg(windows)]
    return Ok(win::ps(&win::Context::open(state_dir)?, all)?);
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = (state_dir, all);
        Err(Error::Unsupported)
    }
}

/// Finishes the job of dead guardians: tears their trees down (`grace` between
/// SIGTERM and SIGKILL), with proof; `dry_run` signals nothing.
pub fn sweep(
    state_dir: Option<&Path>,
    dry_run: bool,
    grace: Duration,
) -> Result<SweepReport, Error> {
    #[cfg(target_os = "linux")]
    {
        use crate::registry::RegistryError;
        match reconcile::Context::open(state_dir) {
            Ok(ctx) => Ok(reconcile::sweep(&ctx, dry_run, grace)?),
            Err(e @ (RegistryError::UnsafeStateDir { .. } | RegistryError::NoStateDir)) => {
                Err(e.into())
            }
            // No registry (a directory in its place, a read-only state dir): sweep what
            // needs none, and say why that is all.
            Err(e) => {
                let mut report = reconcile::sweep_found_cgroups(dry_run, grace).map_err(|why| {
                    RegistryError::Io {
                        path: "/proc/self".into(),
                        msg: why,
                    }
                })?;
                report.registry_error = Some(e.to_string());
                Ok(report)
            }
        }
    }
    #[cfg(windows)]
    {
        // Nothing to terminate: a dead guardian's job died with it.
        let _ = grace;
        Ok(win::sweep(&win::Context::open(state_dir)?, dry_run)?)
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = (state_dir, dry_run, grace);
        Err(Error::Unsupported)
    }
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
    #[cfg(target_os = "linux")]
    {
        let ctx = reconcile::Context::open(state_dir)?;
        let trees = crate::history::trees_to_kill(&ctx.history(), name, all)?;
        let mut done = Vec::new();
        for (id, rec) in trees {
            done.push(reconcile::kill(&ctx, &id, rec.as_ref(), grace)?);
        }
        Ok(done)
    }
    #[cfg(windows)]
    {
        let ctx = win::Context::open(state_dir)?;
        let trees = crate::history::trees_to_kill(&ctx.history(), name, all)?;
        let mut done = Vec::new();
        for (id, _) in trees {
            done.push(win::kill(&ctx, &id, grace)?);
        }
        Ok(done)
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = (state_dir, name, all, grace);
        Err(Error::Unsupported)
    }
}

/// One page of the audit log: the newest `limit` entries below id `before` (all when
/// absent), oldest first, of `tree` when given. Reads only that page from the database.
pub fn log_page(
    state_dir: Option<&Path>,
    tree: Option<&str>,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, Error> {
    #[cfg(target_os = "linux")]
    {
        let ctx = reconcile::Context::open(state_dir)?;
        reconcile::log_page(&ctx, tree, before, limit)
    }
    #[cfg(windows)]
    return win::log_page(&win::Context::open(state_dir)?, tree, before, limit);
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = (state_dir, tree, before, limit);
        Err(Error::Unsupported)
    }
}

/// The audit log, oldest first: every signal sent and every refusal. With `tree`,
/// only that tree's entries.
pub fn log(state_dir: Option<&Path>, tree: Option<&str>) -> Result<Vec<AuditEntry>, Error> {
    #[cfg(target_os = "linux")]
    {
        let ctx = reconcile::Context::open(state_dir)?;
        reconcile::log(&ctx, tree)
    }
    #[cfg(windows)]
    return win::log(&win::Context::open(state_dir)?, tree);
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = (state_dir, tree);
        Err(Error::Unsupported)
    }
}

/// Probes which kernel mechanisms and containment tiers work here, and whether the
/// state directory can be used. Creates and removes a probe cgroup and briefly forks
/// children.
pub fn doctor(state_dir: Option<&Path>) -> Result<DoctorReport, Error> {
    #[cfg(target_os = "linux")]
    return Ok(doctor_linux::run(state_dir));
    #[cfg(windows)]
    return Ok(crate::windows::commands::doctor::run(state_dir));
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = state_dir;
        Err(Error::Unsupported)
    }
}
