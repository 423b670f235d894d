//! Helpers for the registry tests: private PID namespaces, escape-zoo and decoy
//! scripts, and counting survivors by tree marker.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_undertaker");
const INSIDE: &str = "UNDERTAKER_TEST_IN_PIDNS";

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// Skips (or, with CI=true, fails) a test that needs something the machine lacks.
pub fn skip(reason: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("required capability missing under CI: {reason}");
    }
    eprintln!("skipped: {reason}");
}

fn unshare_args() -> Vec<&'static str> {
    if is_root() {
        vec!["--pid", "--fork", "--mount-proc"]
    } else {
        vec![
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount-proc",
        ]
    }
}

/// Runs the calling test again, alone, as PID 1 of a private PID namespace.
/// Returns true inside the namespace (run the body); false outside, after the inner
/// run succeeded (or was skipped).
pub fn in_private_pidns(test_name: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    let probe = Command::new("unshare")
        .args(unshare_args())
        .arg("true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(probe, Ok(s) if s.success()) {
        skip("cannot create a private PID namespace with unshare");
        return false;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new("unshare")
        .args(unshare_args())
        .arg(exe)
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .env_remove("UNDERTAKER_TREE")
        .output()
        .expect("run test in namespace");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- inner run of {test_name} ---\n{stdout}\n{stderr}");
    assert!(out.status.success(), "inner run of {test_name} failed");
    assert!(
        stdout.contains("1 passed"),
        "inner run did not run {test_name}"
    );
    false
}

/// A fresh directory for one test; removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "ut-cli-{}-{name}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `undertaker --state-dir DIR ARGS…`, captured.
pub fn ut(state: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("UNDERTAKER_TREE")
        .env_remove("UNDERTAKER_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run undertaker")
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad json ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Starts `undertaker run --state-dir DIR --label L -- sh -c SCRIPT` in the background.
pub fn spawn_guarded(state: &Path, label: &str, script: &str, env: &[(&str, &str)]) -> Child {
    let mut c = Command::new(BIN);
    c.arg("run")
        .arg("--state-dir")
        .arg(state)
        .args([
            "--tier",
            "subreaper",
            "--label",
            label,
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("spawn undertaker run")
}

/// Escape zoo: a plain child, a SIGTERM-ignorer, a `setsid` double fork, a process
/// in its own group, and a member that exits at once leaving its pid in `exited.pid`.
/// Writes `ready` when all are started.
pub fn zoo_script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"
sleep 1000 &
perl -e '$SIG{{TERM}}="IGNORE"; sleep 1000' &
setsid sh -c 'sleep 1000 & exit 0' &
perl -e 'setpgrp(0,0); sleep 1000' &
sh -c 'echo $$ > {d}/exited.pid'
sleep 0.3
echo ready > {d}/ready
wait
"#
    )
}

/// A process with no marker that logs every catchable signal it gets to `log`.
pub fn spawn_decoy(log: &Path) -> Child {
    Command::new("perl")
        .arg("-e")
        .arg(
            r#"my $f = shift; for my $s (qw(TERM INT HUP USR1 USR2)) {
                 $SIG{$s} = sub { open my $h, ">>", $f; print $h "$_[0]\n"; close $h } }
               sleep 1 while 1"#,
        )
        .arg(log)
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn decoy")
}

pub fn wait_for_file(path: &Path, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Alive = exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some('Z' | 'X') | None)
        }
        Err(_) => false,
    }
}

/// Live processes carrying `UNDERTAKER_TREE=tree`, ignoring zombies and PID 1.
pub fn survivors(tree: &str) -> Vec<i32> {
    let want = format!("UNDERTAKER_TREE={tree}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == 1 || !alive(pid) {
            continue;
        }
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env.split(|&b| b == 0).any(|kv| kv == want.as_bytes()) {
                out.push(pid);
            }
        }
    }
    out
}

/// Polls `ps --json --all` until a tree labelled `label` appears.
pub fn find_tree(state: &Path, label: &str, limit: Duration) -> Option<serde_json::Value> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        let out = ut(state, &["ps", "--json", "--all"]);
        if out.status.success() {
            if let Some(t) = json(&out)
                .as_array()
                .and_then(|a| a.iter().find(|t| t["label"] == label).cloned())
            {
                return Some(t);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
