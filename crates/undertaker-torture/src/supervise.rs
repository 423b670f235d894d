//! `undertaker supervise` under PID reuse and kill -9 (strategy `supervise`). A host
//! (`svhost`) starts the supervisor as Hermes does and hands it trees; decoys (not the
//! host's children) are given the numbers the host has reason to remember.
//!
//! Reuse cells, each ending with the host's `kill -9` (the supervisor must tear down):
//! - `sv-leader-reused`: a registered group's leader exits and is reaped by the host;
//!   a decoy becomes pid = pgid = its number before the teardown.
//! - `sv-group-reused`: the whole registered group dies; its number becomes the pgid of
//!   a leaderless stranger group.
//! - `sv-check-to-signal`: the host dies; the supervisor's SIGTERM kills the leader,
//!   the namespace's init reaps it, and a decoy takes its number before the SIGKILL
//!   round (a TERM reporter outside the group keeps the teardown in its grace period).
//! - `sv-adopt-reused`: `adopt` by pid where the number was reused between the host's
//!   check (its child was alive) and the supervisor's pidfd: the decoy must be refused.
//! - `sv-replayed-registration` (issue 18): the supervisor is `kill -9`ed, the
//!   registered group dies and its number goes to a decoy (a leader or a leaderless
//!   group), the host restarts the supervisor and replays `register N`, registers a new
//!   group, then dies. A stranger on a reused number is never signalled.
//!
//! Chaos cells (the host holds a spawned escape zoo and a registered group; one more
//! `spawn`, `register`, `adopt` or `kill` is in flight, or none):
//! - `sv-chaos-kill-supervisor`: `kill -9` of the supervisor at a random step
//!   (including inside its final teardown), then of the host; freed member numbers go
//!   to decoys; one `undertaker sweep` must finish every recorded tree.
//! - `sv-chaos-kill-host`: `kill -9` of the host at a random step; the supervisor must
//!   tear everything down with no sweep.
//! - `sv-chaos-restart`: `kill -9` of the supervisor at a random step; the host
//!   restarts it and replays, then dies; the predecessor's trees must die too.
//! - `sv-snapshot-same-tick`: pi-crew's snapshot `adopt` of a group that lived
//!   less than a clock tick, its number already reused by a stranger.
//! - `sv-released-restarted`: a released tree across a restart with a replay
//!   (`crate::released`): any signal to a released process is a stranger hit.
//!
//! A group whose registration was refused or never answered was never guarded: its
//! leftovers are cleaned up, not counted.

use crate::baselines::ProcIdentity;
use crate::modes::{ROLE_VAR, TRIAL_VAR};
use crate::procs::{self, Decoy, DecoyKind, Member};
use crate::rng::Rng;
use crate::svhost::Host;
use crate::trial::{role, Ctx, Outcome, READY_TIMEOUT};
use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub const STRATEGY: &str = "supervise";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    LeaderReused,
    GroupReused,
    CheckToSignal,
    AdoptReused,
    ReplayedRegistration,
    SnapshotSameTick,
    KillSupervisor,
    KillHost,
    Restart,
    ReleasedRestarted,
}

pub const CELLS: [Cell; 10] = [
    Cell::LeaderReused,
    Cell::GroupReused,
    Cell::CheckToSignal,
    Cell::AdoptReused,
    Cell::ReplayedRegistration,
    Cell::SnapshotSameTick,
    Cell::KillSupervisor,
    Cell::KillHost,
    Cell::Restart,
    Cell::ReleasedRestarted,
];

impl Cell {
    pub fn name(self) -> &'static str {
        match self {
            Cell::LeaderReused => "sv-leader-reused",
            Cell::GroupReused => "sv-group-reused",
            Cell::CheckToSignal => "sv-check-to-signal",
            Cell::AdoptReused => "sv-adopt-reused",
            Cell::ReplayedRegistration => "sv-replayed-registration",
            Cell::SnapshotSameTick => "sv-snapshot-same-tick",
            Cell::KillSupervisor => "sv-chaos-kill-supervisor",
            Cell::KillHost => "sv-chaos-kill-host",
            Cell::Restart => "sv-chaos-restart",
            Cell::ReleasedRestarted => "sv-released-restarted",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Cell::KillSupervisor | Cell::KillHost | Cell::Restart | Cell::ReleasedRestarted => {
                "chaos"
            }
            _ => "reuse",
        }
    }
}

