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
//! use undertaker::{OwnerSpec, RunOptions, Tier};
//!
//! let opts = RunOptions {
//!     command: vec!["make".into(), "test".into()],
//!     label: Some("tests".into()),
//!     grace: Duration::from_secs(2),
//!     owner: OwnerSpec::Parent,
//!     tier: Tier::Auto,
//!     state_dir: None,
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
/// A process-wrap layer for tokio hosts such as rmcp (feature `process-wrap`).
#[cfg(all(target_os = "linux", feature = "process-wrap"))]
pub mod wrap;

pub use api::{doctor, kill, log, log_page, ps, run, supervise, sweep, MAX_LABEL};
#[cfg(target_os = "linux")]
pub use client::{GuardedChild, Supervisor, SupervisorBuilder};
#[cfg(target_os = "linux")]
#[doc(hidden)]
pub mod testing;

use std::ffi::OsString;
use std::time::Duration;

/// Who the tree belongs to: when it is gone, the tree goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerSpec {
    /// The process that started undertaker (default).
    Parent,
    /// An explicit process, for hosts that start undertaker through a shell.
    Pid(i32),
    /// An inherited pipe read end: end of file means the owner is gone.
    Fd(i32),
}

/// Containment mechanism for a tree (docs/TIERS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Auto,
    Cgroup,
    Pidns,
    Subreaper,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Auto => "auto",
            Tier::Cgroup => "cgroup",
            Tier::Pidns => "pidns",
            Tier::Subreaper => "subreaper",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub command: Vec<OsString>,
    pub label: Option<String>,
    pub grace: Duration,
    pub owner: OwnerSpec,
    pub tier: Tier,
    /// Registry location; `None` = `$UNDERTAKER_STATE_DIR`, XDG state, `~/.local/state`.
    pub state_dir: Option<std::path::PathBuf>,
}

/// Options of `undertaker supervise` (docs/SUPERVISE.md).
#[derive(Debug, Clone)]
pub struct SuperviseOptions {
    /// Default label of the trees it creates.
    pub label: Option<String>,
    pub grace: Duration,
    pub owner: OwnerSpec,
    /// `auto`, `cgroup` or `subreaper`.
    pub tier: Tier,
    pub state_dir: Option<std::path::PathBuf>,
}

/// Why `undertaker run` could not guard the command. Each maps to an exit status.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Usage(String),
    #[error("owner already gone ({0}); the command was not started")]
    OwnerGone(String),
    #[error("tier {tier} unavailable: {why}")]
    TierUnavailable { tier: Tier, why: String },
    #[error("could not guard the command: {0}")]
    Setup(String),
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{0}: not executable: {1}")]
    NotExecutable(String, String),
    #[error("undertaker run is not supported on this platform yet")]
    Unsupported,
}

impl RunError {
    /// Exit status, as docs/DESIGN.md §5 ("Exit status") and a shell use them.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Usage(_) => 2,
            RunError::NotFound(_) => 127,
            RunError::NotExecutable(..) => 126,
            RunError::OwnerGone(_)
            | RunError::TierUnavailable { .. }
            | RunError::Setup(_)
            | RunError::Unsupported => 125,
        }
    }
}

/// Why `ps`, `sweep`, `kill`, `log` or `doctor` failed. Each maps to an exit status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error(transparent)]
    Select(#[from] selector::SelectError),
    #[error("this command is not supported on this platform yet")]
    Unsupported,
}

impl Error {
    /// Exit status: 2 for what the user can fix in the command line (a bad or unknown
    /// tree, an unusable state directory), 125 where the platform cannot, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        use registry::RegistryError;
        match self {
            Error::Select(_)
            | Error::Registry(RegistryError::UnsafeStateDir { .. } | RegistryError::NoStateDir) => {
                2
            }
            Error::Registry(_) => 1,
            Error::Unsupported => 125,
        }
    }
}
