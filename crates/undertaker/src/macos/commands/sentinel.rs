//! The macOS sentinel (docs/TIERS.md, "portable"): a second undertaker process,
//! started by the guardian in its own process group with no stdio and no marker,
//! that waits for the guardian's exit (kqueue `NOTE_EXIT`, through the core's
//! [`Watched`]) and then, unless the guardian closed the tree's record (it finished)
//! or still holds its lock, tears the tree down from the member record and the
//! marker: the core's [`crate::portable::reconcile`] takeover, what `sweep` would do.
//!
//! No fork here (the guardian is one thread of Rust, and a fork is `unsafe`): the
//! sentinel is the same binary re-run as `undertaker run` with
//! [`SENTINEL_OF`] in its environment, which `run` checks first.

use crate::identity::{TreeId, TREE_MARKER};
use crate::macos::commands::reconcile;
use crate::macos::contain::portable::MacOs;
use crate::portable::owner::Watched;
use crate::portable::{ProcessTable, Waker};
use crate::RunError;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `<tree id> <guardian pid> <guardian start>`: makes `undertaker run` the sentinel
/// of that tree's guardian.
const SENTINEL_OF: &str = "UNDERTAKER_SENTINEL_OF";

/// Whose sentinel this process is.
pub struct Request {
    tree: TreeId,
    guardian: i32,
    start: u64,
}

/// The request in our environment, if we are a sentinel.
pub fn requested() -> Option<Request> {
    let value = std::env::var(SENTINEL_OF).ok()?;
    let mut fields = value.split_ascii_whitespace();
    let request = Request {
        tree: TreeId::parse(fields.next()?)?,
        guardian: fields.next()?.parse().ok()?,
        start: fields.next()?.parse().ok()?,
    };
    fields.next().is_none().then_some(request)
}

/// Starts the sentinel of `tree` for this guardian (`me`, started at `start`), or
/// says why not: the guardian then runs without one.
pub fn spawn(
    tree: &TreeId,
    me: i32,
    start: u64,
    grace: Duration,
    state_dir: Option<&Path>,
) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("our own binary: {e}"))?;
    // A host that links the library runs `run` in its own binary, which has no
    // `undertaker run` to re-run.
    if exe.file_stem().is_none_or(|s| s != "undertaker") {
        return Err(format!("{} is not the undertaker binary", exe.display()));
    }
    let mut cmd = Command::new(&exe);
    if let Some(dir) = state_dir {
        cmd.arg("--state-dir").arg(dir);
    }
    cmd.args(["run", "--grace", &format!("{}ms", grace.as_millis())])
        .args(["--", "/usr/bin/true"])
        .env(SENTINEL_OF, format!("{tree} {me} {start}"))
        .env_remove(TREE_MARKER)
        // Never the host's pipes: a host waiting for their end of file must get it.
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Out of the guardian's group: a `killpg` of it leaves the sentinel.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{}: {e}", exe.display()))
}

/// The sentinel's life: waits for the guardian's exit, then takes its tree over
/// unless it finished. Exits 0 either way (nobody waits for its status).
pub fn run(request: &Request, state_dir: Option<&Path>, grace: Duration) -> Result<i32, RunError> {
    let mut os = MacOs::new().map_err(|e| RunError::Setup(format!("kqueue: {e}")))?;
    // A guardian gone before we looked (or a number that names another process now)
    // is a dead guardian.
    let watched = os
        .facts(request.guardian)
        .filter(|f| f.start == request.start)
        .and_then(|_| Watched::arm(&mut os, request.guardian).ok());
    if let Some(guardian) = watched {
        let mut wakes = Vec::new();
        while !guardian.gone(&mut os, &wakes) {
            let now = os.now();
            wakes = os.wait(now + Duration::from_secs(1));
        }
    }
    drop(os);
    let ctx = reconcile::open(state_dir).map_err(|e| RunError::Setup(e.to_string()))?;
    match reconcile::reconcile(&ctx).take_over(request.tree.as_str(), grace) {
        Ok(Some(taken)) => tracing::warn!("guardian of {} died: {}", request.tree, taken.reason),
        Ok(None) => {}
        Err(e) => tracing::error!("taking tree {} over: {e}", request.tree),
    }
    Ok(0)
}
