//! Counting a tree's live processes by their marker and their tree cgroup (the
//! scan itself is [`crate::linux::proof::marked`]).

use super::{recorded_cgroup, Context};
use crate::linux::contain::cgroup;
use crate::linux::kernel::procfs::Procfs;
pub(crate) use crate::linux::proof::marked::{marker_scan, marker_scan_except};
use crate::registry::TreeRecord;
use std::collections::{BTreeMap, BTreeSet};

/// Live processes of a tree: those carrying its marker, and those in its cgroup
/// (members that scrubbed their environment still count).
pub(crate) fn live_count(ctx: &Context, id: &str, rec: Option<&TreeRecord>) -> usize {
    let markers = marker_scan(ctx.procfs(), ctx.signaller.me().uid);
    let mount = cgroup::current_mount().ok();
    let in_cgroup = cgroup_pids(ctx.procfs(), rec, mount.as_ref(), &mut Default::default());
    live_pids(id, &markers, &in_cgroup).len()
}

/// The processes of the tree cgroup `rec` names (and of those below it), when it is
/// one this command may read ([`recorded_cgroup`]).
pub(crate) fn cgroup_pids(
    procfs: &Procfs,
    rec: Option<&TreeRecord>,
    mount: Option<&cgroup::CgroupMount>,
    reader: &mut cgroup::PidsReader,
) -> Vec<i32> {
    let (Some(rec), Some(mount)) = (rec, mount) else {
        return Vec::new();
    };
    recorded_cgroup(rec, mount, procfs)
        .map(|path| reader.pids_at(mount, path))
        .unwrap_or_default()
}

/// [`live_count`]'s set: the tree's marked processes from a marker scan the caller
/// made, and `in_cgroup` ([`cgroup_pids`]).
pub(crate) fn live_pids(
    id: &str,
    markers: &BTreeMap<String, Vec<(i32, u64)>>,
    in_cgroup: &[i32],
) -> BTreeSet<i32> {
    let marked = markers.get(id).into_iter().flatten().map(|&(pid, _)| pid);
    marked.chain(in_cgroup.iter().copied()).collect()
}
