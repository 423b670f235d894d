//! Tearing trees down: one escalation over one tree (`run`, `supervise`'s `kill`, the
//! sentinel's and a sweep's dead guardian's tree) or over every tree a process holds
//! at once (a supervisor's end: one grace period for all, not one per tree). Each
//! member is found by its own tree's rule, and its audit lines go to that tree's
//! record.

use super::{Anchors, Host, Orphans, Tree};
use crate::escalation::Sig;
use crate::linux::proof::descent::ProcTable;
use crate::linux::proof::signal::{Delivery, Members, ProvenProcess, Signaller};
use crate::linux::proof::teardown::{AuditEvent, Escalation, Outcome, TeardownReport, TreeSource};
use rustix::event::PollFlags;
use rustix::fd::BorrowedFd;
use rustix::process::Signal;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// What a teardown did: the escalation's report, member by member, and the members a
/// signal of ours reached (one that then exited was terminated, not merely gone).
pub(crate) struct Torn {
    pub report: TeardownReport,
    pub reached: BTreeSet<(i32, u64)>,
}

impl Torn {
    /// Members still alive.
    pub fn left(&self) -> usize {
        self.report.count(Outcome::Stuck)
    }
}

/// Tears `trees` down together (SIGTERM to all, `grace`, SIGKILL), then reaps and
/// removes each emptied cgroup. With `everything_ours`, every descendant of this
/// process goes too (a supervisor's end when it released no tree: nothing of ours
/// is meant to outlive it).
pub(crate) fn tear_down_together(
    trees: &mut [&mut Tree],
    everything_ours: bool,
    grace: Duration,
    signaller: &Signaller,
    host: &mut dyn Host,
) -> Torn {
    // Audit entries wait here, with the index of their member's tree, until the
    // source files them before its next wait.
    let queued: RefCell<Vec<(usize, AuditEvent)>> = RefCell::new(Vec::new());
    let owner_of: RefCell<HashMap<i32, usize>> = RefCell::new(HashMap::new());
    let mut source = Together {
        trees,
        host,
        signaller,
        everything_ours,
        no_children: false,
        owner_of: &owner_of,
        queued: &queued,
    };
    // A command that exited alone (the usual end): no "reaping" state to show, one
    // commit less, and no escalation (it would only ask the same question again).
    let empty_already = source.is_empty();
    if !empty_already {
        for tree in source.trees.iter() {
            tree.recorder.reaping();
        }
    }
    let mut reached = BTreeSet::new();
    let mut log = |event: AuditEvent| {
        let pid = match &event {
            AuditEvent::Signal {
                target,
                signal,
                delivery,
                ..
            } => {
                tracing::debug!(pid = target.pid, signal = signal.name(), "signalled");
                if *delivery == Delivery::Delivered {
                    reached.insert((target.pid, target.starttime));
                }
                target.pid
            }
            AuditEvent::Refusal { pid, refusal } => {
                tracing::warn!(pid, %refusal, "refused");
                *pid
            }
        };
        let tree = owner_of.borrow().get(&pid).copied().unwrap_or(0);
        queued.borrow_mut().push((tree, event));
    };
    let started = Instant::now();
    let report = match empty_already {
        true => TeardownReport {
            targets: Vec::new(),
            empty: true,
        },
        false => Escalation::with_grace(grace).run(signaller, &mut source, &mut log),
    };
    source.file_audit();
    let left = report.count(Outcome::Stuck);
    let ids: Vec<&str> = source.trees.iter().map(|t| t.id.as_str()).collect();
    tracing::debug!(
        "tree {} done: {} signalled, {} left, {} ms",
        ids.join(", tree "),
        report.targets.len() - report.count(Outcome::Refused),
        left,
        started.elapsed().as_millis()
    );
    if !report.empty {
        for tree in source.trees.iter() {
            tracing::warn!(stuck = left, "tree {} not empty after teardown", tree.id);
        }
    }
    for tree in source.trees.iter_mut() {
        // `is_empty` reaped last when the tree was empty from the start.
        if !empty_already {
            tree.live.reap(source.host);
        }
        if report.empty {
            tree.remove_cgroup();
        }
    }
    Torn { report, reached }
}

/// Trees being torn down together, with the host that reaps and waits for them.
struct Together<'a, 'b> {
    trees: &'a mut [&'b mut Tree],
    host: &'a mut dyn Host,
    signaller: &'a Signaller,
    /// Every descendant of ours is a member too (see [`tear_down_together`]).
    everything_ours: bool,
    /// The host had no child left at its last reap.
    no_children: bool,
    /// Which tree each member belongs to, for its audit lines.
    owner_of: &'a RefCell<HashMap<i32, usize>>,
    queued: &'a RefCell<Vec<(usize, AuditEvent)>>,
}

impl Together<'_, '_> {
    /// `run`'s case: one tree alone in its host, whose every child is the tree's.
    fn alone(&self) -> bool {
        !self.everything_ours
            && self.trees.len() == 1
            && matches!(self.trees[0].anchors, Anchors::Command(Orphans::AllOfHost))
    }

    fn reap(&mut self) {
        for tree in self.trees.iter_mut() {
            tree.live.reap(self.host);
        }
        if self.everything_ours {
            self.no_children = self.host.reap(&mut |_, _| {}) == Some(true);
        }
    }

    /// Hands queued audit entries to their trees' records and writes them.
    fn file_audit(&mut self) {
        for (i, event) in self.queued.borrow_mut().drain(..) {
            if let Some(tree) = self.trees.get(i) {
                tree.recorder.audit(&event);
            }
        }
        for tree in self.trees.iter() {
            tree.recorder.flush_audit();
        }
    }
}

