//! The commands as Windows runs them: what the crate's one platform edge (`mod os` in
//! lib.rs) exports, the same functions on every platform (docs/PORTING.md).

use crate::history;
use crate::report::{DoctorReport, PsRow, SweepReport, TreeSweep};
use crate::windows::commands::{doctor as doctor_windows, guardian, reconcile};
use crate::{Error, RunError, RunOptions, SuperviseOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    if opts.replace {
        return Err(RunError::Setup(
            "--replace is not available on Windows yet".into(),
        ));
    }
    guardian::run(opts)
}

pub fn supervise(opts: &SuperviseOptions) -> Result<i32, RunError> {
    crate::windows::commands::supervise::run(opts)
}

/// The state directory as every platform reads it (`log`).
pub fn open_state(state_dir: Option<&Path>) -> Result<history::Context, Error> {
    Ok(reconcile::open(state_dir)?)
}

pub fn ps(state_dir: Option<&Path>, all: bool) -> Result<Vec<PsRow>, Error> {
    Ok(reconcile::ps(&reconcile::open(state_dir)?, all)?)
}

pub fn sweep(
    state_dir: Option<&Path>,
    dry_run: bool,
    grace: Duration,
) -> Result<SweepReport, Error> {
    // Nothing to terminate: a dead guardian's job died with it.
    let _ = grace;
    Ok(reconcile::sweep(&reconcile::open(state_dir)?, dry_run)?)
}

pub fn kill_named(
    state_dir: Option<&Path>,
    name: &str,
    all: bool,
    grace: Duration,
) -> Result<Vec<TreeSweep>, Error> {
    let ctx = reconcile::open(state_dir)?;
    let trees = crate::history::trees_to_kill(&ctx.history(), name, all)?;
    let mut done = Vec::new();
    for (id, _) in trees {
        done.push(reconcile::kill(&ctx, &id, grace)?);
    }
    Ok(done)
}

pub fn doctor(state_dir: Option<&Path>) -> Result<DoctorReport, Error> {
    Ok(doctor_windows::run(state_dir))
}

/// No cgroups on Windows: the setting has nothing to choose.
pub fn set_cgroup_root(path: PathBuf) {
    let _ = path;
}

/// No self-healing rounds on Windows (a dead guardian's job died with it).
pub fn disable_self_healing() {}
