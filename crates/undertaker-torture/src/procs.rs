//! Observing and cleaning up a trial's processes, and placing decoys.
//!
//! Tree members are found by their `TORTURE_TRIAL` environment marker, never by
//! number alone. The harness's own housekeeping signals (making a member exit on cue,
//! killing survivors after counting them) go through a pidfd opened *before* the marker
//! is re-checked, so even the harness cannot hit a recycled number.

use crate::modes::{ROLE_VAR, TRIAL_VAR};
use crate::ns;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::OwnedFd;
use rustix::process::{Pid, PidfdFlags, Signal};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Reads lines from a child's pipe with a deadline (a hung helper must not hang us).
pub struct Lines {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Lines {
    pub fn new(fd: impl Into<OwnedFd>) -> Self {
        Lines {
            fd: fd.into(),
            buf: Vec::new(),
        }
    }

    /// The next line, or `None` at end of file or when `timeout` passes.
    pub fn next(&mut self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(String::from_utf8_lossy(&line[..pos]).into_owned());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let left = deadline - now;
            let ts = rustix::time::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos() as i64,
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, Some(&ts)) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return None,
            }
            let mut chunk = [0u8; 512];
            match rustix::io::read(&self.fd, &mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => {}
                Err(_) => return None,
            }
        }
    }
}

fn environ(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ")).ok()
}

fn env_value(environ: &[u8], name: &str) -> Option<String> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let s = std::str::from_utf8(entry).ok()?;
        let (k, v) = s.split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

fn all_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Live (non-zombie) processes carrying this trial's marker: pid → role.
pub fn trial_members(trial: &str) -> HashMap<i32, String> {
    let mut found = HashMap::new();
    for pid in all_pids() {
        let Some(env) = environ(pid) else { continue };
        if env_value(&env, TRIAL_VAR).as_deref() == Some(trial) {
            found.insert(pid, env_value(&env, ROLE_VAR).unwrap_or_default());
        }
    }
    found
}

/// A process proven to be a member of `trial`: its pidfd was opened first, then the
/// marker read; a recycled number fails one step or the other.
pub struct Member {
    pub pid: i32,
    pub pidfd: OwnedFd,
}

impl Member {
    pub fn prove(pid: i32, trial: &str) -> Option<Member> {
        let pidfd = rustix::process::pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()?;
        let env = environ(pid)?;
        (env_value(&env, TRIAL_VAR).as_deref() == Some(trial)).then_some(Member { pid, pidfd })
    }

    pub fn exited(&self) -> bool {
        pidfd_readable(&self.pidfd, Duration::ZERO)
    }

    /// Kills it through the pidfd and waits (bounded) for it to exit.
    pub fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL);
        pidfd_readable(&self.pidfd, Duration::from_secs(5));
    }

    /// Alive and not already on its way out (no SIGKILL pending, not exiting).
    pub fn alive_and_well(&self) -> bool {
        !self.exited() && !dying(self.pid)
    }
}

pub fn pidfd_readable(fd: &OwnedFd, timeout: Duration) -> bool {
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
}

