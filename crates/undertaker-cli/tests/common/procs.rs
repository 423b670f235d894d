//! Waiting, reading what processes wrote, and counting the live ones.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

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

    /// One that any user can write to (a guarded tree may run as nobody).
    pub fn world_writable(tag: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let s = Self::new(tag);
        std::fs::set_permissions(&s.0, std::fs::Permissions::from_mode(0o777)).unwrap();
        s
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

pub fn wait_for_file(path: &Path, limit: Duration) -> bool {
    wait_until(limit, || path.exists())
}

/// Waits for a child of ours with a generous bound; `None` if it did not exit.
pub fn wait_child(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let mut status = None;
    wait_until(limit, || {
        status = child.try_wait().ok().flatten();
        status.is_some()
    });
    status
}

/// SIGKILL to a child of ours, then reaps it.
pub fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Sends `sig` to a child of ours. It is not reaped yet, so its pid cannot have been
/// reused by anyone else.
pub fn signal_child(child: &Child, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

pub fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
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

/// Every live (non-zombie) process in this PID namespace except ourselves. Inside
/// `isolate` we are PID 1 and the namespace is ours, so these are what a test left.
pub fn live_processes_except_self() -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && alive(pid))
        .collect()
}

/// Live processes carrying `UNDERTAKER_TREE=tree`.
pub fn survivors(tree: &str) -> Vec<i32> {
    let want = format!("UNDERTAKER_TREE={tree}");
    live_processes_except_self()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == want.as_bytes()))
        })
        .collect()
}

/// `sleep 1000` as uid/gid 65534 through setpriv (needs root), in a process group of
/// its own when `own_group`; returned once it runs as that uid (until setpriv has
/// switched, the process is still root's: a test that signals or sweeps it then would
/// see a process of its own uid).
pub fn sleep_as_nobody(own_group: bool) -> Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["sleep", "1000"])
        .stdin(std::process::Stdio::null());
    if own_group {
        cmd.process_group(0);
    }
    let child = cmd.spawn().expect("setpriv");
    let switched = wait_until(Duration::from_secs(60), || {
        std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t65534")))
    });
    assert!(switched, "setpriv never ran sleep as uid 65534");
    child
}

/// Waits until exactly `n` live processes carry `tree`'s marker and returns them. A
/// count taken once, right after a tree started or lost a member, can be off: a
/// process reads an empty environment while it execs (a fresh-clone CI run saw it),
/// and a member on its way out still counts until it has exited.
pub fn wait_for_members(tree: &str, n: usize) -> Vec<i32> {
    let mut members = Vec::new();
    let settled = wait_until(Duration::from_secs(60), || {
        reap_zombies();
        members = survivors(tree);
        members.len() == n
    });
    assert!(
        settled,
        "tree {tree}: marked processes {members:?}, expected {n}"
    );
    members
}

/// Waits (generously, reaping as we go) for every other process of this namespace to
/// be gone; returns those left with their stat line, empty when none.
pub fn survivors_after(limit: Duration) -> Vec<(i32, String)> {
    wait_until(limit, || {
        reap_zombies();
        live_processes_except_self().is_empty()
    });
    live_processes_except_self()
        .into_iter()
        .map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            (p, stat.trim().to_owned())
        })
        .collect()
}

/// Reaps any zombie children of this process when it is PID 1 (inside `isolate`),
/// where orphans are reparented to it. Anywhere else it does nothing: a wait for any
/// child there would reap a child another test's thread is about to wait for (seen:
/// `wait_with_output` failing with ECHILD in registry.rs).
pub fn reap_zombies() {
    if std::process::id() != 1 {
        return;
    }
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
}

/// Makes the next process forked in this PID namespace get `pid`.
pub fn set_next_pid(pid: i32) -> std::io::Result<()> {
    std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1))
}

/// The guardian of an `undertaker run` we started: the one child of that process (the
/// process a host starts stays behind as a sentinel and forks the guardian). `None`
/// once it is gone.
pub fn guardian_of(wrapper: &std::process::Child) -> Option<i32> {
    let want = wrapper.id() as i32;
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|&pid| parent_of(pid) == Some(want) && alive(pid))
}

/// Parent pid of a live process.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `sig` to `pid` through a pidfd, after re-checking (with the pidfd open) that
/// its parent is still `parent` (a process of ours, unreaped): never a stranger.
pub fn signal_child_of(parent: i32, pid: i32, sig: rustix::process::Signal) -> bool {
    let Some(raw) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    let Ok(fd) = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) else {
        return false;
    };
    parent_of(pid) == Some(parent) && rustix::process::pidfd_send_signal(&fd, sig).is_ok()
}

/// `kill -9` of every undertaker process of a run at once: the sentinel (the process
/// we started) is stopped first so it cannot take over, then its guardian and it are
/// killed. What a sweep must then finish.
pub fn kill9_all(wrapper: &mut std::process::Child) {
    use rustix::process::Signal;
    signal_child(wrapper, Signal::STOP);
    let wpid = wrapper.id() as i32;
    // The guardian may still be starting up; wait until it exists.
    let mut guardian = None;
    wait_until(Duration::from_secs(60), || {
        guardian = guardian_of(wrapper);
        guardian.is_some()
    });
    if let Some(g) = guardian {
        signal_child_of(wpid, g, Signal::KILL);
        wait_until(Duration::from_secs(60), || !alive(g));
    }
    kill9(wrapper);
}
