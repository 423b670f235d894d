//! Kill -9 at a random step: the owner, the wrapper (the process the host started),
//! the guardian it forked, every undertaker process at once, or the owner and every
//! undertaker process; during spawn, while running, or after SIGTERM before SIGKILL.
//! Only when every undertaker process died does `undertaker sweep` have work; the
//! other kill points must leave nothing without it. The tree is the escape zoo (plain
//! child, SIGTERM ignorer, setsid double fork, setpgid(0,0)).
//!
//! After a guardian dies, tree members that die are reaped by the namespace's init and
//! their numbers are handed to decoys before the sweep runs: the sweep must find the
//! leftovers by proof, never by number.

use crate::procs::{self, Decoy, DecoyKind, Lines};
use crate::rng::Rng;
use crate::trial::{self, await_tree, Ctx, Outcome};
use anyhow::{anyhow, Context, Result};
use rustix::process::{Pid, PidfdFlags, Signal};
use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Owner,
    /// `kill -9` of the process the host started: the guardian tears down.
    Wrapper,
    /// `kill -9` of the guardian: the wrapper takes over.
    Guardian,
    /// Every undertaker process at once: left to the sweep.
    Undertaker,
    /// The owner and every undertaker process.
    Both,
}

pub const TARGETS: [Target; 5] = [
    Target::Owner,
    Target::Wrapper,
    Target::Guardian,
    Target::Undertaker,
    Target::Both,
];

impl Target {
    pub fn scenario_name(self) -> &'static str {
        match self {
            Target::Owner => "chaos-kill-owner",
            Target::Wrapper => "chaos-kill-wrapper",
            Target::Guardian => "chaos-kill-guardian",
            Target::Undertaker => "chaos-kill-undertaker",
            Target::Both => "chaos-kill-both",
        }
    }

    /// Whether no undertaker process is left to finish the job, so a sweep must.
    pub fn needs_sweep(self) -> bool {
        matches!(self, Target::Undertaker | Target::Both)
    }
}

const TREE: &str = "plain,ignorer,setsid,ownpg";
const GRACE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Before the tree reported ready: up to 20 ms after `undertaker run` started.
    Spawn { after_us: u64 },
    /// Tree ready, nothing happening.
    Running,
    /// The guardian got SIGTERM and is inside its grace period.
    Grace { after_us: u64 },
}

fn pick_phase(rng: &mut Rng) -> Phase {
    match rng.below(3) {
        0 => Phase::Spawn {
            after_us: rng.below(20_000),
        },
        1 => Phase::Running,
        _ => Phase::Grace {
            after_us: rng.below(GRACE.as_micros() as u64 * 8 / 10),
        },
    }
}

