//! `sv-released-restarted` (issue 26 item 2): the host releases a registered group (by
//! `release` or `unregister`, or releases an adopted child), its supervisor is
//! `kill -9`ed, a registered group's leader dies meanwhile, and the host restarts the
//! supervisor and replays that group (the Hermes pattern, which makes the successor
//! search for its predecessor's trees), sometimes waiting long enough for the
//! successor's self-healing to run; then the host dies.
//!
//! A released process is the host's again: any signal to it (a SIGTERM its reporter
//! prints, or its death) counts as a stranger hit. The replayed group must die with
//! the successor (survivors counted as usual).

use crate::procs::{self, DecoyVerdict, Member};
use crate::rng::Rng;
use crate::supervise::{accepted, finish, members, register};
use crate::svhost::Host;
use crate::trial::{role, Ctx, Outcome, READY_TIMEOUT};
use anyhow::{anyhow, bail, Result};
use serde_json::json;
use std::time::Duration;

/// The released tree: the leader, a member of its group, and one that says "term" on
/// SIGTERM (in the group too) so a teardown's first round is seen, not only deaths.
const RELEASED: &str = "plain,reporter";

/// Grace: a teardown of the released group would be under way well within the trial.
const GRACE: Duration = Duration::from_millis(100);

/// How the host lets the tree go.
#[derive(Debug, Clone, Copy)]
enum Letting {
    Release,
    Unregister,
    AdoptedRelease,
}

pub fn trial(ctx: &mut Ctx, trial: &str, rng: &mut Rng) -> Result<Outcome> {
    let mut host = Host::start(ctx, GRACE)?;
    let (a, b) = (format!("{trial}-a"), format!("{trial}-b"));
    let letting = match rng.below(3) {
        0 => Letting::Release,
        1 => Letting::Unregister,
        _ => Letting::AdoptedRelease,
    };
    let released = host.tree(&b, RELEASED)?;
    let reply = match letting {
        Letting::AdoptedRelease => host.request(json!({"op": "adopt", "pid": released}))?,
        _ => host.request(json!({"op": "register", "pgid": released}))?,
    };
    if !accepted(&reply) {
        bail!("the host's own group refused: {reply}");
    }
    let reply = match letting {
        Letting::Unregister => host.request(json!({"op": "unregister", "pgid": released}))?,
        _ => host.request(json!({"op": "release", "tree": reply["tree"]}))?,
    };
    if !accepted(&reply) {
        bail!("{letting:?} refused: {reply}");
    }
    let kept: Vec<Member> = members(&b).into_values().collect();
    let gone = host.tree(&a, "plain")?;
    register(&mut host, gone)?;
    host.supervisor.kill9();
    role(&members(&a), "leader")?.kill();
    host.reap(gone)?;
    host.restart_supervisor()?;
    host.send(&format!("register {gone}"))?;
    let want = json!(gone);
    host.reply(READY_TIMEOUT, |v| {
        v["op"] == "register" && v["pgid"] == want
    })
    .ok_or_else(|| anyhow!("no reply to the replayed register {gone}"))?;
    if rng.below(2) == 0 {
        // Past the successor's self-healing delay (1 s).
        std::thread::sleep(Duration::from_millis(1500));
    }
    host.kill9();
    let mut outcome = finish(&mut host, Vec::new(), &[a])?;
    // Every released process alive, and no SIGTERM reported.
    let termed = host
        .line(Duration::from_millis(200), |l| l == "term")
        .is_some();
    outcome.decoys = kept
        .iter()
        .map(|m| {
            let hit = !m.alive_and_well();
            DecoyVerdict {
                signals: u32::from(hit),
                hit,
            }
        })
        .collect();
    if termed {
        outcome.decoys.push(DecoyVerdict {
            signals: 1,
            hit: true,
        });
    }
    if kept.len() != 3 {
        outcome.note = Some(format!("{} released processes seen, not 3", kept.len()));
    }
    // Ours to end (not counted: they were never to be torn down).
    procs::count_and_kill_survivors(&b);
    Ok(outcome)
}
