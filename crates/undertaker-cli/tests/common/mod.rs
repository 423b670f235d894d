//! Shared support for the integration tests: private PID namespaces, the escape zoo,
//! decoys that record signals, and survivor counting.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const UNDERTAKER: &str = env!("CARGO_BIN_EXE_undertaker");
const INSIDE: &str = "UNDERTAKER_TEST_INSIDE_PIDNS";

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

pub fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

/// Reports a test as skipped, or fails it in CI where every capability must exist.
pub fn skip(reason: &str) {
    assert!(!in_ci(), "required in CI but unavailable: {reason}");
    eprintln!("skipped: {reason}");
}

/// Runs the calling test again inside a private PID (and mount) namespace, where it is
/// PID 1 and can only ever see and signal its own processes. Returns `true` when the
/// caller is already inside and should run its body; `false` after the inner run
/// passed (or was skipped).
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
        .env(INSIDE, "1");
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
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "isolated run of {test_name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    false
}

/// A scratch directory removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let mut bytes = [0u8; 8];
        rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).unwrap();
        let name = format!(
            "undertaker-test-{tag}-{}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The escape zoo: every member appends "<kind> <pid>" to the file named by $1, then
/// waits forever. Kinds: a plain child, a SIGTERM ignorer, a double-forked `setsid`
/// daemon, a process in its own group, a stopped process, a member with a scrubbed
/// environment, and one that forks more children when it gets SIGTERM.
pub const ZOO: &str = r#"
use strict; use POSIX ();
my $out = shift @ARGV;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0] $$\n"; close $f; }
sub forever { sleep 1000 while 1; }
sub spawn { my $code = shift; my $pid = fork(); die "fork: $!" unless defined $pid; if ($pid == 0) { $code->(); POSIX::_exit(0); } return $pid; }
spawn(sub { note('plain'); forever(); });
spawn(sub { $SIG{TERM} = 'IGNORE'; note('ignores_term'); forever(); });
spawn(sub { POSIX::setsid(); spawn(sub { note('setsid_daemon'); forever(); }); POSIX::_exit(0); });
spawn(sub { setpgrp(0, 0); note('own_group'); forever(); });
spawn(sub { note('stopped'); kill('STOP', $$); forever(); });
spawn(sub { %ENV = (); note('scrubbed_env'); exec('perl', '-e', 'sleep 1000 while 1'); });
spawn(sub { $SIG{TERM} = sub { for (1..20) { spawn(sub { $SIG{TERM}='IGNORE'; forever(); }); } }; note('forks_on_term'); forever(); });
forever();
"#;

pub const ZOO_SIZE: usize = 7;

/// A decoy stranger: records every catchable signal it receives to $1, one per line,
/// and writes "ready" first. It puts itself in its own process group, so a group kill
/// aimed at a recycled pgid would reach it.
pub const DECOY: &str = r#"
use strict; use POSIX ();
my $out = shift @ARGV;
setpgrp(0, 0);
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
for my $s (qw(TERM INT HUP QUIT USR1 USR2 CONT WINCH ALRM PIPE)) { $SIG{$s} = sub { note($s); }; }
note('ready');
sleep 1000 while 1;
"#;

/// Polls until `cond` holds or `limit` passes. Used only to wait for setup, never to
/// decide a verdict on speed.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

pub fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Pids recorded by zoo members.
pub fn zoo_pids(path: &Path) -> Vec<(String, i32)> {
    read_lines(path)
        .iter()
        .filter_map(|l| {
            let (kind, pid) = l.split_once(' ')?;
            Some((kind.to_owned(), pid.parse().ok()?))
        })
        .collect()
}

/// State letter of a live process, or `None` if it is gone.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// True if `pid` is alive and not a zombie.
pub fn alive(pid: i32) -> bool {
    matches!(proc_state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// Every live (non-zombie) process in this PID namespace except ourselves. Only
/// meaningful inside `isolate`, where we are PID 1 and the namespace is ours.
pub fn live_processes_except_self() -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && alive(pid))
        .collect()
}

/// Reaps any zombie children of this process (we are PID 1 inside `isolate`).
pub fn reap_zombies() {
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
}

pub fn undertaker() -> Command {
    let mut c = Command::new(UNDERTAKER);
    c.stdin(Stdio::null());
    c
}

/// Makes the next process forked in this PID namespace get `pid`.
pub fn set_next_pid(pid: i32) -> std::io::Result<()> {
    std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1))
}

pub fn spawn_decoy(scratch: &Scratch, name: &str) -> (Child, PathBuf) {
    let script = scratch.file("decoy.pl", DECOY);
    let log = scratch.path().join(name);
    let child = Command::new("perl")
        .arg(&script)
        .arg(&log)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || read_lines(&log)
            .contains(&"ready".to_string())),
        "decoy did not start"
    );
    (child, log)
}
