//! The commands as Linux runs them: what the crate's one platform edge (`mod os` in
//! lib.rs) exports, the same functions on every platform (docs/PORTING.md).

use crate::history;
use crate::linux::commands::{doctor as doctor_linux, guardian, heal, reconcile, supervise as sup};
use crate::registry::RegistryError;
use crate::report::{DoctorReport, PsRow, SweepReport, TreeSweep};
use crate::{Error, RunError, RunOptions, SuperviseOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    guardian::run(opts)
}

pub fn supervise(opts: &SuperviseOptions) -> Result<i32, RunError> {
    sup::run(opts)
}

/// The state directory as every platform reads it (`log`).
pub fn open_state(state_dir: Option<&Path>) -> Result<history::Context, Error> {
    Ok(reconcile::Context::open(state_dir)?.into_state())
}

pub fn ps(state_dir: Option<&Path>, all: bool) -> Result<Vec<PsRow>, Error> {
    Ok(reconcile::ps(&reconcile::Context::open(state_dir)?, all)?)
}

pub fn sweep(
    state_dir: Option<&Path>,
    dry_run: bool,
    grace: Duration,
) -> Result<SweepReport, Error> {
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

pub fn kill_named(
    state_dir: Option<&Path>,
    name: &str,
    all: bool,
    grace: Duration,
) -> Result<Vec<TreeSweep>, Error> {
    let ctx = reconcile::Context::open(state_dir)?;
    let trees = crate::history::trees_to_kill(&ctx.history(), name, all)?;
    let mut done = Vec::new();
    for (id, rec) in trees {
        done.push(reconcile::kill(&ctx, &id, rec.as_ref(), grace)?);
    }
    Ok(done)
}

pub fn doctor(state_dir: Option<&Path>) -> Result<DoctorReport, Error> {
    Ok(doctor_linux::run(state_dir))
}

pub fn set_cgroup_root(path: PathBuf) {
    crate::linux::contain::cgroup_place::ask_for_root(path);
}

pub fn disable_self_healing() {
    heal::disable();
}
