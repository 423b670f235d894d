//! What the commands report: plain values, the same on every platform. The JSON
//! fields are documented in docs/CLI-JSON.md and docs/CLI-JSON-doctor.md; each set of
//! cases is an enum whose serialized name is the documented string.

use crate::names::names;
use crate::registry::{
    HostEvidence, OwnerKind, RecordedTier, RegistryError, StoredState, TreeRecord,
};
use crate::Tier;
use serde::Serialize;

/// A tree's state as `ps` shows it. `orphaned` is never stored: it is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeState {
    Running,
    Orphaned,
    Reaping,
    Finished,
    /// A supervisor stopped guarding the tree: its processes are the host's again.
    Released,
}

names!(TreeState {
    Running => "running",
    Orphaned => "orphaned",
    Reaping => "reaping",
    Finished => "finished",
    Released => "released",
});

impl TreeState {
    /// The state of a recorded tree, from what is stored and what is alive: a tree
    /// whose guardian or owner is gone is `orphaned` until a sweep finishes it.
    pub fn derive(
        stored: StoredState,
        guardian_alive: bool,
        owner: Option<bool>,
        live: usize,
    ) -> Self {
        match stored {
            // Its supervisor let it go: nothing of it is guarded, nothing is orphaned.
            StoredState::Released => TreeState::Released,
            // A finished tree with marked processes left means teardown left them stuck
            // or its guardian was killed after marking: they still need a sweep.
            StoredState::Finished if live == 0 || guardian_alive => TreeState::Finished,
            _ if !guardian_alive => TreeState::Orphaned,
            _ if owner == Some(false) => TreeState::Orphaned,
            StoredState::Running => TreeState::Running,
            StoredState::Reaping => TreeState::Reaping,
            StoredState::Finished => TreeState::Finished,
        }
    }
}

/// One line of `undertaker ps`.
#[derive(Debug, Clone, Serialize)]
pub struct PsRow {
    pub id: String,
    pub label: Option<String>,
    pub tier: Option<RecordedTier>,
    pub state: TreeState,
    pub guardian_pid: Option<i32>,
    pub guardian_alive: bool,
    pub owner_kind: Option<OwnerKind>,
    pub owner_pid: Option<i32>,
    pub root_pid: Option<i32>,
    pub live_processes: usize,
    pub created_ms: Option<i64>,
    pub age_ms: Option<i64>,
    pub exit_status: Option<i32>,
    /// False for a tree known only from its lock file and marked processes (its
    /// record was lost, e.g. with a corrupt database).
    pub recorded: bool,
    /// For a tree a live supervisor holds: whether `undertaker kill` can ask it (its
    /// control socket is there). `None` for any other tree.
    pub supervisor_reachable: Option<bool>,
    /// The undertaker process the host's launch made (`$!` when the host started
    /// undertaker itself); the guardian is its child. The fields below are null for
    /// trees recorded before undertaker recorded them.
    pub pid: Option<i32>,
    /// The host: the process that started the tree, behind any launcher.
    pub host_pid: Option<i32>,
    pub host_starttime: Option<u64>,
    pub host_name: Option<String>,
    pub host_found_by: Option<HostEvidence>,
    /// The host's own child on the way to undertaker (undertaker, or a launcher).
    pub host_child_pid: Option<i32>,
    /// CMD and its arguments.
    pub command: Option<Vec<String>>,
}

impl PsRow {
    /// The row of a recorded tree: what is stored, with what was found alive now.
    #[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
    pub(crate) fn recorded(
        r: &TreeRecord,
        state: TreeState,
        guardian_alive: bool,
        live_processes: usize,
        now_ms: i64,
    ) -> Self {
        PsRow {
            id: r.id.clone(),
            label: r.label.clone(),
            tier: Some(r.tier),
            state,
            guardian_pid: Some(r.guardian.pid),
            guardian_alive,
            owner_kind: Some(r.owner.kind),
            owner_pid: r.owner.pid,
            root_pid: r.root.as_ref().map(|x| x.pid),
            live_processes,
            created_ms: Some(r.created_ms),
            age_ms: Some(now_ms - r.created_ms),
            exit_status: r.exit_status,
            recorded: true,
            ..PsRow::unrecorded(r.id.clone(), state, guardian_alive, live_processes)
        }
        .with_start(r)
    }

    /// The row of a tree known only from its lock file and marked processes.
    #[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
    pub(crate) fn unrecorded(
        id: String,
        state: TreeState,
        guardian_alive: bool,
        live_processes: usize,
    ) -> Self {
        PsRow {
            id,
            label: None,
            tier: None,
            state,
            guardian_pid: None,
            guardian_alive,
            owner_kind: None,
            owner_pid: None,
            root_pid: None,
            live_processes,
            created_ms: None,
            age_ms: None,
            exit_status: None,
            recorded: false,
            pid: None,
            host_pid: None,
            host_starttime: None,
            host_name: None,
            host_found_by: None,
            supervisor_reachable: None,
            host_child_pid: None,
            command: None,
        }
    }

