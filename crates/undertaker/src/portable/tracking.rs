//! A tree's members while its guardian lives and after it died, over any backend
//! (docs/TIERS.md, "portable"): the lineage seeded with CMD, looked at every
//! [`TRACK_EVERY`] (an orphan's link to its parent is gone on Linux the moment the
//! parent dies, so only a look made before that sees it), each member appended to
//! the tree's member record, and the core's teardown with its freeze round. A
//! sentinel (after the guardian's `kill -9`) or `sweep` (after both) seeds a fresh
//! lineage from that record. Linux's `--tier portable` and macOS run this same code;
//! each builds the backend and the [`Scope`] its own way.

use super::lineage::{Lineage, Scope};
use super::snapshot::Snapshot;
use super::teardown::{tear_down, tear_down_together, Report};
use super::{record, Member, ProcessTable, Waker};
use crate::escalation::Escalation;
use crate::identity::TreeId;
use crate::registry::state_dir;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the guardian looks at its members' children while the tree lives: the
/// window in which a child that scrubbed its marker must be seen before its parent
/// dies (docs/GUARANTEES.md).
pub(crate) const TRACK_EVERY: Duration = Duration::from_millis(100);

/// Every this many looks, one at every pid (members known only by their marker:
/// `setsid` daemons reparented away from every member). A full scan reads every
/// process; the children's look reads a few.
const FULL_SCAN_EVERY: u32 = 10;

/// Which looks are full scans: every [`FULL_SCAN_EVERY`]th, the first included.
#[derive(Debug, Default)]
struct Cadence {
    /// Looks since the last full scan.
    looks: u32,
}

impl Cadence {
    /// Whether this look reads every pid; counts it.
    fn next_is_full(&mut self) -> bool {
        let full = self.looks % FULL_SCAN_EVERY == 0;
        self.looks = self.looks.wrapping_add(1);
        full
    }
}

/// The member record of tree `id`: beside its record file, when there is one.
pub(crate) fn members_path(state: Option<&Path>, id: &TreeId) -> Option<PathBuf> {
    let (path, _) = state_dir::resolve(state).ok()?;
    let trees = path.join("trees");
    trees.is_dir().then(|| members_path_in(&trees, id))
}

/// The member record of tree `id` in the state dir's `trees` folder.
pub(crate) fn members_path_in(trees: &Path, id: &TreeId) -> PathBuf {
    trees.join(format!("{id}.members"))
}

/// The scope of tree `id` as process `me` judges it: never `me` or the `protect`ed
/// pids (its parent, the owner, the other half of a sentinel pair); markers count
/// from `not_before`, else from `me`'s own start.
pub(crate) fn scope<T: ProcessTable>(
    os: &mut T,
    id: &TreeId,
    uid: u32,
    me: i32,
    protect: &[i32],
    not_before: Option<u64>,
) -> Scope {
    let not_before = not_before.unwrap_or_else(|| os.facts(me).map_or(0, |f| f.start));
    let protected: HashSet<u64> = std::iter::once(&me)
        .chain(protect)
        .filter_map(|&pid| os.facts(pid).map(|f| f.serial))
        .collect();
    Scope {
        tree: id.as_str().to_owned(),
        uid,
        not_before,
        protected,
    }
}

/// What a guardian (or its heir) knows of its tree, over backend `T`.
pub(crate) struct Tracking<T> {
    lineage: Lineage,
    os: T,
    record: Option<PathBuf>,
    cadence: Cadence,
}

impl<T: ProcessTable + Waker> Tracking<T> {
    /// Seeds the lineage with CMD at `root` (the guardian's unreaped child, so its
    /// number is its own), records it and looks once.
    pub(crate) fn of_command(os: T, scope: Scope, root: i32, record: Option<PathBuf>) -> Self {
        let mut tracking = Self {
            lineage: Lineage::new(scope),
            os,
            record,
            cadence: Cadence::default(),
        };
        let facts = tracking.os.facts(root);
        if let Some(cmd) = facts.and_then(|f| tracking.lineage.seed(&f)) {
            tracking.append(&[cmd]);
        }
        tracking.track();
        tracking
    }

