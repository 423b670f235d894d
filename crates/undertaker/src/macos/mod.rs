//! macOS: the portable core's backend (libproc, kqueue, the audit-token signal), on
//! the same four layers as `linux/` and `windows/` (docs/PORTING.md, "macOS"). Built
//! and type-checked here (`scripts/cross/check.sh`), its parsers tested on Linux; not
//! yet run on a Mac.
mod api;
pub mod commands;
pub mod contain;
pub mod kernel;
pub mod proof;

pub use api::*;
// What registry/lock.rs needs of the platform, from the kernel layer.
pub use kernel::flock::{lock_file, STATE_FILE_OPEN_FLAGS};
