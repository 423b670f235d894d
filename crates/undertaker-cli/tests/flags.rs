//! Every setting undertaker reads from the environment also has a flag: some hosts
//! (Codex) hand a server only `HOME PATH TERM LANG SHELL PWD`.
#![cfg(target_os = "linux")]

mod common;

use common::*;

#[test]
fn settings_work_as_flags_in_an_environment_stripped_like_codex() {
    let scratch = Scratch::new("flags");
    let out = std::process::Command::new(UNDERTAKER)
        .env_clear()
        .env("HOME", test_home())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .args(["--log-level", "debug", "--no-heal", "run", "--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tier chosen"), "no debug log: {stderr}");
    assert!(
        scratch.path().join("state").is_dir(),
        "--state-dir was not used"
    );
}
