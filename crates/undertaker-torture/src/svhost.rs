//! A host of `undertaker supervise`, as Hermes's is: it starts the supervisor with
//! standard input a pipe it holds, starts trees as its own children (their own process
//! groups), reaps them when told, and relays request lines. The harness drives it
//! (`__sv-host` mode of this binary) over its stdin, so that killing it with -9 is a
//! real host death: the supervisor sees its owner die and its input end at once.
//!
//! Everything the host, the supervisor and the host's trees print goes to the host's
//! standard output, one pipe the harness reads: `host ...` lines, the supervisor's
//! JSON replies, and the trees' `ready ...`/`term` lines.

use crate::modes::{ROLE_VAR, TRIAL_VAR};
use crate::procs::{self, Lines};
use crate::trial::{self, Ctx, READY_TIMEOUT};
use anyhow::{anyhow, bail, Context, Result};
use rustix::fd::OwnedFd;
use rustix::process::{Pid, PidfdFlags, Signal};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How long a supervisor reply may take (a `kill` runs a whole teardown first).
const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- the host process

/// `__sv-host UNDERTAKER STATE_DIR GRACE TIER` (`-` for none).
pub fn host_main(args: &[String]) -> ExitCode {
    let arg = |i: usize| args.get(i).map(String::as_str).filter(|a| *a != "-");
    let (Some(undertaker), Some(grace)) = (arg(0), arg(2)) else {
        eprintln!("undertaker-torture: __sv-host needs UNDERTAKER STATE_DIR GRACE TIER");
        return ExitCode::from(2);
    };
    // Hermes names its own process group (never to be signalled) where it can.
    let parent_pgid = Command::new(undertaker)
        .args(["supervise", "--help"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--parent-pgid"))
        .then(|| {
            rustix::process::getpgrp()
                .as_raw_nonzero()
                .get()
                .to_string()
        });
    let start = || {
        let mut cmd = Command::new(undertaker);
        cmd.arg("supervise");
        if let Some(pgid) = &parent_pgid {
            cmd.args(["--parent-pgid", pgid]);
        }
        if let Some(dir) = arg(1) {
            cmd.arg("--state-dir").arg(dir);
        }
        if let Some(tier) = arg(3) {
            cmd.arg("--tier").arg(tier);
        }
        cmd.args(["--grace", grace, "--label", "torture-sv"])
            .stdin(Stdio::piped());
        if std::env::var_os("TORTURE_DEBUG").is_none() {
            cmd.stderr(Stdio::null());
        }
        cmd.spawn()
    };
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let Ok(mut supervisor) = start() else {
        say("host error cannot start undertaker supervise".into());
        return ExitCode::FAILURE;
    };
    let mut input: Option<ChildStdin> = supervisor.stdin.take();
    say(format!("host supervisor {}", supervisor.id()));
    let mut kids: HashMap<i32, Child> = HashMap::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (verb, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match verb {
            "tree" | "tree-quiet" => {
                let (trial, spec) = rest.split_once(' ').unwrap_or((rest, ""));
                let stdout = if verb == "tree" {
                    Stdio::inherit()
                } else {
                    Stdio::null()
                };
                let spawned = Command::new(&exe)
                    .arg("__tree")
                    .arg(spec)
                    .env(TRIAL_VAR, trial)
                    .env(ROLE_VAR, "leader")
                    .process_group(0)
                    .stdin(Stdio::null())
                    .stdout(stdout)
                    .spawn();
                match spawned {
                    Ok(child) => {
                        let pid = child.id() as i32;
                        kids.insert(pid, child);
                        say(format!("host child {pid}"));
                    }
                    Err(e) => say(format!("host error tree: {e}")),
                }
            }
            "reap" => {
                let pid: i32 = rest.trim().parse().unwrap_or(0);
                if let Some(mut child) = kids.remove(&pid) {
                    let _ = child.wait();
                }
                say(format!("host reaped {pid}"));
            }
            "send" => {
                if let Some(w) = input.as_mut() {
                    let _ = w.write_all(format!("{rest}\n").as_bytes());
                    let _ = w.flush();
                }
            }
            "restart" => {
                drop(input.take());
                let _ = supervisor.wait();
                match start() {
                    Ok(mut s) => {
                        input = s.stdin.take();
                        say(format!("host supervisor {}", s.id()));
                        supervisor = s;
                    }
                    Err(e) => say(format!("host error restart: {e}")),
                }
            }
            _ => {}
        }
    }
    ExitCode::SUCCESS
}

// ---------------------------------------------------------------- the harness side

/// The supervisor process, pinned by a pidfd opened while it was the host's unreaped
/// child (checked after opening).
pub struct SupervisorProc {
    fd: OwnedFd,
}

impl SupervisorProc {
    pub fn exited_within(&self, timeout: Duration) -> bool {
        procs::pidfd_readable(&self.fd, timeout)
    }

    /// `kill -9` through the pidfd; waits (bounded) until it is gone.
    pub fn kill9(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.fd, Signal::KILL);
        self.exited_within(Duration::from_secs(5));
    }
}

/// The host's output: lines read but not yet wanted are kept for later.
struct Stream {
    lines: Lines,
    pending: VecDeque<String>,
}

impl Stream {
    /// The first line (already read or read now) that `want` accepts.
    fn line(&mut self, timeout: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
        if let Some(i) = self.pending.iter().position(|l| want(l)) {
            return self.pending.remove(i);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.next(left)?;
            if want(&line) {
                return Some(line);
            }
            self.pending.push_back(line);
        }
    }

    /// The number in the host's next `PREFIX<number>` line; its error line, or
    /// `missing` when neither comes.
    fn number(&mut self, prefix: &str, missing: &str) -> Result<i32> {
        let line = self
            .line(READY_TIMEOUT, |l| {
                l.starts_with(prefix) || l.starts_with("host error")
            })
            .ok_or_else(|| anyhow!("{missing}"))?;
        line.strip_prefix(prefix)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow!("{line}"))
    }

    /// Reads the supervisor the host (pid `host`) says it started, and pins it.
    fn supervisor(&mut self, host: i32) -> Result<SupervisorProc> {
        let pid = self.number("host supervisor ", "the host never started the supervisor")?;
        let fd = Pid::from_raw(pid)
            .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
            .ok_or_else(|| anyhow!("the supervisor exited at once"))?;
        if procs::parent_of(pid) != Some(host) {
            bail!("pid {pid} is not the host's supervisor");
        }
        Ok(SupervisorProc { fd })
    }
}

