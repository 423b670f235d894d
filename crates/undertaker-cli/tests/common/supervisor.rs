//! `undertaker supervise` driven by this test as its owner: requests on a pipe (or a
//! socket, which can carry descriptors), replies read back, events kept.

use super::cli::undertaker;
use super::procs::wait_child;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// A supervisor whose owner is this test: requests on a pipe (or a socket, which can
/// carry descriptors), replies read back.
pub struct Supervisor {
    pub child: Child,
    pub input: Option<Box<dyn Write>>,
    /// The socket end requests go out on, when started with [`Supervisor::on_socket`].
    socket: Option<UnixStream>,
    output: BufReader<Box<dyn Read>>,
    /// Events read while waiting for replies.
    pub events: Vec<Value>,
}

impl Supervisor {
    pub fn start(state: &Path, tier: &str) -> Self {
        Self::start_with(undertaker(), state, tier, &[])
    }

    /// `undertaker` (`base`) `--state-dir STATE supervise --tier TIER EXTRA…` on pipes.
    pub fn start_with(mut base: Command, state: &Path, tier: &str, extra: &[&str]) -> Self {
        let mut child = base
            .arg("--state-dir")
            .arg(state)
            .args(["supervise", "--grace", "500ms", "--tier", tier])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start undertaker supervise");
        let input: ChildStdin = child.stdin.take().unwrap();
        let output: ChildStdout = child.stdout.take().unwrap();
        Self {
            child,
            input: Some(Box::new(input)),
            socket: None,
            output: BufReader::new(Box::new(output)),
            events: Vec::new(),
        }
    }

    /// The same on one end of a socket pair, for requests that carry descriptors.
    pub fn on_socket(state: &Path, extra: &[&str]) -> Self {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let child = undertaker()
            .arg("--state-dir")
            .arg(state)
            .args(["supervise", "--grace", "500ms"])
            .args(extra)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(
                theirs.try_clone().unwrap(),
            )))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .spawn()
            .expect("start undertaker supervise");
        Self {
            child,
            input: Some(Box::new(ours.try_clone().unwrap())),
            output: BufReader::new(Box::new(ours.try_clone().unwrap())),
            socket: Some(ours),
            events: Vec::new(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let input = self.input.as_mut().unwrap();
        input.write_all(bytes).unwrap();
        input.flush().unwrap();
    }

    /// Sends one line, returns its reply (events on the way are kept).
    pub fn request(&mut self, line: &str) -> Value {
        self.send_raw(format!("{line}\n").as_bytes());
        self.reply()
    }

    /// Sends one line with `fds` attached (socket only), returns its reply.
    pub fn request_with_fds(&mut self, line: &str, fds: &[BorrowedFd<'_>]) -> Value {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let socket = self.socket.as_ref().expect("started on a socket");
        let mut space = vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
        let data = format!("{line}\n");
        let sent = sendmsg(
            socket,
            &[std::io::IoSlice::new(data.as_bytes())],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
        assert_eq!(sent, data.len());
        self.reply()
    }

    pub fn reply(&mut self) -> Value {
        self.next_line().expect("supervisor closed its output")
    }

    /// The next reply, or `None` at end of output (events on the way are kept).
    pub fn next_line(&mut self) -> Option<Value> {
        loop {
            let mut text = String::new();
            let n = self.output.read_line(&mut text).unwrap();
            if n == 0 {
                return None;
            }
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            if v.get("event").is_some() {
                self.events.push(v);
            } else {
                return Some(v);
            }
        }
    }

    /// End of input: the host is gone. Returns the exit code.
    pub fn close(mut self) -> i32 {
        drop(self.input.take());
        if let Some(socket) = &self.socket {
            let _ = socket.shutdown(std::net::Shutdown::Write);
        }
        let status =
            wait_child(&mut self.child, Duration::from_secs(60)).expect("supervisor exits");
        status.code().unwrap_or(-1)
    }
}
