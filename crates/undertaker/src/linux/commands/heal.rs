//! Self-healing: nobody runs `undertaker sweep` by hand on a laptop, so every guardian
//! (`run` once its own CMD has been running for a while, `supervise` once it serves)
//! finishes a few dead guardians' trees
//! in the background (docs/REGISTRY.md, "Self-healing"): the same proofs as `sweep`, a
//! bounded number of trees, off the start-up path. A machine where trees are started
//! now and then converges to zero orphans without a cron job.
//!
//! A guardian first looks cheaply (a bounded look at one directory, the cgroup tree)
//! and starts the round only when there is something to finish, so a healthy machine
//! pays little. The look and the round run on a thread of the guardian, never on the
//! thread that watches the owner and CMD, started after CMD: every fork of a `run`
//! guardian (the namespace init, CMD) has happened by then (`supervise`, which spawns
//! later, only forks children that make plain syscalls before exec), and the thread
//! inherits the blocked signal mask, so signals still reach the main thread's signalfd. If the guardian
//! finishes first, the thread ends with it mid-way; what it did is in the audit log
//! (actor `heal`) and the next round or `sweep` finishes the job.

use crate::linux::commands::reconcile::{candidates, Context, Sweep};
use crate::linux::contain::cgroup;
use crate::linux::kernel::procfs::Procfs;
use crate::registry::lock::FileLock;
use crate::registry::{record_file, state_dir, RegistryError};
use crate::report::SweepAction;
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

/// `--no-heal`, which works where the environment is stripped (`settings`).
static DISABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn disable() {
    DISABLED.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub(crate) fn enabled() -> bool {
    !DISABLED.load(std::sync::atomic::Ordering::Relaxed) && std::env::var_os(NO_HEAL_ENV).is_none()
}

/// For a guardian, once CMD has run [`DELAY`]: on a thread, so that the thread
/// watching the owner and CMD never waits on what it reads (a FIFO planted in `trees/`,
/// a slow disk, many files), a cheap look (one directory, bounded, and the cgroup
/// tree; no database) for anything to heal, and a healing round only when there is.
pub(crate) fn start_if_needed(state_dir: Option<PathBuf>) {
    spawn(move || {
        if anything_to_heal(state_dir.as_deref()) {
            round(state_dir.as_deref());
        }
    });
}

/// For a `supervise` whose start found something to heal (and folded it, taking over
/// its predecessor's trees: docs/SUPERVISE.md): the round after [`DELAY`], on a
/// thread, without a second look.
pub(crate) fn start_round_in_background(state_dir: Option<PathBuf>) {
    if enabled() {
        spawn(move || {
            std::thread::sleep(DELAY);
            round(state_dir.as_deref());
        });
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

/// Record files the look reads at most. More than this in `trees/` is itself
/// something to do: the round's fold moves finished ones into the database, so the
/// directory, and every later look, stays this small however many runs finished
/// (docs/REGISTRY.md, "Self-healing").
const FOLD_AT: usize = 64;

/// Record files one round folds at most: a round's work stays bounded (and off CMD's
/// way) however many runs finished; `trees/` shrinks by this much per round.
const FOLD_PER_ROUND: usize = 256;

/// A record file whose guardian's lock is free and that says the tree is not finished,
/// more than [`FOLD_AT`] record files, or a tree cgroup of a dead guardian (of this PID
/// namespace, or of one that provably has no process left: [`cgroup::list_tree_cgroups`]).
pub(crate) fn anything_to_heal(state_dir: Option<&Path>) -> bool {
    let Some(entries) = state_dir::resolve(state_dir)
        .ok()
        .and_then(|(dir, _)| std::fs::read_dir(dir.join("trees")).ok())
    else {
        return dead_tree_cgroup();
    };
    let mut records = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        if name.to_str().and_then(record_file::id_of).is_none() {
            continue;
        }
        records += 1;
        // Ok(Some): nobody holds the lock, so its guardian is gone.
        if records > FOLD_AT
            || matches!(FileLock::try_acquire(&e.path()), Ok(Some(_)))
                && record_file::read(&e.path()).is_some_and(|r| !r.finished)
        {
            return true;
        }
    }
    dead_tree_cgroup()
}

fn dead_tree_cgroup() -> bool {
    cgroup::list_tree_cgroups(&Procfs::new())
        .iter()
        .any(|f| f.guardian == cgroup::GuardianState::Dead)
}

/// One healing round: opens the registry and finishes at most [`MAX_TREES`] trees.
fn round(state_dir: Option<&Path>) {
    let healed = Context::open_folding_at_most(state_dir, FOLD_PER_ROUND)
        .and_then(|ctx| heal(&ctx, MAX_TREES, GRACE));
    match healed {
        Ok(0) => {}
        Ok(n) => tracing::info!("finished {n} dead guardian(s)' tree(s)"),
        Err(e) => tracing::debug!("self-healing skipped: {e}"),
    }
}

/// Self-healing, one bounded round: finishes at most `max_trees` trees of dead
/// guardians, with the candidates and proofs of `sweep` (records of unfinished trees
/// first, then tree cgroups of dead guardians found on disk, which are emptied and
/// removed). Trees known only by their markers are left to `sweep` (finding them costs
/// a scan of every process). Returns how many trees it finished.
pub(crate) fn heal(
    ctx: &Context,
    max_trees: usize,
    grace: Duration,
) -> Result<usize, RegistryError> {
    let mut done = 0;
    let candidates = candidates(ctx, None)?;
    let sweep = Sweep {
        ctx,
        dry_run: false,
        grace,
        actor: "heal",
    };
    for (id, rec) in &candidates.records {
        if done >= max_trees {
            return Ok(done);
        }
        // A live guardian holds its lock: passed over at the cost of one open and flock.
        let swept = sweep.tree(id, rec.as_ref(), None)?;
        if swept.is_some_and(|t| matches!(t.action, SweepAction::Swept)) {
            done += 1;
        }
    }
    for found in candidates.orphan_cgroups(ctx) {
        if done >= max_trees {
            break;
        }
        if !found.path.exists() {
            continue;
        }
        sweep.cgroup(&found.tree, &found.path);
        done += 1;
    }
    Ok(done)
}

fn spawn(work: impl FnOnce() + Send + 'static) {
    // The thread allocates from the main heap (see there).
    crate::linux::kernel::sys::settle_heap();
    let heal_thread = || {
        std::thread::Builder::new()
            .name("heal".into())
            .stack_size(256 << 10)
    };
    // The work runs on a thread of its own: its exit hands the blocks it freed and
    // cached (glibc keeps a cache per thread, out of the trim's reach) back to the
    // heap, and then the heap is trimmed. The look alone allocates per tree cgroup on
    // the machine (a thousand live trees: ~200 KiB, below glibc's own trim threshold),
    // and the guardian idles on; nor does it keep the look's code mapped.
    let spawned = heal_thread().spawn(move || {
        match heal_thread().spawn(work) {
            Ok(worker) => drop(worker.join()),
            Err(e) => tracing::debug!("self-healing not started: {e}"),
        }
        crate::linux::kernel::sys::settle_heap();
        crate::linux::kernel::sys::settle_code();
    });
    if let Err(e) = spawned {
        tracing::debug!("self-healing not started: {e}");
    }
}
