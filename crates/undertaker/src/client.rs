//! A host's handle on `undertaker supervise` (docs/SUPERVISE.md): [`Supervisor`] starts
//! one with this process as its owner, on a Unix socket pair, and
//! [`Supervisor::spawn`] starts a `std::process::Command` as a guarded tree whose
//! stdio pipes come back to the caller. When this process dies, however it dies, the
//! supervisor tears every tree down.
//!
//! Plain threads and std only: a background thread reads replies and events, so
//! [`GuardedChild::wait`] in one thread never blocks a request in another.

use crate::identity::TreeId;
use crate::protocol::wire::{
    AdoptReply, Event, HeldTier, HelloReply, KillReply, ListReply, ListedTree, RegisterReply,
    SpawnReply,
};
use crate::protocol::{Envelope, Request, SpawnRequest, PROTOCOL_VERSION};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use serde_json::Value;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, IoSlice};
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

/// How to start the supervisor.
#[derive(Debug, Clone)]
pub struct SupervisorBuilder {
    program: PathBuf,
    state_dir: Option<PathBuf>,
    grace: Option<Duration>,
    tier: Option<crate::Tier>,
    label: Option<String>,
}

impl Default for SupervisorBuilder {
    fn default() -> Self {
        Self {
            program: std::env::var_os("UNDERTAKER_BIN")
                .map_or_else(|| PathBuf::from("undertaker"), PathBuf::from),
            state_dir: None,
            grace: None,
            tier: None,
            label: None,
        }
    }
}

impl SupervisorBuilder {
    /// The `undertaker` binary (default: `$UNDERTAKER_BIN`, else `undertaker` on PATH).
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Time between SIGTERM and SIGKILL in every teardown.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    pub fn tier(mut self, tier: crate::Tier) -> Self {
        self.tier = Some(tier);
        self
    }

    /// Default label of the trees.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Starts `undertaker supervise` with this process as owner and checks it answers
    /// `hello` with this protocol version.
    pub fn start(self) -> io::Result<Supervisor> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )?;
        let mut cmd = Command::new(&self.program);
        if let Some(dir) = &self.state_dir {
            cmd.arg("--state-dir").arg(dir);
        }
        cmd.arg("supervise");
        if let Some(grace) = self.grace {
            cmd.arg("--grace").arg(format!("{}ms", grace.as_millis()));
        }
        if let Some(tier) = self.tier {
            cmd.args(["--tier", tier.as_str()]);
        }
        if let Some(label) = &self.label {
            cmd.arg("--label").arg(label);
        }
        let out = theirs.try_clone()?;
        cmd.stdin(Stdio::from(theirs))
            .stdout(Stdio::from(out))
            .env_remove(crate::identity::TREE_MARKER);
        let child = cmd.spawn()?;
        Supervisor::connect(ours, child)
    }
}

/// What the reader thread shares with requesters and waiters.
#[derive(Default)]
struct Inbox {
    /// Reply channels by request id.
    waiting: HashMap<u64, mpsc::Sender<Value>>,
    /// `exited` statuses by tree id.
    exited: HashMap<String, i32>,
    /// Trees whose teardown is over (`ended`).
    ended: std::collections::HashSet<String>,
    closed: bool,
}

struct Shared {
    inbox: Mutex<Inbox>,
    changed: Condvar,
    /// The socket, for writing; one writer at a time.
    writer: Mutex<OwnedFd>,
    next_id: Mutex<u64>,
}

/// A running `undertaker supervise` owned by this process. Dropping it ends the
/// supervisor's input, which tears every tree down, and waits for it to exit.
pub struct Supervisor {
    shared: Arc<Shared>,
    child: Mutex<Child>,
    hello: Option<HelloReply>,
}

impl Supervisor {
    /// Starts one with the defaults (see [`SupervisorBuilder`]).
    pub fn start() -> io::Result<Self> {
        SupervisorBuilder::default().start()
    }

    pub fn builder() -> SupervisorBuilder {
        SupervisorBuilder::default()
    }