pub fn run_trial(ctx: &mut Ctx, target: Target, rng: &mut Rng) -> Result<Outcome> {
    let trial = ctx.next_trial();
    let phase = pick_phase(rng);
    let mut owner = ctx.spawn_owner()?;
    let mut guardian = match ctx
        .guarded_tree(&trial, TREE, GRACE, owner.id())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(g) => g,
        Err(e) => {
            trial::kill_child(&mut owner);
            return Err(e).context("starting undertaker run");
        }
    };
    let mut lines = Lines::new(
        guardian
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from undertaker run"))?,
    );

    // Numbers of members seen alive, to aim decoys at once they are gone.
    let mut known: HashMap<i32, String> = HashMap::new();
    let mut note = None;
    match phase {
        Phase::Spawn { after_us } => {
            std::thread::sleep(Duration::from_micros(after_us));
            known.extend(procs::trial_members(&trial));
        }
        Phase::Running | Phase::Grace { .. } => {
            let members = match await_tree(&mut lines, &trial, TREE) {
                Ok(t) => {
                    note = t.inherited_mask.map(crate::scenarios::inherited_mask_note);
                    t.members
                }
                Err(e) => {
                    trial::kill_child(&mut owner);
                    trial::kill_child(&mut guardian);
                    procs::count_and_kill_survivors(&trial);
                    return Err(e);
                }
            };
            known.extend(members.iter().map(|(r, m)| (m.pid, r.clone())));
            if let Phase::Grace { after_us } = phase {
                // SIGTERM to our own unreaped child, through its pidfd.
                if let Some(fd) = Pid::from_raw(guardian.id() as i32)
                    .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
                {
                    let _ = rustix::process::pidfd_send_signal(&fd, Signal::TERM);
                }
                std::thread::sleep(Duration::from_micros(after_us));
            }
        }
    }

    if matches!(target, Target::Owner | Target::Both) {
        trial::kill_child(&mut owner);
    }
    let guardian_killed = target.needs_sweep();
    // What must finish the teardown on its own, with no sweep.
    let mut finisher = None;
    match target {
        Target::Owner => {}
        Target::Wrapper => {
            // Stopped first so the guardian is found before the kill, not after.
            let _ = procs::signal_own_child(&guardian, Signal::STOP);
            finisher = procs::forked_guardian(&guardian, Duration::ZERO);
            trial::kill_child(&mut guardian);
        }
        Target::Guardian => {
            if let Some(inner) = procs::forked_guardian(&guardian, Duration::from_secs(2)) {
                let _ = rustix::process::pidfd_send_signal(&inner, Signal::KILL);
            }
        }
        Target::Undertaker | Target::Both => {
            let _ = procs::signal_own_child(&guardian, Signal::STOP);
            if let Some(inner) = procs::forked_guardian(&guardian, Duration::from_secs(2)) {
                let _ = rustix::process::pidfd_send_signal(&inner, Signal::KILL);
                procs::pidfd_readable(&inner, Duration::from_secs(5));
            }
            trial::kill_child(&mut guardian);
        }
    }
    if let Some(inner) = &finisher {
        if !procs::pidfd_readable(inner, Duration::from_secs(15)) {
            trial::kill_child(&mut owner);
            procs::count_and_kill_survivors(&trial);
            return Err(anyhow!(
                "the guardian did not finish its teardown in 15 s after the wrapper died"
            ));
        }
    }
    if guardian_killed || target == Target::Wrapper {
        // Reaped (or about to be) already.
    } else if !trial::child_exited_within(&guardian, Duration::from_secs(15)) {
        trial::kill_child(&mut guardian);
        trial::kill_child(&mut owner);
        procs::count_and_kill_survivors(&trial);
        return Err(anyhow!(
            "undertaker run did not finish its teardown in 15 s"
        ));
    } else {
        let _ = guardian.wait();
    }

    let mut decoys = Vec::new();
    if guardian_killed {
        // One member exits on its own after the guardian is gone (as a crashing daemon
        // would); its number and every other freed member number go to decoys.
        if let Some((&pid, _)) = known.iter().find(|(_, r)| r.as_str() == "setsid") {
            if let Some(m) = procs::Member::prove(pid, &trial) {
                m.kill();
            }
        }
        let live = procs::trial_members(&trial);
        let mut freed: Vec<i32> = known
            .keys()
            .copied()
            .filter(|p| !live.contains_key(p))
            .collect();
        freed.sort_unstable();
        for number in freed.into_iter().take(2) {
            if let Some(d) = Decoy::spawn_at(number, DecoyKind::Leader, 200) {
                decoys.push(d);
            }
        }
        ctx.sweep();
    } else if target == Target::Owner && ctx.sweep_available {
        ctx.sweep();
    }
    // Wrapper and guardian kills are counted with no sweep at all: the undertaker
    // process left alive must have finished the job.

    let survivors = procs::count_and_kill_survivors(&trial);
    if std::env::var_os("TORTURE_DEBUG").is_some() {
        eprintln!(
            "chaos {target:?} {phase:?}: known {known:?}, survivors {survivors}, decoys {}",
            decoys.len()
        );
    }
    let mut outcome = Outcome {
        reused: !decoys.is_empty(),
        interleaved: !decoys.is_empty(),
        survivors,
        note,
        ..Outcome::default()
    };
    outcome.decoys = decoys.into_iter().map(|d| d.finish()).collect();
    trial::kill_child(&mut owner);
    Ok(outcome)
}
