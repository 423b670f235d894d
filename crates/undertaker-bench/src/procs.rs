//! Every process the bench creates and every signal it sends live here.
//!
//! The rule: the bench only ever signals processes it started itself and has not yet
//! reaped (so their numbers cannot have been reused): `Child::kill` of its own child,
//! `killpg` of a group whose leader is its own unreaped child, and `cgroup.kill` of a
//! cgroup it created. Trees are told to stop by closing a FIFO, not by signals.
//!
//! It also holds the hidden modes the bench binary runs in as a tree member, so the
//! only `fork` and `_exit` (and this crate's only `unsafe`) are here too.
#![allow(unsafe_code)]

use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// CLOCK_MONOTONIC in nanoseconds: comparable between processes, unlike `Instant`.
pub fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// User + system CPU time, in µs, of every child this process has reaped so far and of
/// the descendants they reaped (`getrusage(RUSAGE_CHILDREN)`): the difference across
/// one `wait` is the CPU time of the whole tree that child ran.
pub fn reaped_children_cpu_us() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes one `rusage` into memory that lives for the call.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, ru.as_mut_ptr());
        ru.assume_init()
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// While alive, this process is a child subreaper: a process a wrapper leaves running
/// when it exits (bwrap's outer process exits without reaping its PID namespace's
/// init, which then still runs CMD's end) is reparented here instead of to init, so
/// [`Self::reap_left_behind`] can reap it and `RUSAGE_CHILDREN` counts its CPU time.
/// Only for measurements during which the bench has no other child.
pub struct OrphanCatcher(());

impl OrphanCatcher {
    pub fn new() -> std::io::Result<OrphanCatcher> {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
        Ok(OrphanCatcher(()))
    }

    /// Waits for and reaps every child left (the wrapper itself was reaped already).
    pub fn reap_left_behind(&self) {
        while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::empty()) {}
    }
}

impl Drop for OrphanCatcher {
    fn drop(&mut self) {
        self.reap_left_behind();
        let _ = rustix::process::set_child_subreaper(None);
    }
}

/// Hidden mode `__stamp`: print the monotonic time, then exit at once.
pub fn stamp_main() -> ! {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", mono_ns());
    let _ = out.flush();
    exit_now(0)
}

/// Hidden mode `__tree PROCS ALIVE STOP CGROUP TAG` (`-` = none).
///
/// Joins CGROUP (if given), opens the FIFO ALIVE for writing, forks PROCS-1 children
/// (a flat tree: every member inherits ALIVE, so the reader sees end of file exactly
/// when the last member is gone), writes one byte "R" once all exist, then every
/// member waits for end of file on the FIFO STOP (or forever). SIGTERM keeps its
/// default action: the tree honours it. TAG only makes the command line findable.
pub fn tree_main(args: &[String]) -> ! {
    let arg = |i: usize| args.get(i).filter(|a| a.as_str() != "-");
    let procs: usize = arg(0).and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    if let Some(cg) = arg(3) {
        if let Err(e) = std::fs::write(Path::new(cg).join("cgroup.procs"), "0\n") {
            eprintln!("undertaker-bench tree: joining cgroup {cg}: {e}");
            exit_now(1);
        }
    }
    let alive = arg(1).map(|p| open_or_die(p, OFlags::WRONLY));
    let stop = arg(2).map(|p| open_or_die(p, OFlags::RDONLY));
    for _ in 1..procs {
        // SAFETY: this process is single-threaded (a hidden mode started by exec, no
        // threads spawned), so the child may run ordinary code; it only blocks in
        // read or sleep and leaves through `_exit`.
        match unsafe { libc::fork() } {
            0 => member_wait(stop.as_ref()),
            n if n < 0 => {
                eprintln!(
                    "undertaker-bench tree: fork: {}",
                    std::io::Error::last_os_error()
                );
                exit_now(1);
            }
            _ => {}
        }
    }
    if let Some(fd) = &alive {
        let _ = rustix::io::write(fd, b"R");
    }
    member_wait(stop.as_ref())
}

fn open_or_die(path: &str, flags: OFlags) -> OwnedFd {
    match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("undertaker-bench tree: open {path}: {e}");
            exit_now(1)
        }
    }
}

