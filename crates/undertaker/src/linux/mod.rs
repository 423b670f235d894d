//! Everything Linux-specific, in four layers that only ever import downwards:
//!
//! - [`kernel`]: access to the kernel (the one `unsafe` module, `/proc`).
//! - [`proof`]: proof of identity, the one signal path, and escalation.
//! - [`contain`]: containment of a tree (cgroup, PID namespace, spawning, the owner).
//! - [`commands`]: what the CLI runs (the guardian, sweep/kill, doctor, the recorder).
//!
//! Other platforms add a sibling module; the core types (identity, ladder, options) do
//! not change.

mod api;
pub mod commands;
pub mod contain;
pub mod kernel;
pub mod proof;

pub use api::*;
// What registry/lock.rs needs of the platform, straight from the kernel layer.
pub use kernel::flock::{lock_file, STATE_FILE_OPEN_FLAGS};
