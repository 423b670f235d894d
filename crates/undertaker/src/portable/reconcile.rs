//! `ps`, `sweep` and `kill` of portable-tier trees, over any backend (macOS; its
//! logic tested on Linux over /proc and pidfds): the registry as every platform reads
//! it ([`Context`]), a tree's members from its member record through the core, and
//! the guardian asked to stop with a proven SIGTERM (docs/TIERS.md, "portable").
//!
//! A guardian is alive exactly while its record file is locked. A dead guardian's
//! tree is seeded from its member record (a serial is never reused, so a stale line
//! names nothing), grown by lineage and the marker, and torn down with the freeze
//! round ([`tracking::sweep_recorded`]).

use super::teardown::Report;
use super::tracking::{self, Tracking};
use super::Delivery;
use super::{Member, ProcessTable, Signal, Waker, Why};
use crate::escalation::KILL_CAP;
use crate::history::{self, Context};
use crate::identity::TreeId;
use crate::registry::{now_ms, AuditEntry, OwnerRecord, RegistryError, StoredState, TreeRecord};
use crate::report::{
    PsRow, SweepAction, SweepReport, SweepTarget, TargetOutcome, TreeState, TreeSweep,
};
use crate::selector::TreeSelector;
use crate::Error;
use std::collections::BTreeMap;
use std::time::Duration;

/// Who reconciles, and with what: the opened state directory, our uid and pid, the
/// pids we never signal (our parent), and how to make a backend (one per tree, so
/// each teardown has its own waker).
pub(crate) struct Reconcile<'a, F> {
    pub ctx: &'a Context,
    pub uid: u32,
    pub me: i32,
    pub protect: Vec<i32>,
    pub backend: F,
}

