//! Escalation: TERM the tree, wait up to the grace period, re-prove, KILL, wait up to
//! a cap. Waiting is event-driven (the source decides how: SIGCHLD, pidfds, cgroup
//! events); nothing here sleeps on a timer to find out whether something died.

use crate::identity::Identity;
use crate::ladder::Refusal;
use crate::linux::proof::signal::{Delivery, Members, Proof, ProvenProcess, Signaller};
use rustix::process::Signal;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Final state of one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Exited before SIGKILL was needed.
    Gone,
    /// Received SIGKILL and is gone.
    Killed,
    /// Still alive after the kill cap (e.g. uninterruptible sleep).
    Stuck,
    /// Never signalled: it could not be proven a member.
    Refused,
}

/// Something the teardown did, for the audit log.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    Signal {
        target: Identity,
        signal: &'static str,
        proof: Proof,
        delivery: Delivery,
    },
    Refusal {
        pid: i32,
        refusal: Refusal,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    pub pid: i32,
    pub starttime: u64,
    pub outcome: Outcome,
    pub proof: Option<Proof>,
    pub refusal: Option<Refusal>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TeardownReport {
    pub targets: Vec<TargetReport>,
    /// True when the source reported the tree empty at the end.
    pub empty: bool,
}

impl TeardownReport {
    pub fn count(&self, outcome: Outcome) -> usize {
        self.targets.iter().filter(|t| t.outcome == outcome).count()
    }
}

/// Where a tree's members come from and how to wait for them to change.
pub trait TreeSource {
    /// Every live member, each proven afresh; refusals are returned beside them.
    fn members(&mut self, signaller: &Signaller) -> Members;
    /// Blocks until a member may have exited, or `deadline`.
    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]);
    /// True when no member is left.
    fn is_empty(&mut self) -> bool;
    /// A kernel-side kill of the whole tree (cgroup.kill). `false` if unsupported.
    fn kill_all(&mut self) -> bool {
        false
    }
    /// One cheap, kernel-scoped SIGTERM before the member walk (e.g. the root's
    /// process group through its pidfd), so the tree starts dying while members are
    /// still being proven. Every signal still goes through the signaller. Returns the
    /// process group that received SIGTERM, if any: its members get no second SIGTERM
    /// (many programs read a second one as "quit now, skip the cleanup").
    fn first_strike(
        &mut self,
        _signaller: &Signaller,
        _audit: &mut dyn FnMut(AuditEvent),
    ) -> Option<i32> {
        None
    }
    /// True when members may exist that the last `members()` call did not look for
    /// (a source that skips an expensive scan while a cheaper view covers the tree):
    /// the grace period then runs another SIGTERM round.
    fn needs_rescan(&mut self) -> bool {
        false
    }
    /// Whether `wait` needs the members' pidfds. A source whose emptiness changes
    /// only on events it watches itself (SIGCHLD, cgroup.events) says `false`: the
    /// watch list costs one poll per live member per wake-up, O(n²) over a teardown.
    fn watches_members(&self) -> bool {
        true
    }
}

fn live<'a>(
    source: &dyn TreeSource,
    tracked: &'a BTreeMap<(i32, u64), Tracked>,
) -> Vec<&'a ProvenProcess> {
    if !source.watches_members() {
        return Vec::new();
    }
    tracked
        .values()
        .filter(|t| !t.proc.has_exited())
        .map(|t| &t.proc)
        .collect()
}

/// How long SIGKILLed members may take to disappear before they count as stuck.
pub const KILL_CAP: Duration = Duration::from_secs(5);

pub struct Escalation {
    pub grace: Duration,
    pub kill_cap: Duration,
}

impl Escalation {
    /// `grace` between SIGTERM and SIGKILL, then the standard [`KILL_CAP`].
    pub fn with_grace(grace: Duration) -> Self {
        Self {
            grace,
            kill_cap: KILL_CAP,
        }
    }
}

/// Which round of the escalation is running.
#[derive(Clone, Copy)]
enum Phase {
    /// SIGTERM to members not yet signalled, except those of the group the first
    /// strike already reached.
    Term { struck_group: Option<i32> },
    /// SIGKILL to every member still there.
    Kill,
}

struct Tracked {
    proc: ProvenProcess,
    killed: bool,
}

/// Longest gap between rescans while killing: a member forked just before its parent
/// died has no event of its own to wake us.
const MAX_RESCAN: Duration = Duration::from_millis(100);

