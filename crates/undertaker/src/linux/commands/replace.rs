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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{GuardianRecord, HostEvidence, OwnerKind, OwnerRecord, RecordedTier};

    fn host(pid: i32, starttime: u64) -> HostRecord {
        HostRecord {
            pid,
            starttime,
            name: "python3".into(),
            found_by: HostEvidence::Stdio,
        }
    }

    fn tree(id: &str, label: &str, host: Option<HostRecord>) -> TreeRecord {
        let mut t = TreeRecord::starting(
            id.into(),
            "boot".into(),
            Some(label.into()),
            RecordedTier::Subreaper,
            GuardianRecord {
                pid: 10,
                starttime: 1,
                pgid: 10,
                pidfs_inode: None,
                supervisor: false,
            },
            OwnerRecord {
                kind: OwnerKind::Parent,
                pid: Some(9),
                starttime: Some(1),
            },
        );
        t.start = Some(StartRecord {
            host,
            ..StartRecord::default()
        });
        t
    }

    #[test]
    fn only_live_trees_of_the_same_label_and_host_are_predecessors() {
        let own = TreeId::generate("boot", [1; 12]);
        let me = host(100, 5);
        let is = |t: &TreeRecord| is_predecessor(t, &own, "boot", "srv", &me);
        assert!(is(&tree("a", "srv", Some(host(100, 5)))));
        // Another host, the same number reused by another host, another label.
        assert!(!is(&tree("a", "srv", Some(host(101, 5)))));
        assert!(!is(&tree("a", "srv", Some(host(100, 6)))));
        assert!(!is(&tree("a", "other", Some(host(100, 5)))));
        // No host recorded (an older record), our own tree, another boot, finished.
        assert!(!is(&tree("a", "srv", None)));
        assert!(!is(&tree(own.as_str(), "srv", Some(host(100, 5)))));
        let mut old_boot = tree("a", "srv", Some(host(100, 5)));
        old_boot.boot_id = "earlier".into();
        assert!(!is(&old_boot));
        let mut finished = tree("a", "srv", Some(host(100, 5)));
        finished.state = StoredState::Finished;
        assert!(!is(&finished));
    }
}
