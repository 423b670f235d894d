//! The owner of a tree, watched so the tree dies with it: a pidfd of a process (the
//! parent by default, or `--owner PID`), or an inherited pipe whose end of file means
//! the owner is gone (`--owner-fd N`, the Hermes trick). Never PDEATHSIG: it fires
//! when the forking *thread* exits, which multi-threaded hosts do all the time.
//! Beside it, [`StdioPeer`]: the host holding undertaker's stdio pipes.

use crate::linux::kernel::poll::{readable_now, timespec};
use crate::linux::kernel::procfs::{Procfs, Stat};
use crate::linux::kernel::sys;
use crate::linux::proof::pidref::PidRef;
use crate::registry::{OwnerKind, OwnerRecord};
use crate::{OwnerSpec, RunError};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};

pub(crate) enum Owner {
    /// We are PID 1 of a namespace: nobody above us to outlive.
    None,
    Process {
        fd: OwnedFd,
        pid: i32,
    },
    Pipe {
        fd: OwnedFd,
    },
}

/// An owner fd must be able to report the owner's end: the read end of a pipe (EOF
/// when the last writer closes) or a connected stream (or seqpacket) socket (EOF when
/// the peer goes; a datagram socket never reads end of file).
/// Anything else either never ends (/dev/zero: always readable, spins the guardian)
/// or ends at once (a file, a write end). Returns what the fd is when it is neither.
fn check_owner_fd(fd: &OwnedFd) -> Result<(), String> {
    use rustix::fs::FileType;
    let st = rustix::fs::fstat(fd).map_err(|e| format!("unreadable ({e})"))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Fifo => {
            let mode = rustix::fs::fcntl_getfl(fd).map_err(|e| format!("unreadable ({e})"))?;
            match mode & rustix::fs::OFlags::RWMODE {
                m if m == rustix::fs::OFlags::RDONLY => Ok(()),
                m if m == rustix::fs::OFlags::WRONLY => Err("the write end of a pipe".into()),
                _ => Err("a pipe opened for reading and writing".into()),
            }
        }
        FileType::Socket => connected_stream(fd.as_fd()),
        FileType::RegularFile => Err("a regular file".into()),
        FileType::Directory => Err("a directory".into()),
        FileType::CharacterDevice => Err("a character device".into()),
        FileType::BlockDevice => Err("a block device".into()),
        FileType::Symlink => Err("a symlink".into()),
        FileType::Unknown => Err("of an unknown kind".into()),
    }
}

/// A socket whose peer's going is reported: connected, stream or seqpacket (a
/// datagram socket never reads end of file). Returns what it is otherwise.
fn connected_stream(fd: BorrowedFd<'_>) -> Result<(), String> {
    if rustix::net::sockopt::socket_acceptconn(fd).unwrap_or(false) {
        return Err("a listening socket".into());
    }
    use rustix::net::SocketType;
    match rustix::net::sockopt::socket_type(fd) {
        Ok(SocketType::STREAM | SocketType::SEQPACKET) => {}
        Ok(SocketType::DGRAM) => return Err("a datagram socket".into()),
        Ok(_) => return Err("a socket of a kind that never reads end of file".into()),
        Err(e) => return Err(format!("a socket of unknown type ({e})")),
    }
    match rustix::net::getpeername(fd) {
        Ok(_) => Ok(()),
        Err(_) => Err("an unconnected socket".into()),
    }
}

