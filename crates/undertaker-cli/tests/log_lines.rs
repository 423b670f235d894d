//! The stderr log as a person reads it: times, and a teardown that says when its grace
//! ran out, what it used then, and how it ended.
#![cfg(target_os = "linux")]

mod common;

use common::*;

#[test]
fn a_teardown_says_when_the_grace_ran_out_and_how_it_ended() {
    let scratch = Scratch::new("log-lines");
    let out = undertaker()
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .args(["--log-level", "debug", "run", "--grace", "1s", "--"])
        // CMD leaves a child that ignores SIGTERM: the grace runs out.
        .args([
            "sh",
            "-c",
            "(trap '' TERM; exec sleep 1000) & sleep 0.2; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines() {
        assert!(
            line.starts_with("20") && line.contains("Z "),
            "no time: {line}"
        );
    }
    let has = |needle: &str| stderr.lines().any(|l| l.contains(needle));
    assert!(
        has("INFO waiting up to 1000 ms for 1 process(es)"),
        "{stderr}"
    );
    assert!(
        has("INFO grace period of 1000 ms over with 1 process(es) left"),
        "{stderr}"
    );
    assert!(has("done: 1 signalled, 0 left"), "{stderr}");
    for rust in ["Some(", "None", "CommandExited"] {
        assert!(!stderr.contains(rust), "Rust's {rust} in the log: {stderr}");
    }
    assert!(has("tearing down tree"), "{stderr}");
}

/// A pidns tree's teardown is in `undertaker log`: what the init did when CMD exited,
/// and the signals to the init when the tree is ended from outside.
#[test]
fn a_pidns_teardown_is_in_the_audit_log() {
    let probe = undertaker()
        .args(["run", "--tier", "pidns", "--", "true"])
        .output()
        .unwrap();
    if !probe.status.success() {
        skip(&format!(
            "pidns tier unavailable: {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
        return;
    }
    let scratch = Scratch::new("log-pidns");
    let state = scratch.path().join("state");
    let state_arg = state.to_str().unwrap();
    let out = ut(
        &state,
        &[
            "run",
            "--tier",
            "pidns",
            "--label",
            "ends",
            "--",
            "sh",
            "-c",
            "sleep 1000 & exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // Ended from outside: `undertaker kill` asks the guardian, which signals the init.
    let ready = scratch.path().join("ready");
    let mut guarded = undertaker()
        .args([
            "--state-dir",
            state_arg,
            "run",
            "--tier",
            "pidns",
            "--label",
            "killed",
        ])
        .args(["--grace", "300ms", "--", "sh", "-c"])
        .arg(format!("sleep 1000 & touch {}; wait", ready.display()))
        .spawn()
        .unwrap();
    assert!(wait_for_file(&ready, std::time::Duration::from_secs(30)));
    let tree = find_tree(&state, "killed", std::time::Duration::from_secs(30)).unwrap();
    let killed = ut(&state, &["kill", tree["id"].as_str().unwrap()]);
    assert!(killed.status.success(), "{killed:?}");
    let _ = guarded.wait();
    let log = json(&ut(&state, &["log", "--json"]));
    let entries = log.as_array().unwrap();
    let notes = entries.iter().filter(|e| e["event"] == "note").count();
    assert_eq!(notes, 2, "one note per namespace teardown: {log:#}");
    assert!(
        entries.iter().any(|e| e["event"] == "signal"
            && e["signal"] == "SIGTERM"
            && e["proof"] == "pidfd+child"),
        "no SIGTERM to the init: {log:#}"
    );
}
