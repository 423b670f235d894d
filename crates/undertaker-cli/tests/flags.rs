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

/// A mistyped option before CMD is a usage error naming the option meant (exit 2, one
/// line), never the command; after `--` a command may start with `-`.
#[test]
fn a_mistyped_option_is_a_usage_error_not_the_command() {
    let scratch = Scratch::new("flags-typo");
    let state = scratch.path().join("state");
    let run = |args: &[&str]| {
        std::process::Command::new(UNDERTAKER)
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["run", "--lable", "x", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(
        stderr.contains("--lable") && stderr.contains("--label"),
        "{stderr}"
    );
    // A word after `--` is the command, whatever it looks like: here one that does
    // not exist, so the shell's 127, not a usage error.
    let out = run(&["run", "--", "-no-such-command"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    // Options of CMD after CMD are CMD's.
    let out = run(&["run", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
}

/// `--help` shows examples and exit statuses, lists on each command only the options
/// that act there, and points to no file a pip or npm user does not have.
#[test]
fn help_has_examples_exit_statuses_and_only_the_options_that_apply() {
    let help = |args: &[&str]| {
        let out = std::process::Command::new(UNDERTAKER)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let top = help(&["--help"]);
    assert!(
        top.contains("Examples:") && top.contains("Exit status:"),
        "{top}"
    );
    for command in ["ps", "sweep", "kill", "log"] {
        let text = help(&[command, "--help"]);
        assert!(!text.contains("--cgroup-root"), "{command}: {text}");
        assert!(!text.contains("docs/CLI-JSON"), "{command}: {text}");
    }
    // Each command's help opens with the line the top-level list gives it (the
    // subcommands are built only when used: a flattened struct's doc could take over).
    for command in ["run", "supervise", "ps", "sweep", "kill", "log", "doctor"] {
        let listed = top
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(command))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{command} not listed: {top}"));
        let text = help(&[command, "--help"]);
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.trim_end_matches('.').starts_with(listed),
            "{command}: help opens with {first:?}, listed as {listed:?}"
        );
    }
}
