//! `undertaker supervise`'s platform-neutral half (docs/SUPERVISE.md): the serve
//! loop over the line protocol (`protocol/`), the table of trees, the answers to
//! `hello`, `spawn`, `register`, `adopt`, `unregister`, `kill`, `release` and `list`,
//! the `exited`/`ended` events, and the teardown of every tree when the input ends,
//! the owner dies or the supervisor is asked to stop. What a tree *is* (a Job
//! Object on Windows, the portable core's tracking on macOS) lives behind two small
//! traits: [`Channel`] (the lines in, the owner, the stop) and [`Trees`] (spawn, take
//! over, release, tear down). Windows and macOS run this one copy; Linux's supervisor
//! is its own (it passes descriptors and holds cgroups).

// The trees over the portable core: macOS's; Linux's tests run them
// (linux/contain/portable/tests/supervise.rs).
#[cfg(any(target_os = "macos", all(test, target_os = "linux")))]
pub(crate) mod portable;

use crate::identity::TreeId;
use crate::protocol::framing::Frame;
use crate::protocol::reply;
use crate::protocol::wire::{
    AdoptReply, HelloReply, KillReply, ListReply, ListedTree, OkReply, RegisterReply, ReleaseReply,
    SpawnReply, TreeKind, UnregisterReply,
};
use crate::protocol::{parse_line, ErrorCode, ProtocolError, Request, SpawnRequest, MAX_LINE};
use crate::registry::recorder::Recorder;
use crate::registry::refusal_log::RefusalLog;
use std::io::Write;
use std::process::{Command, Stdio};

/// The command a `spawn` request names, its stdio the null device (the supervisor's
/// own stdio is the channel): what every platform starts, each its own way, once it
/// has added the tree's marker. Returns the program's name too, for the errors.
pub(crate) fn spawn_command(req: &SpawnRequest) -> Result<(&str, Command), ProtocolError> {
    let (program, args) = req
        .argv
        .split_first()
        .ok_or_else(|| ProtocolError::new(ErrorCode::BadRequest, "argv is empty"))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    if req.env_clear {
        cmd.env_clear();
    }
    cmd.envs(req.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &req.cwd {
        cmd.current_dir(cwd);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok((program, cmd))
}

/// A start of `program` the system refused, as the protocol reports it.
pub(crate) fn spawn_failed(program: &str, e: &std::io::Error) -> ProtocolError {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            ProtocolError::new(ErrorCode::NotFound, format!("{program}: command not found"))
        }
        std::io::ErrorKind::PermissionDenied => {
            ProtocolError::new(ErrorCode::NotExecutable, format!("{program}: {e}"))
        }
        _ => ProtocolError::new(ErrorCode::SpawnFailed, format!("{program}: {e}")),
    }
}

/// One tree of a supervisor: what every platform knows of it, and what only the
/// platform holds (`held`: the job, the tracking, the child).
pub(crate) struct Tree<H> {
    pub id: TreeId,
    pub kind: TreeKind,
    pub root_pid: i32,
    pub label: Option<String>,
    pub record: Recorder,
    /// A spawned root's status, once collected (its `exited` was sent).
    pub status: Option<i32>,
    pub held: H,
}

/// What the channel gave after one wait.
pub(crate) enum Next {
    Frame(Frame),
    /// End of file (or a read error): the host is gone.
    End,
    /// Nothing within the tick: look at the trees.
    Tick,
}

/// Why serving ended: every tree is torn down either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Input,
    Owner,
    /// Asked to stop: the console closing (Windows), a stop signal (macOS).
    Stopped,
}

/// The lines in and what ends the supervisor besides their end.
pub(crate) trait Channel {
    /// Waits up to a tick for the next line (or the input's end).
    fn next(&mut self) -> Next;
    /// Whether the owner is provably gone.
    fn owner_gone(&mut self) -> bool;
    /// Whether the supervisor was asked to stop (it tears every tree down).
    fn stop_asked(&mut self) -> bool;
}

