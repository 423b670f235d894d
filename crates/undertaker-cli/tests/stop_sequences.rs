//! Real hosts' stop sequences (docs/INTEGRATIONS.md, "How hosts stop their servers"):
//! the tree must be gone within the host's patience, not the grace period's.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use rustix::process::Signal;
use std::path::Path;
use std::time::{Duration, Instant};

/// The grace these trees get: far longer than any host waits (hosts give 0.5-5 s), so
/// a tree still there at the end of the grace tells "ended at the SIGKILL" from "ended
/// after the grace" whatever the machine's speed. The mechanism does not depend on the
/// grace's length: with the default 2 s the tree was gone 10 ms after the SIGKILL, and
/// 1 610 ms after it without the fix.
const GRACE: &str = "60s";

/// Bound on how long after the host's SIGKILL the tree may still be there: generous
/// for a loaded machine, far under the 59.5 s a tree waiting out the grace would take.
const AFTER_KILL: Duration = Duration::from_secs(15);

/// `undertaker --no-heal run EXTRA… --grace GRACE -- sh -c SCRIPT`, its state in
/// `scratch`.
fn run_with_grace(scratch: &Scratch, extra: &[&str], script: &str) -> std::process::Child {
    undertaker()
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .args(["--no-heal", "run"])
        .args(extra)
        .args(["--grace", GRACE, "--", "sh", "-c", script])
        .spawn()
        .expect("start undertaker")
}

/// `undertaker run --grace GRACE` of a tree that ignores SIGINT and SIGTERM (the
/// disposition is inherited: every member ignores them); its pids are written to
/// `pids`.
fn start_stubborn_tree(scratch: &Scratch, pids: &Path) -> std::process::Child {
    let script = format!(
        "trap '' INT TERM; sleep 1000 & echo $! >> {p}; setsid sleep 1000 & echo $! >> {p}; echo $$ >> {p}; wait",
        p = pids.display()
    );
    let child = run_with_grace(scratch, &[], &script);
    assert!(
        wait_until(Duration::from_secs(60), || read_lines(pids).len() == 3),
        "the tree did not start"
    );
    child
}

