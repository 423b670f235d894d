//! A platform undertaker has no implementation for yet: the crate's one platform edge
//! (`mod os` in lib.rs) picks this module, and every command says `Unsupported`
//! (exit 125). A port replaces it with a sibling folder exporting the same functions
//! (docs/PORTING.md).

use crate::history;
use crate::report::{DoctorReport, PsRow, SweepReport, TreeSweep};
use crate::{Error, RunError, RunOptions, SuperviseOptions};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn run(_opts: &RunOptions) -> Result<i32, RunError> {
    Err(RunError::Unsupported)
}

pub fn supervise(_opts: &SuperviseOptions) -> Result<i32, RunError> {
    Err(RunError::Unsupported)
}

pub fn open_state(_state_dir: Option<&Path>) -> Result<history::Context, Error> {
    Err(Error::Unsupported)
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

pub fn doctor(_state_dir: Option<&Path>) -> Result<DoctorReport, Error> {
    Err(Error::Unsupported)
}

pub fn lock_file(_file: &File, _blocking: bool) -> io::Result<bool> {
    Err(io::Error::other(
        "file locks are not implemented on this platform",
    ))
}

/// No flags beyond std's own (close-on-exec) until a port chooses them.
pub const STATE_FILE_OPEN_FLAGS: i32 = 0;

pub fn set_cgroup_root(_path: PathBuf) {}

pub fn disable_self_healing() {}