impl Owner {
    pub(crate) fn resolve(spec: &OwnerSpec) -> Result<Self, RunError> {
        match *spec {
            OwnerSpec::Parent => {
                let ppid = rustix::process::getppid();
                let Some(ppid) = ppid else {
                    return Ok(Owner::None);
                };
                let fd = PidRef::open(ppid.as_raw_nonzero().get())
                    .map_err(|_| RunError::OwnerGone(format!("parent {}", ppid.as_raw_nonzero())))?
                    .into_fd();
                // Re-check after opening: if the parent died first we were reparented
                // and would be watching a stranger.
                if rustix::process::getppid() != Some(ppid) || readable_now(fd.as_fd()) {
                    return Err(RunError::OwnerGone(format!(
                        "parent {}",
                        ppid.as_raw_nonzero()
                    )));
                }
                Ok(Owner::Process {
                    fd,
                    pid: ppid.as_raw_nonzero().get(),
                })
            }
            OwnerSpec::Pid(pid) => {
                if pid <= 0 {
                    return Err(RunError::Usage(format!("invalid owner pid {pid}")));
                }
                let fd = PidRef::open(pid)
                    .map_err(|_| RunError::OwnerGone(format!("pid {pid}")))?
                    .into_fd();
                if readable_now(fd.as_fd()) {
                    return Err(RunError::OwnerGone(format!("pid {pid}")));
                }
                Ok(Owner::Process { fd, pid })
            }
            OwnerSpec::Fd(n) => {
                let fd = sys::take_inherited_fd(n)
                    .map_err(|e| RunError::Usage(format!("--owner-fd {n}: {e}")))?;
                check_owner_fd(&fd).map_err(|what| {
                    RunError::Usage(format!(
                        "--owner-fd {n}: fd {n} is {what}, not the read end of a pipe or a connected stream socket"
                    ))
                })?;
                rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK)
                    .map_err(|e| RunError::Usage(format!("--owner-fd {n}: {e}")))?;
                let mut owner = Owner::Pipe { fd };
                if owner.gone() {
                    return Err(RunError::OwnerGone(format!("fd {n} is at end of file")));
                }
                Ok(owner)
            }
        }
    }

    /// True once the owner is provably gone. Data on the pipe is drained and ignored.
    pub(crate) fn gone(&mut self) -> bool {
        match self {
            Owner::None => false,
            Owner::Process { fd, .. } => readable_now(fd.as_fd()),
            Owner::Pipe { fd } => {
                let mut buf = [0u8; 4096];
                loop {
                    match rustix::io::read(&*fd, &mut buf) {
                        Ok(0) => return true,
                        Ok(_) => continue,
                        Err(rustix::io::Errno::AGAIN) => return false,
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(_) => return true,
                    }
                }
            }
        }
    }

    /// The owner as the registry records it, for `ps` and `sweep` to check later. An
    /// owner that is the parent the host's launch had is recorded from the start-up
    /// read of it ([`crate::linux::proof::signal::Signaller::launch_parent`]).
    pub(crate) fn record(
        &self,
        spec: &OwnerSpec,
        procfs: &Procfs,
        launch_parent: Option<&Stat>,
    ) -> OwnerRecord {
        let (kind, pid) = match (self, spec) {
            (Owner::None, _) => (OwnerKind::None, None),
            (Owner::Pipe { .. }, _) => (OwnerKind::Fd, None),
            (Owner::Process { pid, .. }, OwnerSpec::Parent) => (OwnerKind::Parent, Some(*pid)),
            (Owner::Process { pid, .. }, _) => (OwnerKind::Pid, Some(*pid)),
        };
        let starttime = pid.and_then(|p| match launch_parent {
            Some(s) if s.pid == p => Some(s.starttime),
            _ => procfs.stat(p).ok().map(|s| s.starttime),
        });
        OwnerRecord {
            kind,
            pid,
            starttime,
        }
    }

    /// The fd whose readability means the owner is gone (or wrote on its pipe).
    pub(crate) fn fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        match self {
            Owner::None => None,
            Owner::Process { fd, .. } | Owner::Pipe { fd } => Some(fd.as_fd()),
        }
    }

    /// The owner process's pid, when the owner is a process.
    pub(crate) fn pid(&self) -> Option<i32> {
        match self {
            Owner::Process { pid, .. } => Some(*pid),
            _ => None,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Owner::None => "none".into(),
            Owner::Process { pid, .. } => format!("pid {pid}"),
            Owner::Pipe { .. } => "pipe".into(),
        }
    }
}

/// The stdio peer (docs/GUARANTEES.md, "The stdio peer"): when undertaker's stdin and
/// stdout are both pipes or connected stream sockets, no writer left on stdin and no
/// reader left on stdout mean the process that held their far ends (the host) is
/// gone, even while a launcher between it and undertaker (`npx`, `uvx`, a shell)
/// lives on. The launcher, undertaker and CMD hold the same ends as undertaker
/// (stdin's read end, stdout's write end), so they mask neither.
///
/// Watched with poll flags that report hang-ups and errors only, never readiness: no
/// byte of CMD's input is read, and data arriving never wakes the loop.
pub(crate) struct StdioPeer {
    /// Each side's far end was gone at the last look. A side that is stays out of
    /// the poll set (its hang-up would wake the loop at once, forever) until the
    /// other side goes too; each look polls both again, so a side whose far end came
    /// back (a FIFO reopened) is watched again.
    stdin_gone: bool,
    stdout_gone: bool,
}