impl<T, F> Reconcile<'_, F>
where
    T: ProcessTable + Waker,
    F: FnMut() -> std::io::Result<T>,
{
    fn os(&mut self) -> Result<T, Error> {
        (self.backend)().map_err(|e| {
            Error::Registry(RegistryError::Io {
                path: self.ctx.dir.trees_dir(),
                msg: format!("the process table: {e}"),
            })
        })
    }

    /// Tree `r`'s scope as we judge it: markers count from its guardian's start.
    fn scope(&self, os: &mut T, r: &TreeRecord) -> Option<super::lineage::Scope> {
        let id = TreeId::parse(&r.id)?;
        let not_before = Some(r.guardian.starttime);
        Some(tracking::scope(
            os,
            &id,
            self.uid,
            self.me,
            &self.protect,
            not_before,
        ))
    }

    /// The recorded members of `r` still alive (no scan: `ps` stays cheap).
    fn live_members(&mut self, r: &TreeRecord) -> Result<usize, Error> {
        let mut os = self.os()?;
        let (Some(scope), Some(id)) = (self.scope(&mut os, r), TreeId::parse(&r.id)) else {
            return Ok(0);
        };
        let record = tracking::members_path_in(&self.ctx.dir.trees_dir(), &id);
        Ok(Tracking::of_record(os, scope, Some(record)).live())
    }

    pub(crate) fn ps(&mut self, all: bool) -> Result<Vec<PsRow>, Error> {
        let now = now_ms();
        let mut out = Vec::new();
        for r in self.ctx.trees()? {
            if r.state == StoredState::Finished && !all {
                continue;
            }
            let guardian_alive = !r.state.is_closed() && self.ctx.guardian_alive(&r.id);
            let live = if r.state == StoredState::Released {
                0
            } else {
                self.live_members(&r)?
            };
            let owner = owner_alive(&mut self.os()?, &r.owner);
            let state = TreeState::derive(r.state, guardian_alive, owner, live);
            out.push(PsRow::recorded(&r, state, guardian_alive, live, now));
        }
        Ok(out)
    }

    /// Tears down the trees whose guardian died and closes their records.
    pub(crate) fn sweep(&mut self, dry_run: bool, grace: Duration) -> Result<SweepReport, Error> {
        let mut trees = Vec::new();
        for r in self.ctx.trees()? {
            if r.state.is_closed() || self.ctx.guardian_alive(&r.id) {
                continue;
            }
            trees.push(self.sweep_tree(&r, dry_run, grace, "sweep")?);
        }
        Ok(SweepReport::of(dry_run, trees))
    }

    /// A sentinel's takeover after its guardian died: tree `id` swept as `sweep`
    /// would, unless its record is closed (the guardian finished) or its lock still
    /// held (then it lives). `None`: nothing to do.
    pub(crate) fn take_over(
        &mut self,
        id: &str,
        grace: Duration,
    ) -> Result<Option<TreeSweep>, Error> {
        let Some(r) = self.ctx.trees()?.into_iter().find(|r| r.id == id) else {
            return Ok(None);
        };
        if r.state.is_closed() || self.ctx.guardian_alive(id) {
            return Ok(None);
        }
        self.sweep_tree(&r, false, grace, "sentinel").map(Some)
    }

    /// A dead guardian's tree: its recorded members, lineage and marker, torn down
    /// with the freeze round (dry run: counted), then its record closed.
    fn sweep_tree(
        &mut self,
        r: &TreeRecord,
        dry_run: bool,
        grace: Duration,
        actor: &str,
    ) -> Result<TreeSweep, Error> {
        let mut os = self.os()?;
        let (Some(scope), Some(id)) = (self.scope(&mut os, r), TreeId::parse(&r.id)) else {
            return Ok(done(r, SweepAction::Refused, "not a tree id", 0, vec![]));
        };
        let trees = self.ctx.dir.trees_dir();
        if dry_run {
            let live = self.live_members(r)?;
            let reason = format!("its guardian is dead: {live} recorded member(s) alive");
            return Ok(done(r, SweepAction::WouldSweep, &reason, live, vec![]));
        }
        let report = tracking::sweep_recorded(os, scope, &trees, &id, grace);
        let reason = format!(
            "its guardian is dead: {} member(s) from the member record, lineage and marker SIGKILLed ({} signals delivered, {} freeze rounds, {} stuck)",
            report.killed(),
            report.delivered.len(),
            report.freeze_rounds,
            report.stuck.len()
        );
        self.ctx.registry.append_audit(&AuditEntry {
            time_ms: now_ms(),
            tree: Some(r.id.clone()),
            actor: actor.into(),
            event: "note".into(),
            message: Some(reason.clone()),
            ..Default::default()
        })?;
        if report.stuck.is_empty() {
            self.ctx.registry.set_finished(&r.id, None)?;
        }
        let left = report.stuck.len();
        Ok(done(r, SweepAction::Swept, &reason, left, targets(&report)))
    }

    /// `undertaker kill`: a live guardian is sent SIGTERM (proven by its recorded
    /// start, delivered by serial) and awaited; one that does not finish in time is
    /// sent SIGKILL and its tree swept from the member record. A dead guardian's
    /// tree is swept.
    pub(crate) fn kill(&mut self, selector: &str, grace: Duration) -> Result<TreeSweep, Error> {
        let (id, rec) =
            history::resolve_tree(&self.ctx.history(), &TreeSelector::parse(selector)?)?;
        let Some(r) = rec else {
            let reason = "not a recorded tree";
            return Ok(TreeSweep {
                id,
                label: None,
                action: SweepAction::LeftAlone,
                reason: reason.into(),
                targets: vec![],
                left_alive: 0,
            });
        };
        if r.state.is_closed() {
            let reason = "the tree is already finished";
            return Ok(done(&r, SweepAction::Finished, reason, 0, vec![]));
        }
        if !self.ctx.guardian_alive(&id) {
            return self.sweep_tree(&r, false, grace, "kill");
        }
        if r.guardian.supervisor {
            let reason = "its supervisor cannot be asked on this platform";
            return Ok(done(
                &r,
                SweepAction::SupervisorUnreachable,
                reason,
                0,
                vec![],
            ));
        }
        let mut os = self.os()?;
        let guardian = os
            .facts(r.guardian.pid)
            .filter(|f| f.start == r.guardian.starttime)
            .map(|f| Member {
                pid: f.pid,
                serial: f.serial,
                start: f.start,
                why: Why::Seed,
            });
        let Some(guardian) = guardian else {
            self.audit(
                &r,
                "refusal",
                "the recorded guardian could not be proven (pid and start time)",
            )?;
            let reason = "the guardian could not be proven";
            return Ok(done(&r, SweepAction::Refused, reason, 0, vec![]));
        };
        os.watch(&guardian);
        if os.deliver(&guardian, Signal::Term) == Delivery::Delivered {
            self.audit(
                &r,
                "signal",
                "SIGTERM to the guardian: it tears the tree down",
            )?;
            if self.await_guardian(
                &mut os,
                &guardian,
                &id,
                grace + KILL_CAP + Duration::from_secs(1),
            ) {
                let reason = "the guardian tore the tree down";
                return Ok(done(&r, SweepAction::GuardianTerminated, reason, 0, vec![]));
            }
        }
        let killed = os.deliver(&guardian, Signal::Kill) == Delivery::Delivered;
        self.audit(
            &r,
            "signal",
            if killed {
                "the guardian did not finish in time: SIGKILL, then its tree swept"
            } else {
                "the guardian is gone: its tree swept"
            },
        )?;
        if !self.await_guardian(&mut os, &guardian, &id, KILL_CAP) {
            let reason = "the guardian could not be stopped";
            return Ok(done(
                &r,
                SweepAction::GuardianUnresponsive,
                reason,
                0,
                vec![],
            ));
        }
        let mut swept = self.sweep_tree(&r, false, grace, "kill")?;
        swept.action = SweepAction::GuardianTerminated;
        Ok(swept)
    }

    /// Waits up to `limit` for the guardian to exit or close the tree's record.
    fn await_guardian(&self, os: &mut T, guardian: &Member, id: &str, limit: Duration) -> bool {
        let end = os.now() + limit;
        loop {
            let gone = os
                .facts(guardian.pid)
                .is_none_or(|f| f.serial != guardian.serial);
            if gone || !self.ctx.guardian_alive(id) {
                return true;
            }
            let now = os.now();
            if now >= end {
                return false;
            }
            os.wait(end.min(now + Duration::from_millis(50)));
        }
    }

    fn audit(&self, r: &TreeRecord, event: &str, message: &str) -> Result<(), Error> {
        Ok(self.ctx.registry.append_audit(&AuditEntry {
            time_ms: now_ms(),
            tree: Some(r.id.clone()),
            actor: "kill".into(),
            event: event.into(),
            pid: Some(r.guardian.pid),
            starttime: Some(r.guardian.starttime),
            message: Some(message.into()),
            ..Default::default()
        })?)
    }
}

