//! undertaker: guard the process trees a program spawns. The whole tree dies with its
//! owner, and nothing is ever signalled without proof that it belongs to the tree
//! (docs/DESIGN.md).
//!
//! # Quick start
//!
//! Guard a command: this takes over the calling process (child subreaper, signal
//! mask, reaping) until the tree is gone, then returns the status to exit with.
//!
//! ```no_run
//! use std::time::Duration;
//! use undertaker::{GuardOptions, OwnerSpec, RunOptions, Tier};
//!
//! let opts = RunOptions {
//!     command: vec!["make".into(), "test".into()],
//!     guard: GuardOptions {
//!         label: Some("tests".into()),
//!         grace: Duration::from_secs(2),
//!         owner: OwnerSpec::Parent,
//!         stdio_owner: true,
//!         tier: Tier::Auto,
//!         state_dir: None,
//!     },
//!     replace: false,
//! };
//! std::process::exit(undertaker::run(&opts)?);
//! # Ok::<(), undertaker::RunError>(())
//! ```
//!
//! Everything else reads or reconciles the registry of a state directory, and returns
//! `Unsupported` where the platform has no implementation yet:
//!
//! ```
//! let state = std::env::temp_dir().join(format!("undertaker-doc-{}", std::process::id()));
//! match undertaker::ps(Some(&state), false) {
//!     Ok(trees) => assert!(trees.is_empty()), // a fresh state directory
//!     Err(e) => assert_eq!(e.exit_code(), 125), // not supported on this platform
//! }
//! let _ = std::fs::remove_dir_all(&state);
//! ```
//!
//! The library's layers: platform-neutral policy at the root (identity, the refusal
//! ladder, escalation, reports), the Linux mechanisms in `linux/` (kernel access,
//! proof and signals, containment, commands); docs/ARCHITECTURE.md maps them.
#![deny(unsafe_code)]

mod api;
mod error;
mod names;
mod options;
// Platform-neutral policy used by the platform modules (`linux`): unused, not wrong,
// where no platform module exists yet.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod audit;
#[cfg(target_os = "linux")]
mod client;
pub mod duration;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod escalation;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod exit_status;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(any(target_os = "linux", windows))]
pub(crate) mod history;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod identity;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod ladder;
#[cfg(target_os = "linux")]
pub(crate) mod linux;
pub mod protocol;
pub mod registry;
pub mod report;
pub mod selector;
pub mod settings;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub mod snapshot;
#[cfg(windows)]
pub(crate) mod windows;
/// A process-wrap layer for tokio hosts such as rmcp (feature `process-wrap`).
#[cfg(all(target_os = "linux", feature = "process-wrap"))]
pub mod wrap;

pub use api::{doctor, kill, kill_named, log, log_page, ps, run, supervise, sweep, MAX_LABEL};
#[cfg(target_os = "linux")]
pub use client::{GuardedChild, Supervisor, SupervisorBuilder};
#[cfg(target_os = "linux")]
#[doc(hidden)]
pub mod testing;

pub use error::{Error, RunError};
pub use options::{GuardOptions, OwnerSpec, RunOptions, SuperviseOptions, Tier};