/// Stdin's far end gone: POLLHUP on a pipe's read end with no writer left; on a
/// socket, POLLRDHUP once the peer shut down writing or closed (POLLHUP once both
/// ways are shut). POLLIN is never asked for.
const STDIN_WATCH: PollFlags = PollFlags::RDHUP;
const STDIN_GONE: PollFlags = PollFlags::HUP.union(PollFlags::RDHUP).union(PollFlags::ERR);
/// Stdout's: POLLERR on a pipe's write end with no reader left, POLLHUP on a socket
/// whose peer closed. Both are reported without being asked for; POLLOUT is not.
const STDOUT_WATCH: PollFlags = PollFlags::empty();
const STDOUT_GONE: PollFlags = PollFlags::HUP.union(PollFlags::ERR);

/// Why `fd` cannot tell its far end's going (`None`: it can). `reading`: stdin
/// (a pipe's read end), else stdout (a pipe's write end).
fn stdio_unwatchable(fd: BorrowedFd<'_>, reading: bool) -> Option<String> {
    use rustix::fs::{FileType, OFlags};
    let st = match rustix::fs::fstat(fd) {
        Ok(st) => st,
        Err(e) => return Some(format!("unreadable ({e})")),
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Fifo => {
            let mode = match rustix::fs::fcntl_getfl(fd) {
                Ok(flags) => flags & OFlags::RWMODE,
                Err(e) => return Some(format!("unreadable ({e})")),
            };
            let wanted = if reading {
                OFlags::RDONLY
            } else {
                OFlags::WRONLY
            };
            // A FIFO opened for reading and writing is its own writer and reader: it
            // never reports the far end's going.
            (mode != wanted).then(|| "a pipe end of the other kind".into())
        }
        FileType::Socket => connected_stream(fd).err(),
        _ => Some("not a pipe or a socket".into()),
    }
}

impl StdioPeer {
    /// The watch, when stdin is a pipe's read end or a connected stream socket and
    /// stdout a pipe's write end or one: never a regular file, a terminal or
    /// `/dev/null`, whose far ends never go.
    pub(crate) fn detect() -> Option<Self> {
        let stdin = rustix::stdio::stdin();
        let stdout = rustix::stdio::stdout();
        if let Some(why) =
            stdio_unwatchable(stdin, true).or_else(|| stdio_unwatchable(stdout, false))
        {
            tracing::debug!("stdio peer not watched: {why}");
            return None;
        }
        Some(Self {
            stdin_gone: false,
            stdout_gone: false,
        })
    }

    /// The sides to add to the event loop's poll: those whose far end is still there.
    pub(crate) fn fds(&self) -> impl Iterator<Item = (BorrowedFd<'_>, PollFlags)> {
        let stdin = (!self.stdin_gone).then(|| (rustix::stdio::stdin(), STDIN_WATCH));
        let stdout = (!self.stdout_gone).then(|| (rustix::stdio::stdout(), STDOUT_WATCH));
        stdin.into_iter().chain(stdout)
    }

    /// True once both far ends are gone (both sides looked at now).
    pub(crate) fn gone(&mut self) -> bool {
        let (stdin, stdout) = (rustix::stdio::stdin(), rustix::stdio::stdout());
        let mut fds = [
            PollFd::new(&stdin, STDIN_WATCH),
            PollFd::new(&stdout, STDOUT_WATCH),
        ];
        let zero = timespec(std::time::Duration::ZERO);
        match rustix::event::poll(&mut fds, Some(&zero)) {
            Ok(_) => {}
            Err(_) => return false,
        }
        self.stdin_gone = fds[0].revents().intersects(STDIN_GONE);
        self.stdout_gone = fds[1].revents().intersects(STDOUT_GONE);
        self.stdin_gone && self.stdout_gone
    }
}
