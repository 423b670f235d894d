//! A tree made of processes the host handed over (`supervise`'s `register` and
//! `adopt`), or carried on from a dead supervisor's record (its takeover): the
//! anchors, proven before they are accepted, the members of their group, and every
//! descendant of those, moved into the tree's cgroup in the cgroup tier.

use super::{portable, Anchors, Tree};
use crate::identity::TreeId;
use crate::linux::commands::guarded::{self, TakenBy};
use crate::linux::contain::cgroup::{self, CgroupTree};
use crate::linux::contain::containment::{Containment, Placement};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::descent::ProcTable;
use crate::linux::proof::signal::{serial_of, Members, NotProven, ProvenProcess, Signaller};
use crate::registry::AuditEntry;
use crate::RunError;

/// At most this many passes of moving into a taken tree's cgroup and looking again
/// for what the members forked meanwhile.
const MOVE_PASSES: usize = 8;

impl Tree {
    /// Brings `leader` (and, with `group`, its process group) and their descendants
    /// under this recorded tree's guard: into the tree's cgroup in the cgroup tier
    /// (recorded before anything moves), pidfds held in any tier. Returns the number
    /// of members taken.
    pub(crate) fn take(
        &mut self,
        signaller: &Signaller,
        leader: ProvenProcess,
        group: Option<i32>,
        taken: TakenBy,
    ) -> Result<usize, RunError> {
        let placement = Placement::set_up(&self.containment, &self.id, signaller)?;
        if let Some(cg) = placement.cgroup() {
            self.recorder.set_cgroup(&cg.path, cg.id);
        }
        let procfs = signaller.procfs();
        let leader_pid = leader.pid();
        let cg = placement.cgroup();
        // The leader first, then each group member as soon as it is proven: what they
        // fork from then on is born inside (docs/SUPERVISE.md, "A double fork right
        // after `register`").
        if let Some(cg) = cg {
            move_proven(cg, &leader, procfs);
        }
        let mut members = collect(signaller, vec![leader], group, cg);
        if let Some(cg) = cg {
            // Members forked while we moved the others: more passes catch them, until
            // a pass finds nothing new.
            for _ in 0..MOVE_PASSES {
                for m in &members.proven {
                    move_proven(cg, m, procfs);
                }
                let known = members.proven.iter().filter_map(ProvenProcess::try_clone);
                let fresh = collect(signaller, known.collect(), group, None);
                if fresh.proven.len() == members.proven.len() {
                    break;
                }
                members = fresh;
            }
        }
        self.recorder.set_root(procfs, leader_pid, None);
        if matches!(placement, Placement::Portable) {
            self.track_taken(signaller, &members.proven);
        }
        self.live.placement = Some(placement);
        Ok(self.hold(signaller, members, group, taken))
    }

    /// The portable tier: no cgroup holds the taken processes and no subreaper hands
    /// us their orphans, so the portable core tracks them and what they fork from now
    /// on (docs/SUPERVISE.md, "portable"), from the tree's member record too when a
    /// predecessor's was moved there.
    fn track_taken(&mut self, signaller: &Signaller, proven: &[ProvenProcess]) {
        let anchors: Vec<(i32, u64)> = (proven.iter())
            .map(|m| (m.pid(), serial_of(&m.identity)))
            .collect();
        let record = self.live.member_record.clone();
        let tracking = portable::Tracking::taken(signaller, &self.id, &anchors, record);
        self.live.portable = Some(tracking);
    }

