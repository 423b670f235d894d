//! Capabilities, skipping, and re-running a test as PID 1 of a private PID namespace.

use std::process::Command;

const INSIDE: &str = "UNDERTAKER_TEST_INSIDE_PIDNS";

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Reports a test as skipped, or fails it in CI where every capability must exist.
pub fn skip(reason: &str) {
    assert!(!in_ci(), "required in CI but unavailable: {reason}");
    eprintln!("skipped: {reason}");
}

/// Runs the calling test again, alone, inside a private PID (and mount) namespace,
/// where it is PID 1 and can only ever see and signal its own processes. Returns `true`
/// when the caller is already inside and should run its body; `false` after the inner
/// run passed (or was skipped).
pub fn isolate(test_name: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    let mut cmd = Command::new("unshare");
    if !is_root() {
        cmd.args(["--user", "--map-root-user"]);
    }
    cmd.args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(std::env::current_exe().expect("test binary path"))
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .env_remove("UNDERTAKER_TREE");
    // Anything the inner run starts through a shell finds the test state, not the user's.
    super::cli::with_test_state(&mut cmd);
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => {
            skip(&format!("cannot run unshare: {e}"));
            return false;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.starts_with("unshare:") {
        skip(&format!("no private PID namespace here: {}", stderr.trim()));
        return false;
    }
    eprintln!("--- inner run of {test_name} ---\n{stdout}\n{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "isolated run of {test_name} failed or did not run ({})",
        out.status
    );
    false
}

/// `Ok` when `tier` can guard a tree here. Asked of the binary for pidns: the probe
/// forks, which the multi-threaded test harness may not.
pub fn tier_available(tier: &str) -> Result<(), String> {
    if tier == "cgroup" {
        return undertaker::testing::cgroup_tier_available();
    }
    let out = super::cli::undertaker()
        .args(["run", "--tier", tier, "--", "true"])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Skips the test (false) unless `tier` is available here.
pub fn require_tier(tier: &str) -> bool {
    match tier_available(tier) {
        Ok(()) => true,
        Err(why) => {
            skip(&format!("{tier} tier unavailable: {why}"));
            false
        }
    }
}

/// Skips the test (false) unless the cgroup tier is available here.
pub fn require_cgroup() -> bool {
    require_tier("cgroup")
}

pub fn require_python() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip("python3 not installed");
    }
    ok
}
