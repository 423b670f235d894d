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
#[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
pub(crate) mod history;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod identity;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod ladder;
// The portable core (no cgroup, subreaper or PDEATHSIG: macOS's shape; docs/PORTING.md):
// Linux's `--tier portable` and macOS run it, each a part of it (Linux's guardian has
// its own loop and reconcile), so what one platform leaves unused is not dead code.
#[allow(dead_code)]
pub(crate) mod portable;
pub mod protocol;
// Read and written by the platform modules; on a platform with none yet, unused.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod registry;
pub mod report;
pub(crate) mod selector;
pub mod settings;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod snapshot;
// `supervise`'s neutral serve loop: Windows and macOS run it; Linux tests it.
#[cfg(any(windows, target_os = "macos", all(test, target_os = "linux")))]
pub(crate) mod supervisor;
// The platform, chosen once: each module exports the same commands (`run`, `ps`, …,
// `lock_file`) for api.rs; a port adds one sibling folder and one arm here
// (docs/PORTING.md). Inside a platform its layers keep their own name.
#[cfg(target_os = "linux")]
#[path = "linux/mod.rs"]
mod os;
#[cfg(windows)]
#[path = "windows/mod.rs"]
mod os;
#[cfg(target_os = "macos")]
#[path = "macos/mod.rs"]
mod os;
#[cfg(not(any(target_os = "linux", windows, target_os = "macos")))]
#[path = "unsupported.rs"]
mod os;
#[cfg(target_os = "linux")]
use os as linux;
#[cfg(target_os = "macos")]
use os as macos;
#[cfg(windows)]
use os as windows;
// The macOS backend's pure halves (its byte parsers, its delivery rule) compiled into
// every platform's tests at their macOS paths, so Linux runs them on fixtures
// (docs/PORTING.md, "macOS"); on macOS they are the backend's own modules.
#[cfg(all(test, not(target_os = "macos")))]
#[allow(dead_code)] // what only macos/kernel/sys.rs uses
mod macos {
    pub mod kernel {
        pub mod parse;
    }
    pub mod proof {
        pub mod delivery;
    }
}
/// A process-wrap layer for tokio hosts such as rmcp (feature `process-wrap`).
#[cfg(all(target_os = "linux", feature = "process-wrap"))]
pub mod wrap;

pub use api::{doctor, kill, kill_named, log, log_page, ps, run, supervise, sweep, MAX_LABEL};

/// Ends this process with `code` at once, without the C library's exit work (atexit
/// handlers, the destructors of every loaded library). For the two processes of a
/// finished `run` that work is all that still stands between CMD's exit and the
/// host's wait (docs/BENCHMARKS.md, "Issue 30"). Nothing buffered is flushed: flush
/// what must be seen first. Other platforms exit the ordinary way.
pub fn exit_now(code: i32) -> ! {
    #[cfg(target_os = "linux")]
    linux::kernel::sys::exit_immediately(code);
    #[cfg(not(target_os = "linux"))]
    std::process::exit(code)
}
#[cfg(target_os = "linux")]
pub use client::{GuardedChild, Supervisor, SupervisorBuilder};
/// The allocator the `undertaker` binary declares global on Linux: dlmalloc, whose
/// free memory goes back to the kernel when a guardian or sentinel settles. Opt-in: a
/// library user keeps its own allocator.
#[cfg(target_os = "linux")]
pub use linux::kernel::sys::DlmallocHeap;
#[cfg(target_os = "linux")]
#[doc(hidden)]
pub mod testing;

pub use error::{Error, RunError};
// The registry's types that reports and errors show (the registry itself is internal).
pub use options::{GuardOptions, OwnerSpec, RunOptions, SuperviseOptions, Tier};
pub use registry::{AuditEntry, HostEvidence, OwnerKind, RecordedTier, RegistryError};
pub use selector::SelectError;
