//! `undertaker ps`: every tree of this boot as it is now.
//!
//! One look at everything, then one row per tree (docs/BENCHMARKS.md, "`ps` with
//! 1 000 live trees"): the tree cgroups the records name are read first, and the one
//! pass over /proc reads the environment of every other process only. A member found
//! through its cgroup is counted without its environment being read; a marked process
//! outside every tree cgroup (a subreaper tree's, one that left its cgroup) is still
//! found by its marker.

use super::marker::{cgroup_pids, live_pids, marker_scan_except};
use super::{guardian_state, owner_alive, Context, GuardianState};
use crate::linux::commands::control;
use crate::linux::contain::cgroup;
use crate::registry::{now_ms, OwnerRecord, RegistryError, StoredState};
use crate::report::{PsRow, TreeState};
use std::collections::{HashMap, HashSet};

pub fn ps(ctx: &Context, all: bool) -> Result<Vec<PsRow>, RegistryError> {
    // Read once for every row (it was once per tree cgroup: 1 000 mountinfo reads).
    let mount = cgroup::current_mount().ok();
    let rows = ctx.trees()?;
    let mut reader = cgroup::PidsReader::default();
    let in_cgroup: Vec<Vec<i32>> = (rows.iter())
        .map(|r| cgroup_pids(ctx.procfs(), Some(r), mount.as_ref(), &mut reader))
        .collect();
    // Guardians whose lock was held when the command opened the registry: alive
    // without a second probe of the same lock, and their numbers still theirs.
    let locked: HashSet<&str> = ctx.live.iter().map(|l| l.tree.id.as_str()).collect();
    // Not read by the marker scan: members counted through their tree's cgroup, and
    // live guardians (undertaker itself, never a member of the tree it guards).
    let accounted: HashSet<i32> = (in_cgroup.iter().flatten().copied())
        .chain(ctx.live.iter().map(|l| l.tree.guardian.pid))
        .collect();
    let markers = marker_scan_except(ctx.procfs(), ctx.signaller.me().uid, &accounted);
    // Many trees share one owner (a shell, a supervisor's host): one stat each.
    let mut owners: HashMap<(Option<i32>, Option<u64>), Option<bool>> = HashMap::new();
    let mut owner_alive = |owner: &OwnerRecord| {
        *(owners.entry((owner.pid, owner.starttime)))
            .or_insert_with(|| owner_alive(ctx.procfs(), owner))
    };
    // Many trees share one supervisor: one look at its control socket each.
    let uid = ctx.signaller.me().uid;
    let mut reachable: HashMap<(i32, u64), bool> = HashMap::new();
    let now = now_ms();
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (r, in_cgroup) in rows.iter().zip(&in_cgroup) {
        seen.insert(r.id.as_str());
        // Marked processes and the tree cgroup's processes (members that scrubbed
        // their environment count too).
        let live = live_pids(&r.id, &markers, in_cgroup).len();
        let released = r.state == StoredState::Released;
        if (r.state == StoredState::Finished && live == 0 || released) && !all {
            continue;
        }
        let guardian = if r.state == StoredState::Finished && live == 0 || released {
            GuardianState::Dead(None)
        } else if locked.contains(r.id.as_str()) {
            GuardianState::Alive
        } else {
            guardian_state(ctx, &r.id, Some(r))
        };
        let guardian_alive = matches!(guardian, GuardianState::Alive);
        let state = TreeState::derive(r.state, guardian_alive, owner_alive(&r.owner), live);
        let mut row = PsRow::recorded(r, state, guardian_alive, live, now);
        if guardian_alive && r.guardian.supervisor {
            row.supervisor_reachable = Some(
                *(reachable.entry((r.guardian.pid, r.guardian.starttime)))
                    .or_insert_with(|| control::endpoint_present(&ctx.dir, &r.guardian, uid)),
            );
        }
        out.push(row);
    }
    for (id, procs) in &markers {
        if seen.contains(id.as_str()) {
            continue;
        }
        let (state, guardian_alive, info) = match guardian_state(ctx, id, None) {
            GuardianState::Unknown => continue,
            GuardianState::Alive => (TreeState::Running, true, None),
            GuardianState::Dead(mut lock) => (
                TreeState::Orphaned,
                false,
                lock.as_mut().and_then(|l| l.info()),
            ),
        };
        let mut row = PsRow::unrecorded(id.clone(), state, guardian_alive, procs.len());
        row.guardian_pid = info.map(|i| i.guardian_pid);
        out.push(row);
    }
    Ok(out)
}