fn member_wait(stop: Option<&OwnedFd>) -> ! {
    match stop {
        Some(fd) => {
            let mut b = [0u8; 16];
            loop {
                match rustix::io::read(fd, &mut b) {
                    Ok(0) => exit_now(0),
                    Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => exit_now(0),
                }
            }
        }
        None => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}

fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` skips atexit handlers and stdio flushing, which a forked copy of
    // the process must not run twice.
    unsafe { libc::_exit(code) }
}

/// A FIFO in the bench's private temp dir.
pub struct Fifo {
    pub path: PathBuf,
}

impl Fifo {
    pub fn new(dir: &Path, name: &str) -> std::io::Result<Fifo> {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )?;
        Ok(Fifo { path })
    }

    /// The read end whose end of file means "every tree member is gone". Opened
    /// before the tree starts, non-blocking so opening needs no writer.
    pub fn alive_reader(&self) -> std::io::Result<AliveReader> {
        let fd = rustix::fs::open(
            &self.path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(AliveReader { fd })
    }

    /// The bench's end of a stop FIFO: the tree exits on its own once this is dropped.
    /// Read-write so opening never blocks and tree members can open their read ends.
    pub fn stop_writer(&self) -> std::io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            &self.path,
            OFlags::RDWR | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub struct AliveReader {
    fd: OwnedFd,
}

#[derive(Debug)]
pub enum NotReady {
    /// The process that should have started the tree exited first.
    Exited(ExitStatus),
    Timeout,
}

impl AliveReader {
    /// Waits for the tree's "R" byte, watching `starter` (the bench's child that starts
    /// the tree, possibly through a wrapper) in case it exits first.
    pub fn wait_ready(&self, starter: &mut Child, timeout: Duration) -> Result<(), NotReady> {
        let end = Instant::now() + timeout;
        loop {
            let mut b = [0u8; 1];
            if let Ok(1) = rustix::io::read(&self.fd, &mut b) {
                return Ok(());
            }
            if let Ok(Some(st)) = starter.try_wait() {
                return Err(NotReady::Exited(st));
            }
            if Instant::now() >= end {
                return Err(NotReady::Timeout);
            }
            self.poll_for(Duration::from_millis(5));
        }
    }

    /// Blocks until end of file: every tree member has closed its write end, i.e. exited.
    pub fn wait_eof(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let mut b = [0u8; 64];
        loop {
            match rustix::io::read(&self.fd, &mut b) {
                Ok(0) => return true,
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => {}
                Err(_) => return false,
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            self.poll_for(end - now);
        }
    }

    fn poll_for(&self, d: Duration) {
        let ts = rustix::time::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: d.subsec_nanos() as i64,
        };
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let _ = poll(&mut fds, Some(&ts));
    }
}

/// SIGKILL to the bench's own unreaped child (std uses its pidfd or its pid, which
/// cannot be reused before we reap it).
pub fn kill_own_child(child: &mut Child) {
    let _ = child.kill();
}

/// `kill -9` of every undertaker process of an `undertaker run` the bench started: the
/// process it started is stopped (so it cannot take over), the guardian it forked is
/// killed through a pidfd opened while its parent link still named our child, then
/// the process itself. Its tree is left orphaned, for a sweep to find.
pub fn kill_undertaker_processes(run: &mut Child) {
    use rustix::process::{Pid, PidfdFlags, Signal};
    let wrapper = Pid::from_child(run);
    let Ok(wfd) = rustix::process::pidfd_open(wrapper, PidfdFlags::empty()) else {
        return;
    };
    let _ = rustix::process::pidfd_send_signal(&wfd, Signal::STOP);
    let parent_of = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let want = wrapper.as_raw_nonzero().get();
    let pids: Vec<i32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // Its only child is the guardian; once that dies, its orphans become children of
    // the stopped process too, so the children are listed before anything is killed.
    let children: Vec<i32> = pids
        .into_iter()
        .filter(|&p| parent_of(p) == Some(want))
        .collect();
    for pid in children {
        let Some(fd) = Pid::from_raw(pid)
            .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok())
        else {
            continue;
        };
        if parent_of(pid) == Some(want) {
            let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            let _ = poll(
                &mut fds,
                Some(&rustix::time::Timespec {
                    tv_sec: 5,
                    tv_nsec: 0,
                }),
            );
        }
    }
    let _ = run.kill();
}

/// `kill -- -PGID` with SIGTERM, where the group's leader is `leader`, the bench's own
/// unreaped child started with `process_group(0)`: the group id is still its own.
pub fn term_own_group(leader: &Child) -> std::io::Result<()> {
    let pid = rustix::process::Pid::from_child(leader);
    rustix::process::kill_process_group(pid, rustix::process::Signal::TERM)?;
    Ok(())
}

/// Waits for a child with a deadline; SIGKILLs and reaps it if it does not exit.
pub fn wait_or_kill(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + timeout;
    let mut pause = Duration::from_micros(200);
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= end {
            kill_own_child(child);
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// A cgroup v2 directory the bench created for one tree.
pub struct Cgroup {
    pub path: PathBuf,
}

impl Cgroup {
    pub fn create(parent: &Path, name: &str) -> std::io::Result<Cgroup> {
        let path = parent.join(name);
        std::fs::create_dir(&path)?;
        Ok(Cgroup { path })
    }

    /// `cgroup.kill`: the kernel SIGKILLs every member.
    pub fn kill(&self) -> std::io::Result<()> {
        std::fs::write(self.path.join("cgroup.kill"), "1")
    }

    pub fn populated(&self) -> std::io::Result<bool> {
        let events = std::fs::read_to_string(self.path.join("cgroup.events"))?;
        Ok(events.lines().any(|l| l == "populated 1"))
    }

    /// Waits (by polling for the kernel's change notification) until `populated 0`.
    pub fn wait_empty(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let Ok(file) = std::fs::File::open(self.path.join("cgroup.events")) else {
            return false;
        };
        loop {
            match self.populated() {
                Ok(false) => return true,
                Ok(true) => {}
                Err(_) => return false,
            }
            if Instant::now() >= end {
                return false;
            }
            let ts = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            let mut fds = [PollFd::new(&file, PollFlags::PRI)];
            let _ = poll(&mut fds, Some(&ts));
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if self.wait_empty(Duration::from_secs(5)) {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapper that exits while its child still works (as bwrap's outer process
    /// does): with the catcher, that child's CPU time is counted.
    #[test]
    fn cpu_of_a_process_left_behind_is_counted() {
        let burn = "(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done) & exit 0";
        let catcher = OrphanCatcher::new().unwrap();
        let before = reaped_children_cpu_us();
        let st = std::process::Command::new("sh")
            .args(["-c", burn])
            .status()
            .unwrap();
        assert!(st.success());
        catcher.reap_left_behind();
        let used = reaped_children_cpu_us() - before;
        drop(catcher);
        // The loop takes well over 50 ms of CPU on any machine; the shell alone ~1 ms.
        assert!(used > 50_000.0, "counted {used} µs");
    }
}
