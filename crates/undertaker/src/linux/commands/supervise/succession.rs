//! At start, a supervisor takes over the trees a dead supervisor of the same owner
//! recorded (docs/SUPERVISE.md, "Supervisor restarts"; the registry side is
//! `reconcile::succession`). Each becomes a tree of this supervisor, proven afresh: the
//! recorded processes still alive with their start times, the rest of their group
//! through one of them still in it, their descendants, and in the cgroup tier the
//! tree's cgroup, replaced by one named for its new guardian.

use super::Supervisor;
use crate::identity::TreeId;
use crate::linux::commands::guarded::TakenBy;
use crate::linux::commands::reconcile::succession::{self, Predecessor};
use crate::linux::commands::reconcile::Context;
use crate::linux::contain::cgroup::CgroupTree;
use crate::linux::proof::signal::ProvenProcess;
use crate::snapshot;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// What the search for a dead predecessor's trees came to.
enum Search {
    /// The cheap look saw no dead guardian's record or cgroup: look again later.
    NothingSeen,
    /// The registry could not be read (or not in time, however often asked).
    Failed,
    /// The registry has not answered yet: its answer is waited for again at the next
    /// `register` that needs it, and at the end.
    Late,
    Found(Box<Context>, Vec<Predecessor>),
}

/// A search the registry has not answered yet, kept so that its answer is used when
/// it comes (on a loaded machine it can take longer than [`SEARCH_PATIENCE`]: dropped,
/// a replayed `register` of a group whose leader died was refused, and the group's
/// orphans were left unguarded while the host lived).
#[derive(Default)]
pub(super) struct PendingSearch {
    answer: Option<Receiver<Search>>,
    waits: u32,
}

/// The longest the supervisor waits at start (or at a replayed `register`) for the
/// registry to say what its predecessor left.
const SEARCH_PATIENCE: Duration = Duration::from_secs(3);

/// How many times in all a late search is waited for (each time up to
/// [`SEARCH_PATIENCE`]) before the supervisor gives up on it.
const SEARCH_WAITS: u32 = 10;

/// While a late search is pending, the serve loop wakes up this often to use its
/// answer as soon as it comes (a host that replays nothing more must not wait for it).
pub(super) const SEARCH_POLL: Duration = Duration::from_millis(100);

impl PendingSearch {
    pub(super) fn is_pending(&self) -> bool {
        self.answer.is_some()
    }
}

