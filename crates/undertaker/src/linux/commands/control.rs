//! A supervisor's control socket: how `undertaker kill <tree>` asks the live
//! supervisor holding a tree to end that tree only. Signalling the supervisor (what
//! `kill` does to `run`'s guardian) would end every tree it holds.
//!
//! An abstract Unix socket named after the supervisor's identity (boot id, pid,
//! start time), so a tree's record, which names its guardian, leads to it; nothing is
//! left in the file system. Each side checks the other (SO_PEERCRED): the supervisor
//! answers only its own uid, and `kill` talks only to the recorded pid of its uid. One
//! request line per connection, in the `supervise` protocol (docs/SUPERVISE.md); the
//! supervisor answers `kill` only.

use crate::linux::contain::cgroup::own_pidns;
use crate::linux::kernel::poll::poll_until;
use crate::registry::GuardianRecord;
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::io;
use std::time::{Duration, Instant};

/// Longest request line read from a control connection.
const MAX_REQUEST: usize = 4096;
/// How long a control connection may take to send its line or read the reply.
const PATIENCE: Duration = Duration::from_secs(1);

/// The supervisor's socket name. Pid numbers repeat across PID namespaces (two
/// namespaces may each run a supervisor as pid 3, started in the same tick), and
/// abstract names do not: our PID namespace is part of the name, so `kill` finds the
/// supervisor of the namespace it runs in.
fn address(boot_id: &str, pid: i32, starttime: u64) -> io::Result<SocketAddrUnix> {
    let pidns = own_pidns().unwrap_or(0);
    let name = format!("undertaker-supervisor/{boot_id}/{pidns}/{pid}/{starttime}");
    Ok(SocketAddrUnix::new_abstract_name(name.as_bytes())?)
}

/// The supervisor's end.
pub(crate) struct Listener {
    fd: OwnedFd,
}

/// One accepted request, waiting for its reply.
pub(crate) struct Connection {
    fd: OwnedFd,
    pub line: Vec<u8>,
}

impl Listener {
    /// Listens under the name of this process's identity.
    pub(crate) fn bind(boot_id: &str, pid: i32, starttime: u64) -> io::Result<Self> {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::bind(&fd, &address(boot_id, pid, starttime)?)?;
        rustix::net::listen(&fd, 16)?;
        Ok(Self { fd })
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The pending requests of processes of uid `uid` (others are closed unread),
    /// each line read within [`PATIENCE`].
    pub(crate) fn accept(&self, uid: u32) -> Vec<Connection> {
        let mut out = Vec::new();
        while let Ok(fd) =
            rustix::net::accept_with(&self.fd, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)
        {
            let ours = rustix::net::sockopt::socket_peercred(&fd)
                .is_ok_and(|cred| cred.uid.as_raw() == uid);
            if !ours {
                continue;
            }
            if let Some(line) = read_line(fd.as_fd(), Instant::now() + PATIENCE) {
                out.push(Connection { fd, line });
            }
        }
        out
    }
}

impl Connection {
    /// Sends the reply (dropped if the asker does not read it in time).
    pub(crate) fn reply(self, line: &str) {
        write_all(self.fd.as_fd(), line.as_bytes(), Instant::now() + PATIENCE);
    }
}

/// `kill`'s end: sends `request` to the supervisor `guardian` names and returns its
/// reply. `None` when no supervisor listens there (the guardian is `run`'s, or
/// predates control sockets); `Some(Err)` when one does but could not be asked.
pub(crate) fn ask(
    boot_id: &str,
    guardian: &GuardianRecord,
    uid: u32,
    request: &str,
    deadline: Instant,
) -> Option<Result<serde_json::Value, String>> {
    let addr = address(boot_id, guardian.pid, guardian.starttime).ok()?;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .ok()?;
    rustix::net::connect(&fd, &addr).ok()?;
    // The name could have been taken by anyone: only the recorded pid, of our uid,
    // is the supervisor.
    let peer = rustix::net::sockopt::socket_peercred(&fd);
    let is_it = peer.as_ref().is_ok_and(|cred| {
        cred.pid.as_raw_nonzero().get() == guardian.pid && cred.uid.as_raw() == uid
    });
    if !is_it {
        return Some(Err(format!(
            "the control socket of supervisor {} is held by another process",
            guardian.pid
        )));
    }
    let ask = || -> Result<serde_json::Value, String> {
        rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK).map_err(|e| e.to_string())?;
        let line = format!("{request}\n");
        if !write_all(fd.as_fd(), line.as_bytes(), deadline) {
            return Err("the supervisor did not take the request".into());
        }
        let reply = read_line(fd.as_fd(), deadline)
            .ok_or_else(|| "the supervisor did not answer in time".to_string())?;
        serde_json::from_slice(&reply).map_err(|e| format!("unreadable answer: {e}"))
    };
    Some(ask())
}

/// Reads up to the first newline (or [`MAX_REQUEST`] bytes) from a non-blocking
/// socket before `deadline`. `None` on end of input first, or past the deadline.
fn read_line(fd: BorrowedFd<'_>, deadline: Instant) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return None,
            Ok(n) => {
                line.extend_from_slice(&buf[..n]);
                if let Some(end) = line.iter().position(|&b| b == b'\n') {
                    line.truncate(end);
                    return Some(line);
                }
                if line.len() > MAX_REQUEST {
                    return None;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                if Instant::now() >= deadline {
                    return None;
                }
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                poll_until(&mut fds, Some(deadline));
            }
            Err(_) => return None,
        }
    }
}

/// Writes all of `bytes` to a non-blocking socket before `deadline`.
fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8], deadline: Instant) -> bool {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
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