/// The per-platform tree operations.
pub(crate) trait Trees {
    type Held;
    /// `hello`'s answer on this platform.
    fn hello(&self) -> HelloReply;
    /// `spawn`: a new tree whose root is our child.
    fn spawn(&mut self, req: &SpawnRequest) -> Result<Tree<Self::Held>, ProtocolError>;
    /// `register` / `adopt` by pid: proves `pid` (the owner's child, not ours, not
    /// held by one of `held`) and takes it and its descendants over.
    fn take(
        &mut self,
        kind: TreeKind,
        pid: i32,
        held: &[Tree<Self::Held>],
    ) -> Result<Tree<Self::Held>, ProtocolError>;
    /// The refusal of a request this platform cannot serve (`adopt` of a passed
    /// descriptor, `adopt` of a process-group snapshot).
    fn cannot(&self, request: &Request) -> ProtocolError;
    fn root_alive(&mut self, tree: &mut Tree<Self::Held>) -> bool;
    /// Its processes running now.
    fn live(&mut self, tree: &mut Tree<Self::Held>) -> u64;
    /// Whether `undertaker kill` asked for this tree.
    fn stop_asked(&mut self, tree: &Tree<Self::Held>) -> bool;
    /// A spawned root's status once it has exited (waits for it: after teardown).
    fn root_status(&mut self, tree: &mut Tree<Self::Held>) -> Option<i32>;
    /// One look at a live tree on each tick (the portable core's tracking).
    fn look(&mut self, tree: &mut Tree<Self::Held>);
    /// Stops guarding: the members outlive the tree; the record says `released`.
    fn release(&mut self, tree: Tree<Self::Held>) -> Result<(), String>;
    /// Tears `trees` down together (audited in their records); each one's
    /// processes still running afterwards.
    fn tear_down(&mut self, trees: &mut [Tree<Self::Held>]) -> Vec<usize>;
}

/// The serve loop's state: the platform's trees, the channel's replies, the log of
/// refusals.
pub(crate) struct Supervisor<T: Trees, W: Write> {
    pub trees: T,
    pub out: W,
    held: Vec<Tree<T::Held>>,
    /// Where refusals go besides the reply (a host may never read replies).
    refusals: RefusalLog,
}

impl<T: Trees, W: Write> Supervisor<T, W> {
    pub(crate) fn new(trees: T, out: W, refusals: RefusalLog) -> Self {
        Self {
            trees,
            out,
            held: Vec::new(),
            refusals,
        }
    }

    /// Serves until the host is gone, then tears every tree down.
    pub(crate) fn run(&mut self, channel: &mut impl Channel) -> End {
        let end = self.serve(channel);
        tracing::debug!("supervise: {end:?}: tearing every tree down");
        self.tear_down_all();
        end
    }

    fn serve(&mut self, channel: &mut impl Channel) -> End {
        loop {
            match channel.next() {
                Next::Frame(Frame::Line(line)) => {
                    // Each request is acted on only while the owner lives.
                    if channel.owner_gone() {
                        return End::Owner;
                    }
                    self.handle(&line);
                }
                Next::Frame(Frame::TooLong) => self.emit(&reply::error(&ProtocolError::new(
                    ErrorCode::LineTooLong,
                    format!("line longer than {MAX_LINE} bytes"),
                ))),
                Next::End => return End::Input,
                Next::Tick => {}
            }
            if channel.owner_gone() {
                return End::Owner;
            }
            if channel.stop_asked() {
                return End::Stopped;
            }
            self.watch_trees();
        }
    }

    /// One JSON line to the host. A host that stopped reading blocks this write; its
    /// death ends the read side, which ends the supervisor.
    fn emit(&mut self, line: &str) {
        let _ = self.out.write_all(line.as_bytes());
        let _ = self.out.flush();
    }