impl Supervisor<'_> {
    /// Takes over every tree of a dead predecessor of our owner; each predecessor's
    /// record is then finished, naming its successor.
    ///
    /// Done once per supervisor: at start when a cheap look (the one self-healing
    /// makes: record files and tree cgroups of dead guardians) finds anything, else at
    /// the first `register` that cannot be proven otherwise (a replay).
    pub(super) fn take_over_predecessors(&mut self) {
        self.take_over(false);
    }

    /// At start: only when the cheap look finds a dead guardian's record or cgroup.
    /// Returns whether it did (the search folded those records: self-healing must not
    /// rely on its own look then).
    pub(super) fn take_over_predecessors_if_any(&mut self) -> bool {
        self.take_over(true)
    }

    /// At the end: a search still unanswered is waited for once more, so that what a
    /// dead predecessor left (a spawned tree, say) goes with our teardown.
    pub(super) fn take_over_if_pending(&mut self) {
        if self.search.is_pending() {
            self.take_over(false);
        }
    }

    /// While serving: a late search's answer, if it has come (no waiting).
    pub(super) fn take_over_if_answered(&mut self) {
        if self.search.is_pending() {
            self.take_over_within(false, Duration::ZERO);
        }
    }

    fn take_over(&mut self, look_first: bool) -> bool {
        self.take_over_within(look_first, SEARCH_PATIENCE)
    }

    fn take_over_within(&mut self, look_first: bool, patience: Duration) -> bool {
        if self.predecessors_checked
            || self.owner_record.pid.is_none()
            || self.owner_record.starttime.is_none()
        {
            return false;
        }
        let (ctx, found) = match self.search(look_first, patience) {
            Search::NothingSeen | Search::Late => return false,
            Search::Failed => {
                self.predecessors_checked = true;
                return false;
            }
            Search::Found(ctx, found) => (ctx, found),
        };
        self.predecessors_checked = true;
        for old in found {
            let new = self.take_over_one(&old);
            succession::hand_over(&ctx, &old.record.id, new.as_ref().map(TreeId::as_str));
        }
        true
    }

    /// The look and the registry search, on a thread: what they read (the state dir,
    /// the database) must never hold up the thread that watches the owner. Waited for
    /// at most `patience` at a time; after that the supervisor serves without them,
    /// and the answer is looked for again while serving and when next needed
    /// ([`PendingSearch`]).
    fn search(&mut self, look_first: bool, patience: Duration) -> Search {
        let answer = match self.search.answer.take() {
            Some(pending) => pending,
            None => match self.start_search(look_first) {
                Some(answer) => answer,
                None => return Search::Failed,
            },
        };
        match answer.recv_timeout(patience) {
            Ok(found) => found,
            // A look while serving: not a wait, so not counted.
            Err(RecvTimeoutError::Timeout) if patience.is_zero() => {
                self.search.answer = Some(answer);
                Search::Late
            }
            Err(RecvTimeoutError::Timeout) if self.search.waits < SEARCH_WAITS => {
                self.search.waits += 1;
                tracing::warn!("the registry has not answered yet: takeover waits for it");
                self.search.answer = Some(answer);
                Search::Late
            }
            Err(_) => {
                tracing::warn!("no takeover: the registry did not answer in time");
                Search::Failed
            }
        }
    }

    fn start_search(&self, look_first: bool) -> Option<Receiver<Search>> {
        let state_dir = self.opts.state_dir.clone();
        let owner = self.owner_record.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("takeover".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let look = !look_first
                    || crate::linux::commands::heal::anything_to_heal(state_dir.as_deref());
                let found = if !look {
                    Search::NothingSeen
                } else {
                    match Context::open(state_dir.as_deref()) {
                        Ok(ctx) => {
                            let found = succession::predecessors(&ctx, &owner);
                            Search::Found(Box::new(ctx), found)
                        }
                        Err(_) => Search::Failed,
                    }
                };
                let _ = tx.send(found);
            });
        spawned.is_ok().then_some(rx)
    }

    /// One predecessor's tree as a new tree of ours; `None` when nothing of it is left.
    fn take_over_one(&mut self, old: &Predecessor) -> Option<TreeId> {
        // Registered before a late search answered: the group is ours already.
        if let TakenBy::Group(pgid) = old.taken {
            if let Some((id, _)) = self.holding_group(pgid) {
                return Some(id);
            }
        }
        let group = match old.taken {
            TakenBy::Group(pgid) => Some(pgid),
            TakenBy::Process | TakenBy::Spawn => None,
        };
        let anchors: Vec<ProvenProcess> = match old.taken {
            // The root died with its supervisor: its tree is what carries the marker.
            TakenBy::Spawn => self.marked(old),
            // A group's leader entry never proves the group, here as for `adopt` with
            // a snapshot.
            TakenBy::Group(_) | TakenBy::Process => old
                .snapshot
                .iter()
                .filter(|e| !group.is_some_and(|pgid| snapshot::is_leader_entry(pgid, e)))
                .filter_map(|e| self.signaller.prove_snapshot_entry(e).ok())
                .collect(),
        };
        let old_cgroup = old
            .record
            .cgroup_path
            .as_deref()
            .and_then(|p| CgroupTree::open(Path::new(p)).ok())
            .filter(|cg| Some(cg.id) == old.record.cgroup_id);
        if anchors.is_empty() && !old_cgroup.as_ref().is_some_and(CgroupTree::is_populated) {
            if let Some(cg) = &old_cgroup {
                let _ = cg.remove(std::time::Duration::ZERO);
            }
            return None;
        }
        let mut tree = self.record(old.record.label.clone()).ok()?;
        let id = tree.id().clone();
        let cgroup = old_cgroup.map(|cg| self.claim(cg, &id));
        let root = old.record.root.as_ref().map(|r| r.pid);
        let predecessor = TreeId::parse(&old.record.id);
        tree.carry_on(
            &self.signaller,
            cgroup,
            anchors,
            group,
            old.taken,
            root,
            predecessor.as_ref(),
        );
        self.trees.push(tree);
        Some(id)
    }

    /// A spawned tree's live processes: its marker, our uid, started no earlier than
    /// its guardian (as `sweep` proves them).
    fn marked(&self, old: &Predecessor) -> Vec<ProvenProcess> {
        let Some(tree) = TreeId::parse(&old.record.id) else {
            return Vec::new();
        };
        let me = self.signaller.me();
        let scan = crate::linux::commands::reconcile::marker_scan(self.signaller.procfs(), me.uid);
        scan.get(tree.as_str())
            .into_iter()
            .flatten()
            .filter_map(|&(pid, _)| {
                self.signaller
                    .prove_by_marker(pid, &tree, old.record.guardian.starttime)
                    .ok()
            })
            .collect()
    }

    /// The predecessor's cgroup, replaced by one named for its new tree and guardian
    /// (its processes moved under freeze) so that nothing takes it for a dead
    /// guardian's (the name says whose it is); kept as it is if that fails.
    fn claim(&self, cg: CgroupTree, id: &TreeId) -> CgroupTree {
        cg.replace(
            id,
            self.signaller.me().pid,
            self.starttime(),
            &self.signaller,
        )
    }
}
