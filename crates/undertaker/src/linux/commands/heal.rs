//! Self-healing: nobody runs `undertaker sweep` by hand on a laptop, so every guardian
//! (`run` once its own CMD has been running for a while, `supervise` once it serves)
//! finishes a few dead guardians' trees
//! in the background (docs/REGISTRY.md, "Self-healing"): the same proofs as `sweep`, a
//! bounded number of trees, off the start-up path. A machine where trees are started
//! now and then converges to zero orphans without a cron job.
//!
//! A guardian first looks cheaply (a directory, the cgroup tree) and starts the round
//! only when there is something to finish, so a healthy machine pays nothing. The
//! round runs on a thread of the guardian, started after CMD: every fork of a `run`
//! guardian (the namespace init, CMD) has happened by then (`supervise`, which spawns
//! later, only forks children that make plain syscalls before exec), and the thread
//! inherits the blocked signal mask, so signals still reach the main thread's signalfd. If the guardian
//! finishes first, the thread ends with it mid-way; what it did is in the audit log
//! (actor `heal`) and the next round or `sweep` takes over.

use crate::linux::commands::reconcile::{self, Context};
use crate::linux::contain::cgroup;
use crate::linux::kernel::procfs::Procfs;
use crate::registry::lock::FileLock;
use crate::registry::{record_file, state_dir};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long CMD runs before this guardian looks for others' orphans: short-lived runs
/// (`run -- true`) never pay for it.
pub(crate) const DELAY: Duration = Duration::from_secs(1);

/// At most this many trees per guardian.
const MAX_TREES: usize = 3;

/// What the dead guardians' trees get between SIGTERM and SIGKILL (as `sweep`).
const GRACE: Duration = Duration::from_secs(2);

/// Set (to anything) to turn self-healing off, e.g. where orphans are kept on purpose
/// for `undertaker ps` to show.
pub const NO_HEAL_ENV: &str = "UNDERTAKER_NO_HEAL";

pub(crate) fn enabled() -> bool {
    std::env::var_os(NO_HEAL_ENV).is_none()
}

/// For a guardian, on its main thread once CMD has run [`DELAY`]: a cheap look (one
/// directory and the cgroup tree; no database, no thread) for anything to heal, and a
/// healing round in the background only when there is. A guardian in a healthy state
/// dir so stays as small as it was.
pub(crate) fn start_if_needed(state_dir: Option<PathBuf>) {
    if anything_to_heal(state_dir.as_deref()) {
        spawn(move || round(state_dir.as_deref()));
    }
}

/// For `supervise`, once it serves: after [`DELAY`], on a thread, the same cheap look,
/// and a healing round only when it found something (a healthy supervisor never opens
/// the database for healing).
pub(crate) fn start_in_background(state_dir: Option<PathBuf>) {
    if enabled() {
        spawn(move || {
            std::thread::sleep(DELAY);
            if anything_to_heal(state_dir.as_deref()) {
                round(state_dir.as_deref());
            }
        });
    }
}

/// A record file whose guardian's lock is free and that says the tree is not finished,
/// or a tree cgroup of a dead guardian of this PID namespace.
fn anything_to_heal(state_dir: Option<&Path>) -> bool {
    let orphaned_record = state_dir::resolve(state_dir)
        .ok()
        .and_then(|(dir, _)| std::fs::read_dir(dir.join("trees")).ok())
        .is_some_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name();
                let is_record = name.to_str().and_then(record_file::id_of).is_some();
                // Ok(Some): nobody holds the lock, so its guardian is gone.
                is_record
                    && matches!(FileLock::try_acquire(&e.path()), Ok(Some(_)))
                    && record_file::read(&e.path()).is_some_and(|r| !r.finished)
            })
        });
    orphaned_record
        || cgroup::list_tree_cgroups(&Procfs::new())
            .iter()
            .any(|f| f.guardian == cgroup::GuardianState::Dead)
}

/// One healing round: opens the registry and finishes at most [`MAX_TREES`] trees.
fn round(state_dir: Option<&Path>) {
    let healed = Context::open(state_dir).and_then(|ctx| reconcile::heal(&ctx, MAX_TREES, GRACE));
    match healed {
        Ok(0) => {}
        Ok(n) => tracing::info!("finished {n} dead guardian(s)' tree(s)"),
        Err(e) => tracing::debug!("self-healing skipped: {e}"),
    }
    crate::linux::kernel::sys::trim_heap();
}

fn spawn(work: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("heal".into())
        .stack_size(256 << 10)
        .spawn(work);
    if let Err(e) = spawned {
        tracing::debug!("self-healing not started: {e}");
    }
}
