//! The portable teardown: the escalation of docs/DESIGN.md §4 without a kernel
//! container. SIGTERM to every proven member (SIGCONT to stopped ones), the grace
//! period with rescans, then a **freeze round** in place of `cgroup.kill`: SIGSTOP
//! every proven member and rescan until a scan adds nobody (a stopped process cannot
//! fork, so the set stops growing), then SIGKILL them all, then wait up to the kill
//! cap. Every signal goes through [`ProcessTable::deliver`], which refuses a process
//! that is no longer the proven serial.

use super::lineage::Lineage;
use super::snapshot::Snapshot;
use super::{Delivery, Facts, Member, ProcessTable, Serial, Signal, Waker};
use crate::escalation::{Escalation, MAX_RESCAN};
use std::collections::HashSet;
use std::time::Duration;

/// Freeze passes before the kill goes out regardless (a member that keeps being
/// replaced faster than we can stop it is killed with what was found).
const MAX_FREEZE_ROUNDS: usize = 32;

/// What a teardown did.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Every delivery that reached its member, in order.
    pub delivered: Vec<(Member, Signal)>,
    /// Freeze passes run (0 if the tree was gone within the grace).
    pub freeze_rounds: usize,
    /// Members still there after the kill cap.
    pub stuck: Vec<Member>,
}

impl Report {
    fn send(&mut self, table: &mut impl ProcessTable, member: &Member, signal: Signal) {
        if table.deliver(member, signal) == Delivery::Delivered {
            self.delivered.push((member.clone(), signal));
        }
    }

    /// The audit note a guardian or supervisor writes after the teardown.
    pub fn summary(&self) -> String {
        format!(
            "portable teardown: {} signals delivered, {} members SIGKILLed after {} freeze rounds, {} stuck",
            self.delivered.len(),
            self.killed(),
            self.freeze_rounds,
            self.stuck.len()
        )
    }

    /// Distinct members that were sent SIGKILL.
    pub fn killed(&self) -> usize {
        let set: HashSet<Serial> = self
            .delivered
            .iter()
            .filter(|(_, s)| *s == Signal::Kill)
            .map(|(m, _)| m.serial)
            .collect();
        set.len()
    }
}

/// Tears the tree down. `lineage` holds the seeds; it grows as members are found.
/// `os` is the backend: its table and its waker (one value, so the scan, the
/// signals and the waits see one world).
pub fn tear_down<O: ProcessTable + Waker>(
    lineage: &mut Lineage,
    os: &mut O,
    escalation: Escalation,
) -> Report {
    let mut reports = tear_down_together(&mut [lineage], os, escalation);
    reports.pop().unwrap_or_default()
}

/// Tears every tree of `lineages` down together: one SIGTERM round for all, one
/// grace, one freeze round, one SIGKILL round (a supervisor's end: not one grace per
/// tree). Each look is one [`Snapshot`] every lineage is scanned in. Returns one
/// report per lineage, in order; a process two lineages claim is signalled once, in
/// the first one's report.
pub fn tear_down_together<O: ProcessTable + Waker>(
    lineages: &mut [&mut Lineage],
    os: &mut O,
    escalation: Escalation,
) -> Vec<Report> {
    let mut reports = vec![Report::default(); lineages.len()];
    let grace_ends = os.now() + escalation.grace;
    if round(lineages, os, &mut reports, Signal::Term, grace_ends).is_empty() {
        return reports;
    }
    freeze(lineages, os, &mut reports);
    let cap_ends = os.now() + escalation.kill_cap;
    // Nothing new should appear in the kill round (every member is stopped), but a
    // rescan costs little and a straggler gets the same treatment.
    for (i, m, _) in round(lineages, os, &mut reports, Signal::Kill, cap_ends) {
        reports[i].stuck.push(m);
    }
    reports
}

/// One look: every lineage scanned in one snapshot (new members watched), then
/// every lineage's live members, each with the index of its lineage.
fn look<O: ProcessTable + Waker>(
    lineages: &mut [&mut Lineage],
    os: &mut O,
) -> Vec<(usize, Member, Facts)> {
    let mut found = Vec::new();
    let mut live = Vec::new();
    let mut snapshot = Snapshot::new(os);
    for lineage in lineages.iter_mut() {
        found.extend(lineage.scan(&mut snapshot));
    }
    for (i, lineage) in lineages.iter().enumerate() {
        let members = lineage.live(&mut snapshot);
        live.extend(members.into_iter().map(|(m, facts)| (i, m, facts)));
    }
    for m in &found {
        os.watch(m);
    }
    live
}

/// One round until `ends`: rescan, send `signal` once to each live member not yet
/// sent it (SIGTERM also SIGCONTs a stopped member, which could not act on it), wait
/// a little, again. Returns the members still live at `ends`; none once the trees
/// are gone.
fn round<O: ProcessTable + Waker>(
    lineages: &mut [&mut Lineage],
    os: &mut O,
    reports: &mut [Report],
    signal: Signal,
    ends: Duration,
) -> Vec<(usize, Member, Facts)> {
    let mut sent: HashSet<Serial> = HashSet::new();
    loop {
        let live = look(lineages, os);
        if live.is_empty() {
            return live;
        }
        for (i, m, facts) in &live {
            if sent.insert(m.serial) {
                reports[*i].send(os, m, signal);
                if signal == Signal::Term && facts.stopped {
                    reports[*i].send(os, m, Signal::Cont);
                }
            }
        }
        let now = os.now();
        if now >= ends {
            return live;
        }
        os.wait(ends.min(now + MAX_RESCAN));
    }
}

/// SIGSTOP every live member, rescan, repeat until a pass stops nobody new.
fn freeze<O: ProcessTable + Waker>(
    lineages: &mut [&mut Lineage],
    os: &mut O,
    reports: &mut [Report],
) {
    let mut frozen: HashSet<Serial> = HashSet::new();
    let mut rounds = 0;
    while rounds < MAX_FREEZE_ROUNDS {
        rounds += 1;
        let mut stopped_now = 0;
        for (i, m, _) in look(lineages, os) {
            if frozen.insert(m.serial) {
                reports[i].send(os, &m, Signal::Stop);
                stopped_now += 1;
            }
        }
        if stopped_now == 0 {
            break;
        }
        // Let a fork that was under way when the stop arrived finish, so its child
        // shows up in the next pass.
        let now = os.now();
        os.wait(now + Duration::from_millis(1));
    }
    for report in reports {
        report.freeze_rounds = rounds;
    }
}
