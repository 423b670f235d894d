//! Escalation: TERM the tree, wait up to the grace period, re-prove, KILL, wait up to
//! a cap. Waiting is event-driven (the source decides how: SIGCHLD, pidfds, cgroup
//! events); nothing here sleeps on a timer to find out whether something died.

pub(crate) use crate::audit::AuditEvent;
use crate::escalation::{signals_for, MemberState, Phase, MAX_RESCAN};
pub(crate) use crate::escalation::{Escalation, Outcome, KILL_CAP};

/// A grace period at least this long is announced at `info` when a teardown starts
/// waiting it out.
const LONG_GRACE: Duration = Duration::from_secs(1);
use crate::ladder::Refusal;
use crate::linux::proof::signal::{Members, Proof, ProvenProcess, Signaller};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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
    /// True once whoever is waiting for this teardown has stopped waiting (a host
    /// SIGKILLed the process it started): the rest of the grace period is skipped.
    fn out_of_patience(&mut self) -> bool {
        false
    }
}

/// Members tracked over one teardown, by (pid, starttime).
struct Tracked {
    proc: ProvenProcess,
    killed: bool,
}

/// One escalation in progress.
struct Running<'a> {
    signaller: &'a Signaller,
    source: &'a mut dyn TreeSource,
    audit: &'a mut dyn FnMut(AuditEvent),
    tracked: BTreeMap<(i32, u64), Tracked>,
    refused: BTreeMap<i32, Refusal>,
    /// The source saw no member at its last look, though a signalled member had not
    /// finished exiting: waits then watch the lingering members' pidfds.
    lingering: bool,
}

impl Escalation {
    /// Tears down the tree `source` reports, proving every member before each signal.
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
        let mut running = Running {
            signaller,
            source,
            audit,
            tracked: BTreeMap::new(),
            refused: BTreeMap::new(),
            lingering: false,
        };
        running.term_phase(self.grace);
        if !running.is_empty() {
            running.kill_phase(self.grace, self.kill_cap);
        }
        running.report()
    }
}