/// Grace in the reuse cells: the decoy is always in place before the SIGKILL round.
const GRACE_REUSE: Duration = Duration::from_millis(250);
const GRACE_CHAOS: Duration = Duration::from_millis(100);
/// Grace + the 5 s kill cap, generously: a supervisor still running after this is an
/// error, never a verdict on speed.
pub(crate) const TEARDOWN_BOUND: Duration = Duration::from_secs(20);
const DECOY_ATTEMPTS: u32 = 500;
/// The escape zoo a `spawn` starts (the supervisor's own descendants).
const ZOO: &str = "plain,ignorer,setsid,ownpg";
/// What the host registers: the leader's own group and a child in its own group that
/// ignores SIGTERM. (A daemon the host's child double-forked *before* registration is
/// nobody's descendant any more: no registration can cover it.)
const REGISTERED: &str = "plain,ownpg-ignorer";

pub fn run_trial(ctx: &mut Ctx, cell: Cell, rng: &mut Rng) -> Result<Outcome> {
    let trial = ctx.next_trial();
    let result = match cell {
        Cell::KillSupervisor | Cell::KillHost | Cell::Restart => {
            chaos_trial(ctx, &trial, cell, rng)
        }
        Cell::ReleasedRestarted => crate::released::trial(ctx, &trial, rng),
        _ => reuse_trial(ctx, &trial, cell, rng),
    };
    // Whatever happened, nothing of this trial may outlive it.
    let late: u32 = ["a", "b", "c", "s1", "s2", "r1", "r2"]
        .iter()
        .map(|t| procs::count_and_kill_survivors(&format!("{trial}-{t}")))
        .sum();
    result.map(|mut o| {
        o.survivors += late;
        o
    })
}

/// Members of `trial`, proven by marker (pidfd first), by role.
pub(crate) fn members(trial: &str) -> HashMap<String, Member> {
    procs::trial_members(trial)
        .into_iter()
        .filter_map(|(pid, role)| Some((role, Member::prove(pid, trial)?)))
        .collect()
}

fn debug(line: &str) {
    if std::env::var_os("TORTURE_DEBUG").is_some() {
        eprintln!("{line}");
    }
}

pub(crate) fn accepted(reply: &Value) -> bool {
    reply["ok"] == json!(true)
}

pub(crate) fn register(host: &mut Host, pgid: i32) -> Result<()> {
    let reply = host.request(json!({"op": "register", "pgid": pgid}))?;
    if !accepted(&reply) {
        bail!("register of the host's own live group refused: {reply}");
    }
    Ok(())
}

/// Ends the trial: the supervisor must be done, then decoys and survivors are counted.
pub(crate) fn finish(host: &mut Host, decoys: Vec<Decoy>, counted: &[String]) -> Result<Outcome> {
    if !host.supervisor_done(TEARDOWN_BOUND) {
        bail!("the supervisor did not finish its teardown in {TEARDOWN_BOUND:?}");
    }
    let mut outcome = Outcome {
        reused: !decoys.is_empty(),
        interleaved: !decoys.is_empty(),
        ..Outcome::default()
    };
    outcome.decoys = decoys.into_iter().map(Decoy::finish).collect();
    outcome.survivors = counted
        .iter()
        .map(|t| procs::count_and_kill_survivors(t))
        .sum();
    Ok(outcome)
}

