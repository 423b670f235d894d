//! One tree a supervisor holds, and how its members are found without touching the
//! supervisor's other trees.
//!
//! `run` guards one tree per process, so every descendant of the guardian is a member.
//! A supervisor holds many: a tree's members are the processes its containment vouches
//! for (the tree's cgroup), the processes proven at `register`/`adopt` time (pidfds
//! held since), the spawned root while it is unreaped, orphans reparented to us that
//! carry the tree's marker, and every descendant of those by parentage.

use super::process::Process;
use crate::identity::TreeId;
use crate::linux::commands::record::Recorder;
use crate::linux::contain::cgroup::CgroupTree;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::{Members, ProvenProcess, Signaller};
use crate::linux::proof::teardown::{AuditEvent, Escalation, Outcome, TreeSource};
use rustix::event::PollFlags;
use rustix::fd::BorrowedFd;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How a tree came to be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Spawn,
    Register,
    Adopt,
}

impl Kind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Kind::Spawn => "spawn",
            Kind::Register => "register",
            Kind::Adopt => "adopt",
        }
    }
}

pub(super) struct HeldTree {
    pub id: TreeId,
    pub kind: Kind,
    pub label: Option<String>,
    /// The registered group (`register` only).
    pub pgid: Option<i32>,
    pub root_pid: i32,
    /// Nothing of the tree started before this (its marker proof's lower bound).
    pub root_starttime: u64,
    /// The spawned root, our child (`spawn` only).
    pub root: Option<PidRef>,
    pub root_status: Option<i32>,
    /// `register`/`adopt`: the processes proven when the tree was taken, leader first.
    pub anchors: Vec<ProvenProcess>,
    pub cgroup: Option<CgroupTree>,
    pub recorder: Recorder,
    /// The root's exit was handled (event sent, or the leader's exit noted).
    pub root_done: bool,
}

/// Parent links of every process, from one pass over /proc.
pub(super) struct ProcTable {
    children_of: HashMap<i32, Vec<i32>>,
}

impl ProcTable {
    pub(super) fn scan(procfs: &Procfs) -> Self {
        let mut children_of: HashMap<i32, Vec<i32>> = HashMap::new();
        for pid in procfs.pids().unwrap_or_default() {
            if let Ok(stat) = procfs.stat(pid) {
                children_of.entry(stat.ppid).or_default().push(pid);
            }
        }
        Self { children_of }
    }

    fn children(&self, pid: i32) -> &[i32] {
        self.children_of.get(&pid).map_or(&[], Vec::as_slice)
    }

    /// `found` plus every descendant of its processes (see [`walk_descendants`]).
    pub(super) fn walk(&self, signaller: &Signaller, found: Members) -> Members {
        walk_descendants(signaller, self, found)
    }
}

impl HeldTree {
    /// The fd whose readability means the root (spawned child or registered leader)
    /// exited, while that is still news.
    pub(super) fn root_fd(&self) -> Option<BorrowedFd<'_>> {
        if self.root_done {
            return None;
        }
        match &self.root {
            Some(root) => Some(root.fd()),
            None => self.anchors.first().map(ProvenProcess::pidfd),
        }
    }

    /// Every live member, each proven afresh.
    pub(super) fn members(&self, signaller: &Signaller, table: &ProcTable) -> Members {
        let mut found = Members::default();
        if let Some(cg) = &self.cgroup {
            found.merge(cg.members(signaller));
        }
        let mut start: Vec<ProvenProcess> = Vec::new();
        // The spawned root, while its pidfd says it lives: its number is still its own.
        if let Some(root) = self.root.as_ref().filter(|r| !r.exited()) {
            if let Ok(p) = signaller.prove_child(None, root.pid()) {
                start.push(p);
            }
        }
        start.extend(
            self.anchors
                .iter()
                .filter(|a| !a.has_exited())
                .filter_map(ProvenProcess::try_clone),
        );
        if self.kind == Kind::Spawn {
            // Orphans of the tree, reparented to us (we are their subreaper).
            let me = signaller.me().pid;
            for &pid in table.children(me) {
                if pid == self.root_pid {
                    continue;
                }
                if let Ok(p) = signaller.prove_by_marker(pid, &self.id, self.root_starttime) {
                    start.push(p);
                }
            }
        }
        found.merge(Members {
            proven: start,
            refused: Vec::new(),
        });
        walk_descendants(signaller, table, found)
    }

    /// Live members now (for `list` and the `kill` reply).
    pub(super) fn live_count(&self, signaller: &Signaller) -> usize {
        let table = ProcTable::scan(signaller.procfs());
        self.members(signaller, &table).proven.len()
    }

    fn is_populated(&self) -> bool {
        self.cgroup.as_ref().is_some_and(CgroupTree::is_populated)
    }

    /// Closes the record and removes the (empty) cgroup.
    pub(super) fn finish(mut self, status: Option<i32>) {
        self.recorder.finished(status.or(self.root_status));
        if let Some(cg) = &self.cgroup {
            if !cg.is_populated() {
                if let Err(e) = cg.remove(Duration::from_secs(2)) {
                    tracing::warn!("cannot remove cgroup {}: {e}", cg.path.display());
                }
            }
        }
    }
}

