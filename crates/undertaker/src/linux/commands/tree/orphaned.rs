//! Trees of guardians that died, finished by another process: the sentinel that
//! forked the guardian (the orphans are its descendants), or a process that is
//! neither (`sweep`, `kill`, self-healing), which finds them by cgroup and marker.
//! Either way the tree is torn down by the one escalation, [`super::tear_down_together`].

use super::{portable, tear_down_together, Anchors, Bystander, Live, Orphans, Torn, Tree};
use crate::identity::TreeId;
use crate::linux::commands::record::Recorder;
use crate::linux::contain::cgroup::CgroupTree;
use crate::linux::contain::containment::{Containment, Placement};
use crate::linux::proof::signal::Signaller;
use crate::GuardOptions;
use std::time::Duration;

impl Tree {
    /// The tree of a guardian that died, finished by the process that forked it
    /// (see `sentinel`): no root (CMD died with its guardian), the tree's cgroup when
    /// it has one, and the existing record, finished once the tree is torn down.
    pub(crate) fn orphaned(
        opts: &GuardOptions,
        id: TreeId,
        signaller: &Signaller,
        cgroup: Option<CgroupTree>,
    ) -> Self {
        let recorder = Recorder::adopt(opts, &id, signaller);
        let placement = match cgroup {
            Some(cg) => Placement::Cgroup(cg),
            None => Placement::Subreaper,
        };
        Tree {
            id,
            label: opts.label.clone(),
            grace: opts.grace,
            containment: Containment::Subreaper,
            recorder,
            anchors: Anchors::Command(Orphans::AllOfHost),
            live: Live {
                placement: Some(placement),
                ..Live::default()
            },
        }
    }

    /// The portable tier's tree of a guardian that died, finished by its sentinel:
    /// no subreaper handed it the orphans, so the member record and the marker name
    /// them.
    pub(crate) fn orphaned_portable(
        opts: &GuardOptions,
        id: TreeId,
        signaller: &Signaller,
    ) -> Self {
        let recorder = Recorder::adopt(opts, &id, signaller);
        let record = portable::members_path(opts.state_dir.as_deref(), &id);
        let tracking = portable::Tracking::orphaned(signaller, &id, record, None);
        Tree {
            id,
            label: opts.label.clone(),
            grace: opts.grace,
            containment: Containment::Portable,
            recorder,
            anchors: Anchors::Command(Orphans::AllOfHost),
            live: Live {
                placement: Some(Placement::Portable),
                portable: Some(tracking),
                ..Live::default()
            },
        }
    }

    /// A dead guardian's tree as `sweep`, `kill` and self-healing find it: its
    /// trusted cgroup (`cgroup`, the only evidence for a tree found by its cgroup
    /// alone) and, when the guardian's start `since` is known, the processes carrying
    /// its marker (`scanned`: those of a scan just made, for the first look); every
    /// descendant of those too. Nothing is its child: torn down by
    /// [`Tree::tear_down_from_outside`], `grace` between SIGTERM and SIGKILL. Its
    /// audit lines go where `recorder` sends them.
    pub(crate) fn left_behind(
        id: TreeId,
        cgroup: Option<CgroupTree>,
        since: Option<u64>,
        scanned: Option<Vec<i32>>,
        grace: Duration,
        recorder: Recorder,
    ) -> Self {
        let placement = match cgroup {
            Some(cg) => Placement::Cgroup(cg),
            None => Placement::Subreaper,
        };
        Tree {
            id,
            label: None,
            grace,
            containment: Containment::Subreaper,
            recorder,
            anchors: Anchors::Left { since, scanned },
            live: Live {
                placement: Some(placement),
                ..Live::default()
            },
        }
    }

    /// Writes a note to the tree's audit log now (why a sweep acts, how it ended).
    pub(crate) fn note(&self, message: String) {
        self.recorder.note(message);
    }

    /// Tears a [`Tree::left_behind`] down through the one escalation, as a process
    /// that is no member's parent: a report of each member back.
    pub(crate) fn tear_down_from_outside(&mut self, signaller: &Signaller) -> Torn {
        let grace = self.grace;
        tear_down_together(&mut [self], false, grace, signaller, &mut Bystander)
    }
}
