//! The macOS backend on a real Mac (docs/PORTING.md, "The macOS backend"): type-checked
//! on Linux by scripts/cross/check.sh, run by the ci workflow's macOS job. What exists
//! there today: `doctor` probes libproc, `KERN_PROCARGS2`, kqueue and the boot session
//! on the test process itself; `log` reads a state directory; `run` exits 125.
#![cfg(target_os = "macos")]

use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch state directory of this test's own, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("undertaker-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn undertaker(state: &Scratch, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_undertaker"))
        .arg("--state-dir")
        .arg(&state.0)
        .args(args)
        .output()
        .expect("undertaker starts")
}

#[test]
fn doctor_probes_answer_on_this_mac() {
    let state = Scratch::new("doctor");
    let out = undertaker(&state, &["doctor", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["kernel"].as_str().is_some_and(|k| k.starts_with("macos")));
    for probe in [
        "proc_pidinfo_uniqid",
        "kern_procargs2",
        "kqueue_evfilt_proc",
        "boot_session_uuid",
    ] {
        assert_eq!(
            v["checks"][probe]["ok"], true,
            "{probe}: {}",
            v["checks"][probe]
        );
    }
    // Which binding is in use is reported, not required (macOS 14.4+ has the token).
    let binding = &v["checks"]["kernel_checked_signal"];
    assert!(binding["ok"].is_boolean() && binding["detail"].is_string());
    println!("kernel_checked_signal: {binding}");
}

#[test]
fn run_says_it_is_not_supported_yet_and_starts_nothing() {
    let state = Scratch::new("run");
    let marker = state.0.join("started");
    let out = undertaker(
        &state,
        &["run", "--", "/usr/bin/touch", marker.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not supported"));
    assert!(!marker.exists(), "CMD must not have been started");
}

#[test]
fn log_reads_an_empty_state_directory() {
    let state = Scratch::new("log");
    let out = undertaker(&state, &["log"]);
    assert!(out.status.success(), "{out:?}");
}
