//! The commands as macOS runs them today: what the crate's one platform edge (`mod os`
//! in lib.rs) exports, the same functions on every platform (docs/PORTING.md). The
//! backend the portable core needs exists (`contain/portable.rs`); the guardian that
//! would drive it does not yet, so `run`, `supervise`, `ps`, `sweep` and `kill` say
//! `Unsupported` (exit 125). `log` and `doctor` work.

use crate::history;
use crate::macos::commands::doctor as doctor_macos;
use crate::report::{DoctorReport, PsRow, SweepReport, TreeSweep};
use crate::{Error, RunError, RunOptions, SuperviseOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn run(_opts: &RunOptions) -> Result<i32, RunError> {
    Err(RunError::Unsupported)
}

pub fn supervise(_opts: &SuperviseOptions) -> Result<i32, RunError> {
    Err(RunError::Unsupported)
}

/// The state directory as every platform reads it (`log`).
pub fn open_state(state_dir: Option<&Path>) -> Result<history::Context, Error> {
    Ok(doctor_macos::open(state_dir)?)
}

pub fn ps(_state_dir: Option<&Path>, _all: bool) -> Result<Vec<PsRow>, Error> {
    Err(Error::Unsupported)
}

pub fn sweep(
    _state_dir: Option<&Path>,
    _dry_run: bool,
    _grace: Duration,
) -> Result<SweepReport, Error> {
    Err(Error::Unsupported)
}

pub fn kill_named(
    _state_dir: Option<&Path>,
    _name: &str,
    _all: bool,
    _grace: Duration,
) -> Result<Vec<TreeSweep>, Error> {
    Err(Error::Unsupported)
}

pub fn doctor(state_dir: Option<&Path>) -> Result<DoctorReport, Error> {
    Ok(doctor_macos::run(state_dir))
}

/// No cgroups on macOS: the setting has nothing to choose.
pub fn set_cgroup_root(path: PathBuf) {
    let _ = path;
}

/// No self-healing rounds on macOS yet (no guardian leaves a tree behind).
pub fn disable_self_healing() {}
