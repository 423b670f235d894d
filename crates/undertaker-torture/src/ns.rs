//! The private PID namespace every trial runs in, and pid steering inside it.
//!
//! The harness re-executes itself through `unshare --pid --fork --mount-proc` (with
//! `--user --map-root-user` when not root). PID 1 of the namespace is `__init`: it
//! lowers the namespace's own `pid_max` (Linux ≥ 6.14 keeps one per namespace), starts
//! the worker and reaps every orphan until the worker exits; then the kernel kills
//! whatever is left. Nothing outside the namespace can be signalled by anything inside.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};

/// Set in the worker's environment: we are inside the private namespace.
pub const INSIDE_VAR: &str = "TORTURE_IN_NAMESPACE";
/// The namespace's pid_max: small, so numbers wrap within a few dozen trials.
pub const NS_PID_MAX: u32 = 700;
const NS_LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

pub fn inside() -> bool {
    std::env::var_os(INSIDE_VAR).is_some()
}

fn unshare_args() -> Vec<&'static str> {
    let mut args = Vec::new();
    if !rustix::process::geteuid().is_root() {
        args.extend(["--user", "--map-root-user"]);
    }
    args.extend(["--pid", "--fork", "--mount-proc"]);
    args
}

/// Whether this machine lets us create the private namespace; `Err` says why not.
pub fn probe() -> Result<()> {
    let out = Command::new("unshare")
        .args(unshare_args())
        .arg("true")
        .stdin(Stdio::null())
        .output()
        .context("cannot run unshare (util-linux)")?;
    if !out.status.success() {
        bail!(
            "unshare {} failed: {}",
            unshare_args().join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs this binary again with `args`, as PID 1 of a fresh namespace; returns its status.
pub fn reexec(args: &[OsString]) -> Result<i32> {
    let exe = std::env::current_exe().context("locating our own executable")?;
    let status = Command::new("unshare")
        .args(unshare_args())
        .arg("--")
        .arg(exe)
        .arg("__init")
        .args(args)
        .env(INSIDE_VAR, "1")
        .status()
        .context("running unshare")?;
    Ok(status.code().unwrap_or(125))
}

/// Linux ≥ 6.14 gives each PID namespace its own pid_max. On older kernels the file
/// is the host's, so we leave it alone.
fn per_namespace_pid_max() -> bool {
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (6, 14)
}

/// PID 1 of the namespace: set pid_max, run the worker, reap everything.
pub fn init(args: &[String]) -> ExitCode {
    if rustix::process::getpid().as_raw_nonzero().get() != 1 {
        eprintln!("undertaker-torture: __init must be PID 1 of a new namespace");
        return ExitCode::from(125);
    }
    if per_namespace_pid_max() {
        if let Err(e) = std::fs::write("/proc/sys/kernel/pid_max", NS_PID_MAX.to_string()) {
            eprintln!("undertaker-torture: note: could not lower the namespace pid_max: {e}");
        }
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    // The worker leads its own group, so its pgrp is a number inside the namespace.
    let worker = match Command::new(exe).args(args).process_group(0).spawn() {
        Ok(c) => c.id() as i32,
        Err(e) => {
            eprintln!("undertaker-torture: cannot start the worker: {e}");
            return ExitCode::from(125);
        }
    };
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid.as_raw_nonzero().get() == worker => {
                let code = status
                    .exit_status()
                    .or_else(|| status.terminating_signal().map(|s| 128 + s))
                    .unwrap_or(125);
                return ExitCode::from(code.clamp(0, 255) as u8);
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return ExitCode::from(125),
        }
    }
}

/// The namespace's pid_max as the kernel reports it.
pub fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Makes `target` the next pid the namespace hands out (if it is free by then).
pub fn aim_next_pid(target: i32) -> std::io::Result<()> {
    std::fs::write(NS_LAST_PID, (target - 1).to_string())
}