    fn handle(&mut self, line: &[u8]) {
        let envelope = match parse_line(line) {
            Ok(None) => return,
            Ok(Some(e)) => e,
            Err(e) => return self.emit(&reply::error(&e)),
        };
        let op = envelope.request.op();
        let pgid = match envelope.request {
            Request::Register { pgid } | Request::Unregister { pgid } => Some(pgid),
            _ => None,
        };
        let target = match envelope.request {
            Request::Adopt { pid } => pid,
            _ => pgid,
        };
        match self.answer(envelope.request) {
            Ok(answer) => self.emit(&reply::ok(envelope.id.as_ref(), &answer)),
            Err(e) => {
                let refusal = e.reason.map(|r| (r, e.message.clone()));
                self.emit(&reply::error(&e.answering(op, envelope.id, pgid)));
                // After the reply: the host is not kept waiting for the database.
                if let Some((reason, message)) = refusal {
                    self.refusals
                        .refused(op.as_str(), target, reason.as_str(), &message);
                }
            }
        }
    }

    fn answer(&mut self, request: Request) -> Result<OkReply, ProtocolError> {
        match request {
            Request::Hello => Ok(OkReply::Hello(self.trees.hello())),
            Request::Spawn(req) => {
                let tree = self.trees.spawn(&req)?;
                let answer = SpawnReply {
                    tree: tree.id.to_string(),
                    pid: tree.root_pid,
                };
                self.held.push(tree);
                Ok(OkReply::Spawn(answer))
            }
            Request::Register { pgid } => {
                for t in &mut self.held {
                    if t.kind == TreeKind::Register
                        && t.root_pid == pgid
                        && self.trees.root_alive(t)
                    {
                        return Ok(OkReply::Register(RegisterReply {
                            pgid,
                            tree: t.id.to_string(),
                            members: self.trees.live(t),
                        }));
                    }
                }
                let (tree, members) = self.take(TreeKind::Register, pgid)?;
                Ok(OkReply::Register(RegisterReply {
                    pgid,
                    tree,
                    members,
                }))
            }
            Request::Adopt { pid: Some(pid) } => {
                let (tree, members) = self.take(TreeKind::Adopt, pid)?;
                Ok(OkReply::Adopt(AdoptReply {
                    pid: Some(pid),
                    pgid: None,
                    tree,
                    members,
                }))
            }
            ref cannot @ (Request::Adopt { pid: None } | Request::AdoptGroup { .. }) => {
                Err(self.trees.cannot(cannot))
            }
            Request::Unregister { pgid } => {
                let Some(i) = self
                    .held
                    .iter()
                    .rposition(|t| t.kind == TreeKind::Register && t.root_pid == pgid)
                else {
                    return Err(ProtocolError::new(
                        ErrorCode::NotRegistered,
                        format!("pgid {pgid} is not registered"),
                    ));
                };
                let tree = self.held.remove(i);
                let id = tree.id.to_string();
                self.trees
                    .release(tree)
                    .map_err(|e| ProtocolError::new(ErrorCode::Refused, e))?;
                Ok(OkReply::Unregister(UnregisterReply { pgid, tree: id }))
            }
            Request::Kill { tree } => {
                let i = self.find(tree.as_str())?;
                let tree = self.held.remove(i);
                let id = tree.id.to_string();
                let live = self.close(tree, "kill: tearing the tree down");
                Ok(OkReply::Kill(KillReply {
                    tree: id,
                    live: live as u64,
                }))
            }
            Request::Release { tree } => {
                let i = self.find(tree.as_str())?;
                let tree = self.held.remove(i);
                let id = tree.id.to_string();
                self.trees
                    .release(tree)
                    .map_err(|e| ProtocolError::new(ErrorCode::Refused, e))?;
                Ok(OkReply::Release(ReleaseReply { tree: id }))
            }
            Request::List => {
                let mut trees = Vec::with_capacity(self.held.len());
                for t in &mut self.held {
                    let alive = self.trees.root_alive(t);
                    trees.push(ListedTree {
                        tree: t.id.to_string(),
                        kind: t.kind,
                        pid: Some(t.root_pid),
                        pgid: alive.then_some(t.root_pid),
                        label: t.label.clone(),
                        live: self.trees.live(t),
                    });
                }
                Ok(OkReply::List(ListReply { trees }))
            }
        }
    }