/// Whether the recorded owner still runs: the same pid with the same start.
fn owner_alive(os: &mut impl ProcessTable, owner: &OwnerRecord) -> Option<bool> {
    let (pid, started) = (owner.pid?, owner.starttime?);
    Some(os.facts(pid).is_some_and(|f| f.start == started))
}

/// What the teardown did to each member, as `sweep` and `kill` report it.
fn targets(report: &Report) -> Vec<SweepTarget> {
    let mut by_serial: BTreeMap<u64, SweepTarget> = BTreeMap::new();
    for (m, signal) in &report.delivered {
        let outcome = match signal {
            Signal::Kill => TargetOutcome::Killed,
            _ => TargetOutcome::Terminated,
        };
        let t = by_serial.entry(m.serial).or_insert(SweepTarget {
            pid: m.pid,
            starttime: m.start,
            outcome,
            proof: Some(format!("{:?}", m.why).to_lowercase()),
            refusal_code: None,
            refusal: None,
        });
        if *signal == Signal::Kill {
            t.outcome = TargetOutcome::Killed;
        }
    }
    for m in &report.stuck {
        if let Some(t) = by_serial.get_mut(&m.serial) {
            t.outcome = TargetOutcome::Stuck;
        }
    }
    by_serial.into_values().collect()
}

fn done(
    r: &TreeRecord,
    action: SweepAction,
    reason: &str,
    left_alive: usize,
    targets: Vec<SweepTarget>,
) -> TreeSweep {
    TreeSweep {
        id: r.id.clone(),
        label: r.label.clone(),
        action,
        reason: reason.into(),
        targets,
        left_alive,
    }
}
