//! Windows: the Job Object tier, on the same four layers as `linux/` (kernel, proof,
//! contain, commands) and the same neutral policy (docs/PORTING.md, "Windows").
//! Built with mingw (`x86_64-pc-windows-gnu`) and tested under Wine in CI.
mod api;
pub mod commands;
pub mod contain;
pub mod kernel;
pub mod proof;

pub use api::*;
// What registry/lock.rs needs of the platform, straight from the kernel layer.
pub use kernel::sys::lock_file;
