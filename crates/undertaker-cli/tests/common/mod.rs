//! Shared support for the CLI integration tests: running a test inside a private PID
//! namespace, scratch directories, the escape zoos and decoys, process counting, and
//! invoking the binary.
#![allow(dead_code, unused_imports)]

mod cli;
mod pidns;
mod procs;
mod supervisor;
mod zoo;

pub use cli::*;
pub use pidns::*;
pub use procs::*;
pub use supervisor::*;
pub use zoo::*;
