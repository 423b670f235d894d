//! A tree's member rule: where its members start from ([`Anchors`]), and every live
//! member found from there, each proven afresh at each look.

use super::{Host, Tree};
use crate::linux::proof::descent::ProcTable;
use crate::linux::proof::marked::marked_pids;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::{Members, ProvenProcess, Signaller};

/// Where a tree's members start from: its member rule, scoped to the tree.
///
/// Every member is proven afresh at each look: the processes the tree's placement
/// vouches for (its cgroup), its anchors, its orphans, and every descendant of
/// those by parentage.
pub(crate) enum Anchors {
    /// CMD, which the tree started (`run`, and `supervise`'s `spawn`): the root while
    /// it is unreaped, and the orphans it left to the host (we are their subreaper).
    Command(Orphans),
    /// Processes the host handed over (`register` a group, `adopt` a process), each
    /// proven when it was taken, leader first; pidfds held since.
    Taken {
        /// The registered group (`register` only).
        group: Option<i32>,
        proven: Vec<ProvenProcess>,
    },
    /// A dead guardian's tree, torn down by a process that is neither its guardian
    /// nor its parent (`sweep`, `kill`, self-healing): what its trusted cgroup holds
    /// and, with `since`, every process of our uid that carries the tree's marker
    /// and started no earlier than the dead guardian.
    Left {
        /// The dead guardian's start; `None`: the cgroup alone names the tree.
        since: Option<u64>,
        /// The marked pids of a scan the sweep just made, used for the first look.
        scanned: Option<Vec<i32>>,
    },
}

/// Which of the host's orphaned children belong to a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Orphans {
    /// The host holds this tree alone (`run`): every descendant of the host is the
    /// tree's, marker or not.
    AllOfHost,
    /// The host holds many trees (`supervise`): an orphan is this tree's when it
    /// carries the tree's marker and started no earlier than its root.
    Marked,
}

/// The round's one look at /proc, made on first need.
fn scan<'t>(table: &'t mut Option<ProcTable>, signaller: &Signaller) -> &'t ProcTable {
    table.get_or_insert_with(|| ProcTable::scan(signaller))
}

impl Tree {
    /// Every live member now, each proven afresh. `table` is one scan of /proc
    /// shared by every tree looked at together: made here if none was yet and this
    /// tree's rule needs one.
    pub(crate) fn members(
        &mut self,
        signaller: &Signaller,
        table: &mut Option<ProcTable>,
    ) -> Members {
        let live = &mut self.live;
        let mut found = live
            .placement
            .as_ref()
            .map(|p| p.members(signaller))
            .unwrap_or_default();
        match &mut self.anchors {
            Anchors::Command(Orphans::AllOfHost) => {
                // Both views: a member that left our descendants (setsid + reparenting
                // elsewhere) is still in the cgroup, and one that moved out of the
                // cgroup is still our descendant. The descendant walk costs a scan of
                // all of /proc, so the first (SIGTERM) round skips it while the
                // cgroup is populated. Nothing is lost: a descendant outside the
                // cgroup becomes our child (we are its subreaper) once its in-cgroup
                // ancestors die, and then `needs_rescan` asks for a walk; every
                // SIGKILL round walks anyway.
                let walk = match live.cgroup() {
                    None => true,
                    Some(cg) => {
                        let populated = cg.is_populated();
                        let walk = live.member_rounds > 0 || !populated;
                        live.member_rounds += 1;
                        live.walked_after_empty |= walk && !populated;
                        walk
                    }
                };
                if walk {
                    found.merge(scan(table, signaller).descendants(signaller));
                }
            }
            Anchors::Command(Orphans::Marked) => {
                let mut start = Members::default();
                // The root, while unreaped: its number is still its own.
                let root = live.root.as_ref().filter(|r| !r.exited());
                if let Some(p) = root.and_then(|r| signaller.prove_child(None, r.pid()).ok()) {
                    start.proven.push(p);
                }
                let root_pid = live.root.as_ref().map(PidRef::pid);
                let table = scan(table, signaller);
                let mut candidates = table.marked(&self.id).to_vec();
                // The root's exit shows (its pidfd) a moment before the kernel hands
                // its children to us: for that moment they still name it as parent,
                // are no child of ours, and a look then would miss them. Its children
                // are candidates too, each proven by its marker, not by parentage.
                if root.is_none() {
                    for &pid in root_pid.map_or(&[][..], |r| table.children(r)) {
                        if !candidates.contains(&pid) {
                            candidates.push(pid);
                        }
                    }
                }
                for pid in candidates {
                    if Some(pid) != root_pid {
                        let proof = signaller.prove_by_marker(pid, &self.id, live.root_starttime);
                        start.add(pid, proof);
                    }
                }
                found.merge(table.walk(signaller, start));
            }
            Anchors::Left { since, scanned } => {
                // A refused process in the cgroup (another user's) rules cgroup.kill
                // out: it would kill what the ladder refused.
                live.refused_in_cgroup |= !found.refused.is_empty();
                if let Some(since) = *since {
                    let me = signaller.me().uid;
                    let marked = (scanned.take())
                        .unwrap_or_else(|| marked_pids(signaller.procfs(), me, &self.id));
                    let mut start = found;
                    for pid in marked {
                        if !start.proven.iter().any(|p| p.pid() == pid) {
                            start.add(pid, signaller.prove_by_marker(pid, &self.id, since));
                        }
                    }
                    found = scan(table, signaller).walk(signaller, start);
                }
            }
            Anchors::Taken { proven, .. } => {
                let start = Members {
                    proven: (proven.iter())
                        .filter(|a| !a.has_exited())
                        .filter_map(ProvenProcess::try_clone)
                        .collect(),
                    refused: Vec::new(),
                };
                found.merge(scan(table, signaller).walk(signaller, start));
            }
        }
        found
    }

    /// How many live members a listing reports: while the tree's cgroup is populated,
    /// its own proven members (what the kernel says the tree holds, without a look at
    /// all of /proc); else [`Tree::members`]. A process moved out of the cgroup by hand
    /// is not counted then; teardown's walk still finds it.
    pub(crate) fn live_count(
        &mut self,
        signaller: &Signaller,
        table: &mut Option<ProcTable>,
    ) -> usize {
        match self.live.cgroup() {
            Some(cg) if cg.is_populated() => cg.members(signaller).proven.len(),
            _ => self.members(signaller, table).proven.len(),
        }
    }

    /// True when nothing of the tree is left.
    pub(super) fn is_empty(&mut self, signaller: &Signaller, host: &mut dyn Host) -> bool {
        self.live.reap(host);
        if self.live.is_populated() {
            return false;
        }
        match self.anchors {
            // Alone in its host: no child of the host left means no member left.
            Anchors::Command(Orphans::AllOfHost) => self.live.no_children,
            // A fresh proof of every member is the only evidence of emptiness here.
            _ => self.members(signaller, &mut None).proven.is_empty(),
        }
    }
}
