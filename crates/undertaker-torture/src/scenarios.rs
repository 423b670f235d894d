//! The four PID/PGID-reuse scenarios, each run against every strategy.
//!
//! In every trial a decoy (a same-uid stranger that records each signal) is handed,
//! through `ns_last_pid`, exactly the number the strategy has reason to remember: the
//! tree leader's pid, which is also its pgid. Then the strategy does its teardown.
//!
//! 1. `leader-reused`: the leader exits and is reaped; a decoy becomes pid = pgid = L.
//! 2. `group-reused`: the whole group L dies; the number becomes the pgid of a stranger
//!    group whose own leader has already exited (only a non-leader member is left).
//! 3. `check-to-signal`: the reuse happens inside the strategy's window between its
//!    last check and its signal (an injected pause in the baselines; for undertaker the
//!    same interleaving happens naturally: the leader dies of the guardian's SIGTERM and
//!    its number goes to a decoy while the guardian is in its grace period).
//! 4. `stale-registration`: Hermes's orphan case: the leader exits, a member keeps the
//!    group alive so the registration is kept on purpose (a prune pass sees it alive),
//!    then the group empties and its number is recycled between two probes. For
//!    undertaker: a guarded daemon dies while the tree runs and its number is recycled
//!    before the owner dies.

use crate::baselines::{self, Ladder, ProcIdentity, Prune};
use crate::procs::{self, Decoy, DecoyKind, Lines};
use crate::trial::{self, await_tree, role, Ctx, Outcome};
use anyhow::{anyhow, Context, Result};
use process_wrap::std::{ChildWrapper, CommandWrap, ProcessGroup};
use std::os::unix::process::CommandExt;
use std::process::Child;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Naive,
    Prune,
    Ladder,
    ProcessWrap,
    Undertaker,
}

pub const STRATEGIES: [Strategy; 5] = [
    Strategy::Naive,
    Strategy::Prune,
    Strategy::Ladder,
    Strategy::ProcessWrap,
    Strategy::Undertaker,
];

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Prune => "prune",
            Strategy::Ladder => "ladder",
            Strategy::ProcessWrap => "process-wrap",
            Strategy::Undertaker => "undertaker",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    LeaderReused,
    GroupReused,
    CheckToSignal,
    StaleRegistration,
}

pub const SCENARIOS: [Scenario; 4] = [
    Scenario::LeaderReused,
    Scenario::GroupReused,
    Scenario::CheckToSignal,
    Scenario::StaleRegistration,
];

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::LeaderReused => "leader-reused",
            Scenario::GroupReused => "group-reused",
            Scenario::CheckToSignal => "check-to-signal",
            Scenario::StaleRegistration => "stale-registration",
        }
    }

    /// The tree, the same for every strategy. Members outside the leader's group are
    /// the escapes a group kill cannot reach; a TERM ignorer/reporter outside the group
    /// keeps undertaker's guardian in its grace period while the decoy moves in.
    fn tree(self) -> &'static str {
        match self {
            Scenario::LeaderReused => "ownpg,setsid-ignorer",
            Scenario::GroupReused => "plain,setsid-ignorer",
            Scenario::CheckToSignal => "plain,setsid-reporter",
            Scenario::StaleRegistration => "plain,setsid",
        }
    }
}

/// undertaker's grace in the reuse scenarios: long enough that the decoy is always in
/// place before the SIGKILL round (`interleaved` counts the trials where it was).
const UNDERTAKER_GRACE: Duration = Duration::from_millis(250);
/// How many times a decoy may try for its number while a zombie still holds it.
const DECOY_ATTEMPTS: u32 = 500;

pub fn run_trial(ctx: &mut Ctx, strategy: Strategy, scenario: Scenario) -> Result<Outcome> {
    let trial = ctx.next_trial();
    let result = match strategy {
        Strategy::Undertaker => undertaker_trial(ctx, &trial, scenario),
        _ => baseline_trial(ctx, &trial, strategy, scenario),
    };
    // Whatever happened, nothing of this trial may outlive it.
    let late = procs::count_and_kill_survivors(&trial);
    result.map(|mut o| {
        o.survivors += late;
        o
    })
}