impl TreeSource for Together<'_, '_> {
    fn members(&mut self, signaller: &Signaller) -> Members {
        self.reap();
        // One scan of /proc for every tree of this round, made only if one needs it.
        let mut table: Option<ProcTable> = None;
        let mut all = Members::default();
        for (i, tree) in self.trees.iter_mut().enumerate() {
            let members = tree.members(signaller, &mut table);
            let mut owner_of = self.owner_of.borrow_mut();
            for p in &members.proven {
                owner_of.entry(p.pid()).or_insert(i);
            }
            all.merge(members);
        }
        if self.everything_ours {
            let table = table.get_or_insert_with(|| ProcTable::scan(signaller));
            all.merge(table.descendants(signaller));
        }
        all
    }

    fn first_strike(
        &mut self,
        signaller: &Signaller,
        audit: &mut dyn FnMut(AuditEvent),
    ) -> Option<i32> {
        self.reap();
        // One tree started by us: strike its root's group first.
        let [tree] = &mut *self.trees else {
            return None;
        };
        if !matches!(tree.anchors, Anchors::Command(_)) {
            return None;
        }
        // CMD is unreaped (no status yet), so its number is still its own; prove_child
        // pins it with a fresh pidfd and re-checks it is our child. The kernel then
        // resolves the group from that process (PIDFD_SIGNAL_PROCESS_GROUP), never
        // from a number that could have been recycled.
        if tree.live.root_status.is_some() {
            return None;
        }
        let root_pid = tree.live.root.as_ref()?.pid();
        let root = signaller.prove_child(None, root_pid).ok()?;
        // Only a group that cannot hold a stranger gets a group-wide signal: CMD's own
        // group in CMD's own session (no terminal involved). A process can only join a
        // group of its own session, and only CMD's descendants are ever in that one.
        // In the guardian's session (a terminal) any process of the session could have
        // joined: members are then proven and signalled one by one.
        if root.identity.pgid != root.pid() || root.identity.sid != root.pid() {
            return None;
        }
        self.owner_of.borrow_mut().insert(root.pid(), 0);
        match signaller.signal_group(&root, Signal::TERM) {
            Ok(delivery) => {
                audit(AuditEvent::Signal {
                    target: root.identity.clone(),
                    signal: Sig::Term,
                    proof: root.proof.clone(),
                    delivery,
                });
                (delivery == Delivery::Delivered).then_some(root.identity.pgid)
            }
            // Older kernels: the member walk signals everyone one by one anyway.
            Err(refusal) => {
                tracing::debug!(%refusal, "no process-group first strike");
                None
            }
        }
    }

    fn watches_members(&self) -> bool {
        // Alone: emptiness is "no children and an unpopulated cgroup", and SIGCHLD
        // (signalfd) and cgroup.events wake us for both. A member that is not our
        // child exits without either, but then its parent, a member too, is still
        // there. Sharing the host, a tree's members may be anyone's children.
        !self.alone()
    }

    fn needs_rescan(&mut self) -> bool {
        // A child of ours that is alive while the cgroup is empty lives outside it.
        if !self.alone() {
            return false;
        }
        let live = &self.trees[0].live;
        let Some(cg) = live.cgroup() else {
            return false;
        };
        !live.walked_after_empty && !live.no_children && !cg.is_populated()
    }

    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
        // Queued audit entries are written before anything blocks.
        self.file_audit();
        let alone = self.alone();
        let mut fds: Vec<(BorrowedFd<'_>, PollFlags)> = Vec::with_capacity(watch.len() + 1);
        for tree in self.trees.iter() {
            if let Some(cg) = tree.live.cgroup() {
                // Reading re-arms the POLLPRI notification.
                let _ = cg.is_populated();
                fds.push((cg.events_fd(), PollFlags::PRI));
            }
        }
        fds.extend(watch.iter().map(|p| (p.pidfd(), PollFlags::IN)));
        // Sharing the host, look again at least every 50 ms: a member may fork
        // without any fd we watch changing.
        let until = match alone {
            true => deadline,
            false => deadline.min(Instant::now() + Duration::from_millis(50)),
        };
        self.host.wait(until, &fds);
        drop(fds);
        self.reap();
    }

    fn is_empty(&mut self) -> bool {
        let signaller = self.signaller;
        let host = &mut *self.host;
        if !self.trees.iter_mut().all(|t| t.is_empty(signaller, host)) {
            return false;
        }
        if self.everything_ours {
            self.reap();
            return self.no_children;
        }
        true
    }

    fn out_of_patience(&mut self) -> bool {
        self.host.out_of_patience()
    }

    fn kill_all(&mut self) -> bool {
        // cgroup.kill for every tree that has a cgroup; `true` only when that covered
        // every tree (members outside a cgroup still get their SIGKILL either way).
        let protected = &self.signaller.me().protected_groups;
        let procfs = self.signaller.procfs();
        let mut all = true;
        for tree in self.trees.iter() {
            let Some(cg) = tree.live.cgroup() else {
                all = false;
                continue;
            };
            // cgroup.kill takes no exceptions: a cgroup holding a member of the host's
            // own group (`supervise --parent-pgid`) gets the per-process SIGKILLs only.
            let holds_protected = !protected.is_empty()
                && (cg.pids().into_iter())
                    .any(|pid| procfs.stat(pid).is_ok_and(|s| protected.contains(&s.pgrp)));
            all &= !holds_protected && !tree.live.refused_in_cgroup && cg.kill();
        }
        all && !self.trees.is_empty() && !self.everything_ours
    }
}
