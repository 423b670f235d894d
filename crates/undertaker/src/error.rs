//! Why a command failed, each variant mapped to one exit status (docs/DESIGN.md §5,
//! "Exit status"). Ground floor: only the registry's and the selector's error types
//! come in, as sources.

use crate::options::Tier;
use crate::{registry, selector};

/// Why undertaker could not guard a command (`run`, `supervise`, or a command
/// `supervise` was asked to start). Each maps to an exit status.
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
    /// The working directory asked for could not be entered; nothing was started.
    #[error("cwd {dir:?}: {why}")]
    Cwd { dir: String, why: String },
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
            | RunError::Cwd { .. }
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