fn baseline_trial(
    ctx: &mut Ctx,
    trial: &str,
    strategy: Strategy,
    scenario: Scenario,
) -> Result<Outcome> {
    let spec = scenario.tree();
    let mut cmd = ctx.bare_tree(trial, spec);
    // The host's own child handle (naive, prune, ladder) or process-wrap's.
    let mut host: Option<Child> = None;
    let mut wrapped: Option<Box<dyn ChildWrapper>> = None;
    let stdout = if strategy == Strategy::ProcessWrap {
        let mut w = CommandWrap::from(cmd);
        w.wrap(ProcessGroup::leader());
        let mut child = w.spawn().context("process-wrap spawn")?;
        let out = child.stdout().take();
        wrapped = Some(child);
        out
    } else {
        cmd.process_group(0);
        let mut child = cmd.spawn().context("spawning the tree")?;
        let out = child.stdout.take();
        host = Some(child);
        out
    };
    let leader = host
        .as_ref()
        .map(|c| c.id())
        .or_else(|| wrapped.as_ref().map(|w| w.id()))
        .ok_or_else(|| anyhow!("no child"))? as i32;
    let mut lines = Lines::new(stdout.ok_or_else(|| anyhow!("no stdout"))?);
    let members = match await_tree(&mut lines, trial, spec) {
        Ok(t) => t.members,
        Err(e) => {
            reap_host(&mut host, &mut wrapped);
            return Err(e);
        }
    };

    // Registration at spawn.
    let mut prune = Prune::default();
    prune.register(leader);
    let ladder = Ladder {
        record: ProcIdentity::read(leader).ok_or_else(|| anyhow!("leader identity"))?,
    };

    // The host reaps its exited child, as any event loop does (process-wrap: wait()).
    let reap_leader = |host: &mut Option<Child>, wrapped: &mut Option<Box<dyn ChildWrapper>>| {
        if let Some(c) = host.as_mut() {
            let _ = c.wait();
        }
        if let Some(w) = wrapped.as_mut() {
            let _ = w.wait();
        }
    };

    let mut decoy: Option<Decoy> = None;
    match scenario {
        Scenario::LeaderReused => {
            role(&members, "leader")?.kill();
            reap_leader(&mut host, &mut wrapped);
            decoy = Decoy::spawn_at(leader, DecoyKind::Leader, DECOY_ATTEMPTS);
        }
        Scenario::GroupReused => {
            role(&members, "plain")?.kill();
            role(&members, "leader")?.kill();
            reap_leader(&mut host, &mut wrapped);
            decoy = Decoy::spawn_at(leader, DecoyKind::Leaderless, DECOY_ATTEMPTS);
        }
        Scenario::StaleRegistration => {
            role(&members, "leader")?.kill();
            reap_leader(&mut host, &mut wrapped);
            // A registration change: the group still has a member, so it is kept.
            prune.registration_changed();
            role(&members, "plain")?.kill();
            decoy = Decoy::spawn_at(leader, DecoyKind::Leader, DECOY_ATTEMPTS);
        }
        Scenario::CheckToSignal => {
            // The last probe before the owner dies sees the group alive.
            prune.registration_changed();
        }
    }

    // The owner dies. In check-to-signal, the pause between check and signal is where
    // the group dies, is reaped by the host, and its number goes to the decoy.
    let in_window = scenario == Scenario::CheckToSignal;
    let mut pause = || {
        if !in_window {
            return;
        }
        if let (Ok(plain), Ok(lead)) = (role(&members, "plain"), role(&members, "leader")) {
            plain.kill();
            lead.kill();
        }
        match host.as_mut() {
            Some(c) => {
                let _ = c.wait();
                decoy = Decoy::spawn_at(leader, DecoyKind::Leader, DECOY_ATTEMPTS);
            }
            // process-wrap reaps only inside its own wait(), which is not running:
            // the zombie leader keeps its number, so one try shows it is not free.
            None => decoy = Decoy::spawn_at(leader, DecoyKind::Leader, 1),
        }
    };
    match strategy {
        Strategy::Naive => baselines::naive_teardown(leader, &mut pause),
        Strategy::Prune => prune.owner_died(&mut pause),
        Strategy::Ladder => ladder.owner_died(&mut pause),
        Strategy::ProcessWrap => {
            if let Some(w) = wrapped.as_mut() {
                baselines::process_wrap_teardown(w.as_mut(), &mut pause);
            }
        }
        Strategy::Undertaker => unreachable!("undertaker runs its own trial"),
    }

    let mut outcome = Outcome {
        reused: decoy.is_some(),
        interleaved: decoy.is_some(),
        ..Outcome::default()
    };
    if let Some(d) = decoy {
        outcome.decoys.push(d.finish());
    }
    // Count (and clean up) before reaping the host's child: a live leader is a survivor.
    outcome.survivors = procs::count_and_kill_survivors(trial);
    reap_host(&mut host, &mut wrapped);
    Ok(outcome)
}