fn reuse_trial(ctx: &mut Ctx, trial: &str, cell: Cell, rng: &mut Rng) -> Result<Outcome> {
    let mut host = Host::start(ctx, GRACE_REUSE)?;
    let a = format!("{trial}-a");
    let mut counted = vec![a.clone()];
    let mut note = None;
    let mut in_time = true;
    let decoy = match cell {
        Cell::LeaderReused => {
            let leader = host.tree(&a, "ownpg,ownpg-ignorer")?;
            register(&mut host, leader)?;
            role(&members(&a), "leader")?.kill();
            host.reap(leader)?;
            let d = Decoy::spawn_at(leader, DecoyKind::Leader, DECOY_ATTEMPTS);
            in_time = !host.supervisor_done(Duration::ZERO);
            host.kill9();
            d
        }
        Cell::GroupReused => {
            let leader = host.tree(&a, REGISTERED)?;
            register(&mut host, leader)?;
            let m = members(&a);
            role(&m, "plain")?.kill();
            role(&m, "leader")?.kill();
            host.reap(leader)?;
            let d = Decoy::spawn_at(leader, DecoyKind::Leaderless, DECOY_ATTEMPTS);
            in_time = !host.supervisor_done(Duration::ZERO);
            host.kill9();
            d
        }
        Cell::CheckToSignal => {
            let leader = host.tree(&a, "plain,ownpg-reporter")?;
            register(&mut host, leader)?;
            let m = members(&a);
            host.kill9();
            host.line(READY_TIMEOUT, |l| l == "term")
                .ok_or_else(|| anyhow!("the supervisor never sent SIGTERM"))?;
            // The leader died of that SIGTERM and the namespace's init reaped it.
            let d = Decoy::spawn_at(leader, DecoyKind::Leader, DECOY_ATTEMPTS);
            in_time = role(&m, "ownpg-reporter")?.alive_and_well()
                && !host.supervisor_done(Duration::ZERO);
            d
        }
        Cell::AdoptReused => {
            let b = format!("{trial}-b");
            counted.push(b.clone());
            // The host checked its child was alive; before the supervisor opened its
            // pidfd the child died, was reaped and its number went to a stranger.
            let stale = host.tree(&b, "")?;
            role(&members(&b), "leader")?.kill();
            host.reap(stale)?;
            let d = Decoy::spawn_at(stale, DecoyKind::Leader, DECOY_ATTEMPTS);
            let reply = host.request(json!({"op": "adopt", "pid": stale}))?;
            debug(&format!("adopt of the reused number {stale}: {reply}"));
            if d.is_some() && accepted(&reply) {
                note = Some(format!("adopt of a reused number accepted: {reply}"));
            }
            let live = host.tree(&a, "ownpg")?;
            let reply = host.request(json!({"op": "adopt", "pid": live}))?;
            if !accepted(&reply) {
                bail!("adopt of the host's own live child refused: {reply}");
            }
            host.kill9();
            d
        }
        Cell::SnapshotSameTick => {
            let b = format!("{trial}-b");
            counted.push(b.clone());
            // pi-crew records (pid, start time) at spawn. This group lives for less
            // than a clock tick if the machine allows: its number goes to a stranger
            // that may be born in the very tick the snapshot recorded.
            let (stale, fd) = host.tree_now(&b, "")?;
            let recorded = ProcIdentity::read(stale);
            let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
            procs::pidfd_readable(&fd, READY_TIMEOUT);
            host.reap(stale)?;
            let d = Decoy::spawn_at(stale, DecoyKind::Leader, DECOY_ATTEMPTS);
            let recorded = recorded.ok_or_else(|| anyhow!("no start time for {stale}"))?;
            let now = ProcIdentity::read(stale);
            in_time = now.is_some_and(|n| n.starttime == recorded.starttime);
            let snapshot =
                json!([{"pid": stale, "start_time": recorded.starttime.parse::<u64>().ok()}]);
            let reply =
                host.request(json!({"op": "adopt", "pgid": stale, "snapshot": snapshot}))?;
            debug(&format!(
                "snapshot adopt of {stale} (same tick: {in_time}): {reply}"
            ));
            if d.is_some() && accepted(&reply) {
                note = Some(format!(
                    "snapshot adopt of a reused number accepted: {reply}"
                ));
            }
            let live = host.tree(&a, "ownpg")?;
            let reply = host.request(json!({"op": "adopt", "pid": live}))?;
            if !accepted(&reply) {
                bail!("adopt of the host's own live child refused: {reply}");
            }
            host.kill9();
            d
        }
        Cell::ReplayedRegistration => {
            let c = format!("{trial}-c");
            counted.push(c.clone());
            let leader = host.tree(&a, "plain")?;
            host.send(&format!("register {leader}"))?;
            let want = json!(leader);
            let first = host
                .reply(READY_TIMEOUT, |v| {
                    v["op"] == "register" && v["pgid"] == want
                })
                .ok_or_else(|| anyhow!("no reply to register {leader}"))?;
            if !accepted(&first) {
                bail!("register of the host's own live group refused: {first}");
            }
            // As docs/SUPERVISE.md asks of a host's snapshot: each entry read through
            // a pidfd opened first, and kept only once its process was seen alive in a
            // later clock tick than its start (20 ms later: two ticks).
            let recorded = members(&a);
            let identities: Vec<(&procs::Member, ProcIdentity)> = recorded
                .values()
                .filter_map(|m| ProcIdentity::read(m.pid).map(|id| (m, id)))
                .collect();
            std::thread::sleep(Duration::from_millis(20));
            let snapshot: Vec<Value> = identities
                .into_iter()
                .filter(|(m, _)| !m.exited())
                .map(|(_, id)| {
                    json!({"pid": id.pid, "start_time": id.starttime.parse::<u64>().ok()})
                })
                .collect();
            let pi_crew = rng.below(3) == 0;
            host.supervisor.kill9();
            // The number is reused before the restart, or after it (the group still
            // lived when the successor started, and it may have taken the group over).
            let reused_after_restart = rng.below(2) == 1;
            if reused_after_restart {
                host.restart_supervisor()?;
            }
            let m = members(&a);
            role(&m, "plain")?.kill();
            role(&m, "leader")?.kill();
            host.reap(leader)?;
            let kind = if rng.below(2) == 0 {
                DecoyKind::Leader
            } else {
                DecoyKind::Leaderless
            };
            let d = Decoy::spawn_at(leader, kind, DECOY_ATTEMPTS);
            // Hermes restarts its supervisor and replays its whole set.
            if !reused_after_restart {
                host.restart_supervisor()?;
            }
            // Hermes replays `register N`; pi-crew's form adopts the group with the
            // snapshot (pid, start time) it recorded at spawn.
            let replay = if pi_crew {
                host.request(json!({"op": "adopt", "pgid": leader, "snapshot": snapshot}))?
            } else {
                host.send(&format!("register {leader}"))?;
                host.reply(READY_TIMEOUT, |v| {
                    v["op"] == "register" && v["pgid"] == want
                })
                .ok_or_else(|| anyhow!("no reply to the replayed register {leader}"))?
            };
            debug(&format!(
                "replayed {} {leader} ({kind:?} decoy, reused after the restart: \
                 {reused_after_restart}): {replay}",
                if pi_crew {
                    "adopt with snapshot"
                } else {
                    "register"
                }
            ));
            if d.is_some() && accepted(&replay) {
                note = Some(format!("replay of a reused number accepted: {replay}"));
            }
            let fresh = host.tree(&c, REGISTERED)?;
            register(&mut host, fresh)?;
            in_time = !host.supervisor_done(Duration::ZERO);
            host.kill9();
            d
        }
        Cell::KillSupervisor | Cell::KillHost | Cell::Restart | Cell::ReleasedRestarted => {
            unreachable!("chaos cells")
        }
    };
    let mut outcome = finish(&mut host, decoy.into_iter().collect(), &counted)?;
    outcome.interleaved &= in_time;
    outcome.note = note;
    Ok(outcome)
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Spawn {
        after_us: u64,
    },
    Register {
        after_us: u64,
    },
    Adopt {
        after_us: u64,
    },
    Kill {
        after_us: u64,
    },
    Idle,
    /// The host is gone and the supervisor is inside its final teardown.
    Teardown {
        after_us: u64,
    },
}