/// The harness's handle on one host and the supervisor it started.
pub struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    stream: Stream,
    pub supervisor: SupervisorProc,
    next_id: u64,
    /// The tier the supervisor reported (`hello`).
    pub tier: String,
}

impl Host {
    pub fn start(ctx: &Ctx, grace: Duration) -> Result<Host> {
        let opt = |o: Option<String>| o.unwrap_or_else(|| "-".into());
        let mut child = Command::new(&ctx.exe)
            .arg("__sv-host")
            .arg(&ctx.undertaker)
            .arg(opt(ctx.state_dir.as_ref().map(|d| d.display().to_string())))
            .arg(format!("{}ms", grace.as_millis()))
            .arg(opt(ctx.tier.clone()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the host")?;
        let stdin = child.stdin.take();
        let mut stream = Stream {
            lines: Lines::new(
                child
                    .stdout
                    .take()
                    .ok_or_else(|| anyhow!("no host stdout"))?,
            ),
            pending: VecDeque::new(),
        };
        let supervisor = match stream.supervisor(child.id() as i32) {
            Ok(s) => s,
            Err(e) => {
                trial::kill_child(&mut child);
                return Err(e);
            }
        };
        let mut host = Host {
            child,
            stdin,
            stream,
            supervisor,
            next_id: 0,
            tier: String::new(),
        };
        let hello = host.request(json!({"op": "hello"}))?;
        host.tier = hello["tier"].as_str().unwrap_or("").to_owned();
        Ok(host)
    }

    fn command(&mut self, line: &str) -> Result<()> {
        let w = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("host input closed"))?;
        w.write_all(format!("{line}\n").as_bytes())
            .and_then(|_| w.flush())
            .context("writing to the host")
    }

    pub fn line(&mut self, timeout: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
        self.stream.line(timeout, want)
    }

    /// Starts `__tree SPEC` as the host's child, marked `trial`, and waits until every
    /// member said ready. Returns the leader's pid.
    pub fn tree(&mut self, trial: &str, spec: &str) -> Result<i32> {
        self.command(&format!("tree {trial} {spec}"))?;
        let leader = self.stream.number(
            "host child ",
            &format!("the host did not start tree {trial}"),
        )?;
        let expected = 1 + spec.split(',').filter(|k| !k.is_empty()).count();
        for n in 0..expected {
            self.line(READY_TIMEOUT, |l| l.starts_with("ready "))
                .ok_or_else(|| anyhow!("tree {trial} not ready ({n}/{expected})"))?;
        }
        Ok(leader)
    }

    /// Starts `__tree SPEC` as the host's child with its output discarded, and returns
    /// at once: the leader's pid and a pidfd opened while it was the host's unreaped
    /// child (checked after opening).
    pub fn tree_now(&mut self, trial: &str, spec: &str) -> Result<(i32, OwnedFd)> {
        self.command(&format!("tree-quiet {trial} {spec}"))?;
        let leader = self.stream.number(
            "host child ",
            &format!("the host did not start tree {trial}"),
        )?;
        let fd = Pid::from_raw(leader)
            .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
            .ok_or_else(|| anyhow!("the host's child {leader} is gone"))?;
        if procs::parent_of(leader) != Some(self.child.id() as i32) {
            bail!("pid {leader} is not the host's child");
        }
        Ok((leader, fd))
    }

    /// The host reaps its child `pid` (as any event loop does once it exited).
    pub fn reap(&mut self, pid: i32) -> Result<()> {
        self.command(&format!("reap {pid}"))?;
        let want = format!("host reaped {pid}");
        self.line(READY_TIMEOUT, |l| l == want)
            .map(|_| ())
            .ok_or_else(|| anyhow!("the host did not reap {pid}"))
    }

    /// Sends one request line through the host without waiting for its reply.
    pub fn send(&mut self, line: &str) -> Result<()> {
        self.command(&format!("send {line}"))
    }

    /// Sends a JSON request with a fresh `id`; returns that id.
    pub fn send_json(&mut self, mut request: Value) -> Result<u64> {
        self.next_id += 1;
        request["id"] = json!(self.next_id);
        self.send(&request.to_string())?;
        Ok(self.next_id)
    }

    /// The reply (not an event) that `want` accepts, within `timeout`.
    pub fn reply(&mut self, timeout: Duration, want: impl Fn(&Value) -> bool) -> Option<Value> {
        let line = self.line(timeout, |l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| v.get("ok").is_some() && want(&v))
        })?;
        serde_json::from_str(&line).ok()
    }

    pub fn reply_to(&mut self, id: u64, timeout: Duration) -> Option<Value> {
        self.reply(timeout, |v| v["id"] == json!(id))
    }

    /// A JSON request and its reply.
    pub fn request(&mut self, request: Value) -> Result<Value> {
        let op = request["op"].as_str().unwrap_or("?").to_owned();
        let id = self.send_json(request)?;
        self.reply_to(id, REPLY_TIMEOUT)
            .ok_or_else(|| anyhow!("no reply to {op}"))
    }

    /// `kill -9` of the supervisor, then the host starts a new one (as Hermes does).
    pub fn restart_supervisor(&mut self) -> Result<()> {
        self.supervisor.kill9();
        self.command("restart")?;
        self.supervisor = self.stream.supervisor(self.child.id() as i32)?;
        Ok(())
    }

    /// `kill -9` of the host (our child: by handle, never by number).
    pub fn kill9(&mut self) {
        drop(self.stdin.take());
        trial::kill_child(&mut self.child);
    }

    /// Waits for the supervisor to finish (bounded); false if it is still running.
    pub fn supervisor_done(&self, timeout: Duration) -> bool {
        self.supervisor.exited_within(timeout)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill9();
        if !self.supervisor.exited_within(Duration::ZERO) {
            self.supervisor.kill9();
        }
    }
}