/// Adds every descendant (by parentage, each proven as the child of a proven parent)
/// of the processes in `found`.
fn walk_descendants(signaller: &Signaller, table: &ProcTable, mut found: Members) -> Members {
    let mut seen: HashSet<i32> = found.proven.iter().map(ProvenProcess::pid).collect();
    let mut frontier: Vec<usize> = (0..found.proven.len()).collect();
    while let Some(i) = frontier.pop() {
        let parent_pid = found.proven[i].pid();
        for &pid in table.children(parent_pid) {
            if !seen.insert(pid) {
                continue;
            }
            let before = found.proven.len();
            let result = signaller.prove_child(Some(&found.proven[i]), pid);
            found.add(pid, result);
            if found.proven.len() > before {
                frontier.push(before);
            }
        }
    }
    found
}

/// Trees being torn down together, with the process that reaps and waits for them.
struct Teardown<'a> {
    signaller: &'a Signaller,
    trees: Vec<&'a HeldTree>,
    process: &'a mut Process,
    /// Also every descendant of ours (the final teardown, when no tree was released).
    all_descendants: bool,
    /// Which tree each member belongs to, for its audit lines.
    owner_of: HashMap<i32, usize>,
}

impl TreeSource for Teardown<'_> {
    fn members(&mut self, signaller: &Signaller) -> Members {
        self.process.reap();
        let table = ProcTable::scan(signaller.procfs());
        let mut all = Members::default();
        for (i, tree) in self.trees.iter().enumerate() {
            let members = tree.members(signaller, &table);
            for p in &members.proven {
                self.owner_of.entry(p.pid()).or_insert(i);
            }
            all.merge(members);
        }
        if self.all_descendants {
            let rest = walk_descendants(
                signaller,
                &table,
                Members {
                    proven: own_children(signaller, &table),
                    refused: Vec::new(),
                },
            );
            all.merge(rest);
        }
        all
    }

    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
        let mut fds: Vec<(BorrowedFd<'_>, PollFlags)> = Vec::new();
        for tree in &self.trees {
            tree.recorder.flush_audit();
            if let Some(cg) = &tree.cgroup {
                let _ = cg.is_populated();
                fds.push((cg.events_fd(), PollFlags::PRI));
            }
        }
        fds.extend(watch.iter().map(|p| (p.pidfd(), PollFlags::IN)));
        // Rescan at least every 50 ms: a member may fork without any fd changing.
        let until = deadline.min(Instant::now() + Duration::from_millis(50));
        self.process.wait(until, &fds);
        self.process.reap();
    }

    fn is_empty(&mut self) -> bool {
        if self.trees.iter().any(|t| t.is_populated()) {
            return false;
        }
        // A fresh proof of every member is the only evidence of emptiness here.
        let signaller = self.signaller;
        self.members(signaller).proven.is_empty()
    }

    /// cgroup.kill for every tree that has a cgroup; `false` all the same, so members
    /// outside a cgroup (descendants that never were in one) still get their SIGKILL.
    fn kill_all(&mut self) -> bool {
        for cg in self.trees.iter().filter_map(|t| t.cgroup.as_ref()) {
            cg.kill();
        }
        false
    }
}

/// Our children, each proven (the roots and the orphans reparented to us).
fn own_children(signaller: &Signaller, table: &ProcTable) -> Vec<ProvenProcess> {
    let me = signaller.me().pid;
    table
        .children(me)
        .iter()
        .filter_map(|&pid| signaller.prove_child(None, pid).ok())
        .collect()
}

/// Tears `trees` down together (SIGTERM, grace, SIGKILL). Returns the number of
/// members still alive afterwards.
pub(super) fn tear_down(
    trees: &[&HeldTree],
    all_descendants: bool,
    signaller: &Signaller,
    process: &mut Process,
    grace: Duration,
) -> usize {
    for tree in trees {
        tree.recorder.reaping();
    }
    let mut source = Teardown {
        signaller,
        trees: trees.to_vec(),
        process,
        all_descendants,
        owner_of: HashMap::new(),
    };
    let owner_of = std::cell::RefCell::new(HashMap::<i32, usize>::new());
    let report = {
        let mut audit = |event: AuditEvent| {
            let pid = match &event {
                AuditEvent::Signal { target, .. } => target.pid,
                AuditEvent::Refusal { pid, .. } => *pid,
            };
            let index = owner_of.borrow().get(&pid).copied().unwrap_or(0);
            if let Some(tree) = trees.get(index) {
                tree.recorder.audit(&event);
            }
        };
        // The audit closure needs the source's pid → tree map: share it through a
        // wrapper that copies the map after every member walk.
        let mut sharing = SharingSource {
            inner: &mut source,
            owner_of: &owner_of,
        };
        Escalation::with_grace(grace).run(signaller, &mut sharing, &mut audit)
    };
    for tree in trees {
        tree.recorder.flush_audit();
    }
    report.count(Outcome::Stuck)
}

/// Passes everything to `inner`, publishing its pid → tree map after each walk.
struct SharingSource<'a, 'b> {
    inner: &'a mut Teardown<'b>,
    owner_of: &'a std::cell::RefCell<HashMap<i32, usize>>,
}

impl TreeSource for SharingSource<'_, '_> {
    fn members(&mut self, signaller: &Signaller) -> Members {
        let members = self.inner.members(signaller);
        self.owner_of
            .borrow_mut()
            .extend(self.inner.owner_of.iter().map(|(k, v)| (*k, *v)));
        members
    }
    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
        self.inner.wait(deadline, watch)
    }
    fn is_empty(&mut self) -> bool {
        self.inner.is_empty()
    }
    fn kill_all(&mut self) -> bool {
        self.inner.kill_all()
    }
}