impl Running<'_> {
    /// Round 1: SIGTERM (and SIGCONT to stopped members so they can act on it), then
    /// wait up to the grace period, with another round for members a cheap view missed.
    fn term_phase(&mut self, grace: Duration) {
        let term = Phase::Term {
            struck_group: self.source.first_strike(self.signaller, self.audit),
        };
        self.round(term);
        let grace_end = Instant::now() + grace;
        // A long wait is said once, where a person watching the log would wonder.
        if grace >= LONG_GRACE && !self.is_empty() {
            tracing::info!(
                "waiting up to {} ms for {} process(es) to exit after SIGTERM",
                grace.as_millis(),
                self.live()
            );
        }
        while !self.is_empty() && Instant::now() < grace_end && !self.source.out_of_patience() {
            if self.source.needs_rescan() {
                self.round(term);
            }
            self.wait(grace_end);
        }
    }

    /// Rounds 2..n: re-prove everything still there and SIGKILL it, until the tree is
    /// empty or the cap has passed.
    fn kill_phase(&mut self, grace: Duration, cap: Duration) {
        let cap_end = Instant::now() + cap;
        // Members already gone before the kernel-side kill went out count as `gone`,
        // not `killed`.
        let exited_before: Vec<(i32, u64)> = (self.tracked.iter())
            .filter(|(_, t)| t.proc.has_exited())
            .map(|(k, _)| *k)
            .collect();
        // Counted before the kill, which may empty the tree at once.
        let left = self.live();
        let kernel_kill = self.source.kill_all();
        tracing::info!(
            "grace period of {} ms over with {} process(es) left: {}",
            grace.as_millis(),
            left,
            match kernel_kill {
                true => "cgroup.kill, then SIGKILL to each proven member left",
                false => "SIGKILL to each proven member",
            }
        );
        let mut pause = Duration::from_millis(1);
        loop {
            self.round(Phase::Kill);
            if kernel_kill {
                for (key, t) in self.tracked.iter_mut() {
                    t.killed |= !exited_before.contains(key);
                }
            }
            if self.is_empty() || Instant::now() >= cap_end {
                break;
            }
            self.wait((Instant::now() + pause).min(cap_end));
            pause = (pause * 2).min(MAX_RESCAN);
            if self.is_empty() {
                break;
            }
        }
    }

    /// Nothing of the tree is left: the source sees no member, and every member
    /// signalled so far has exited. A process that has released its memory on its way
    /// out no longer shows its marker (its environment reads empty), yet its pidfd
    /// does not read as exited until it has finished: it is waited for, not reported
    /// stuck.
    fn is_empty(&mut self) -> bool {
        if !self.source.is_empty() {
            self.lingering = false;
            return false;
        }
        self.lingering = self.tracked.values().any(|t| !t.proc.has_exited());
        !self.lingering
    }

    /// Members signalled and not yet seen to exit.
    fn live(&self) -> usize {
        self.tracked
            .values()
            .filter(|t| !t.proc.has_exited())
            .count()
    }

    /// Lets the source wait, watching the live members' pidfds if it wants them (or
    /// if they are all that is left).
    fn wait(&mut self, until: Instant) {
        let watch: Vec<&ProvenProcess> = match self.source.watches_members() || self.lingering {
            false => Vec::new(),
            true => (self.tracked.values())
                .filter(|t| !t.proc.has_exited())
                .map(|t| &t.proc)
                .collect(),
        };
        self.source.wait(until, &watch);
    }

    /// One look at the tree: every member proven afresh and sent what `phase` says.
    fn round(&mut self, phase: Phase) {
        let Members { proven, refused } = self.source.members(self.signaller);
        for (pid, r) in refused {
            if self.refused.insert(pid, r.clone()).is_none() {
                (self.audit)(AuditEvent::Refusal { pid, refusal: r });
            }
        }
        let kill = phase == Phase::Kill;
        for member in proven {
            let key = (member.pid(), member.identity.starttime);
            let state = MemberState {
                seen: self.tracked.get(&key).map(|t| t.killed),
                stopped: matches!(member.state, 'T' | 't'),
                pgid: member.identity.pgid,
            };
            for &sig in signals_for(phase, state) {
                let event = match self.signaller.signal(&member, sig.into()) {
                    Ok(delivery) => AuditEvent::Signal {
                        target: member.identity.clone(),
                        signal: sig,
                        proof: member.proof.clone(),
                        delivery,
                    },
                    Err(refusal) => AuditEvent::Refusal {
                        pid: member.pid(),
                        refusal,
                    },
                };
                (self.audit)(event);
            }
            let entry = self.tracked.entry(key).or_insert(Tracked {
                proc: member,
                killed: false,
            });
            entry.killed |= kill;
        }
    }

    fn report(mut self) -> TeardownReport {
        let empty = self.is_empty();
        let members = self.tracked.into_values().map(|t| TargetReport {
            pid: t.proc.pid(),
            starttime: t.proc.identity.starttime,
            outcome: Outcome::of_member(t.proc.has_exited(), t.killed),
            proof: Some(t.proc.proof.clone()),
            refusal: None,
        });
        let refused = self.refused.into_iter().map(|(pid, r)| TargetReport {
            pid,
            starttime: 0,
            outcome: Outcome::Refused,
            proof: None,
            refusal: Some(r),
        });
        TeardownReport {
            targets: members.chain(refused).collect(),
            empty,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The escalation engine against a fake tree source whose members are real
    //! children of this test (mocks only for the source; signals are real).
    use super::*;
    use crate::escalation::Sig;
    use crate::linux::kernel::poll::poll_until;
    use crate::linux::kernel::procfs::Procfs;
    use rustix::event::{PollFd, PollFlags};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};

    /// What the source and the audit saw, in order.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Members,
        Wait,
        Kill,
    }

    type Log = std::rc::Rc<std::cell::RefCell<Vec<Seen>>>;

    /// A tree made of this test's own children. Only unreaped children are offered for
    /// proof, so their numbers are still their own.
    struct Children {
        kids: Vec<Child>,
        log: Log,
        /// Ask for a SIGTERM round at every wake-up (a policy that sent a second
        /// SIGTERM would show it).
        rescan: bool,
        /// Never admit to being empty (to run the escalation into its cap).
        lie_not_empty: bool,
        /// Offer members to the first look only, and be empty from then on, as a
        /// marker scan is for a member that released its memory on its way out.
        first_look_only: bool,
        looks: usize,
    }

    impl Children {
        fn reap(&mut self) -> Vec<i32> {
            let mut alive = Vec::new();
            for kid in &mut self.kids {
                if kid.try_wait().ok().flatten().is_none() {
                    alive.push(kid.id() as i32);
                }
            }
            alive
        }
    }

    impl TreeSource for Children {
        fn members(&mut self, signaller: &Signaller) -> Members {
            self.log.borrow_mut().push(Seen::Members);
            self.looks += 1;
            if self.first_look_only && self.looks > 1 {
                return Members::default();
            }
            let alive = self.reap();
            Members::collect(alive, |pid| signaller.prove_child(None, pid))
        }

        fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
            self.log.borrow_mut().push(Seen::Wait);
            let until = deadline.min(Instant::now() + Duration::from_millis(20));
            let fds: Vec<_> = watch.iter().map(|p| p.pidfd()).collect();
            let mut polls: Vec<_> = fds
                .iter()
                .map(|fd| PollFd::new(fd, PollFlags::IN))
                .collect();
            poll_until(&mut polls, Some(until));
        }

        fn is_empty(&mut self) -> bool {
            let lost = self.first_look_only && self.looks > 0;
            (lost || self.reap().is_empty()) && !self.lie_not_empty
        }

        fn needs_rescan(&mut self) -> bool {
            self.rescan
        }
    }

    impl Drop for Children {
        fn drop(&mut self) {
            for kid in &mut self.kids {
                let _ = kid.kill();
                let _ = kid.wait();
            }
        }
    }

    fn spawn(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Starts a child that ignores SIGTERM, and waits (setup, not a verdict) until
    /// its disposition is in place. The caller reaps it (`Children` waits on drop).
    #[allow(clippy::zombie_processes)]
    fn spawn_term_ignorer() -> Child {
        let mut kid = spawn("trap '' TERM; exec sleep 60");
        let status = format!("/proc/{}/status", kid.id());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ignored = std::fs::read_to_string(&status)
                .ok()
                .and_then(|t| {
                    let line = t.lines().find(|l| l.starts_with("SigIgn:"))?.to_owned();
                    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
                })
                .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0);
            if ignored {
                return kid;
            }
            if Instant::now() >= deadline {
                let _ = kid.kill();
                let _ = kid.wait();
                panic!("the ignorer never set up");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn signals_to(events: &[AuditEvent], pid: i32, name: &str) -> usize {
        let sent = |e: &&AuditEvent| matches!(e, AuditEvent::Signal { target, signal, .. } if target.pid == pid && signal.name() == name);
        events.iter().filter(sent).count()
    }

    #[test]
    fn term_reaches_everyone_once_and_kill_follows_a_fresh_proof() {
        let signaller = Signaller::for_current_process(Procfs::new()).unwrap();
        let ignorer = spawn_term_ignorer();
        let mut tree = Children {
            kids: vec![spawn("exec sleep 60"), spawn("exec sleep 60"), ignorer],
            log: Log::default(),
            rescan: true,
            lie_not_empty: false,
            first_look_only: false,
            looks: 0,
        };
        let pids: Vec<i32> = tree.kids.iter().map(|k| k.id() as i32).collect();
        let log = tree.log.clone();
        let mut events = Vec::new();
        // The two sleepers must die of the SIGTERM before the grace ends (the test counts
        // SIGKILLs): a grace no loaded machine outlasts; the ignorer takes all of it.
        let escalation = Escalation {
            grace: Duration::from_secs(3),
            kill_cap: Duration::from_secs(20),
        };
        let report = escalation.run(&signaller, &mut tree, &mut |e| {
            if matches!(
                e,
                AuditEvent::Signal {
                    signal: Sig::Kill,
                    ..
                }
            ) {
                log.borrow_mut().push(Seen::Kill);
            }
            events.push(e);
        });

        for &pid in &pids {
            assert_eq!(
                signals_to(&events, pid, "SIGTERM"),
                1,
                "pid {pid}: {events:?}"
            );
        }
        assert_eq!(signals_to(&events, pids[0], "SIGKILL"), 0);
        assert_eq!(signals_to(&events, pids[1], "SIGKILL"), 0);
        assert_eq!(signals_to(&events, pids[2], "SIGKILL"), 1);
        // The SIGKILL went out right after a fresh proof, not on the grace period's.
        let log = log.borrow();
        let kill_at = log.iter().position(|s| *s == Seen::Kill).unwrap();
        let before = log[..kill_at].iter().rev().find(|s| **s != Seen::Kill);
        assert_eq!(before, Some(&Seen::Members), "{log:?}");
        assert!(log[..kill_at].contains(&Seen::Wait), "{log:?}");
        assert!(report.empty);
        let outcome = |pid| {
            report
                .targets
                .iter()
                .find(|t| t.pid == pid)
                .unwrap()
                .outcome
        };
        assert_eq!(outcome(pids[0]), Outcome::Gone);
        assert_eq!(outcome(pids[1]), Outcome::Gone);
        assert_eq!(outcome(pids[2]), Outcome::Killed);
    }

    /// A member the source stops seeing while it is still exiting (a marker scan reads
    /// an empty environment once a process has released its memory) is waited for
    /// through its pidfd and reported by how it ended, never `stuck`.
    #[test]
    fn a_member_the_source_lost_is_waited_for_not_reported_stuck() {
        let signaller = Signaller::for_current_process(Procfs::new()).unwrap();
        // Takes 300 ms to exit once SIGTERM arrives.
        let kid = spawn("trap 'exec sleep 0.3' TERM; while :; do sleep 0.05; done");
        let caught = format!("/proc/{}/status", kid.id());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&caught).is_ok_and(|t| {
            t.lines()
                .find(|l| l.starts_with("SigCgt:"))
                .and_then(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
                .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
        }) {
            assert!(Instant::now() < deadline, "the trap never set up");
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = kid.id() as i32;
        let mut tree = Children {
            kids: vec![kid],
            log: Log::default(),
            rescan: false,
            lie_not_empty: false,
            first_look_only: true,
            looks: 0,
        };
        let escalation = Escalation {
            grace: Duration::from_secs(20),
            kill_cap: Duration::from_secs(20),
        };
        let report = escalation.run(&signaller, &mut tree, &mut |_| {});
        let target = report.targets.iter().find(|t| t.pid == pid).unwrap();
        assert_eq!(target.outcome, Outcome::Gone, "{report:?}");
        assert!(report.empty);
    }

    #[test]
    fn the_kill_phase_ends_at_its_cap() {
        let signaller = Signaller::for_current_process(Procfs::new()).unwrap();
        let mut tree = Children {
            kids: vec![spawn_term_ignorer()],
            log: Log::default(),
            rescan: false,
            lie_not_empty: true,
            first_look_only: false,
            looks: 0,
        };
        let escalation = Escalation {
            grace: Duration::ZERO,
            kill_cap: Duration::from_millis(300),
        };
        let start = Instant::now();
        let report = escalation.run(&signaller, &mut tree, &mut |_| {});
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(30), "{took:?}");
        // The source never admitted to being empty: the report says so.
        assert!(!report.empty);
        assert_eq!(report.targets.len(), 1);
        assert_eq!(report.targets[0].outcome, Outcome::Killed);
    }

    #[test]
    fn an_empty_tree_is_not_walked() {
        let signaller = Signaller::for_current_process(Procfs::new()).unwrap();
        let mut tree = Children {
            kids: Vec::new(),
            log: Log::default(),
            rescan: false,
            lie_not_empty: false,
            first_look_only: false,
            looks: 0,
        };
        let report =
            Escalation::with_grace(Duration::from_secs(1)).run(&signaller, &mut tree, &mut |_| {});
        assert!(report.empty && report.targets.is_empty());
        assert!(tree.log.borrow().is_empty(), "{:?}", tree.log);
    }
}