fn reap_host(host: &mut Option<Child>, wrapped: &mut Option<Box<dyn ChildWrapper>>) {
    if let Some(c) = host.as_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
    if let Some(w) = wrapped.as_mut() {
        if matches!(w.try_wait(), Ok(None)) {
            let _ = w.start_kill();
        }
        let _ = w.wait();
    }
}

fn undertaker_trial(ctx: &mut Ctx, trial: &str, scenario: Scenario) -> Result<Outcome> {
    let spec = scenario.tree();
    let mut owner = ctx.spawn_owner()?;
    let mut guardian = match ctx
        .guarded_tree(trial, spec, UNDERTAKER_GRACE, owner.id())
        .spawn()
    {
        Ok(g) => g,
        Err(e) => {
            trial::kill_child(&mut owner);
            return Err(e).context("starting undertaker run");
        }
    };
    let result = undertaker_steps(ctx, trial, scenario, &mut owner, &mut guardian);
    trial::kill_child(&mut owner);
    if !trial::child_exited_within(&guardian, Duration::from_secs(15)) {
        trial::kill_child(&mut guardian);
        return Err(anyhow!(
            "undertaker run did not finish its teardown in 15 s"
        ));
    }
    let _ = guardian.wait();
    let (mut outcome, decoy) = result?;
    if let Some(d) = decoy {
        outcome.decoys.push(d.finish());
    }
    Ok(outcome)
}

fn undertaker_steps(
    _ctx: &Ctx,
    trial: &str,
    scenario: Scenario,
    owner: &mut Child,
    guardian: &mut Child,
) -> Result<(Outcome, Option<Decoy>)> {
    let spec = scenario.tree();
    let mut lines = Lines::new(
        guardian
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from undertaker run"))?,
    );
    let tree = await_tree(&mut lines, trial, spec)?;
    let members = tree.members;
    let leader = role(&members, "leader")?.pid;
    let guardian_running = |g: &mut Child| matches!(g.try_wait(), Ok(None));
    let (decoy, interleaved) = match scenario {
        Scenario::LeaderReused => {
            // CMD exits: the guardian reaps it and starts tearing the rest down.
            role(&members, "leader")?.kill();
            let d = Decoy::spawn_at(leader, DecoyKind::Leader, DECOY_ATTEMPTS);
            let during_grace =
                role(&members, "setsid-ignorer")?.alive_and_well() && guardian_running(guardian);
            (d, during_grace)
        }
        Scenario::GroupReused => {
            role(&members, "plain")?.kill();
            role(&members, "leader")?.kill();
            let d = Decoy::spawn_at(leader, DecoyKind::Leaderless, DECOY_ATTEMPTS);
            let during_grace =
                role(&members, "setsid-ignorer")?.alive_and_well() && guardian_running(guardian);
            (d, during_grace)
        }
        Scenario::CheckToSignal => {
            // The owner dies; the guardian proves every member and sends SIGTERM.
            trial::kill_child(owner);
            loop {
                match lines.next(trial::READY_TIMEOUT) {
                    Some(l) if l == "term" => break,
                    Some(_) => {}
                    None => return Err(anyhow!("the guardian never sent SIGTERM")),
                }
            }
            // The leader died of that SIGTERM; its number goes to a decoy before the
            // guardian's SIGKILL round.
            let d = Decoy::spawn_at(leader, DecoyKind::Leader, DECOY_ATTEMPTS);
            let during_grace =
                role(&members, "setsid-reporter")?.alive_and_well() && guardian_running(guardian);
            (d, during_grace)
        }
        Scenario::StaleRegistration => {
            // A guarded daemon dies while the tree runs; the guardian (its subreaper)
            // reaps it and its number is recycled before the owner dies.
            let daemon = role(&members, "setsid")?;
            let number = daemon.pid;
            daemon.kill();
            let d = Decoy::spawn_at(number, DecoyKind::Leader, DECOY_ATTEMPTS);
            let still_guarding = guardian_running(guardian);
            trial::kill_child(owner);
            (d, still_guarding)
        }
    };
    let outcome = Outcome {
        reused: decoy.is_some(),
        interleaved: decoy.is_some() && interleaved,
        note: tree.inherited_mask.map(inherited_mask_note),
        ..Outcome::default()
    };
    Ok((outcome, decoy))
}

pub fn inherited_mask_note(mask: String) -> String {
    format!("CMD started with signals blocked (SigBlk={mask}): undertaker run leaks its mask")
}
