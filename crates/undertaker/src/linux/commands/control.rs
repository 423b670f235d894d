//! A supervisor's control socket: how `undertaker kill <tree>` asks the live
//! supervisor holding a tree to end that tree only. Signalling the supervisor (what
//! `kill` does to `run`'s guardian) would end every tree it holds.
//!
//! A socket file in the state dir's `control/` directory (0700, our uid's, given the
//! state dir's checks), named after the supervisor's identity as its trees' records
//! give it: no network namespace hides a file, and no other uid can create one there
//! (an abstract name is per network namespace and anyone's to take). Each side still
//! checks the other (SO_PEERCRED): the supervisor answers only its own uid, and `kill`
//! talks only to the recorded pid of its uid. The file is removed when the supervisor
//! exits; one left by a supervisor that was killed is removed by the next supervisor
//! to bind in that directory, and meanwhile answers nobody (`ECONNREFUSED`).
//!
//! A state dir path may be longer than `sun_path` (108 bytes): both sides name the
//! socket through `/proc/self/fd/N/NAME`, N an `O_PATH` descriptor of `control/`, a
//! path of at most ~70 bytes whatever the state dir.
//!
//! One request line per connection, in the `supervise` protocol (docs/SUPERVISE.md);
//! the supervisor answers `kill` only. It reads connections without ever waiting: they
//! are polled with its other descriptors, at most [`MAX_OPEN`] at once, each closed
//! unanswered after [`PATIENCE`] without a complete line.

use crate::linux::contain::cgroup::own_pidns;
use crate::linux::kernel::poll::poll_until;
use crate::linux::kernel::procfs::Procfs;
use crate::registry::{GuardianRecord, StateDir};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::net::{AddressFamily, SendFlags, SocketAddrUnix, SocketFlags, SocketType};
use std::io;
use std::time::{Duration, Instant};

/// Longest request line read from a control connection.
const MAX_REQUEST: usize = 4096;
/// How long a control connection may take to send its line.
const PATIENCE: Duration = Duration::from_secs(1);
/// Connections read at once; more are closed unread until some finish.
const MAX_OPEN: usize = 16;

/// The socket's file name. Pid numbers repeat across PID namespaces (two namespaces
/// may each run a supervisor as pid 3, started in the same tick), so our PID
/// namespace is part of the name: `kill` finds the supervisor of the namespace it runs
/// in.
fn file_name(pidns: u64, pid: i32, starttime: u64) -> String {
    format!("{pidns}-{pid}-{starttime}.sock")
}

/// The identity a socket file's name gives: (pidns, pid, starttime).
fn parse_file_name(name: &str) -> Option<(u64, i32, u64)> {
    let mut parts = name.strip_suffix(".sock")?.splitn(3, '-');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    ))
}