    #[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
    fn with_start(mut self, r: &TreeRecord) -> Self {
        let Some(start) = &r.start else {
            return self;
        };
        self.pid = start.pid;
        self.host_child_pid = start.host_child_pid;
        self.command = Some(start.command.clone());
        if let Some(host) = &start.host {
            self.host_pid = Some(host.pid);
            self.host_starttime = Some(host.starttime);
            self.host_name = Some(host.name.clone());
            self.host_found_by = Some(host.found_by);
        }
        self
    }
}

/// What `sweep` or `kill` did to one tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepAction {
    Swept,
    /// Dry run.
    WouldSweep,
    /// The guardian is alive and tears the tree down itself.
    LeftAlone,
    Refused,
    /// `kill` of a live guardian: it tore the tree down.
    GuardianTerminated,
    /// `kill` of a live guardian that did not finish in time.
    GuardianUnresponsive,
    /// `kill` of a tree whose live supervisor cannot be asked (no control socket
    /// here): nothing was signalled.
    SupervisorUnreachable,
    /// `kill`: the tree was already finished.
    Finished,
}

names!(SweepAction {
    Swept => "swept",
    WouldSweep => "would_sweep",
    LeftAlone => "left_alone",
    Refused => "refused",
    GuardianTerminated => "guardian_terminated",
    GuardianUnresponsive => "guardian_unresponsive",
    SupervisorUnreachable => "supervisor_unreachable",
    Finished => "finished",
});

/// What became of one process a sweep or kill looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetOutcome {
    /// Had exited before any signal of ours reached it.
    Gone,
    /// Received our SIGTERM and exited before SIGKILL was needed.
    Terminated,
    /// Received SIGKILL and is gone.
    Killed,
    /// Still alive after the kill cap (e.g. uninterruptible sleep).
    Stuck,
    /// Never signalled: it could not be proven a member.
    Refused,
    /// Dry run: would be signalled.
    WouldSignal,
}

names!(TargetOutcome {
    Gone => "gone",
    Terminated => "terminated",
    Killed => "killed",
    Stuck => "stuck",
    Refused => "refused",
    WouldSignal => "would_signal",
});

/// `kill`'s exit status when the tree's supervisor cannot be asked.
pub const SUPERVISOR_UNREACHABLE_EXIT: i32 = 3;

/// What `sweep` or `kill` did to one tree.
#[derive(Debug, Clone, Serialize)]
pub struct TreeSweep {
    pub id: String,
    pub label: Option<String>,
    pub action: SweepAction,
    pub reason: String,
    pub targets: Vec<SweepTarget>,
    /// Marked processes of the tree still alive afterwards.
    pub left_alive: usize,
}