fn pick_step(rng: &mut Rng, cell: Cell) -> Step {
    let grace_us = GRACE_CHAOS.as_micros() as u64 * 8 / 10;
    let steps = if cell == Cell::KillSupervisor { 6 } else { 5 };
    match rng.below(steps) {
        0 => Step::Spawn {
            after_us: rng.below(20_000),
        },
        1 => Step::Register {
            after_us: rng.below(5_000),
        },
        2 => Step::Adopt {
            after_us: rng.below(5_000),
        },
        3 => Step::Kill {
            after_us: rng.below(grace_us),
        },
        4 => Step::Idle,
        _ => Step::Teardown {
            after_us: rng.below(grace_us),
        },
    }
}

/// A `spawn` request for the escape zoo marked `trial`; the members' stdio is
/// /dev/null on a pipe channel, so they say "ready" into `ready` instead.
fn spawn_request(ctx: &Ctx, trial: &str, ready: &std::path::Path) -> Value {
    json!({
        "op": "spawn",
        "argv": ["/bin/sh", "-c", "exec \"$0\" __tree \"$1\" >>\"$2\" 2>/dev/null",
                 ctx.exe, ZOO, ready],
        "env": {TRIAL_VAR: trial, ROLE_VAR: "leader"},
        "label": "torture-sv",
    })
}