    /// A dead guardian's tree, seeded from its member record (a serial is never
    /// reused, so a stale line names nothing) and grown by lineage and the marker.
    pub(crate) fn of_record(mut os: T, scope: Scope, record: Option<PathBuf>) -> Self {
        let recorded = record
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| record::parse(&text))
            .unwrap_or_default();
        let lineage = record::seeded(scope, &recorded, &mut os);
        Self {
            lineage,
            os,
            record,
            cadence: Cadence::default(),
        }
    }

    /// Seeds the processes a caller proved, each given as (pid, serial): a process
    /// at that pid is seeded only while it still has that serial, so a number reused
    /// since the proof names nothing. Records them and looks once.
    pub(crate) fn seed_proven(&mut self, anchors: &[(i32, u64)]) {
        let mut seeded = Vec::new();
        for &(pid, serial) in anchors {
            let facts = self.os.facts(pid).filter(|f| f.serial == serial);
            seeded.extend(facts.and_then(|f| self.lineage.seed(&f)));
        }
        self.append(&seeded);
        self.track();
    }

    /// The backend, for the guardian's own waits and watches.
    pub(crate) fn os(&mut self) -> &mut T {
        &mut self.os
    }

    /// Whether the process with `serial` was proven a member.
    pub(crate) fn holds(&self, serial: super::Serial) -> bool {
        self.lineage.is_member(serial)
    }

    /// The proven members the table still shows.
    pub(crate) fn live(&mut self) -> usize {
        self.lineage.live(&mut Snapshot::new(&mut self.os)).len()
    }

    fn append(&self, members: &[Member]) {
        let Some(path) = &self.record else { return };
        if members.is_empty() {
            return;
        }
        let text: String = members.iter().map(record::line).collect();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            tracing::warn!("member record {}: {e}", path.display());
        }
    }

    /// One look for new members (at every pid once in [`FULL_SCAN_EVERY`], else at
    /// the members' children); each is watched and recorded.
    pub(crate) fn track(&mut self) {
        let full = self.cadence.next_is_full();
        let found = look_for(&mut self.lineage, &mut Snapshot::new(&mut self.os), full);
        self.found(&found);
    }

    /// This tree's part of a look shared with other trees (see [`Looks`]).
    fn track_in(&mut self, look: &mut Snapshot<'_, T>, full: bool) {
        let found = look_for(&mut self.lineage, look, full);
        self.found(&found);
    }

    /// New members are watched and recorded.
    fn found(&mut self, found: &[Member]) {
        for m in found {
            self.os.watch(m);
        }
        self.append(found);
    }

    /// The core's teardown: SIGTERM, the grace, the freeze round, SIGKILL.
    pub(crate) fn tear_down(&mut self, grace: Duration) -> Report {
        tear_down(
            &mut self.lineage,
            &mut self.os,
            Escalation::with_grace(grace),
        )
    }

    /// The member record goes with the tree.
    pub(crate) fn forget(&self) {
        if let Some(path) = &self.record {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// One look for `lineage`'s new members in `look`: at every pid when `full`, else
/// at the members' children.
fn look_for<T: ProcessTable>(
    lineage: &mut Lineage,
    look: &mut Snapshot<'_, T>,
    full: bool,
) -> Vec<Member> {
    match full {
        true => lineage.scan(look),
        false => lineage.scan_children(look),
    }
}

/// The looks of every tree one process holds (a supervisor): each tick one
/// [`Snapshot`] that every tree's lineage is scanned in, so an idle tick costs
/// O(processes), not O(trees × processes); and the trees' end together, with one
/// grace for all.
pub(crate) struct Looks<T> {
    os: T,
    cadence: Cadence,
}

impl<T: ProcessTable + Waker> Looks<T> {
    pub(crate) fn new(os: T) -> Self {
        Self {
            os,
            cadence: Cadence::default(),
        }
    }

    /// One look for every tree of `trees` (at every pid once in
    /// [`FULL_SCAN_EVERY`], else at each tree's members' children).
    pub(crate) fn track<'a>(&mut self, trees: impl IntoIterator<Item = &'a mut Tracking<T>>)
    where
        T: 'a,
    {
        let full = self.cadence.next_is_full();
        let mut look = Snapshot::new(&mut self.os);
        for tracking in trees {
            tracking.track_in(&mut look, full);
        }
    }

    /// The core's teardown of every tree of `trees` together: one SIGTERM round,
    /// one grace, one freeze round, one SIGKILL round. One report per tree, in order.
    pub(crate) fn tear_down(
        &mut self,
        trees: &mut [&mut Tracking<T>],
        grace: Duration,
    ) -> Vec<Report> {
        let mut lineages: Vec<&mut Lineage> = trees.iter_mut().map(|t| &mut t.lineage).collect();
        tear_down_together(&mut lineages, &mut self.os, Escalation::with_grace(grace))
    }
}

/// `sweep` (or `kill`) of a dead guardian's tree: the core seeded from its member
/// record in `trees`, grown by lineage and the marker (from `not_before`, the
/// guardian's start), torn down with the freeze round; the record goes with it.
pub(crate) fn sweep_recorded<T: ProcessTable + Waker>(
    os: T,
    scope: Scope,
    trees: &Path,
    id: &TreeId,
    grace: Duration,
) -> Report {
    let record = members_path_in(trees, id);
    let mut tracking = Tracking::of_record(os, scope, Some(record));
    let report = tracking.tear_down(grace);
    tracking.forget();
    report
}

/// Why a guardian's watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    CmdExited,
    OwnerGone,
    /// Asked to stop (a signal, `undertaker kill`).
    Stopped,
}

/// What a guardian watches besides CMD and its members, asked after every wake.
pub(crate) trait Watch<T> {
    /// The owner is provably gone; `wakes` are what the last wait reported.
    fn owner_gone(&mut self, os: &mut T, wakes: &[super::Wake]) -> bool;
    /// Someone asked the guardian to tear the tree down.
    fn stop_asked(&mut self, os: &mut T) -> bool;
}

impl<T: ProcessTable + Waker> Tracking<T> {
    /// The guardian's life beside its tree: CMD (`root`, our unreaped child) is
    /// watched, and the members are looked for every [`TRACK_EVERY`] (sooner when a
    /// watched process forks, execs or exits) until CMD exits (the table no longer
    /// shows it alive: a zombie is not), the owner is gone or a stop is asked.
    pub(crate) fn watch(&mut self, root: i32, watch: &mut impl Watch<T>) -> Ended {
        let cmd = self.os.facts(root).map(|f| Member {
            pid: root,
            serial: f.serial,
            start: f.start,
            why: super::Why::Seed,
        });
        if let Some(cmd) = &cmd {
            self.os.watch(cmd);
        }
        let mut wakes = Vec::new();
        loop {
            if watch.stop_asked(&mut self.os) {
                return Ended::Stopped;
            }
            let cmd_alive = cmd.as_ref().is_some_and(|cmd| {
                self.os
                    .facts(cmd.pid)
                    .is_some_and(|f| f.serial == cmd.serial)
            });
            if !cmd_alive {
                return Ended::CmdExited;
            }
            if watch.owner_gone(&mut self.os, &wakes) {
                return Ended::OwnerGone;
            }
            self.track();
            let now = self.os.now();
            wakes = self.os.wait(now + TRACK_EVERY);
        }
    }
}
