//! `run --replace`: before CMD starts, the live trees with the same label that the
//! same host started are ended, as `undertaker kill` ends them (their guardian is
//! asked, with proof). A host that reconnects or restarts a server and forgets the
//! old one gets one server, not two (docs/GUARANTEES.md, "Which host a tree belongs
//! to"). Another host's trees are never touched, whatever their label.

use crate::identity::TreeId;
use crate::linux::commands::reconcile::{self, Context};
use crate::linux::proof::signal::Signaller;
use crate::registry::record_file;
use crate::registry::{state_dir, HostRecord, StartRecord, StateDir, StoredState, TreeRecord};
use crate::report::TreeSweep;
use crate::GuardOptions;

/// True when `tree` is one `--replace` ends for a new tree `own` of `label` started
/// by `host`: live, the same label, the same host (pid and start time, this boot).
fn is_predecessor(
    tree: &TreeRecord,
    own: &TreeId,
    boot_id: &str,
    label: &str,
    host: &HostRecord,
) -> bool {
    let same_host = (tree.start.as_ref().and_then(|s| s.host.as_ref()))
        .is_some_and(|h| h.pid == host.pid && h.starttime == host.starttime);
    tree.id != own.as_str()
        && tree.boot_id == boot_id
        && tree.label.as_deref() == Some(label)
        && matches!(tree.state, StoredState::Running | StoredState::Reaping)
        && same_host
}

/// Ends the predecessors of tree `own` (see [`is_predecessor`]); returns what was
/// done to each. A tree that could not be ended is reported, and CMD starts anyway:
/// coverage of the new tree beats the old one's cleanup.
pub(crate) fn end_predecessors(
    opts: &GuardOptions,
    own: &TreeId,
    start: &StartRecord,
    signaller: &Signaller,
) -> Vec<TreeSweep> {
    let (Some(label), Some(host)) = (opts.label.as_deref(), start.host.as_ref()) else {
        return Vec::new();
    };
    let me = signaller.me();
    // The live record files first: the database is opened only when there is a tree
    // to end, as `undertaker kill` opens it (a guardian's start-up never needs it).
    let dir = state_dir::resolve(opts.state_dir.as_deref())
        .and_then(|(path, _)| StateDir::prepare(&path, me.uid));
    let Ok(dir) = dir else {
        return Vec::new();
    };
    let old: Vec<TreeRecord> = (record_file::list(&dir).into_iter())
        .filter_map(|(_, path)| record_file::read(&path))
        .filter(|read| !read.finished)
        .map(|read| read.tree)
        .filter(|t| is_predecessor(t, own, &me.boot_id, label, host))
        .collect();
    if old.is_empty() {
        return Vec::new();
    }
    let ctx = match Context::open(opts.state_dir.as_deref()) {
        Ok(ctx) => ctx,
        Err(e) => {
            tracing::warn!("--replace: cannot read the registry: {e}");
            return Vec::new();
        }
    };
    let mut done = Vec::new();
    for tree in old {
        match reconcile::kill(&ctx, &tree.id, Some(&tree), opts.grace) {
            Ok(t) => {
                if t.exit_code() != 0 {
                    tracing::warn!("--replace: tree {}: {}: {}", t.id, t.action, t.reason);
                }
                done.push(t);
            }
            Err(e) => tracing::warn!("--replace: tree {}: {e}", tree.id),
        }
    }
    done
}
