//! A spawned tree's events (docs/SUPERVISE.md, "Events"): `exited` goes out as soon as
//! the root's status is known, before the rest of the tree is torn down, and `ended`
//! when the teardown is over. A host wants the status at once, not after the grace
//! period of a member that ignores SIGTERM. Destructive bodies run inside a private PID
//! namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Far longer than the root's exit takes to be seen, however loaded the machine.
const GRACE: Duration = Duration::from_secs(10);

fn exited_comes_at_once_and_ended_after_the_teardown(tier: &str) {
    let scratch = Scratch::new(&format!("events-{tier}"));
    let mut sup = undertaker()
        .arg("--state-dir")
        .arg(scratch.path())
        .args(["supervise", "--grace", "10s", "--tier", tier])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = sup.stdin.take().unwrap();
    // Each line with when it came, read on a thread so that a missing line fails
    // the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let output = BufReader::new(sup.stdout.take().unwrap());
    std::thread::spawn(move || {
        for text in output.lines().map_while(Result::ok) {
            let line: Value = serde_json::from_str(&text).unwrap();
            if tx.send((line, Instant::now())).is_err() {
                return;
            }
        }
    });
    let next = || {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("no line from the supervisor within 60 s")
    };
    // The root exits 3 at once; the member it leaves ignores SIGTERM (inherited
    // across exec), so the teardown takes the whole grace period.
    let ready = scratch.path().join("ready");
    let request = serde_json::json!({
        "op": "spawn",
        "id": 1,
        "argv": ["sh", "-c", format!("trap '' TERM; sleep 1000 & echo > {}; exit 3", ready.display())],
    });
    writeln!(input, "{request}").unwrap();
    let started = Instant::now();
    let mut lines = Vec::new();
    let (reply, _) = loop {
        let line = next();
        if line.0.get("event").is_none() {
            break line;
        }
        lines.push(line);
    };
    assert_eq!(reply["ok"], true, "{reply}");
    let tree = reply["tree"].clone();
    while lines.len() < 2 {
        lines.push(next());
    }
    let events: Vec<&Value> = lines.iter().map(|(v, _)| v).collect();
    assert_eq!(events[0]["event"], "exited", "{events:?}");
    assert_eq!(events[0]["tree"], tree);
    assert_eq!(events[0]["status"], 3);
    assert_eq!(events[1]["event"], "ended", "{events:?}");
    assert_eq!(events[1]["tree"], tree);
    assert_eq!(events[1]["live"], 0);
    let exited_after = lines[0].1 - started;
    assert!(
        exited_after < GRACE,
        "`exited` came {exited_after:?} after the spawn, not before the member's grace period ran out"
    );
    // `ended` waited for the member's SIGKILL at the end of the grace period.
    assert!(
        lines[1].1 - started >= GRACE - Duration::from_secs(1),
        "`ended` came before the teardown was over"
    );
    drop(input);
    assert_eq!(
        wait_child(&mut sup, Duration::from_secs(60)).and_then(|s| s.code()),
        Some(0)
    );
    assert!(ready.exists());
    assert_nothing_left();
}

#[test]
fn exited_comes_at_once_and_ended_after_the_teardown_in_the_cgroup_tier() {
    if !require_cgroup()
        || !isolate("exited_comes_at_once_and_ended_after_the_teardown_in_the_cgroup_tier")
    {
        return;
    }
    exited_comes_at_once_and_ended_after_the_teardown("cgroup");
}

#[test]
fn exited_comes_at_once_and_ended_after_the_teardown_in_the_subreaper_tier() {
    if !isolate("exited_comes_at_once_and_ended_after_the_teardown_in_the_subreaper_tier") {
        return;
    }
    exited_comes_at_once_and_ended_after_the_teardown("subreaper");
}

#[test]
fn exited_comes_at_once_and_ended_after_the_teardown_in_the_portable_tier() {
    if !isolate("exited_comes_at_once_and_ended_after_the_teardown_in_the_portable_tier") {
        return;
    }
    exited_comes_at_once_and_ended_after_the_teardown("portable");
}