    fn connect(socket: OwnedFd, child: Child) -> io::Result<Self> {
        let reading = File::from(socket.try_clone()?);
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox::default()),
            changed: Condvar::new(),
            writer: Mutex::new(socket),
            next_id: Mutex::new(1),
        });
        let for_reader = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("undertaker-supervisor-reader".into())
            .spawn(move || read_loop(reading, &for_reader))?;
        let mut sup = Self {
            shared,
            child: Mutex::new(child),
            hello: None,
        };
        // Dropped on failure: closing the socket ends the supervisor.
        let hello = sup.call(Request::Hello, &[])?;
        if hello["protocol"] != PROTOCOL_VERSION {
            return Err(io::Error::other(format!(
                "undertaker supervise speaks protocol {}, this library {PROTOCOL_VERSION}",
                hello["protocol"]
            )));
        }
        sup.hello = Some(typed(hello)?);
        Ok(sup)
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> u32 {
        self.child.lock().map(|c| c.id()).unwrap_or(0)
    }

    /// The containment tier its trees get (`cgroup`, `subreaper`, `portable`, or `job` on Windows).
    pub fn tier(&self) -> &str {
        match self.hello.as_ref().map(|h| h.tier) {
            Some(HeldTier::Cgroup) => "cgroup",
            Some(HeldTier::Subreaper) => "subreaper",
            Some(HeldTier::Portable) => "portable",
            Some(HeldTier::Job) => "job",
            None => "",
        }
    }

    /// Its `hello` reply: protocol, version, tier, pid, owner, channel kind.
    pub fn hello(&self) -> Option<&HelloReply> {
        self.hello.as_ref()
    }

    /// The trees it holds (`list`).
    pub fn list(&self) -> io::Result<Vec<ListedTree>> {
        let reply: ListReply = typed(self.call(Request::List, &[])?)?;
        Ok(reply.trees)
    }

    /// Sends one request with `fds` attached and waits for its reply (its `id` is
    /// set here). A reply with `ok: false` becomes an error carrying its code and
    /// message.
    pub fn call(&self, request: Request, fds: &[BorrowedFd<'_>]) -> io::Result<Value> {
        send_request(&self.shared, request, fds)
    }

    /// [`Supervisor::call`] with a request written as JSON (an object whose `op` and
    /// fields docs/supervise.schema.json describes), for what the typed methods do
    /// not cover. It is parsed as the supervisor parses it first.
    pub fn request(&self, request: Value, fds: &[BorrowedFd<'_>]) -> io::Result<Value> {
        let line = serde_json::to_vec(&request)?;
        let parsed = crate::protocol::parse_line(&line)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an empty request"))?;
        self.call(parsed.request, fds)
    }

    /// Starts `cmd` (program, arguments, environment changes, working directory) as a
    /// guarded tree, with pipes for its stdin, stdout and stderr. `env_clear` on the
    /// command cannot be seen through std's API: use [`Supervisor::request`] for that.
    pub fn spawn(&self, cmd: &Command) -> io::Result<GuardedChild> {
        let (in_r, in_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mut child = self.spawn_with_fds(cmd, [in_r.as_fd(), out_w.as_fd(), err_w.as_fd()])?;
        child.stdin = Some(File::from(in_w));
        child.stdout = Some(File::from(out_r));
        child.stderr = Some(File::from(err_r));
        Ok(child)
    }

    /// Like [`Supervisor::spawn`], with the child's stdin, stdout and stderr given.
    pub fn spawn_with_fds(
        &self,
        cmd: &Command,
        stdio: [BorrowedFd<'_>; 3],
    ) -> io::Result<GuardedChild> {
        let text = |s: &std::ffi::OsStr| {
            std::str::from_utf8(s.as_bytes())
                .map(str::to_owned)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not UTF-8"))
        };
        let mut argv = vec![text(cmd.get_program())?];
        for arg in cmd.get_args() {
            argv.push(text(arg)?);
        }
        let mut env = Vec::new();
        for (k, v) in cmd.get_envs() {
            // A removed variable: the protocol has no removal; an empty value is closest.
            let v: OsString = v.map(OsString::from).unwrap_or_default();
            env.push((text(k)?, text(&v)?));
        }
        let cwd = cmd.get_current_dir().map(|d| text(d.as_os_str()));
        let request = Request::Spawn(SpawnRequest {
            argv,
            env,
            cwd: cwd.transpose()?,
            ..Default::default()
        });
        let reply: SpawnReply = typed(self.call(request, &stdio)?)?;
        Ok(GuardedChild {
            pid: u32::try_from(reply.pid).unwrap_or(0),
            tree: reply.tree,
            stdin: None,
            stdout: None,
            stderr: None,
            shared: Arc::clone(&self.shared),
        })
    }

    /// `adopt`: a child of this process (and its descendants) becomes a tree. Returns
    /// the tree id.
    pub fn adopt(&self, pid: u32) -> io::Result<String> {
        let pid = Some(number(pid)?);
        let reply: AdoptReply = typed(self.call(Request::Adopt { pid }, &[])?)?;
        Ok(reply.tree)
    }

    /// `adopt` with a pidfd: the process it names (and its descendants) becomes a tree;
    /// the pidfd is the proof of identity. Returns the tree id.
    pub fn adopt_pidfd(&self, pidfd: BorrowedFd<'_>) -> io::Result<String> {
        let reply: AdoptReply = typed(self.call(Request::Adopt { pid: None }, &[pidfd])?)?;
        Ok(reply.tree)
    }

    /// `register`: a process group whose leader is a child of this process.
    pub fn register(&self, pgid: u32) -> io::Result<String> {
        let pgid = number(pgid)?;
        let reply: RegisterReply = typed(self.call(Request::Register { pgid }, &[])?)?;
        Ok(reply.tree)
    }

    /// Tears one tree down now; returns how many of its processes are still alive.
    pub fn kill_tree(&self, tree: &str) -> io::Result<u64> {
        let tree = tree_id(tree)?;
        let reply: KillReply = typed(self.call(Request::Kill { tree }, &[])?)?;
        Ok(reply.live)
    }

    /// Stops guarding one tree; nothing is signalled.
    pub fn release(&self, tree: &str) -> io::Result<()> {
        let tree = tree_id(tree)?;
        self.call(Request::Release { tree }, &[]).map(drop)
    }
}

impl Drop for Supervisor {
    /// End of input: the supervisor tears every tree down and exits.
    fn drop(&mut self) {
        if let Ok(writer) = self.shared.writer.lock() {
            let _ = rustix::net::shutdown(&*writer, rustix::net::Shutdown::Write);
        }
        if let Ok(mut child) = self.child.lock() {
            let _ = child.wait();
        }
    }
}

/// A command running as a guarded tree.
pub struct GuardedChild {
    pid: u32,
    tree: String,
    pub stdin: Option<File>,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    shared: Arc<Shared>,
}

impl GuardedChild {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The tree id (as `undertaker ps` shows it).
    pub fn tree(&self) -> &str {
        &self.tree
    }

    /// Tears the whole tree down (SIGTERM, grace, SIGKILL) and returns once it is gone.
    pub fn kill(&mut self) -> io::Result<()> {
        let tree = tree_id(&self.tree)?;
        match send_request(&self.shared, Request::Kill { tree }, &[]) {
            Ok(_) => Ok(()),
            // Already exited and torn down: nothing left to kill.
            Err(e) if e.to_string().starts_with("unknown_tree") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits for the tree to be gone: its root exited and the rest of the tree was
    /// torn down (`ended`). Returns the root's status as a shell reports it (128+N
    /// for signal N).
    pub fn wait(&mut self) -> io::Result<i32> {
        self.wait_until(|inbox, tree| {
            inbox
                .exited
                .get(tree)
                .copied()
                .filter(|_| inbox.ended.contains(tree) || inbox.closed)
        })
    }

    /// Waits for the root to exit, and returns its status at once (`exited`), while
    /// the rest of the tree may still be in its teardown (see [`GuardedChild::wait`]).
    pub fn wait_exit(&mut self) -> io::Result<i32> {
        self.wait_until(|inbox, tree| inbox.exited.get(tree).copied())
    }

    fn wait_until(&self, done: impl Fn(&Inbox, &str) -> Option<i32>) -> io::Result<i32> {
        let mut inbox = lock(&self.shared.inbox)?;
        loop {
            if let Some(status) = done(&inbox, &self.tree) {
                return Ok(status);
            }
            if inbox.closed {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the supervisor is gone",
                ));
            }
            inbox = self
                .shared
                .changed
                .wait(inbox)
                .map_err(|_| io::Error::other("poisoned"))?;
        }
    }
}

/// A pid or pgid as the protocol carries it.
fn number(n: u32) -> io::Result<i32> {
    i32::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not a pid"))
}

fn tree_id(tree: &str) -> io::Result<TreeId> {
    TreeId::parse(tree)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no tree {tree}")))
}

/// One request and its reply (see [`Supervisor::call`]).
fn send_request(shared: &Shared, request: Request, fds: &[BorrowedFd<'_>]) -> io::Result<Value> {
    let id = {
        let mut next = lock(&shared.next_id)?;
        *next += 1;
        *next
    };
    let envelope = Envelope {
        id: Some(id.into()),
        request,
    };
    let (tx, rx) = mpsc::channel();
    {
        let mut inbox = lock(&shared.inbox)?;
        if inbox.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the supervisor is gone",
            ));
        }
        inbox.waiting.insert(id, tx);
    }
    let mut line = serde_json::to_string(&envelope)?;
    line.push('\n');
    let writer = lock(&shared.writer)?;
    send_line(&writer, line.as_bytes(), fds)?;
    drop(writer);
    let reply = rx.recv().map_err(|_| {
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the supervisor closed its output",
        )
    })?;
    if reply["ok"] == true {
        return Ok(reply);
    }
    let code = reply["error"]["code"].as_str().unwrap_or("unknown");
    let message = reply["error"]["message"].as_str().unwrap_or("");
    let kind = match code {
        "not_found" => io::ErrorKind::NotFound,
        "not_executable" | "refused" => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    Err(io::Error::new(kind, format!("{code}: {message}")))
}

/// A successful reply as its verb's type (docs/supervise.schema.json).
fn typed<T: serde::de::DeserializeOwned>(reply: Value) -> io::Result<T> {
    serde_json::from_value(reply).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a reply of undertaker supervise does not have its verb's shape: {e}"),
        )
    })
}

