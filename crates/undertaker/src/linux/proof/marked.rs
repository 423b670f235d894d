//! Finding a tree's processes by their marker (`UNDERTAKER_TREE=<id>` in the
//! environment): candidates only, each proven afresh before any signal
//! ([`crate::linux::proof::signal::Signaller::prove_by_marker`]).

use crate::identity::{TreeId, TREE_MARKER};
use crate::linux::kernel::procfs::Procfs;
use std::collections::{BTreeMap, HashSet};

/// Live (non-zombie) processes of uid `uid` carrying a tree marker, by tree id.
pub(crate) fn marker_scan(procfs: &Procfs, uid: u32) -> BTreeMap<String, Vec<(i32, u64)>> {
    marker_scan_except(procfs, uid, &HashSet::new())
}

/// [`marker_scan`] of every process but those in `counted` (already counted through
/// their tree's cgroup: their environments are not read).
///
/// One read per process, its environ (a zombie's reads empty); stat (zombie, start
/// time) and status (real uid) only for the few marked ones. Every candidate is
/// proven afresh before any signal anyway.
pub(crate) fn marker_scan_except(
    procfs: &Procfs,
    uid: u32,
    counted: &HashSet<i32>,
) -> BTreeMap<String, Vec<(i32, u64)>> {
    let mut out: BTreeMap<String, Vec<(i32, u64)>> = BTreeMap::new();
    for pid in procfs.pids().unwrap_or_default() {
        if counted.contains(&pid) {
            continue;
        }
        let Ok(Some(v)) = procfs.environ_value(pid, TREE_MARKER) else {
            continue;
        };
        let Some(id) = std::str::from_utf8(&v).ok().and_then(TreeId::parse) else {
            continue;
        };
        let Ok(stat) = procfs.stat(pid) else { continue };
        if stat.state == 'Z' || stat.state == 'X' {
            continue;
        }
        if procfs.real_uid(pid).ok() != Some(uid) {
            continue;
        }
        out.entry(id.to_string())
            .or_default()
            .push((pid, stat.starttime));
    }
    out
}

/// The live processes of uid `uid` that carry `tree`'s marker.
pub(crate) fn marked_pids(procfs: &Procfs, uid: u32, tree: &TreeId) -> Vec<i32> {
    (marker_scan(procfs, uid)
        .remove(tree.as_str())
        .into_iter()
        .flatten())
    .map(|(pid, _)| pid)
    .collect()
}
