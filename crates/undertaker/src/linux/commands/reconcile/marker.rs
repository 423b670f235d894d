//! Finding a dead guardian's members by their marker (and, for counting, by their
//! tree cgroup).

use super::{recorded_cgroup, Context};
use crate::identity::{TreeId, TREE_MARKER};
use crate::linux::contain::cgroup;
use crate::linux::kernel::poll::poll_until;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::{Members, ProvenProcess, Signaller};
use crate::linux::proof::teardown::TreeSource;
use crate::registry::TreeRecord;
use rustix::event::{PollFd, PollFlags};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

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

/// Members of a tree whose guardian is gone: marked processes, proven one by one.
pub(crate) struct MarkerSource<'a> {
    pub(crate) procfs: &'a Procfs,
    pub(crate) tree: TreeId,
    pub(crate) not_before: u64,
    pub(crate) uid: u32,
    /// Candidates from a scan the caller just made: used once instead of rescanning.
    pub(crate) scanned: Option<Vec<i32>>,
}

impl MarkerSource<'_> {
    fn candidates(&mut self) -> Vec<i32> {
        if let Some(pids) = self.scanned.take() {
            return pids;
        }
        marker_scan(self.procfs, self.uid)
            .remove(self.tree.as_str())
            .unwrap_or_default()
            .into_iter()
            .map(|(pid, _)| pid)
            .collect()
    }
}

impl TreeSource for MarkerSource<'_> {
    fn members(&mut self, signaller: &Signaller) -> Members {
        let (tree, not_before) = (self.tree.clone(), self.not_before);
        let mut members = Members::collect(self.candidates(), |pid| {
            signaller.prove_by_marker(pid, &tree, not_before)
        });
        // A live child of a proven member is a member by parentage, marker or not
        // (proven while its parent is still alive, so its ppid means that parent):
        // this finds members that scrubbed their environment while their parent lives.
        let mut seen: std::collections::HashSet<i32> =
            members.proven.iter().map(|p| p.pid()).collect();
        let mut next = 0;
        while next < members.proven.len() {
            let parent_pid = members.proven[next].pid();
            for child in self.procfs.children(parent_pid).unwrap_or_default() {
                if seen.insert(child) {
                    let proven = signaller.prove_child(Some(&members.proven[next]), child);
                    members.add(child, proven);
                }
            }
            next += 1;
        }
        members
    }

    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
        // Rescan at least every 50 ms: a member may fork without any pidfd changing.
        let until = deadline.min(Instant::now() + Duration::from_millis(50));
        let fds: Vec<_> = watch.iter().map(|p| p.pidfd()).collect();
        let mut polls: Vec<PollFd<'_>> = fds
            .iter()
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        poll_until(&mut polls, Some(until));
    }

    fn is_empty(&mut self) -> bool {
        self.candidates().is_empty()
    }
}