    /// A dead supervisor's tree carried on by this one (its takeover): `anchors` are
    /// its recorded processes proven afresh, `cgroup` its cgroup (already renamed for
    /// this tree), `root` the recorded root's pid, `predecessor` its old id (in the
    /// portable tier its member record becomes this tree's). Returns the number of
    /// members.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn carry_on(
        &mut self,
        signaller: &Signaller,
        cgroup: Option<CgroupTree>,
        mut anchors: Vec<ProvenProcess>,
        group: Option<i32>,
        taken: TakenBy,
        root: Option<i32>,
        predecessor: Option<&TreeId>,
    ) -> usize {
        if let Some(cg) = &cgroup {
            self.recorder.set_cgroup(&cg.path, cg.id);
        }
        let portable = matches!(self.containment, Containment::Portable);
        self.live.placement = Some(match cgroup {
            Some(cg) => Placement::Cgroup(cg),
            None if portable => Placement::Portable,
            None => Placement::Subreaper,
        });
        if portable {
            if let (Some(new), Some(old)) = (&self.live.member_record, predecessor) {
                if let Some(trees) = new.parent() {
                    let _ = std::fs::rename(portable::members_path_in(trees, old), new);
                }
            }
            self.track_taken(signaller, &anchors);
        }
        // The rest of the group through one recorded process still in it.
        let in_group = group.and_then(|n| anchors.iter().position(|a| a.identity.pgid == n));
        let mut found = match in_group {
            Some(i) => collect(signaller, vec![anchors.remove(i)], group, None),
            None => Members::default(),
        };
        found.merge(Members {
            proven: anchors,
            refused: Vec::new(),
        });
        let members = ProcTable::scan(signaller).walk(signaller, found);
        if let Some(r) = members.proven.iter().find(|m| Some(m.pid()) == root) {
            self.recorder.set_root(signaller.procfs(), r.pid(), None);
        }
        self.hold(signaller, members, group, taken)
    }

    /// The members become the tree's anchors; each is noted in its record, as the
    /// tree's snapshot, once its entry can name no other process.
    fn hold(
        &mut self,
        signaller: &Signaller,
        members: Members,
        group: Option<i32>,
        taken: TakenBy,
    ) -> usize {
        for m in signaller.past_their_start_tick(&members.proven) {
            self.recorder.audit_line(guarded::guarded_entry(m, taken));
        }
        self.recorder.flush_audit();
        let count = members.proven.len();
        self.anchors = Anchors::Taken {
            group,
            proven: members.proven,
        };
        count
    }

    /// An entry for the tree's audit log, written now.
    pub(crate) fn audit_line(&self, entry: AuditEntry) {
        self.recorder.audit_line(entry);
        self.recorder.flush_audit();
    }

    /// True when this tree took group `pgid` and one of its processes is alive and
    /// still in it, so the number still names the group it took.
    pub(crate) fn holds_group(&self, procfs: &Procfs, pgid: i32) -> bool {
        let Anchors::Taken {
            group: Some(group),
            proven,
        } = &self.anchors
        else {
            return false;
        };
        *group == pgid
            && proven.iter().any(|a| {
                !a.has_exited()
                    && procfs
                        .stat(a.pid())
                        .is_ok_and(|s| s.pgrp == pgid && s.starttime == a.identity.starttime)
            })
    }
}

/// `known` (the group's anchor first), the members of group `group` (proven through
/// the anchor while it lives to pin the number), and every descendant of those.
/// `into`: the tree's cgroup, where each group member goes as soon as it is proven.
fn collect(
    signaller: &Signaller,
    known: Vec<ProvenProcess>,
    group: Option<i32>,
    into: Option<&CgroupTree>,
) -> Members {
    let mut start = Members {
        proven: known,
        refused: Vec::new(),
    };
    if let (Some(pgid), Some(anchor)) = (group, start.proven.first()) {
        let mut more = Vec::new();
        for pid in group_candidates(signaller.procfs(), pgid, anchor.pid()) {
            if start.proven.iter().any(|p| p.pid() == pid) {
                continue;
            }
            if let Ok(p) = prove_in_group(signaller, pid, anchor) {
                if let Some(cg) = into {
                    move_proven(cg, &p, signaller.procfs());
                }
                more.push(p);
            }
        }
        start.proven.extend(more);
    }
    // Read after the group moved: children they forked meanwhile are in it.
    ProcTable::scan(signaller).walk(signaller, start)
}

/// A member of `anchor`'s group: through the leader while the anchor leads it, else
/// through a member a snapshot proved (the leader is gone).
fn prove_in_group(
    signaller: &Signaller,
    pid: i32,
    anchor: &ProvenProcess,
) -> Result<ProvenProcess, NotProven> {
    if anchor.pid() == anchor.identity.pgid {
        signaller.prove_in_group(pid, anchor)
    } else {
        signaller.prove_in_group_of_member(pid, anchor)
    }
}

/// Processes whose group is `pgid` now (read from /proc; each is proven afterwards).
fn group_candidates(procfs: &Procfs, pgid: i32, leader: i32) -> Vec<i32> {
    procfs
        .pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|&pid| pid != leader)
        .filter(|&pid| procfs.stat(pid).is_ok_and(|s| s.pgrp == pgid))
        .collect()
}

/// Moves a proven member into the tree's cgroup. cgroup.procs takes a number, not a
/// pidfd: the number named the member during the write only if the member is still
/// alive afterwards. If it died meanwhile, whatever process now has that number and
/// landed in our cgroup is moved back where the member came from: it is not ours.
fn move_proven(cg: &CgroupTree, member: &ProvenProcess, procfs: &Procfs) {
    let pid = member.pid();
    let origin = cgroup::dir_of_process(procfs, pid);
    if let Err(e) = cg.move_in(pid) {
        tracing::warn!(pid, "cannot move into {}: {e}", cg.path.display());
        return;
    }
    if member.has_exited() && cg.pids().contains(&pid) {
        if let Some(origin) = origin {
            let _ = cgroup::move_to(&origin, pid);
        }
    }
}