/// `control/` of the state dir, opened `O_PATH` without following a symlink.
fn open_dir(state: &StateDir, uid: u32) -> io::Result<OwnedFd> {
    let path = state.control_dir(uid).map_err(io::Error::other)?;
    Ok(rustix::fs::open(
        &path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The socket's address through the directory's descriptor (short whatever the state
/// dir's path).
fn address(dir: BorrowedFd<'_>, name: &str) -> io::Result<SocketAddrUnix> {
    Ok(SocketAddrUnix::new(format!(
        "/proc/self/fd/{}/{name}",
        dir.as_raw_fd()
    ))?)
}

/// The supervisor's end.
pub(crate) struct Listener {
    fd: OwnedFd,
    dir: OwnedFd,
    name: String,
    /// Accepted connections whose line is not complete yet.
    pending: Vec<Pending>,
    /// `accept` failed for want of a descriptor: the socket, which stays readable,
    /// is not polled until then (it would wake the loop without end).
    resting_until: Option<Instant>,
}

struct Pending {
    fd: OwnedFd,
    line: Vec<u8>,
    deadline: Instant,
}

/// One request, waiting for its reply.
pub(crate) struct Connection {
    fd: OwnedFd,
    pub line: Vec<u8>,
}

impl Listener {
    /// Listens in `state`'s `control/` under the name of this process's identity
    /// (`pid`, `starttime`), after removing the files of supervisors of our PID
    /// namespace that are gone.
    pub(crate) fn bind(
        state: &StateDir,
        uid: u32,
        pid: i32,
        starttime: u64,
        procfs: &Procfs,
    ) -> io::Result<Self> {
        let pidns = own_pidns().unwrap_or(0);
        let dir = open_dir(state, uid)?;
        remove_stale(dir.as_fd(), pidns, procfs);
        let name = file_name(pidns, pid, starttime);
        // A file of our very identity is a dead namesake's (a pid and start time seen
        // in an earlier boot): ours to replace.
        let _ = rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::empty());
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::bind(&fd, &address(dir.as_fd(), &name)?)?;
        let listener = Self {
            fd,
            dir,
            name,
            pending: Vec::new(),
            resting_until: None,
        };
        // Before `listen`: nobody can connect until the mode is 0600 (the directory
        // already keeps other uids out).
        rustix::fs::chmodat(
            &listener.dir,
            listener.name.as_str(),
            Mode::RUSR | Mode::WUSR,
            AtFlags::empty(),
        )?;
        rustix::net::listen(&listener.fd, MAX_OPEN as i32)?;
        Ok(listener)
    }

    /// What to poll for reading: the socket and each connection being read.
    pub(crate) fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        let listening = self.resting_until.is_none().then(|| self.fd.as_fd());
        listening
            .into_iter()
            .chain(self.pending.iter().map(|p| p.fd.as_fd()))
    }

    /// When the oldest connection being read runs out of time, or the socket is
    /// polled again.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        (self.pending.iter().map(|p| p.deadline))
            .chain(self.resting_until)
            .min()
    }

    /// Never waits: accepts what is queued (processes of uid `uid` only; others, and
    /// any beyond [`MAX_OPEN`], are closed unread), reads what each connection sent,
    /// and returns the connections whose line is complete. Connections past their
    /// deadline, closed, or sending more than [`MAX_REQUEST`] bytes are dropped.
    pub(crate) fn accept(&mut self, uid: u32) -> Vec<Connection> {
        let now = Instant::now();
        if self.resting_until.is_some_and(|t| now < t) {
            return self.read_pending(now);
        }
        self.resting_until = None;
        // Bounded: a peer connecting without end must not keep us here.
        for _ in 0..4 * MAX_OPEN {
            let fd = match rustix::net::accept_with(
                &self.fd,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::INTR | rustix::io::Errno::CONNABORTED) => continue,
                Err(
                    rustix::io::Errno::MFILE
                    | rustix::io::Errno::NFILE
                    | rustix::io::Errno::NOBUFS
                    | rustix::io::Errno::NOMEM,
                ) => {
                    self.resting_until = Some(now + Duration::from_millis(100));
                    break;
                }
                Err(_) => break,
            };
            let ours = rustix::net::sockopt::socket_peercred(&fd)
                .is_ok_and(|cred| cred.uid.as_raw() == uid);
            if ours && self.pending.len() < MAX_OPEN {
                self.pending.push(Pending {
                    fd,
                    line: Vec::new(),
                    deadline: Instant::now() + PATIENCE,
                });
            }
        }
        self.read_pending(Instant::now())
    }

    /// Reads what each connection sent; returns those whose line is complete.
    fn read_pending(&mut self, now: Instant) -> Vec<Connection> {
        let mut done = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            match read_some(p.fd.as_fd(), &mut p.line) {
                Read::Line => done.push(Connection {
                    fd: p.fd,
                    line: p.line,
                }),
                Read::More if now < p.deadline => self.pending.push(p),
                Read::More | Read::Over => {}
            }
        }
        done
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
    }
}

/// Removes the socket files of supervisors of PID namespace `pidns` that are gone.
/// Files of other namespaces cannot be judged from here and stay (they answer no one
/// once their supervisor is gone).
fn remove_stale(dir: BorrowedFd<'_>, pidns: u64, procfs: &Procfs) {
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((ns, pid, starttime)) = name.to_str().and_then(parse_file_name) else {
            continue;
        };
        let alive = procfs
            .stat(pid)
            .is_ok_and(|s| s.starttime == starttime && !matches!(s.state, 'Z' | 'X'));
        if ns == pidns && !alive {
            let _ = rustix::fs::unlinkat(dir, name.as_os_str(), AtFlags::empty());
        }
    }
}

enum Read {
    /// A complete line is in the buffer (the newline removed).
    Line,
    /// Nothing more for now.
    More,
    /// Closed, failed, or too long: dropped.
    Over,
}

/// Reads what a non-blocking connection has for us into `line`.
fn read_some(fd: BorrowedFd<'_>, line: &mut Vec<u8>) -> Read {
    let mut buf = [0u8; 1024];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return Read::Over,
            Ok(n) => {
                line.extend_from_slice(&buf[..n]);
                if let Some(end) = line.iter().position(|&b| b == b'\n') {
                    line.truncate(end);
                    return Read::Line;
                }
                if line.len() > MAX_REQUEST {
                    return Read::Over;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => return Read::More,
            Err(_) => return Read::Over,
        }
    }
}

