//! CMD must start with no blocked signals: the guardian blocks the ones its signalfd
//! reads, and a blocked mask is inherited across fork and exec, so a leaked mask makes
//! CMD ignore SIGTERM (teardown then always waits out the grace period) and SIGINT.
#![cfg(target_os = "linux")]

mod common;

use common::undertaker;

#[test]
fn command_starts_with_an_empty_signal_mask() {
    let out = undertaker()
        .args(["run", "--", "cat", "/proc/self/status"])
        .output()
        .expect("running undertaker");
    assert!(out.status.success(), "undertaker run failed: {out:?}");
    let status = String::from_utf8_lossy(&out.stdout);
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .expect("SigBlk line in /proc/self/status")
        .trim();
    assert!(
        blocked.chars().all(|c| c == '0'),
        "CMD started with blocked signals {blocked}"
    );
}