    fn find(&self, tree: &str) -> Result<usize, ProtocolError> {
        self.held
            .iter()
            .position(|t| t.id.as_str() == tree)
            .ok_or_else(|| {
                ProtocolError::new(ErrorCode::UnknownTree, format!("no tree {tree} here"))
            })
    }

    /// Takes `pid` and its descendants over as a new tree: its id and members.
    fn take(&mut self, kind: TreeKind, pid: i32) -> Result<(String, u64), ProtocolError> {
        let mut tree = self.trees.take(kind, pid, &self.held)?;
        let id = tree.id.to_string();
        let members = self.trees.live(&mut tree);
        self.held.push(tree);
        Ok((id, members))
    }

    /// Trees that ended on their own or were asked to: a spawned root that exited
    /// (its `exited` event, then the rest torn down as `run` does), a tree `undertaker
    /// kill` asked for, a taken tree whose processes all exited (closed quietly).
    /// The others get their look.
    fn watch_trees(&mut self) {
        let mut i = 0;
        while i < self.held.len() {
            let t = &mut self.held[i];
            let why = if self.trees.stop_asked(t) {
                Some("undertaker kill: tearing the tree down")
            } else if t.kind == TreeKind::Spawn && !self.trees.root_alive(t) {
                Some("root exited: tearing the rest down")
            } else if t.kind != TreeKind::Spawn && self.trees.live(t) == 0 {
                Some("every process of the tree has exited")
            } else {
                None
            };
            match why {
                Some(why) => {
                    let tree = self.held.remove(i);
                    self.close(tree, why);
                }
                None => {
                    self.trees.look(t);
                    i += 1;
                }
            }
        }
    }

    /// Tears one tree down, closes its record; a spawned tree's root status goes out
    /// as `exited` (at once when the root has already exited, else once the teardown
    /// collected it), then `ended`. Returns its processes still running afterwards.
    fn close(&mut self, mut tree: Tree<T::Held>, why: &str) -> usize {
        tree.record.note(why);
        if !self.trees.root_alive(&mut tree) {
            self.root_exited(&mut tree);
        }
        let mut one = [tree];
        let live = self.trees.tear_down(&mut one);
        let [tree] = one;
        self.finish(tree, live.first().copied().unwrap_or(0))
    }

    /// Sends a spawned root's `exited` once (its status is collected then).
    fn root_exited(&mut self, tree: &mut Tree<T::Held>) {
        if tree.kind == TreeKind::Spawn && tree.status.is_none() {
            tree.status = self.trees.root_status(tree);
            if let Some(status) = tree.status {
                self.emit(&reply::exited(&tree.id, tree.root_pid, status));
            }
        }
    }

    fn finish(&mut self, mut tree: Tree<T::Held>, live: usize) -> usize {
        self.root_exited(&mut tree);
        if tree.kind == TreeKind::Spawn {
            self.emit(&reply::ended(&tree.id, live));
        }
        tree.record
            .finish(if live > 0 { Some(125) } else { tree.status });
        live
    }

    /// End of input, the owner's death or a stop: every tree at once.
    fn tear_down_all(&mut self) {
        let mut trees = std::mem::take(&mut self.held);
        for t in &trees {
            t.record.note("supervisor ending: tearing every tree down");
        }
        let live = self.trees.tear_down(&mut trees);
        for (tree, live) in trees.into_iter().zip(live) {
            self.finish(tree, live);
        }
    }
}
