//! The commands as macOS runs them: what the crate's one platform edge (`mod os` in
//! lib.rs) exports, the same functions on every platform (docs/PORTING.md). `run`,
//! `ps`, `sweep`, `kill`, `log`, `doctor` and `supervise` run the portable core over
//! libproc and kqueue. Type-checked here, its logic tested on Linux, not yet run on
//! a Mac.

use crate::history;
use crate::macos::commands::{doctor as doctor_macos, guardian, reconcile, supervise as serve};
use crate::report::DoctorReport;
use crate::{Error, RunError, RunOptions, SuperviseOptions};
use std::path::{Path, PathBuf};

// `ps`, `sweep` and `kill` are the portable reconcile over libproc, as they are.
pub use crate::macos::commands::reconcile::{kill_named, ps, sweep};

pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    guardian::run(opts)
}

pub fn supervise(opts: &SuperviseOptions) -> Result<i32, RunError> {
    serve::run(opts)
}

/// The state directory as every platform reads it (`log`).
pub fn open_state(state_dir: Option<&Path>) -> Result<history::Context, Error> {
    Ok(reconcile::open(state_dir)?)
}

pub fn doctor(state_dir: Option<&Path>) -> Result<DoctorReport, Error> {
    Ok(doctor_macos::run(state_dir))
}

/// No cgroups on macOS: the setting has nothing to choose.
pub fn set_cgroup_root(path: PathBuf) {
    let _ = path;
}

/// No self-healing rounds on macOS yet: a dead guardian's tree waits for `sweep`.
pub fn disable_self_healing() {}