fn await_ready_file(path: &std::path::Path, expected: usize) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let n = text.lines().filter(|l| l.starts_with("ready ")).count();
        if n >= expected {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("spawned tree not ready ({n}/{expected})");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A chaos trial's trees: `s1` spawned and `r1` registered before the step; `s2` and
/// `r2` are what the step may have had in flight.
struct Zoo {
    s1: String,
    s2: String,
    r1: String,
    r2: String,
    r1_leader: i32,
    /// The `register`/`adopt` request for `r2` (its leader), if one was sent.
    r2_request: Option<(u64, Value)>,
    ready: [std::path::PathBuf; 2],
    /// Member numbers seen alive before the kill.
    known: Vec<i32>,
}

impl Zoo {
    /// Sets the trees up, then takes `step` (leaving its request in flight).
    fn set_up(ctx: &Ctx, host: &mut Host, trial: &str, step: Step) -> Result<Zoo> {
        let [s1, s2, r1, r2] = ["s1", "s2", "r1", "r2"].map(|t| format!("{trial}-{t}"));
        let ready = [&s1, &s2].map(|t| ctx.scratch.join(format!("{t}.ready")));
        let spawned = host.request(spawn_request(ctx, &s1, &ready[0]))?;
        if !accepted(&spawned) {
            bail!("spawn refused: {spawned}");
        }
        await_ready_file(&ready[0], 1 + ZOO.split(',').count())?;
        let r1_leader = host.tree(&r1, REGISTERED)?;
        register(host, r1_leader)?;
        let mut r2_request = None;
        let pause = |us: u64| std::thread::sleep(Duration::from_micros(us));
        match step {
            Step::Spawn { after_us } => {
                host.send_json(spawn_request(ctx, &s2, &ready[1]))?;
                pause(after_us);
            }
            Step::Register { after_us } | Step::Adopt { after_us } => {
                let leader = host.tree(&r2, REGISTERED)?;
                let request = if matches!(step, Step::Register { .. }) {
                    json!({"op": "register", "pgid": leader})
                } else {
                    json!({"op": "adopt", "pid": leader})
                };
                r2_request = Some((host.send_json(request.clone())?, request));
                pause(after_us);
            }
            Step::Kill { after_us } => {
                host.send_json(json!({"op": "kill", "tree": spawned["tree"]}))?;
                pause(after_us);
            }
            Step::Idle => {}
            Step::Teardown { after_us } => {
                host.kill9();
                pause(after_us);
            }
        }
        let known = [&s1, &s2, &r1, &r2]
            .iter()
            .flat_map(|t| procs::trial_members(t).into_keys())
            .collect();
        Ok(Zoo {
            s1,
            s2,
            r1,
            r2,
            r1_leader,
            r2_request,
            ready,
            known,
        })
    }

    /// One daemon exits on its own; then numbers freed since the kill (up to two) go
    /// to decoys.
    fn decoys_on_freed_numbers(&self, still_counted: &[String]) -> Vec<Decoy> {
        if let Some(m) = members(&self.s1).get("setsid") {
            m.kill();
        }
        let live: Vec<i32> = still_counted
            .iter()
            .flat_map(|t| procs::trial_members(t).into_keys())
            .collect();
        let mut freed: Vec<i32> = self
            .known
            .iter()
            .copied()
            .filter(|p| !live.contains(p))
            .collect();
        freed.sort_unstable();
        freed
            .into_iter()
            .take(2)
            .filter_map(|number| Decoy::spawn_at(number, DecoyKind::Leader, 200))
            .collect()
    }

    /// Cleans up (without counting) the groups that were never guarded.
    fn drop_uncounted(&self, counted: &[String]) {
        for t in [&self.r1, &self.r2] {
            if !counted.contains(t) {
                procs::count_and_kill_survivors(t);
            }
        }
    }
}

impl Drop for Zoo {
    fn drop(&mut self) {
        for f in &self.ready {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn chaos_trial(ctx: &mut Ctx, trial: &str, cell: Cell, rng: &mut Rng) -> Result<Outcome> {
    let step = pick_step(rng, cell);
    let mut host = Host::start(ctx, GRACE_CHAOS)?;
    let zoo = Zoo::set_up(ctx, &mut host, trial, step)?;
    let mut decoys = Vec::new();
    let mut note = None;
    match cell {
        Cell::KillHost => {
            host.kill9();
            if !host.supervisor_done(TEARDOWN_BOUND) {
                bail!("the supervisor did not finish its teardown in {TEARDOWN_BOUND:?}");
            }
        }
        _ => host.supervisor.kill9(),
    }
    // Whatever the killed supervisor wrote is in the pipe by now.
    let mut r2_guarded = zoo
        .r2_request
        .as_ref()
        .and_then(|(id, _)| host.reply_to(*id, Duration::from_millis(500)))
        .is_some_and(|r| accepted(&r));
    if cell == Cell::Restart {
        let all = [&zoo.s1, &zoo.s2, &zoo.r1, &zoo.r2].map(|t| t.clone());
        decoys = zoo.decoys_on_freed_numbers(&all);
        // Hermes restarts its supervisor and replays its whole set (it never read
        // a reply, so the request that was in flight is replayed too).
        host.restart_supervisor()?;
        host.send(&format!("register {}", zoo.r1_leader))?;
        // Read only so that the host dies after the supervisor had the line.
        let want = json!(zoo.r1_leader);
        host.reply(TEARDOWN_BOUND, |v| {
            v["op"] == "register" && v["pgid"] == want
        })
        .ok_or_else(|| anyhow!("no reply to the replayed register"))?;
        if let Some((_, request)) = &zoo.r2_request {
            let id = host.send_json(request.clone())?;
            let reply = host.reply_to(id, TEARDOWN_BOUND);
            r2_guarded |= reply.is_some_and(|r| accepted(&r));
        }
        host.kill9();
        if !host.supervisor_done(TEARDOWN_BOUND) {
            bail!("the restarted supervisor did not finish its teardown in {TEARDOWN_BOUND:?}");
        }
    }
    let mut counted = vec![zoo.s1.clone(), zoo.s2.clone()];
    let registered_findable = cell != Cell::KillSupervisor || host.tier != "subreaper";
    if registered_findable {
        counted.push(zoo.r1.clone());
        if r2_guarded {
            counted.push(zoo.r2.clone());
        }
    } else {
        note = Some(
            "subreaper tier: registered groups are not counted after the supervisor's \
             kill -9 (no cgroup, no marker: docs/SUPERVISE.md)"
                .to_owned(),
        );
    }
    zoo.drop_uncounted(&counted);
    if cell == Cell::KillSupervisor {
        host.kill9();
        // One sweep must finish every recorded tree by proof, never by number.
        decoys = zoo.decoys_on_freed_numbers(&counted);
        ctx.sweep();
    }
    if std::env::var_os("TORTURE_DEBUG").is_some() {
        for t in &counted {
            let left: Vec<String> = procs::trial_members(t).into_values().collect();
            if !left.is_empty() {
                eprintln!("  {t}: still there: {left:?}");
            }
        }
    }
    let mut outcome = finish(&mut host, decoys, &counted)?;
    outcome.note = note;
    debug(&format!(
        "{} {step:?}: survivors {}, r2 guarded {r2_guarded}",
        cell.name(),
        outcome.survivors
    ));
    Ok(outcome)
}