/// A fatal signal is queued (the kernel turns every fatal signal into a pending
/// SIGKILL), or the task is already exiting (PF_EXITING) or a zombie.
fn dying(pid: i32) -> bool {
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is the state (stat field 3), fields[6] the flags (field 9).
    if matches!(fields.first(), Some(&"Z") | Some(&"X") | None) {
        return true;
    }
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    if flags & PF_EXITING != 0 {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    status.lines().any(|l| {
        (l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
            && u64::from_str_radix(l[7..].trim(), 16).unwrap_or(0) & SIGKILL_BIT != 0
    })
}

/// Counts the trial's survivors, then kills them (through proven pidfds). A member
/// counts as a survivor only if it is alive and not dying, and still so 20 ms later.
pub fn count_and_kill_survivors(trial: &str) -> u32 {
    let proven = || -> Vec<Member> {
        trial_members(trial)
            .into_keys()
            .filter_map(|pid| Member::prove(pid, trial))
            .collect()
    };
    let survivors = proven()
        .iter()
        .filter(|m| {
            m.alive_and_well()
                && !pidfd_readable(&m.pidfd, Duration::from_millis(20))
                && !dying(m.pid)
        })
        .count() as u32;
    for _ in 0..5 {
        let left = proven();
        if left.is_empty() {
            break;
        }
        for m in &left {
            m.kill();
        }
    }
    survivors
}

/// What a decoy went through.
#[derive(Debug, Default, Clone, Copy)]
pub struct DecoyVerdict {
    /// Signals it recorded, plus one if it is dead (SIGKILL cannot be recorded).
    pub signals: u32,
    pub hit: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoyKind {
    /// pid == pgid == the recycled number.
    Leader,
    /// The recycled number is the pgid of a group whose leader already exited; the
    /// decoy is its only member (a different pid).
    Leaderless,
}

/// A stranger process of our uid that is no part of any tree.
pub struct Decoy {
    stdin: Option<ChildStdin>,
    lines: Lines,
    child: Option<Child>,
}

impl Decoy {
    /// Spawns a decoy whose pid (or, for `Leaderless`, whose pgid) is `target`. Retries
    /// while the number is still held (e.g. by a zombie not yet reaped); gives up after
    /// `attempts`.
    pub fn spawn_at(target: i32, kind: DecoyKind, attempts: u32) -> Option<Decoy> {
        let exe = std::env::current_exe().ok()?;
        for attempt in 0..attempts {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            if ns::aim_next_pid(target).is_err() {
                return None;
            }
            let mode = match kind {
                DecoyKind::Leader => "__decoy",
                DecoyKind::Leaderless => "__decoy-group",
            };
            let mut child = Command::new(&exe)
                .arg(mode)
                .env_remove(TRIAL_VAR)
                .env_remove(ROLE_VAR)
                .env_remove("UNDERTAKER_TREE")
                .process_group(0)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .ok()?;
            if child.id() as i32 != target {
                // Our own unreaped child: killing it by its handle cannot miss.
                let _ = child.kill();
                let _ = child.wait();
                continue;
            }
            let stdin = child.stdin.take();
            let mut lines = Lines::new(child.stdout.take()?);
            let ready = lines.next(Duration::from_secs(5));
            let child = match kind {
                DecoyKind::Leader => Some(child),
                DecoyKind::Leaderless => {
                    // The group's leader exits right after starting its member.
                    let _ = child.wait();
                    None
                }
            };
            let decoy = Decoy {
                stdin,
                lines,
                child,
            };
            if ready.as_deref() != Some("ready decoy") {
                decoy.finish();
                return None;
            }
            return Some(decoy);
        }
        None
    }

    /// Asks the decoy what it received; a decoy that cannot answer is dead: hit.
    /// Closing its stdin then makes it exit.
    pub fn finish(mut self) -> DecoyVerdict {
        let asked = self
            .stdin
            .as_mut()
            .map(|s| s.write_all(b"?").and_then(|_| s.flush()).is_ok())
            .unwrap_or(false);
        let answer = if asked {
            self.lines.next(Duration::from_secs(5))
        } else {
            None
        };
        drop(self.stdin.take());
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        match answer.as_deref().and_then(|a| a.strip_prefix("sigs")) {
            Some(list) => {
                let signals: u32 = list
                    .split_whitespace()
                    .filter_map(|e| e.split_once(':')?.1.parse::<u32>().ok())
                    .sum();
                DecoyVerdict {
                    signals,
                    hit: signals > 0,
                }
            }
            None => DecoyVerdict {
                signals: 1,
                hit: true,
            },
        }
    }
}

/// Sends `sig` to our own unreaped child through a pidfd.
pub fn signal_own_child(child: &Child, sig: Signal) -> bool {
    Pid::from_raw(child.id() as i32)
        .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
        .is_some_and(|fd| rustix::process::pidfd_send_signal(&fd, sig).is_ok())
}

/// A pidfd of the guardian that `undertaker run` (our child `wrapper`) forked,
/// waiting up to `patience` for it to exist. The parent link is re-read after the
/// pidfd is open, so the pidfd is that child's and nobody else's.
pub fn forked_guardian(wrapper: &Child, patience: Duration) -> Option<OwnedFd> {
    let want = wrapper.id() as i32;
    let deadline = Instant::now() + patience;
    loop {
        for pid in all_pids() {
            if parent_of(pid) != Some(want) {
                continue;
            }
            let Some(fd) = Pid::from_raw(pid)
                .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
            else {
                continue;
            };
            if parent_of(pid) == Some(want) {
                return Some(fd);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}
