//! What every trial shares: the context, starting trees (bare or under `undertaker
//! run`), waiting for them to be ready, and the per-trial result.

use crate::modes::{ROLE_VAR, TRIAL_VAR};
use crate::procs::{self, DecoyVerdict, Lines, Member};
use anyhow::{anyhow, bail, Context, Result};
use rustix::process::{Pid, PidfdFlags};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a helper may take to say it is ready before the trial is an error.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Ctx {
    pub exe: PathBuf,
    pub undertaker: PathBuf,
    /// Passed to `undertaker run`/`sweep` when the binary supports `--state-dir`.
    pub state_dir: Option<PathBuf>,
    pub sweep_available: bool,
    pub tier: Option<String>,
    /// The harness's own scratch files (never inside the state dir).
    pub scratch: PathBuf,
    nonce: String,
    counter: u64,
}

impl Ctx {
    pub fn new(exe: PathBuf, undertaker: PathBuf, tier: Option<String>, seed: u64) -> Self {
        let mut random = [0u8; 6];
        let _ = rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty());
        let nonce: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let sweep_available = Command::new(&undertaker)
            .args(["sweep", "--help"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        let run_help = Command::new(&undertaker)
            .args(["run", "--help"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let state_dir = run_help
            .contains("--state-dir")
            .then(|| std::env::temp_dir().join(format!("undertaker-torture-{nonce}-{seed}")));
        if let Some(dir) = &state_dir {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
        }
        let scratch =
            std::env::temp_dir().join(format!("undertaker-torture-{nonce}-{seed}-scratch"));
        {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(&scratch);
        }
        Ctx {
            exe,
            scratch,
            undertaker,
            state_dir,
            sweep_available,
            tier,
            nonce,
            counter: 0,
        }
    }

    pub fn next_trial(&mut self) -> String {
        self.counter += 1;
        format!("{}-{}", self.nonce, self.counter)
    }

    /// Appends `env MARKERS… <self> __tree SPEC`: the marker is set through env(1) so
    /// a wrapping guardian does not carry it itself.
    fn tree_args(&self, cmd: &mut Command, trial: &str, spec: &str) {
        cmd.arg("env")
            .arg(format!("{TRIAL_VAR}={trial}"))
            .arg(format!("{ROLE_VAR}=leader"))
            .arg(&self.exe)
            .arg("__tree")
            .arg(spec)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
    }

    /// A bare tree, as a host without undertaker starts it.
    pub fn bare_tree(&self, trial: &str, spec: &str) -> Command {
        let mut cmd = Command::new("env");
        cmd.arg(format!("{TRIAL_VAR}={trial}"))
            .arg(format!("{ROLE_VAR}=leader"))
            .arg(&self.exe)
            .arg("__tree")
            .arg(spec)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        cmd
    }

    /// The owner stand-in: a process that just lives until the harness kills it.
    pub fn spawn_owner(&self) -> Result<Child> {
        Command::new(&self.exe)
            .arg("__owner")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting the owner")
    }

    /// `undertaker run --owner OWNER --grace GRACE -- <tree>`.
    pub fn guarded_tree(&self, trial: &str, spec: &str, grace: Duration, owner: u32) -> Command {
        let mut cmd = Command::new(&self.undertaker);
        cmd.arg("run");
        if let Some(dir) = &self.state_dir {
            cmd.arg("--state-dir").arg(dir);
        }
        if let Some(tier) = &self.tier {
            cmd.arg("--tier").arg(tier);
        }
        cmd.arg("--label")
            .arg(format!("torture-{trial}"))
            .arg("--grace")
            .arg(format!("{}ms", grace.as_millis()))
            .arg("--owner")
            .arg(owner.to_string())
            .arg("--");
        self.tree_args(&mut cmd, trial, spec);
        cmd
    }

    /// `undertaker sweep`; its exit status.
    pub fn sweep(&self) -> Option<i32> {
        let mut cmd = Command::new(&self.undertaker);
        cmd.arg("sweep");
        if let Some(dir) = &self.state_dir {
            cmd.arg("--state-dir").arg(dir);
        }
        cmd.arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .ok()
            .and_then(|s| s.code())
    }

    pub fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
        if let Some(dir) = &self.state_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A ready tree: its members, proven, and the signal mask the leader inherited.
pub struct Tree {
    pub members: HashMap<String, Member>,
    /// `Some(mask)` if the leader started with signals blocked.
    pub inherited_mask: Option<String>,
}

/// Waits for `1 + members` "ready" lines, then proves every member by its marker.
pub fn await_tree(lines: &mut Lines, trial: &str, spec: &str) -> Result<Tree> {
    let expected = 1 + spec.split(',').filter(|k| !k.is_empty()).count();
    let mut ready = 0;
    let mut inherited_mask = None;
    while ready < expected {
        match lines.next(READY_TIMEOUT) {
            Some(l) if l.starts_with("ready ") => {
                ready += 1;
                if l.starts_with("ready leader") {
                    inherited_mask = l.split_once("sigblk=").map(|(_, m)| m.to_string());
                }
            }
            Some(_) => {}
            None => bail!("tree {trial} not ready ({ready}/{expected})"),
        }
    }
    let mut members = HashMap::new();
    for (pid, role) in procs::trial_members(trial) {
        if let Some(m) = Member::prove(pid, trial) {
            members.insert(role, m);
        }
    }
    if members.len() != expected {
        bail!(
            "tree {trial}: found {} of {expected} members",
            members.len()
        );
    }
    Ok(Tree {
        members,
        inherited_mask,
    })
}

pub fn role<'a>(members: &'a HashMap<String, Member>, name: &str) -> Result<&'a Member> {
    members
        .get(name)
        .ok_or_else(|| anyhow!("tree has no {name} member"))
}

/// Waits (bounded) for one of our own children to exit, through a pidfd: it is
/// unreaped until we wait for it, so its number is its own.
pub fn child_exited_within(child: &Child, timeout: Duration) -> bool {
    match Pid::from_raw(child.id() as i32)
        .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
    {
        Some(fd) => procs::pidfd_readable(&fd, timeout),
        None => true,
    }
}

/// SIGKILLs our own child (by handle: never a recycled number) and reaps it.
pub fn kill_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The measurable result of one trial.
#[derive(Debug, Default)]
pub struct Outcome {
    pub reused: bool,
    pub interleaved: bool,
    pub decoys: Vec<DecoyVerdict>,
    pub survivors: u32,
    /// Something the trial noticed that is worth reporting beside the numbers.
    pub note: Option<String>,
}