impl TreeSweep {
    /// `kill`'s exit status: 0 when the tree is gone, 1 when something is left or the
    /// tree could not be touched, 3 when its supervisor cannot be asked (nothing was
    /// signalled: the tree lives on, held by its supervisor).
    pub fn exit_code(&self) -> i32 {
        if self.action == SweepAction::SupervisorUnreachable {
            return SUPERVISOR_UNREACHABLE_EXIT;
        }
        let failed = matches!(
            self.action,
            SweepAction::Refused | SweepAction::GuardianUnresponsive
        );
        i32::from(self.left_alive > 0 || failed)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepTarget {
    pub pid: i32,
    pub starttime: u64,
    pub outcome: TargetOutcome,
    pub proof: Option<String>,
    pub refusal_code: Option<String>,
    pub refusal: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub dry_run: bool,
    pub trees: Vec<TreeSweep>,
    /// Guarded processes of swept trees still alive: 0 means success.
    pub left_alive: usize,
    /// Why the registry could not be used, when it could not: then only what needs no
    /// registry (tree cgroups of dead guardians) was swept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_error: Option<String>,
}

impl SweepReport {
    /// The report of a sweep over `trees`: what is left alive is their sum.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn of(dry_run: bool, trees: Vec<TreeSweep>) -> Self {
        let left_alive = trees.iter().map(|t| t.left_alive).sum();
        SweepReport {
            dry_run,
            trees,
            left_alive,
            registry_error: None,
        }
    }

    /// `sweep`'s exit status: 0 when no guarded process is left alive and the
    /// registry could be read (without it, trees only it knows were not looked at).
    pub fn exit_code(&self) -> i32 {
        i32::from(self.left_alive > 0 || self.registry_error.is_some())
    }
}

/// One probed mechanism. `name` values are stable (docs/CLI-JSON-doctor.md).
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Whether a tier can guard a tree here.
#[derive(Debug, Clone, Serialize)]
pub struct TierCheck {
    pub tier: Tier,
    pub available: bool,
    pub detail: String,
}

/// Whether the state directory and its registry can be used.
#[derive(Debug, Clone, Serialize)]
pub struct StateDirCheck {
    /// The directory, or `(none)` when none could be resolved.
    pub path: String,
    pub ok: bool,
    pub detail: String,
}

impl StateDirCheck {
    /// `doctor`'s verdict on the state directory `state_dir` resolves to, from the
    /// unfinished trees its registry lists (or why it could not be read).
    #[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
    pub(crate) fn of(
        state_dir: Option<&std::path::Path>,
        unfinished: Result<Vec<TreeRecord>, RegistryError>,
    ) -> Self {
        let path = crate::registry::state_dir::resolve(state_dir)
            .map(|(p, _)| p.display().to_string())
            .unwrap_or_else(|_| "(none)".into());
        match unfinished {
            Ok(trees) => StateDirCheck {
                path,
                ok: true,
                detail: format!("registry ok, {} unfinished tree(s)", trees.len()),
            },
            Err(e) => StateDirCheck {
                path,
                ok: false,
                detail: e.to_string(),
            },
        }
    }
}

/// Where the cgroup tier puts tree cgroups here, and why (docs/TIERS.md, "Placement").
#[derive(Debug, Clone, Serialize)]
pub struct CgroupPlacement {
    /// The directory tree cgroups are created in; `None` when the tier has no place.
    pub path: Option<String>,
    /// `asked`, `delegated`, `own` or `hierarchy_root`; `None` with no place.
    pub kind: Option<&'static str>,
    /// Why there, or why nowhere (one line).
    pub reason: String,
}

/// What `undertaker doctor` found.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub kernel: String,
    pub checks: Vec<Check>,
    pub tiers: Vec<TierCheck>,
    /// What `--tier auto` picks.
    pub auto: Tier,
    pub cgroup_placement: CgroupPlacement,
    pub state_dir: StateDirCheck,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_serialized_strings() {
        for a in [
            SweepAction::Swept,
            SweepAction::WouldSweep,
            SweepAction::LeftAlone,
            SweepAction::Refused,
            SweepAction::GuardianTerminated,
            SweepAction::GuardianUnresponsive,
            SweepAction::SupervisorUnreachable,
            SweepAction::Finished,
        ] {
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
        }
        for o in [
            TargetOutcome::Gone,
            TargetOutcome::Terminated,
            TargetOutcome::Killed,
            TargetOutcome::Stuck,
            TargetOutcome::Refused,
            TargetOutcome::WouldSignal,
        ] {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        for s in [
            TreeState::Running,
            TreeState::Orphaned,
            TreeState::Reaping,
            TreeState::Finished,
            TreeState::Released,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn derived_state_orphans_trees_whose_guardian_or_owner_is_gone() {
        use StoredState::*;
        assert_eq!(
            TreeState::derive(Running, true, Some(true), 3),
            TreeState::Running
        );
        assert_eq!(
            TreeState::derive(Running, false, Some(true), 3),
            TreeState::Orphaned
        );
        assert_eq!(
            TreeState::derive(Running, true, Some(false), 3),
            TreeState::Orphaned
        );
        assert_eq!(
            TreeState::derive(Reaping, true, None, 1),
            TreeState::Reaping
        );
        assert_eq!(
            TreeState::derive(Finished, false, None, 0),
            TreeState::Finished
        );
        // Finished but marked processes are left and nobody tears them down.
        assert_eq!(
            TreeState::derive(Finished, false, None, 2),
            TreeState::Orphaned
        );
        assert_eq!(
            TreeState::derive(Finished, true, None, 2),
            TreeState::Finished
        );
    }

    #[test]
    fn kill_and_sweep_exit_codes() {
        let t = |action, left_alive| TreeSweep {
            id: String::new(),
            label: None,
            action,
            reason: String::new(),
            targets: vec![],
            left_alive,
        };
        assert_eq!(t(SweepAction::Swept, 0).exit_code(), 0);
        assert_eq!(t(SweepAction::Swept, 1).exit_code(), 1);
        assert_eq!(t(SweepAction::Refused, 0).exit_code(), 1);
        assert_eq!(t(SweepAction::GuardianUnresponsive, 0).exit_code(), 1);
        assert_eq!(t(SweepAction::GuardianTerminated, 0).exit_code(), 0);
        assert_eq!(t(SweepAction::SupervisorUnreachable, 0).exit_code(), 3);
        assert_eq!(t(SweepAction::SupervisorUnreachable, 2).exit_code(), 3);
    }
}
