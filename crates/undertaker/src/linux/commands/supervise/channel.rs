//! The control channel: requests on standard input (a pipe, or a Unix stream socket
//! that may carry file descriptors), replies and events on standard output.
//!
//! Writing never blocks the supervisor: a host that stops reading its replies loses
//! them, it does not stall the teardown of its trees (standard output is made
//! non-blocking when it is a pipe or a socket).

use crate::protocol::framing::{Frame, LineFramer};
use crate::RunError;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::FileType;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use std::io::IoSliceMut;
use std::mem::MaybeUninit;

/// Bytes read per call: one maximal line fits in two reads.
const READ_CHUNK: usize = 32 * 1024;
/// Most file descriptors accepted with one message (a spawn takes three).
const MAX_FDS: usize = 8;

/// A complete line and the file descriptors that came with it.
pub(super) struct Incoming {
    pub frame: Frame,
    pub fds: Vec<OwnedFd>,
}

pub(super) struct Channel {
    input: OwnedFd,
    socket: bool,
    framer: LineFramer,
    /// Descriptors received with bytes of a line not complete yet.
    pending_fds: Vec<OwnedFd>,
    buf: Vec<u8>,
}

impl Channel {
    /// Takes standard input. On a socket, the peer must have our uid (`SO_PEERCRED`).
    pub(super) fn from_stdin(uid: u32) -> Result<Self, RunError> {
        // Close-on-exec from now on: nothing we start may inherit the channel.
        let input = crate::linux::kernel::sys::take_inherited_fd(0)
            .map_err(|e| RunError::Usage(format!("standard input: {e}")))?;
        let kind = rustix::fs::fstat(&input)
            .map(|st| FileType::from_raw_mode(st.st_mode))
            .map_err(|e| RunError::Usage(format!("standard input: {e}")))?;
        let socket = kind == FileType::Socket;
        if socket {
            let cred = rustix::net::sockopt::socket_peercred(&input).map_err(|e| {
                RunError::Usage(format!("standard input is a socket without a peer: {e}"))
            })?;
            if cred.uid.as_raw() != uid {
                return Err(RunError::Usage(format!(
                    "the peer of standard input has uid {}, not ours ({uid}): refused",
                    cred.uid.as_raw()
                )));
            }
        }
        make_stdout_nonblocking();
        Ok(Self {
            input,
            socket,
            framer: LineFramer::new(),
            pending_fds: Vec::new(),
            buf: vec![0; READ_CHUNK],
        })
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.input.as_fd()
    }

    pub(super) fn is_socket(&self) -> bool {
        self.socket
    }

    /// Reads what is there (call when the fd polled readable). `None`: end of input
    /// (or an error that means the same: the host can no longer talk to us).
    pub(super) fn read(&mut self) -> Option<Vec<Incoming>> {
        let (n, fds) = loop {
            let got = if self.socket {
                self.recv()
            } else {
                rustix::io::read(&self.input, &mut self.buf[..]).map(|n| (n, Vec::new()))
            };
            match got {
                Ok(x) => break x,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => return Some(Vec::new()),
                Err(_) => return None,
            }
        };
        if n == 0 {
            return None;
        }
        let mut frames = Vec::new();
        self.framer.push(&self.buf[..n], &mut frames);
        // Descriptors belong to the line holding the first byte of their message.
        self.pending_fds.extend(fds);
        let mut out = Vec::with_capacity(frames.len());
        for frame in frames {
            let fds = std::mem::take(&mut self.pending_fds);
            out.push(Incoming { frame, fds });
        }
        Some(out)
    }

    fn recv(&mut self) -> rustix::io::Result<(usize, Vec<OwnedFd>)> {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut self.buf[..])];
        let msg =
            rustix::net::recvmsg(&self.input, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
        let mut fds = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        Ok((msg.bytes, fds))
    }
}

fn make_stdout_nonblocking() {
    let out = rustix::stdio::stdout();
    let Ok(st) = rustix::fs::fstat(out) else {
        return;
    };
    if matches!(
        FileType::from_raw_mode(st.st_mode),
        FileType::Fifo | FileType::Socket
    ) {
        if let Ok(flags) = rustix::fs::fcntl_getfl(out) {
            let _ = rustix::fs::fcntl_setfl(out, flags | rustix::fs::OFlags::NONBLOCK);
        }
    }
}

/// Set when a line was dropped because nobody reads standard output: later lines are
/// then dropped at once instead of each waiting for a reader that is not there.
static STALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes one reply or event line to standard output. Errors are ignored: the
/// supervisor never dies of its own output, and a reply is never worth blocking for:
/// a full pipe gets 100 ms, then the line is dropped (and later lines at once, until
/// a write goes through again).
pub(super) fn emit(line: &str) {
    use std::sync::atomic::Ordering;
    let out = rustix::stdio::stdout();
    let mut bytes = line.as_bytes();
    let mut stalls = 0;
    while !bytes.is_empty() {
        match rustix::io::write(out, bytes) {
            Ok(0) => return,
            Ok(n) => {
                bytes = &bytes[n..];
                STALLED.store(false, Ordering::Relaxed);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                let untouched = bytes.len() == line.len();
                if (untouched && STALLED.load(Ordering::Relaxed)) || stalls >= 20 {
                    STALLED.store(true, Ordering::Relaxed);
                    return;
                }
                stalls += 1;
                let mut fds = [rustix::event::PollFd::new(
                    &out,
                    rustix::event::PollFlags::OUT,
                )];
                crate::linux::kernel::poll::poll_until(
                    &mut fds,
                    Some(std::time::Instant::now() + std::time::Duration::from_millis(5)),
                );
            }
            Err(_) => return,
        }
    }
}
