//! The control channel: requests on standard input (a pipe, or a Unix stream socket
//! that may carry file descriptors), replies and events on standard output.
//!
//! Descriptors belong to exactly one line: the one their `sendmsg` began with
//! (docs/SUPERVISE.md). A stream socket glues messages in one read, so a line start
//! is read on its own: a message carrying descriptors that begins there brings them
//! with that one byte, and with nothing else. Descriptors of a message that began
//! inside a line belong to no line: the kernel discards them (they are never
//! received) and the line gets `bad_fds`. So the channel holds at most one message's
//! descriptors ([`MAX_FDS`]) at any time, whatever the peer sends.
//!
//! Writing never blocks the supervisor: a host that stops reading its replies loses
//! them, it does not stall the owner watch or the teardown of its trees. The flags of
//! the inherited standard output are never changed (they live in the open file
//! description the host shares, and a terminal's with every process on it: a shell
//! that found its terminal non-blocking would fail its reads): a pipe or a terminal
//! (a pty whose reader stopped, or ^S) is written through a private non-blocking
//! re-open of it, a socket with `MSG_DONTWAIT`. Only a regular file is written
//! plainly: its writes never wait for a reader.

use crate::protocol::framing::{Frame, LineFramer};
use crate::protocol::{ErrorCode, ProtocolError};
use crate::RunError;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendFlags};
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// Bytes read per call: one maximal line fits in two reads.
const READ_CHUNK: usize = 32 * 1024;
/// Most file descriptors accepted with one message (a spawn takes three). More: the
/// line gets `bad_fds`, and none of them is kept.
const MAX_FDS: usize = 8;
/// Bytes consumed per [`Channel::read`] at most, so a busy host cannot starve the
/// owner watch and the trees' roots.
const READ_BUDGET: usize = 4 * READ_CHUNK;
/// Descriptors kept open from the start and closed when the teardown begins, so the
/// teardown finds free slots (pidfds, `/proc` directories, `cgroup.kill`, the registry)
/// however full the table got.
const RESERVED_FDS: usize = 32;

/// A complete line and the file descriptors that came with it, or why they were
/// refused (the line then gets `bad_fds`; the descriptors are already closed).
pub(super) struct Incoming {
    pub frame: Frame,
    pub fds: Result<Vec<OwnedFd>, ProtocolError>,
}

pub(super) struct Channel {
    input: OwnedFd,
    socket: bool,
    framer: LineFramer,
    /// The descriptors of the message that began the line being read.
    line_fds: Vec<OwnedFd>,
    /// Why the line being read may not have descriptors (they were closed).
    line_refused: Option<String>,
    buf: Vec<u8>,
    /// End of input seen while lines read before it were still to be handed out.
    ended: bool,
    reserve: Vec<OwnedFd>,
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
        let _ = OUTPUT.set(Output::choose());
        let reserve = (0..RESERVED_FDS)
            .map_while(|_| rustix::io::fcntl_dupfd_cloexec(&input, 3).ok())
            .collect();
        Ok(Self {
            input,
            socket,
            framer: LineFramer::new(),
            line_fds: Vec::new(),
            line_refused: None,
            buf: vec![0; READ_CHUNK],
            ended: false,
            reserve,
        })
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.input.as_fd()
    }

    pub(super) fn is_socket(&self) -> bool {
        self.socket
    }

    /// The teardown begins: the reserved descriptor slots, and those of an unfinished
    /// line, are free for it from now on.
    pub(super) fn release_reserve(&mut self) {
        self.reserve.clear();
        self.line_fds.clear();
    }

    /// Reads what is there (call when the fd polled readable). `None`: end of input
    /// (or an error that means the same: the host can no longer talk to us).
    pub(super) fn read(&mut self) -> Option<Vec<Incoming>> {
        if self.ended {
            return None;
        }
        let mut out = Vec::new();
        let mut consumed = 0;
        while consumed < READ_BUDGET {
            let step = if self.socket {
                self.socket_step(&mut out)
            } else {
                self.pipe_step(&mut out)
            };
            match step {
                Step::Read(n) => consumed += n,
                Step::Drained => break,
                Step::End if out.is_empty() => return None,
                Step::End => {
                    self.ended = true;
                    break;
                }
            }
            if !self.socket {
                // A pipe polled readable promises one read that does not block.
                break;
            }
        }
        Some(out)
    }

    fn pipe_step(&mut self, out: &mut Vec<Incoming>) -> Step {
        loop {
            match rustix::io::read(&self.input, &mut self.buf[..]) {
                Ok(0) => return Step::End,
                Ok(n) => {
                    self.push(n, out);
                    return Step::Read(n);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Step::Drained,
                Err(_) => return Step::End,
            }
        }
    }

    /// One read on the socket. Peeks first: bytes with no descriptor message beginning
    /// among them are read in one go; otherwise a line start is read alone (what comes
    /// with it is the line's), and inside a line only up to its end.
    fn socket_step(&mut self, out: &mut Vec<Incoming>) -> Step {
        let (peeked, fds_ahead) = match recv(&self.input, &mut self.buf[..], None, true) {
            Ok((0, ..)) => return Step::End,
            Ok((n, _, truncated)) => (n, truncated),
            Err(rustix::io::Errno::AGAIN) => return Step::Drained,
            Err(rustix::io::Errno::INTR) => return Step::Read(0),
            Err(_) => return Step::End,
        };
        let at_line_start = self.framer.at_line_start();
        let want = match (fds_ahead, at_line_start) {
            (false, _) => peeked,
            (true, true) => 1,
            (true, false) => self.buf[..peeked]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(peeked, |i| i + 1),
        };
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        // Only a line start may take descriptors; anywhere else the kernel drops them.
        let control = (fds_ahead && at_line_start).then_some(&mut space[..]);
        let (n, fds, truncated) = match recv(&self.input, &mut self.buf[..want], control, false) {
            Ok((0, ..)) => return Step::End,
            Ok(got) => got,
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => return Step::Read(0),
            Err(_) => return Step::End,
        };
        if fds_ahead && at_line_start {
            self.begin_line(fds, truncated);
        } else if truncated && !self.framer.discarding() {
            drop(fds);
            self.refuse_line(
                "file descriptors came with a message that began inside a line (they were \
                 closed): send them with the message that begins the line they are for",
            );
        }
        self.push(n, out);
        Step::Read(n)
    }

    fn begin_line(&mut self, fds: Vec<OwnedFd>, truncated: bool) {
        if truncated {
            self.refuse_line(&format!(
                "more than {MAX_FDS} file descriptors came with this line, or no slot was \
                 free for them (they were closed)"
            ));
        } else {
            self.line_fds = fds;
        }
    }

    fn refuse_line(&mut self, why: &str) {
        self.line_fds.clear();
        if self.line_refused.is_none() {
            self.line_refused = Some(why.to_owned());
        }
    }

    /// Feeds `n` bytes of the buffer to the framer; the first line completed takes the
    /// descriptors (or the refusal) of the line being read.
    fn push(&mut self, n: usize, out: &mut Vec<Incoming>) {
        let mut frames = Vec::new();
        self.framer.push(&self.buf[..n], &mut frames);
        for frame in frames {
            let fds = match self.line_refused.take() {
                Some(why) => Err(ProtocolError::new(ErrorCode::BadFds, why)),
                None => Ok(std::mem::take(&mut self.line_fds)),
            };
            out.push(Incoming { frame, fds });
        }
    }
}