fn lock<T>(m: &Mutex<T>) -> io::Result<std::sync::MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| io::Error::other("a supervisor client thread panicked"))
}

/// Sends one line with `fds` attached to its first byte (`SCM_RIGHTS`).
fn send_line(socket: &OwnedFd, line: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut sent = rustix::net::sendmsg(
        socket,
        &[IoSlice::new(line)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    while sent < line.len() {
        sent += rustix::net::send(socket, &line[sent..], SendFlags::NOSIGNAL)?;
    }
    Ok(())
}

/// Reads replies and events until the supervisor closes its output.
fn read_loop(socket: File, shared: &Shared) {
    let mut reader = BufReader::new(socket);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Ok(mut inbox) = shared.inbox.lock() else {
            return;
        };
        if value.get("event").is_some() {
            // Events this library does not know (a newer supervisor's) are skipped.
            match serde_json::from_value::<Event>(value) {
                Ok(Event::Exited { tree, status, .. }) => {
                    inbox.exited.insert(tree, status);
                }
                Ok(Event::Ended { tree, .. }) => {
                    inbox.ended.insert(tree);
                }
                Err(_) => {}
            }
        } else if let Some(id) = value["id"].as_u64() {
            if let Some(tx) = inbox.waiting.remove(&id) {
                let _ = tx.send(value);
            }
        }
        shared.changed.notify_all();
    }
    if let Ok(mut inbox) = shared.inbox.lock() {
        inbox.closed = true;
        inbox.waiting.clear();
    }
    shared.changed.notify_all();
}