fn tree_pids(pids: &Path) -> Vec<i32> {
    read_lines(pids)
        .iter()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// How long after `since` the last of `pids` was gone (polled every 10 ms), up to
/// twice the bound.
fn gone_after(pids: &[i32], since: Instant) -> Duration {
    wait_until(2 * AFTER_KILL, || {
        reap_zombies();
        !pids.iter().any(|&p| alive(p))
    });
    since.elapsed()
}

/// Stops `sentinel` as Claude Code stops its server: SIGINT, SIGTERM at +100 ms,
/// SIGKILL at +500 ms (`before_kill` runs just before it). Returns when the SIGKILL went.
fn stop_like_claude_code(
    sentinel: &mut std::process::Child,
    before_kill: impl FnOnce(),
) -> Instant {
    signal_child(sentinel, Signal::INT);
    std::thread::sleep(Duration::from_millis(100));
    signal_child(sentinel, Signal::TERM);
    std::thread::sleep(Duration::from_millis(400));
    before_kill();
    let killed_at = Instant::now();
    kill9(sentinel);
    killed_at
}

/// Fails unless `took` (from the host's SIGKILL until `what` was gone) is within bound.
fn assert_within_bound(took: Duration, what: &str) {
    eprintln!(
        "{what} gone {} ms after the host's SIGKILL",
        took.as_millis()
    );
    assert!(
        took < AFTER_KILL,
        "{what} gone {} ms after the host's SIGKILL (bound {} ms)",
        took.as_millis(),
        AFTER_KILL.as_millis()
    );
}

#[test]
fn claude_code_stop_sequence_ends_the_tree_at_the_sigkill_not_after_the_grace() {
    if !isolate("claude_code_stop_sequence_ends_the_tree_at_the_sigkill_not_after_the_grace") {
        return;
    }
    let scratch = Scratch::new("stop-claude");
    let pids = scratch.path().join("pids");
    let mut sentinel = start_stubborn_tree(&scratch, &pids);
    let tree = tree_pids(&pids);
    let killed_at = stop_like_claude_code(&mut sentinel, || {
        assert!(
            tree.iter().all(|&p| alive(p)),
            "the tree ignores SIGTERM: it must still be there before the SIGKILL"
        )
    });
    assert_within_bound(gone_after(&tree, killed_at), "tree");
    assert_nothing_left();
}

/// The same in the pidns tier, where the namespace's init runs the grace period: the
/// guardian SIGKILLs the init (ending the namespace) as soon as the host's SIGKILL
/// lands. The tree's pids are the namespace's own, so "gone" is: nothing but this test
/// left in its PID namespace (the guardian included).
#[test]
fn claude_code_stop_sequence_in_the_pidns_tier() {
    let probe = undertaker()
        .args(["run", "--tier", "pidns", "--", "true"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        skip(&format!("pidns tier unavailable: {probe:?}"));
        return;
    }
    if !isolate("claude_code_stop_sequence_in_the_pidns_tier") {
        return;
    }
    let scratch = Scratch::new("stop-claude-pidns");
    let ready = scratch.path().join("ready");
    let script = format!(
        "trap '' INT TERM; sleep 1000 & setsid sleep 1000 & touch {}; wait",
        ready.display()
    );
    let mut sentinel = run_with_grace(&scratch, &["--tier", "pidns"], &script);
    assert!(
        wait_for_file(&ready, Duration::from_secs(60)),
        "tree started"
    );
    let killed_at = stop_like_claude_code(&mut sentinel, || {});
    wait_until(2 * AFTER_KILL, || {
        reap_zombies();
        live_processes_except_self().is_empty()
    });
    assert_within_bound(killed_at.elapsed(), "namespace");
}

#[test]
fn sigterm_to_the_guardian_then_a_sentinel_kill9_ends_the_tree_at_once() {
    if !isolate("sigterm_to_the_guardian_then_a_sentinel_kill9_ends_the_tree_at_once") {
        return;
    }
    let scratch = Scratch::new("stop-opencode");
    let pids = scratch.path().join("pids");
    let mut sentinel = start_stubborn_tree(&scratch, &pids);
    let tree = tree_pids(&pids);
    // opencode walks its tree: the guardian gets SIGTERM directly.
    let guardian = guardian_of(&sentinel).expect("the guardian");
    assert!(signal_child_of(
        sentinel.id() as i32,
        guardian,
        Signal::TERM
    ));
    std::thread::sleep(Duration::from_millis(400));
    assert!(
        tree.iter().all(|&p| alive(p)),
        "the grace period is running"
    );
    let killed_at = Instant::now();
    kill9(&mut sentinel);
    assert_within_bound(gone_after(&tree, killed_at), "tree");
    assert_nothing_left();
}

/// A SIGTERM sent to the guardian directly and one sent to the process the host
/// started end the same way: the tree torn down, the same exit status.
#[test]
fn sigterm_to_the_guardian_is_the_same_as_sigterm_to_the_sentinel() {
    if !isolate("sigterm_to_the_guardian_is_the_same_as_sigterm_to_the_sentinel") {
        return;
    }
    let scratch = Scratch::new("stop-direct");
    let mut statuses = Vec::new();
    for direct in [false, true] {
        let ready = scratch.path().join(format!("ready-{direct}"));
        let script = format!("sleep 1000 & touch {}; wait", ready.display());
        let mut sentinel = undertaker()
            .arg("--state-dir")
            .arg(scratch.path().join("state"))
            .args(["run", "--grace", "5s", "--", "sh", "-c", &script])
            .spawn()
            .unwrap();
        assert!(wait_for_file(&ready, Duration::from_secs(60)));
        if direct {
            let guardian = guardian_of(&sentinel).expect("the guardian");
            assert!(signal_child_of(
                sentinel.id() as i32,
                guardian,
                Signal::TERM
            ));
        } else {
            signal_child(&sentinel, Signal::TERM);
        }
        let status = wait_child(&mut sentinel, Duration::from_secs(60)).expect("exited");
        statuses.push(status.code());
        assert_nothing_left();
    }
    assert_eq!(statuses[0], statuses[1], "{statuses:?}");
    assert_eq!(statuses[0], Some(143), "CMD died of SIGTERM: {statuses:?}");
}