enum Step {
    /// Bytes consumed (0: try again).
    Read(usize),
    /// Nothing more queued now.
    Drained,
    End,
}

/// One `recvmsg`, never waiting: (bytes, descriptors received, whether the kernel had
/// descriptors it did not hand over). `control: None` accepts none; `peek` leaves the
/// bytes queued (and the descriptors with them).
fn recv(
    socket: &OwnedFd,
    buf: &mut [u8],
    control: Option<&mut [MaybeUninit<u8>]>,
    peek: bool,
) -> rustix::io::Result<(usize, Vec<OwnedFd>, bool)> {
    let mut none: [MaybeUninit<u8>; 0] = [];
    let mut control = RecvAncillaryBuffer::new(control.unwrap_or(&mut none));
    let mut iov = [IoSliceMut::new(buf)];
    let mut flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
    if peek {
        flags |= RecvFlags::PEEK;
    }
    let msg = rustix::net::recvmsg(socket, &mut iov, &mut control, flags)?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    Ok((msg.bytes, fds, msg.flags.contains(ReturnFlags::CTRUNC)))
}

/// How replies reach standard output without changing the host's file flags.
enum Output {
    /// A socket: `send` with `MSG_DONTWAIT`.
    Socket,
    /// A pipe or a terminal (any character device), re-opened: a description of our
    /// own, non-blocking.
    Private(OwnedFd),
    /// One that could not be re-opened: poll, then writes of at most `PIPE_BUF`
    /// bytes, which a pipe polling writable takes without blocking.
    Polled,
    /// A regular file: plain writes.
    Plain,
}

static OUTPUT: OnceLock<Output> = OnceLock::new();

/// POSIX's `PIPE_BUF` on Linux.
const PIPE_BUF: usize = 4096;

impl Output {
    fn choose() -> Self {
        let out = rustix::stdio::stdout();
        let Ok(st) = rustix::fs::fstat(out) else {
            return Output::Plain;
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Socket => Output::Socket,
            FileType::RegularFile => Output::Plain,
            // `O_NOCTTY`: we lead a session without a terminal (setsid), and opening
            // one without it would make it ours.
            _ => rustix::fs::open(
                "/proc/self/fd/1",
                OFlags::WRONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_or(Output::Polled, Output::Private),
        }
    }

    fn write(&self, bytes: &[u8]) -> rustix::io::Result<usize> {
        let out = rustix::stdio::stdout();
        match self {
            Output::Socket => {
                rustix::net::send(out, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)
            }
            Output::Private(fd) => rustix::io::write(fd, bytes),
            Output::Polled => {
                let mut fds = [rustix::event::PollFd::new(
                    &out,
                    rustix::event::PollFlags::OUT,
                )];
                let now = crate::linux::kernel::poll::timespec(std::time::Duration::ZERO);
                if !matches!(rustix::event::poll(&mut fds, Some(&now)), Ok(n) if n > 0) {
                    return Err(rustix::io::Errno::AGAIN);
                }
                rustix::io::write(out, &bytes[..bytes.len().min(PIPE_BUF)])
            }
            Output::Plain => rustix::io::write(out, bytes),
        }
    }

    fn wait_writable(&self) {
        let out = rustix::stdio::stdout();
        let fd = match self {
            Output::Private(fd) => fd.as_fd(),
            _ => out,
        };
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::OUT,
        )];
        crate::linux::kernel::poll::poll_until(
            &mut fds,
            Some(std::time::Instant::now() + std::time::Duration::from_millis(5)),
        );
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
    let output = OUTPUT.get_or_init(|| Output::Plain);
    let mut bytes = line.as_bytes();
    let mut stalls = 0;
    while !bytes.is_empty() {
        match output.write(bytes) {
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
                output.wait_writable();
            }
            Err(_) => return,
        }
    }
}
