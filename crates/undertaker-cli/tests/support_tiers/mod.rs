//! Helpers for the tier tests: private PID namespaces, the escape zoo, survivor counts.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const INNER_ENV: &str = "UNDERTAKER_TIERS_INNER";

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_undertaker"))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Prints "skipped: why" and returns, or fails when CI=true.
pub fn skip(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("required capability missing under CI: {why}");
    }
    eprintln!("skipped: {why}");
}

/// True when the caller is already inside the private namespace and should run the
/// body. Otherwise re-runs this test there (and reports its result) and returns false.
pub fn in_private_pidns(test: &str) -> bool {
    if std::env::var_os(INNER_ENV).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new("unshare");
    if !is_root() {
        cmd.args(["--user", "--map-root-user"]);
    }
    cmd.args(["--pid", "--fork", "--mount-proc"])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(INNER_ENV, "1");
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            skip(&format!("cannot run unshare: {e}"));
            return false;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() && text.contains("unshare failed") {
        skip(&format!("no private PID namespace here: {}", text.trim()));
        return false;
    }
    eprintln!("{text}");
    assert!(out.status.success(), "inner test {test} failed");
    assert!(text.contains("1 passed"), "inner test {test} did not run");
    false
}

/// Live processes of this namespace other than us (pid 1), ignoring zombies.
pub fn survivors() -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == 1 {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = stat.rsplit_once(')').map(|(_, a)| a.trim()).unwrap_or("");
        if after.starts_with('Z') || after.starts_with('X') {
            continue;
        }
        out.push((pid, stat.trim().to_owned()));
    }
    out
}

/// Waits (generously) for the survivor list to become empty; returns what is left.
pub fn survivors_after(limit: Duration) -> Vec<(i32, String)> {
    let end = Instant::now() + limit;
    loop {
        reap_orphans();
        let s = survivors();
        if s.is_empty() || Instant::now() >= end {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// We are PID 1 of the test namespace: reap whatever was reparented to us.
pub fn reap_orphans() {
    loop {
        // SAFETY: waitpid with WNOHANG and a valid pointer.
        let rc = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if rc <= 0 {
            return;
        }
    }
}

/// The escape zoo as a shell script. It writes `ready` into `dir` once everything runs.
/// Members: plain child, SIGTERM ignorer, setsid double fork, setpgid(0,0), an
/// environment-scrubbing `env -i setsid` escapee, a bounded fork loop.
pub fn zoo_script(dir: &Path) -> String {
    let ready = dir.join("ready");
    format!(
        r#"
sleep 1000 &
sh -c 'trap "" TERM; while :; do sleep 1; done' &
setsid sh -c 'sleep 1000 & exit 0' &
perl -e 'setpgrp(0,0); sleep 1000' &
env -i /usr/bin/setsid /bin/sh -c 'trap "" TERM; sleep 1000 & while :; do sleep 1; done' &
sh -c 'trap "" TERM; i=0; while [ $i -lt 3000 ]; do sleep 5 & i=$((i+1)); sleep 0.01; done' &
sleep 0.3
echo ok > {ready}
wait
"#,
        ready = ready.display()
    )
}

/// A world-writable scratch dir (the guarded tree may run as nobody).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("undertaker-tiers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
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

/// A stand-in owner: a process we started and will kill -9.
pub fn spawn_owner() -> Child {
    Command::new("sleep").arg("1000").spawn().unwrap()
}

/// Starts `undertaker run` with `args` before `--`, guarding the zoo, owned by `owner`.
/// `as_nobody` runs it through setpriv as uid/gid 65534.
pub fn spawn_guarded_zoo(tier: &str, owner: i32, dir: &Path, as_nobody: bool) -> Child {
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin());
        c
    } else {
        Command::new(bin())
    };
    cmd.args(["run", "--tier", tier, "--grace", "300ms", "--owner"])
        .arg(owner.to_string())
        .args(["--", "sh", "-c"])
        .arg(zoo_script(dir))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd.spawn().unwrap()
}

/// Waits for a child of ours with a generous bound; None if it did not exit.
pub fn wait_child(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + limit;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Tree cgroups on disk whose guardian had pid `guardian` (in this namespace).
pub fn tree_cgroups_of(guardian: i32) -> Vec<PathBuf> {
    undertaker::linux::cgroup::list_tree_cgroups(&undertaker::linux::procfs::Procfs::new())
        .into_iter()
        .filter(|f| {
            f.guardian_pid == guardian
                && f.guardian != undertaker::linux::cgroup::GuardianState::Unknown
        })
        .map(|f| f.path)
        .collect()
}
