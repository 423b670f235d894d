//! The portable tier's side of a tree on Linux (docs/TIERS.md, "portable"): no
//! cgroup, no subreaper, no PDEATHSIG on CMD. What the guardian knows of its members
//! is the core's [`crate::portable::tracking`], the same code macOS runs; this file
//! only builds its backend ([`LinuxOs`]) and its scope from the [`Signaller`].

use super::{Cause, Host, Tree};
use crate::identity::TreeId;
use crate::linux::contain::portable::LinuxOs;
use crate::linux::proof::signal::Signaller;
use crate::portable::lineage::Scope;
use crate::portable::teardown::Report;
use crate::portable::tracking;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use tracking::{members_path, members_path_in, TRACK_EVERY};

/// What a guardian on the portable tier knows of its tree.
pub(crate) type Tracking = tracking::Tracking<LinuxOs>;

/// What a supervisor's portable trees share: one look per tick, one end.
pub(crate) type Looks = tracking::Looks<LinuxOs>;

impl Looks {
    pub(crate) fn of(signaller: &Signaller) -> Self {
        Self::new(LinuxOs::new(signaller.clone()))
    }
}

/// The scope of tree `id` as seen from this process: never itself, its parent
/// (the sentinel's, or the guardian's sentinel) or `also`; markers count from
/// `not_before`, else from our own start.
fn scope(
    os: &mut LinuxOs,
    signaller: &Signaller,
    id: &TreeId,
    also: &[i32],
    not_before: Option<u64>,
) -> Scope {
    let me = signaller.me();
    let protect: Vec<i32> = me
        .ancestors
        .first()
        .into_iter()
        .chain(also)
        .copied()
        .collect();
    let own_start = || signaller.procfs().stat(me.pid).map_or(0, |s| s.starttime);
    let not_before = Some(not_before.unwrap_or_else(own_start));
    tracking::scope(os, id, me.uid, me.pid, &protect, not_before)
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
        let mut os = LinuxOs::new(signaller.clone());
        let scope = scope(&mut os, signaller, id, owner.as_slice(), None);
        Self::of_command(os, scope, root, record)
    }

    /// A tree of processes the host handed over (`supervise`'s `register`/`adopt`,
    /// or a dead supervisor's tree carried on, whose member record is already at
    /// `record`), each given as (pid, serial) by the caller that proved it.
    pub(crate) fn taken(
        signaller: &Signaller,
        id: &TreeId,
        anchors: &[(i32, u64)],
        record: Option<PathBuf>,
    ) -> Self {
        let mut tracking = Self::orphaned(signaller, id, record, None);
        tracking.seed_proven(anchors);
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
        let scope = scope(&mut os, signaller, id, &[], not_before);
        Self::of_record(os, scope, record)
    }
}

/// `sweep` of a dead guardian's portable tree: [`tracking::sweep_recorded`] over
/// /proc and pidfds. The marker sweep runs after.
pub(crate) fn sweep_recorded(
    signaller: &Signaller,
    id: &TreeId,
    trees: &Path,
    not_before: u64,
    grace: Duration,
) -> Report {
    let mut os = LinuxOs::new(signaller.clone());
    let scope = scope(&mut os, signaller, id, &[], Some(not_before));
    tracking::sweep_recorded(os, scope, trees, id, grace)
}

impl Tree {
    /// The portable tier: the tree's member record goes without a teardown (a
    /// released tree is the host's again: no sweep may seed from it).
    pub(crate) fn forget_members(&self) {
        if let Some(tracking) = &self.live.portable {
            tracking.forget();
        }
    }

    /// One look for new members in every portable tree of `trees`, all in one
    /// snapshot of /proc (a supervisor's tick).
    pub(crate) fn track_all(trees: &mut [Tree], looks: &mut Looks) {
        looks.track(trees.iter_mut().filter_map(|t| t.live.portable.as_mut()));
    }

    /// The core's teardown of every portable tree of `trees` together (a
    /// supervisor's end): one SIGTERM round, one `grace`, one freeze round, one
    /// SIGKILL round for all of them. Returns the members still alive.
    pub(crate) fn tear_down_portable_together(
        trees: &mut [Tree],
        looks: &mut Looks,
        grace: Duration,
        cause: Cause,
        host: &mut dyn Host,
    ) -> usize {
        let mut torn: Vec<&mut Tree> = (trees.iter_mut())
            .filter(|t| t.live.portable.is_some())
            .collect();
        for tree in &torn {
            tree.note_cause(cause);
        }
        let mut trackings: Vec<&mut Tracking> = (torn.iter_mut())
            .filter_map(|t| t.live.portable.as_mut())
            .collect();
        let reports = looks.tear_down(&mut trackings, grace);
        (torn.into_iter().zip(&reports))
            .map(|(tree, report)| tree.torn_portable(report, host))
            .sum()
    }

    /// After the core's teardown: its figures in the audit log, the tree reaped.
    /// Returns the members still alive.
    pub(super) fn torn_portable(&mut self, report: &Report, host: &mut dyn Host) -> usize {
        self.recorder.audit_line(crate::registry::AuditEntry {
            actor: "guardian".into(),
            event: "note".into(),
            message: Some(report.summary()),
            ..Default::default()
        });
        self.recorder.flush_audit();
        self.live.reap(host);
        report.stuck.len()
    }
}
