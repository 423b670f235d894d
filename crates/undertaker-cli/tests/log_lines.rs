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
    assert!(
        !stderr.contains("Some("),
        "Rust's Option in the log: {stderr}"
    );
}
