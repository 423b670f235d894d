//! Self-healing: nobody runs `undertaker sweep` by hand on a laptop, so every guardian
//! (`run` once its own CMD has been running for a while, `supervise` once it serves)
//! finishes a few dead guardians' trees
//! in the background (docs/REGISTRY.md, "Self-healing"): the same proofs as `sweep`, a
//! bounded number of trees, off the start-up path. A machine where trees are started
//! now and then converges to zero orphans without a cron job.
//!
//! It runs on a thread of the guardian, started after CMD: every fork of a `run`
//! guardian (the namespace init, CMD) has happened by then (`supervise`, which spawns
//! later, only forks children that make plain syscalls before exec), and the thread
//! inherits the blocked signal mask, so signals still reach the main thread's signalfd. If the guardian
//! finishes first, the thread ends with it mid-way; what it did is in the audit log
//! (actor `heal`) and the next round or `sweep` takes over.

use crate::linux::commands::reconcile::{self, Context};
use std::path::PathBuf;
use std::time::Duration;

/// How long CMD runs before this guardian looks for others' orphans: short-lived runs
/// (`run -- true`) never pay for it.
const DELAY: Duration = Duration::from_secs(1);

/// At most this many trees per guardian.
const MAX_TREES: usize = 3;

/// What the dead guardians' trees get between SIGTERM and SIGKILL (as `sweep`).
const GRACE: Duration = Duration::from_secs(2);

/// Set (to anything) to turn self-healing off, e.g. where orphans are kept on purpose
/// for `undertaker ps` to show.
pub const NO_HEAL_ENV: &str = "UNDERTAKER_NO_HEAL";

/// Starts one healing round on a thread of its own, after [`DELAY`].
pub(crate) fn start_in_background(state_dir: Option<PathBuf>) {
    if std::env::var_os(NO_HEAL_ENV).is_some() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("heal".into())
        .stack_size(256 << 10)
        .spawn(move || {
            std::thread::sleep(DELAY);
            let healed = Context::open(state_dir.as_deref())
                .and_then(|ctx| reconcile::heal(&ctx, MAX_TREES, GRACE));
            match healed {
                Ok(0) => {}
                Ok(n) => tracing::info!("finished {n} dead guardian(s)' tree(s)"),
                Err(e) => tracing::debug!("self-healing skipped: {e}"),
            }
            crate::linux::kernel::sys::trim_heap();
        });
    if let Err(e) = spawned {
        tracing::debug!("self-healing not started: {e}");
    }
}
