//! The portable tier's side of a tree (docs/TIERS.md, "portable"): no cgroup, no
//! subreaper, no PDEATHSIG on CMD. The portable core proves the members (lineage to
//! a fixed point, the marker), the guardian tracks them while the tree lives (an
//! orphan's link to its parent is gone on Linux the moment the parent dies, so only
//! a scan made before that sees it), appends each to the tree's member record, and
//! tears them down with the core's freeze round. The sentinel (after the guardian's
//! `kill -9`) and `sweep` (after both) seed a fresh lineage from that record.

use crate::escalation::Escalation;
use crate::identity::TreeId;
use crate::linux::contain::portable::LinuxOs;
use crate::linux::proof::signal::{serial_of, Signaller};
use crate::portable::lineage::{Lineage, Scope};
use crate::portable::teardown::{tear_down, Report};
use crate::portable::{record, ProcessTable, Waker};
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

/// `sweep` of a dead guardian's portable tree: the core seeded from its member
/// record (a serial is never reused, so a stale line names nothing), grown by
/// lineage and the marker (from `not_before`, the guardian's start), torn down with
/// the freeze round; the record goes with it. The marker sweep runs after.
pub(crate) fn sweep_recorded(
    signaller: &Signaller,
    id: &TreeId,
    trees: &Path,
    not_before: u64,
    grace: Duration,
) -> Report {
    let record = members_path_in(trees, id);
    let mut tracking = Tracking::orphaned(signaller, id, Some(record), Some(not_before));
    let report = tracking.tear_down(grace);
    tracking.forget();
    report
}

/// The serial of the live process at `pid`, if it is one.
fn serial(signaller: &Signaller, pid: i32) -> Option<u64> {
    let (identity, _, _) = signaller.identify(pid).ok()?;
    Some(serial_of(&identity))
}

/// The scope of tree `id` as seen from this process: never itself, its parent
/// (the sentinel's, or the guardian's sentinel) or `also`; markers count from
/// `not_before`, else from our own start.
fn scope(signaller: &Signaller, id: &TreeId, also: &[i32], not_before: Option<u64>) -> Scope {
    let me = signaller.me();
    let own_start = || signaller.procfs().stat(me.pid).map_or(0, |s| s.starttime);
    let not_before = not_before.unwrap_or_else(own_start);
    let mut protected: HashSet<u64> = HashSet::new();
    for pid in [me.pid].iter().chain(me.ancestors.first()).chain(also) {
        protected.extend(serial(signaller, *pid));
    }
    Scope {
        tree: id.as_str().to_owned(),
        uid: me.uid,
        not_before,
        protected,
    }
}

/// What a guardian on the portable tier knows of its tree.
pub(crate) struct Tracking {
    lineage: Lineage,
    os: LinuxOs,
    record: Option<PathBuf>,
    /// Looks since the last full scan.
    looks: u32,
}

impl Tracking {
    /// Seeds the lineage with CMD (our unreaped child, so its number is its own).
    pub(crate) fn start(
        signaller: &Signaller,
        id: &TreeId,
        root: i32,
        owner: Option<i32>,
        record: Option<PathBuf>,
    ) -> Self {
        let os = LinuxOs::new(signaller.clone());
        let lineage = Lineage::new(scope(signaller, id, owner.as_slice(), None));
        let mut tracking = Self {
            lineage,
            os,
            record,
            looks: 0,
        };
        let facts = tracking.os.facts(root);
        if let Some(cmd) = facts.and_then(|f| tracking.lineage.seed(&f)) {
            tracking.append(&[cmd]);
        }
        tracking.track();
        tracking
    }

    /// A tree of processes the host handed over (`supervise`'s `register`/`adopt`,
    /// or a dead supervisor's tree carried on, whose member record is already at
    /// `record`), each given as (pid, serial) by the caller that proved it: a process
    /// at that pid is seeded only while it still has that serial, so a number reused
    /// since the proof names nothing.
    pub(crate) fn taken(
        signaller: &Signaller,
        id: &TreeId,
        anchors: &[(i32, u64)],
        record: Option<PathBuf>,
    ) -> Self {
        let mut tracking = Self::orphaned(signaller, id, record, None);
        let mut seeded = Vec::new();
        for &(pid, serial) in anchors {
            let facts = tracking.os.facts(pid).filter(|f| f.serial == serial);
            seeded.extend(facts.and_then(|f| tracking.lineage.seed(&f)));
        }
        tracking.append(&seeded);
        tracking.track();
        tracking
    }

    /// A dead guardian's tree, from its member record (and the marker, counted
    /// from `not_before`, else from our own start).
    pub(crate) fn orphaned(
        signaller: &Signaller,
        id: &TreeId,
        record: Option<PathBuf>,
        not_before: Option<u64>,
    ) -> Self {
        let mut os = LinuxOs::new(signaller.clone());
        let recorded = record
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| record::parse(&text))
            .unwrap_or_default();
        let scope = scope(signaller, id, &[], not_before);
        let lineage = record::seeded(scope, &recorded, &mut os);
        Self {
            lineage,
            os,
            record,
            looks: 0,
        }
    }

    fn append(&self, members: &[crate::portable::Member]) {
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
        let found = match self.looks % FULL_SCAN_EVERY {
            0 => self.lineage.scan(&mut self.os),
            _ => self.lineage.scan_children(&mut self.os),
        };
        self.looks = self.looks.wrapping_add(1);
        for m in &found {
            self.os.watch(m);
        }
        self.append(&found);
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

impl super::Tree {
    /// The portable tier: the tree's member record goes without a teardown (a
    /// released tree is the host's again: no sweep may seed from it).
    pub(crate) fn forget_members(&self) {
        if let Some(tracking) = &self.live.portable {
            tracking.forget();
        }
    }
}
