//! Which trees a sweep or a self-healing round examines: the one rule both use.
//!
//! A tree its supervisor released is never a candidate, nor is the cgroup its record
//! names (left behind when a member forked as it was moved out: the guardian died
//! since, but the processes are the host's). Any other recorded tree is
//! a candidate while its record is unfinished, or while marked
//! processes of it live (known only with a marker scan, which `sweep` makes and a
//! self-healing round does not: it costs a read of every process). A marker scan also
//! makes candidates of trees known only by their markers. Then every tree cgroup of a
//! dead guardian that no candidate's record leads to (another state dir, a lost
//! registry) is one: the cgroup proves membership by itself. Whether a candidate's
//! guardian is dead, and what of it may be signalled, is proven per tree afterwards
//! ([`super::sweep_tree`], [`super::sweep_cgroup`]).

use super::{recorded_cgroup, Context};
use crate::linux::contain::cgroup;
use crate::registry::{RegistryError, StoredState, TreeRecord};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The candidates of one sweep or self-healing round.
pub(crate) struct Candidates {
    /// Candidate trees by id, with their record (none: known only by markers).
    pub records: BTreeMap<String, Option<TreeRecord>>,
    /// Cgroups the candidate records lead to (they are swept with their tree, so the
    /// walk over tree cgroups must not list or count their members a second time),
    /// and those released records name (never swept).
    recorded_cgroups: BTreeSet<PathBuf>,
}

/// The candidate records; `markers` is the caller's marker scan, if it made one.
pub(crate) fn candidates(
    ctx: &Context,
    markers: Option<&BTreeMap<String, Vec<(i32, u64)>>>,
) -> Result<Candidates, RegistryError> {
    let marked = |id: &str| markers.is_some_and(|m| m.contains_key(id));
    let mut records: BTreeMap<String, Option<TreeRecord>> = BTreeMap::new();
    // A released tree's processes are the host's again, marked or not: never ours.
    let mut released = BTreeSet::new();
    let mut released_records = Vec::new();
    for r in ctx.trees()? {
        if r.state == StoredState::Released {
            released.insert(r.id.clone());
            released_records.push(r);
        } else if r.state != StoredState::Finished || marked(&r.id) {
            records.insert(r.id.clone(), Some(r));
        }
    }
    for id in markers.into_iter().flat_map(|m| m.keys()) {
        if !released.contains(id) {
            records.entry(id.clone()).or_insert(None);
        }
    }
    let mount = cgroup::current_mount().ok();
    let recorded_cgroups = (records.values().flatten())
        .chain(&released_records)
        .filter_map(|r| recorded_cgroup(r, mount.as_ref()?, ctx.procfs()).map(PathBuf::from))
        .collect();
    Ok(Candidates {
        records,
        recorded_cgroups,
    })
}

impl Candidates {
    /// Tree cgroups of dead guardians that no candidate record leads to, as they are
    /// now (call it after the records are swept: their cgroups are gone by then).
    pub(crate) fn orphan_cgroups(&self, ctx: &Context) -> Vec<cgroup::FoundTreeCgroup> {
        cgroup::list_tree_cgroups(ctx.procfs())
            .into_iter()
            .filter(|found| {
                found.guardian == cgroup::GuardianState::Dead
                    && found.path.exists()
                    && !self.recorded_cgroups.contains(&found.path)
            })
            .collect()
    }
}