impl Escalation {
    pub fn run(
        &self,
        signaller: &Signaller,
        source: &mut dyn TreeSource,
        audit: &mut dyn FnMut(AuditEvent),
    ) -> TeardownReport {
        // Nothing left (the usual end: CMD exited alone): skip the member walk, whose
        // /proc scan costs O(processes on the machine), not O(tree).
        if source.is_empty() {
            return TeardownReport {
                targets: Vec::new(),
                empty: true,
            };
        }
        let mut tracked: BTreeMap<(i32, u64), Tracked> = BTreeMap::new();
        let mut refused: BTreeMap<i32, Refusal> = BTreeMap::new();

        // Round 1: SIGTERM (and SIGCONT to stopped members so they can act on it).
        let term = Phase::Term {
            struck_group: source.first_strike(signaller, audit),
        };
        self.round(signaller, source, &mut tracked, &mut refused, audit, term);
        let grace_end = Instant::now() + self.grace;
        while !source.is_empty() && Instant::now() < grace_end {
            if source.needs_rescan() {
                self.round(signaller, source, &mut tracked, &mut refused, audit, term);
            }
            let watch = live(source, &tracked);
            source.wait(grace_end, &watch);
        }

        // Round 2..n: re-prove everything still there and SIGKILL it, until empty or cap.
        if !source.is_empty() {
            let cap_end = Instant::now() + self.kill_cap;
            // Members already gone before the kernel-side kill went out count as
            // `gone`, not `killed`.
            let exited_before: Vec<(i32, u64)> = tracked
                .iter()
                .filter(|(_, t)| t.proc.has_exited())
                .map(|(k, _)| *k)
                .collect();
            let kernel_kill = source.kill_all();
            let mut pause = Duration::from_millis(1);
            loop {
                self.round(
                    signaller,
                    source,
                    &mut tracked,
                    &mut refused,
                    audit,
                    Phase::Kill,
                );
                if kernel_kill {
                    for (key, t) in tracked.iter_mut() {
                        if !exited_before.contains(key) {
                            t.killed = true;
                        }
                    }
                }
                if source.is_empty() || Instant::now() >= cap_end {
                    break;
                }
                let until = (Instant::now() + pause).min(cap_end);
                let watch = live(source, &tracked);
                source.wait(until, &watch);
                pause = (pause * 2).min(MAX_RESCAN);
                if source.is_empty() {
                    break;
                }
            }
        }

        let empty = source.is_empty();
        let mut targets: Vec<TargetReport> = tracked
            .into_values()
            .map(|t| {
                let outcome = if !t.proc.has_exited() {
                    Outcome::Stuck
                } else if t.killed {
                    Outcome::Killed
                } else {
                    Outcome::Gone
                };
                TargetReport {
                    pid: t.proc.pid(),
                    starttime: t.proc.identity.starttime,
                    outcome,
                    proof: Some(t.proc.proof.clone()),
                    refusal: None,
                }
            })
            .collect();
        targets.extend(refused.into_iter().map(|(pid, r)| TargetReport {
            pid,
            starttime: 0,
            outcome: Outcome::Refused,
            proof: None,
            refusal: Some(r),
        }));
        TeardownReport { targets, empty }
    }

    fn round(
        &self,
        signaller: &Signaller,
        source: &mut dyn TreeSource,
        tracked: &mut BTreeMap<(i32, u64), Tracked>,
        refused: &mut BTreeMap<i32, Refusal>,
        audit: &mut dyn FnMut(AuditEvent),
        phase: Phase,
    ) {
        let (kill, struck_group) = match phase {
            Phase::Term { struck_group } => (false, struck_group),
            Phase::Kill => (true, None),
        };
        let Members {
            proven: members,
            refused: refusals,
        } = source.members(signaller);
        for (pid, r) in refusals {
            if refused.insert(pid, r.clone()).is_none() {
                audit(AuditEvent::Refusal { pid, refusal: r });
            }
        }
        for member in members {
            let key = (member.pid(), member.identity.starttime);
            let already = tracked.get(&key).map(|t| t.killed);
            // A stopped process cannot act on SIGTERM until continued; a running one
            // needs no SIGCONT (one syscall and one audit row saved per member).
            let stopped = matches!(member.state, 'T' | 't');
            // Members of the group the first strike reached already have their SIGTERM.
            // One that joined it after the strike gets SIGKILL when the grace ends.
            let struck = struck_group == Some(member.identity.pgid);
            let signals: &[(Signal, &'static str)] = match (kill, already) {
                (false, Some(_)) => &[],
                (false, None) if struck && stopped => &[(Signal::CONT, "SIGCONT")],
                (false, None) if struck => &[],
                (false, None) if stopped => &[(Signal::TERM, "SIGTERM"), (Signal::CONT, "SIGCONT")],
                (false, None) => &[(Signal::TERM, "SIGTERM")],
                (true, Some(true)) => &[],
                (true, _) => &[(Signal::KILL, "SIGKILL")],
            };
            for &(sig, name) in signals {
                match signaller.signal(&member, sig) {
                    Ok(delivery) => audit(AuditEvent::Signal {
                        target: member.identity.clone(),
                        signal: name,
                        proof: member.proof.clone(),
                        delivery,
                    }),
                    Err(r) => {
                        audit(AuditEvent::Refusal {
                            pid: member.pid(),
                            refusal: r,
                        });
                    }
                }
            }
            match tracked.get_mut(&key) {
                Some(t) => t.killed |= kill,
                None => {
                    tracked.insert(
                        key,
                        Tracked {
                            proc: member,
                            killed: kill,
                        },
                    );
                }
            }
        }
    }
}

/// Walk of the descendants of this process, each proven as the child of a proven
/// parent. Exited processes (zombies) never prove: their pidfd is already readable,
/// and they have no children left to walk.
///
/// The parent links come from one pass over /proc (many kernels lack
/// `/proc/PID/task/TID/children`); each link is then re-proven through a pidfd.
pub fn prove_descendants(signaller: &Signaller) -> Members {
    let procfs = signaller.procfs();
    let mut children_of: HashMap<i32, Vec<i32>> = HashMap::new();
    for pid in procfs.pids().unwrap_or_default() {
        if let Ok(stat) = procfs.stat(pid) {
            children_of.entry(stat.ppid).or_default().push(pid);
        }
    }
    let mut found = Members::default();
    let me = signaller.me().pid;
    let mut frontier: Vec<Option<usize>> = vec![None];
    while let Some(parent_idx) = frontier.pop() {
        let parent_pid = parent_idx.map_or(me, |i| found.proven[i].pid());
        let Some(children) = children_of.remove(&parent_pid) else {
            continue;
        };
        for pid in children {
            let parent = parent_idx.map(|i| &found.proven[i]);
            let before = found.proven.len();
            let result = signaller.prove_child(parent, pid);
            found.add(pid, result);
            if found.proven.len() > before {
                frontier.push(Some(before));
            }
        }
    }
    found
}