impl Connection {
    /// Sends the reply in one non-blocking send (a fresh connection's buffer takes a
    /// reply line whole); dropped if the asker is gone.
    pub(crate) fn reply(self, line: &str) {
        let _ = rustix::net::send(
            &self.fd,
            line.as_bytes(),
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        );
    }
}

/// Whether the supervisor `guardian` names has its control socket in `state` (a
/// cheap look for `ps`: the file is there, a socket of ours).
pub(crate) fn endpoint_present(state: &StateDir, guardian: &GuardianRecord, uid: u32) -> bool {
    let Ok(dir) = open_dir(state, uid) else {
        return false;
    };
    let name = file_name(own_pidns().unwrap_or(0), guardian.pid, guardian.starttime);
    rustix::fs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket
            && st.st_uid == uid
    })
}

/// What asking a supervisor came to.
pub(crate) enum Asked {
    /// Its reply.
    Answered(serde_json::Value),
    /// Nothing of it answers here: no socket file (it could not make one, or runs in
    /// another PID namespace), or nobody listening on it.
    Unreachable(String),
    /// It was reached, but the request or its answer failed.
    Failed(String),
}

/// `kill`'s end: sends `request` to the supervisor `guardian` names and returns its
/// reply.
pub(crate) fn ask(
    state: &StateDir,
    guardian: &GuardianRecord,
    uid: u32,
    request: &str,
    deadline: Instant,
) -> Asked {
    let unreachable = |why: String| {
        Asked::Unreachable(format!(
            "its supervisor (pid {}) cannot be asked: {why}",
            guardian.pid
        ))
    };
    let name = file_name(own_pidns().unwrap_or(0), guardian.pid, guardian.starttime);
    let connected = open_dir(state, uid).and_then(|dir| {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::connect(&fd, &address(dir.as_fd(), &name)?)?;
        Ok(fd)
    });
    let fd = match connected {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return unreachable("it has no control socket in this state dir".into())
        }
        Err(e) => return unreachable(format!("its control socket: {e}")),
    };
    // Only the recorded pid, of our uid, is the supervisor.
    let peer = rustix::net::sockopt::socket_peercred(&fd);
    let is_it = peer.as_ref().is_ok_and(|cred| {
        cred.pid.as_raw_nonzero().get() == guardian.pid && cred.uid.as_raw() == uid
    });
    if !is_it {
        return unreachable("its control socket is held by another process".into());
    }
    let ask = || -> Result<serde_json::Value, String> {
        rustix::fs::fcntl_setfl(&fd, OFlags::NONBLOCK).map_err(|e| e.to_string())?;
        let line = format!("{request}\n");
        if !write_all(fd.as_fd(), line.as_bytes(), deadline) {
            return Err("the supervisor did not take the request".into());
        }
        let reply = read_line(fd.as_fd(), deadline)
            .ok_or_else(|| "the supervisor did not answer in time".to_string())?;
        serde_json::from_slice(&reply).map_err(|e| format!("unreadable answer: {e}"))
    };
    match ask() {
        Ok(reply) => Asked::Answered(reply),
        Err(why) => Asked::Failed(why),
    }
}

/// Reads up to the first newline from a non-blocking socket before `deadline`.
/// `None` on end of input first, or past the deadline.
fn read_line(fd: BorrowedFd<'_>, deadline: Instant) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    loop {
        match read_some(fd, &mut line) {
            Read::Line => return Some(line),
            Read::Over => return None,
            Read::More if Instant::now() >= deadline => return None,
            Read::More => {
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                poll_until(&mut fds, Some(deadline));
            }
        }
    }
}

/// Writes all of `bytes` to a non-blocking socket before `deadline`.
fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8], deadline: Instant) -> bool {
    while !bytes.is_empty() {
        match rustix::net::send(fd, bytes, SendFlags::NOSIGNAL) {
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                if Instant::now() >= deadline {
                    return false;
                }
                let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
                poll_until(&mut fds, Some(deadline));
            }
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip_and_stay_short() {
        let name = file_name(u64::MAX, i32::MAX, u64::MAX);
        assert_eq!(parse_file_name(&name), Some((u64::MAX, i32::MAX, u64::MAX)));
        // "/proc/self/fd/" + a descriptor number + "/" + the name, with its NUL.
        assert!(14 + 10 + 1 + name.len() < 108, "{name}");
        assert_eq!(parse_file_name("1-2.sock"), None);
        assert_eq!(parse_file_name("1-2-3"), None);
    }
}
