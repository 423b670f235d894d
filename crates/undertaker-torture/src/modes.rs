//! The helper processes, as hidden modes of this very binary (`undertaker-torture __NAME`):
//! tree members (the escape zoo), decoys (strangers that record what they receive),
//! the owner stand-in, and the namespace's init.

use crate::sys;
use std::io::{Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

/// Environment variable naming a tree member's role (`leader`, `plain`, ...).
pub const ROLE_VAR: &str = "TORTURE_ROLE";
/// Environment variable every tree member carries: the trial it belongs to.
pub const TRIAL_VAR: &str = "TORTURE_TRIAL";

// Member kinds a tree can contain (see `member`): `plain`, `ignorer` (SIGTERM ignored)
// and `ownpg` (setpgid(0,0)) are the leader's children; `setsid`, `setsid-ignorer` and
// `setsid-reporter` (prints "term" on SIGTERM and keeps running) are double-forked
// daemons in their own session.

pub fn run(mode: &str, args: &[std::ffi::OsString]) -> ExitCode {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match mode {
        "__init" => crate::ns::init(&args),
        "__tree" => tree(args.first().map(String::as_str).unwrap_or("")),
        "__daemonize" => daemonize(args.first().map(String::as_str).unwrap_or("plain")),
        "__member" => member(args.first().map(String::as_str).unwrap_or("plain")),
        "__decoy" => decoy(),
        "__decoy-group" => decoy_group(),
        "__owner" => sleep_forever(),
        "__sv-host" => crate::svhost::host_main(&args),
        other => {
            eprintln!("undertaker-torture: unknown internal mode {other}");
            ExitCode::from(2)
        }
    }
}

fn self_command(mode: &str) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let mut cmd = Command::new(exe);
    cmd.arg(mode);
    cmd
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Notes the signal mask we inherited (" sigblk=HEX" if any signal was blocked), then
/// unblocks everything so the trial does not depend on it.
fn start_clean() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(str::trim)
        .unwrap_or("");
    let blocked = u64::from_str_radix(mask, 16).unwrap_or(0);
    sys::unblock_all_signals();
    if blocked == 0 {
        String::new()
    } else {
        format!(" sigblk={mask}")
    }
}

fn sleep_forever() -> ExitCode {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The tree's root: starts each member of `spec` (comma separated kinds), says
/// "ready leader", and sleeps.
fn tree(spec: &str) -> ExitCode {
    let blocked = start_clean();
    let mut children = Vec::new();
    for kind in spec.split(',').filter(|k| !k.is_empty()) {
        let mode = if kind.starts_with("setsid") {
            "__daemonize"
        } else {
            "__member"
        };
        let mut cmd = self_command(mode);
        cmd.arg(kind).env(ROLE_VAR, kind).stdin(Stdio::null());
        match cmd.spawn() {
            // The daemonizer exits at once; reaping it leaves its child orphaned.
            Ok(mut child) if mode == "__daemonize" => {
                let _ = child.wait();
            }
            Ok(child) => children.push(child),
            Err(e) => eprintln!("undertaker-torture: cannot start {kind}: {e}"),
        }
    }
    say(&format!("ready leader{}", blocked));
    sleep_forever()
}

/// Double fork + setsid: a new session, a child in it, and exit.
fn daemonize(kind: &str) -> ExitCode {
    let _ = rustix::process::setsid();
    let mut cmd = self_command("__member");
    cmd.arg(kind);
    match cmd.spawn() {
        Ok(_) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

fn member(kind: &str) -> ExitCode {
    let blocked = start_clean();
    if kind.starts_with("ownpg") {
        let _ = rustix::process::setpgid(None, None);
    }
    if kind.ends_with("ignorer") {
        sys::ignore_sigterm();
    }
    if kind.ends_with("reporter") {
        sys::report_sigterm();
    }
    say(&format!("ready {kind}{blocked}"));
    sleep_forever()
}

/// A stranger: records every catchable signal; answers "sigs N:COUNT ..." to each `?`
/// on stdin; exits at end of file. Its spawner makes it a group leader.
fn decoy() -> ExitCode {
    sys::record_all_signals();
    say("ready decoy");
    let mut stdin = std::io::stdin().lock();
    let mut byte = [0u8; 1];
    loop {
        match stdin.read(&mut byte) {
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) if byte[0] == b'?' => {
                let list: Vec<String> = sys::recorded_signals()
                    .iter()
                    .map(|(sig, n)| format!("{sig}:{n}"))
                    .collect();
                say(&format!("sigs {}", list.join(" ")));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return ExitCode::FAILURE,
        }
    }
}

/// A stranger group whose leader is already gone: starts a decoy in its own group
/// (inherited from us, pid == pgid) and exits, leaving the group leaderless.
fn decoy_group() -> ExitCode {
    match self_command("__decoy").spawn() {
        Ok(_) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
