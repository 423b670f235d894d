//! `undertaker supervise` on Windows (docs/SUPERVISE.md; docs/PORTING.md, "Windows").
//!
//! One process, one kill-on-close job per tree, and only this process holds the job
//! handles: when it dies, however it dies, the kernel closes every job and
//! terminates every tree, so no sentinel is needed. [`run`] reads as its steps:
//! owner → channel → serve → tear everything down → exit 0.
//!
//! The channel is standard input and output, lines as on Linux. Windows has no
//! descriptor passing: a request that needs one (`adopt` without `pid`) is refused
//! saying so. A reader thread feeds lines to the serve loop, which also watches the
//! owner, the spawned roots and each tree's stop event (`undertaker kill`).

mod tree;

use crate::escalation::Escalation;
use crate::protocol::framing::{Frame, LineFramer};
use crate::protocol::reply;
use crate::protocol::wire::{
    AdoptReply, HeldTier, HelloReply, KillReply, ListReply, ListedTree, OkReply, OwnerPid,
    RegisterReply, ReleaseReply, SpawnReply, TreeKind, UnregisterReply,
};
use crate::protocol::{
    parse_line, ErrorCode, ProtocolError, RefusalReason, Request, MAX_LINE, PROTOCOL_VERSION,
};
use crate::registry::refusal_log::RefusalLog;
use crate::registry::{OwnerKind, OwnerRecord};
use crate::windows::commands::guardian::BOOT_ID;
use crate::windows::contain::owner::{self, Owner};
use crate::windows::kernel::sys;
use crate::windows::proof::teardown::{self, Outcome};
use crate::{RunError, SuperviseOptions, Tier};
use std::io::{Read, Write};
use std::os::windows::io::AsHandle;
use std::sync::mpsc;
use std::time::Duration;
use tree::{Setup, Tree};

/// How often the serve loop looks at the owner, the roots and the stop events when
/// no line arrives.
const TICK: Duration = Duration::from_millis(50);

/// What the reader thread hands the serve loop.
enum Input {
    Frame(Frame),
    /// End of file (or a read error): the host is gone.
    End,
}

/// Why serving ended: every tree is torn down either way.
#[derive(Debug, Clone, Copy)]
enum End {
    Input,
    Owner,
    Console,
}

/// The owner as `register` proves parentage against: its pid and creation time.
#[derive(Debug, Clone, Copy)]
struct OwnerId {
    pid: u32,
    created: u64,
}

pub fn run(sup_opts: &SuperviseOptions) -> Result<i32, RunError> {
    let opts = &sup_opts.guard;
    if opts.tier != Tier::Auto {
        return Err(RunError::TierUnavailable {
            tier: opts.tier,
            why: "Linux only; Windows uses a Job Object (--tier auto)".into(),
        });
    }
    // 1. The owner, proven before anything is served.
    let (owner, owner_record) = owner::resolve(&opts.owner)?;
    let owner_id = owner_id(&owner_record);
    let console = sys::create_event(None).map_err(|e| RunError::Setup(format!("event: {e}")))?;
    if let Ok(c) = console.try_clone() {
        if let Err(e) = sys::install_console_handler(c) {
            tracing::debug!("console handler: {e}");
        }
    }
    // 2. The channel: a thread cuts standard input into bounded lines.
    let lines = read_lines_in_background()?;
    // 3. Serve until the host is gone.
    let mut sup = Supervisor {
        setup: Setup {
            state_dir: opts.state_dir.as_deref(),
            label: opts.label.as_deref(),
            owner: &owner_record,
        },
        owner_id,
        me: sys::current_pid(),
        esc: Escalation::with_grace(opts.grace),
        trees: Vec::new(),
        refusals: RefusalLog::new(opts.state_dir.clone(), 0, BOOT_ID.into()),
    };
    let end = sup.serve(&lines, &owner, &console);
    tracing::debug!("supervise: {end:?}: tearing every tree down");
    // 4. Every tree at once, then exit 0.
    sup.tear_down_all();
    Ok(0)
}

/// `--owner`/the parent: the resolved owner; `--owner-fd`: our Windows parent, if any
/// (the host that holds the pipe's other end is normally it). `None`: no Windows
/// process to be the parent (started from outside Windows, as under Wine from a Linux
/// shell), so `register`/`adopt` are refused `not_owner_child`.
fn owner_id(record: &OwnerRecord) -> Option<OwnerId> {
    if let (Some(pid), Some(created)) = (record.pid, record.starttime) {
        return Some(OwnerId {
            pid: pid as u32,
            created,
        });
    }
    if record.kind != OwnerKind::Fd {
        return None;
    }
    let pid = sys::parent_pid().ok().filter(|&p| p != 0)?;
    let h = sys::open_process(pid, sys::Access::Watch).ok()?;
    let created = sys::creation_time(h.as_handle()).ok()?;
    (created <= sys::own_creation_time().ok()?).then_some(OwnerId { pid, created })
}

fn read_lines_in_background() -> Result<mpsc::Receiver<Input>, RunError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("supervise-input".into())
        .spawn(move || {
            let mut input = std::io::stdin().lock();
            let mut framer = LineFramer::new();
            let mut buf = vec![0u8; 16 * 1024];
            let mut frames = Vec::new();
            loop {
                match input.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        framer.push(&buf[..n], &mut frames);
                        for f in frames.drain(..) {
                            if tx.send(Input::Frame(f)).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            let _ = tx.send(Input::End);
        })
        .map_err(|e| RunError::Setup(format!("input thread: {e}")))?;
    Ok(rx)
}

/// One JSON line to the host. A host that stopped reading blocks this write (Windows
/// pipes have no non-blocking write for a shared handle); its death ends the read
/// side, which ends the supervisor.
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

struct Supervisor<'a> {
    setup: Setup<'a>,
    owner_id: Option<OwnerId>,
    me: u32,
    esc: Escalation,
    trees: Vec<Tree>,
    /// Where refusals go besides the reply (a host may never read replies).
    refusals: RefusalLog,
}

impl Supervisor<'_> {
    fn serve(
        &mut self,
        lines: &mpsc::Receiver<Input>,
        owner: &Owner,
        console: &std::os::windows::io::OwnedHandle,
    ) -> End {
        let signalled = |h| matches!(sys::wait_any(&[h], Some(Duration::ZERO)), Ok(Some(0)));
        loop {
            match lines.recv_timeout(TICK) {
                Ok(Input::Frame(Frame::Line(line))) => {
                    // Each request is acted on only while the owner lives.
                    if owner.waitable().is_some_and(signalled) {
                        return End::Owner;
                    }
                    self.handle(&line);
                }
                Ok(Input::Frame(Frame::TooLong)) => emit(&reply::error(&ProtocolError::new(
                    ErrorCode::LineTooLong,
                    format!("line longer than {MAX_LINE} bytes"),
                ))),
                Ok(Input::End) | Err(mpsc::RecvTimeoutError::Disconnected) => return End::Input,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if owner.waitable().is_some_and(signalled) {
                return End::Owner;
            }
            if signalled(console.as_handle()) {
                return End::Console;
            }
            self.watch_trees();
        }
    }

    fn handle(&mut self, line: &[u8]) {
        let envelope = match parse_line(line) {
            Ok(None) => return,
            Ok(Some(e)) => e,
            Err(e) => return emit(&reply::error(&e)),
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
            Ok(answer) => emit(&reply::ok(envelope.id.as_ref(), &answer)),
            Err(e) => {
                let refusal = e.reason.map(|r| (r, e.message.clone()));
                emit(&reply::error(&e.answering(op, envelope.id, pgid)));
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
            Request::Hello => Ok(OkReply::Hello(HelloReply {
                protocol: PROTOCOL_VERSION,
                version: env!("CARGO_PKG_VERSION").into(),
                tier: HeldTier::Job,
                pid: self.me as i32,
                owner: OwnerPid {
                    pid: self.owner_id.map(|o| o.pid as i32),
                },
                socket: false,
            })),
            Request::Spawn(req) => {
                let tree = self.setup.spawn(&req)?;
                let answer = SpawnReply {
                    tree: tree.id.to_string(),
                    pid: tree.root_pid as i32,
                };
                self.trees.push(tree);
                Ok(OkReply::Spawn(answer))
            }
            Request::Register { pgid } => {
                let existing = self.trees.iter().find(|t| {
                    t.kind == TreeKind::Register && t.root_pid as i32 == pgid && t.root_alive()
                });
                if let Some(t) = existing {
                    return Ok(OkReply::Register(RegisterReply {
                        pgid,
                        tree: t.id.to_string(),
                        members: t.live(),
                    }));
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
            Request::Adopt { pid: None } => Err(ProtocolError::new(
                ErrorCode::BadRequest,
                "adopt needs `pid` on Windows: a pidfd travels only on a Unix socket (Linux)",
            )),
            Request::AdoptGroup { .. } => Err(ProtocolError::new(
                ErrorCode::BadRequest,
                "adopt by snapshot names a process group, which Windows has not: adopt by `pid`",
            )),
            Request::Unregister { pgid } => {
                let Some(i) = self
                    .trees
                    .iter()
                    .rposition(|t| t.kind == TreeKind::Register && t.root_pid as i32 == pgid)
                else {
                    return Err(ProtocolError::new(
                        ErrorCode::NotRegistered,
                        format!("pgid {pgid} is not registered"),
                    ));
                };
                let tree = self.trees.remove(i);
                let id = tree.id.to_string();
                tree.release()
                    .map_err(|e| ProtocolError::new(ErrorCode::Refused, e))?;
                Ok(OkReply::Unregister(UnregisterReply { pgid, tree: id }))
            }
            Request::Kill { tree } => {
                let i = self.find(tree.as_str())?;
                let tree = self.trees.remove(i);
                let id = tree.id.to_string();
                let live = self.close(tree, "kill: tearing the tree down");
                Ok(OkReply::Kill(KillReply { tree: id, live }))
            }
            Request::Release { tree } => {
                let i = self.find(tree.as_str())?;
                let tree = self.trees.remove(i);
                let id = tree.id.to_string();
                tree.release()
                    .map_err(|e| ProtocolError::new(ErrorCode::Refused, e))?;
                Ok(OkReply::Release(ReleaseReply { tree: id }))
            }
            Request::List => Ok(OkReply::List(ListReply {
                trees: self
                    .trees
                    .iter()
                    .map(|t| {
                        let alive = t.root_alive();
                        ListedTree {
                            tree: t.id.to_string(),
                            kind: t.kind,
                            pid: Some(t.root_pid as i32),
                            pgid: alive.then_some(t.root_pid as i32),
                            label: t.label.clone(),
                            live: t.live(),
                        }
                    })
                    .collect(),
            })),
        }
    }

    fn find(&self, tree: &str) -> Result<usize, ProtocolError> {
        self.trees
            .iter()
            .position(|t| t.id.as_str() == tree)
            .ok_or_else(|| {
                ProtocolError::new(ErrorCode::UnknownTree, format!("no tree {tree} here"))
            })
    }

    /// Proves `pid` (the owner's child, created after the owner: Windows' parent
    /// pid is never updated, so an older process is a stranger on a reused number),
    /// then takes it and its descendants into a new job.
    fn take(&mut self, kind: TreeKind, pid: i32) -> Result<(String, u64), ProtocolError> {
        let refused =
            |reason, why: String| Err(ProtocolError::refused(reason, format!("pid {pid}: {why}")));
        let number = pid as u32;
        let owner = self.owner_id;
        if number == self.me || owner.is_some_and(|o| o.pid == number) {
            return refused(
                RefusalReason::Protected,
                "the supervisor or its owner".into(),
            );
        }
        let Ok(process) = sys::open_process(number, sys::Access::Assign) else {
            return refused(RefusalReason::NoSuchProcess, "no such process".into());
        };
        if sys::exit_code(process.as_handle()).is_some() {
            return refused(RefusalReason::NoSuchProcess, "it has exited".into());
        }
        if self
            .trees
            .iter()
            .any(|t| sys::is_in_job(process.as_handle(), t.job.handle()).unwrap_or(false))
        {
            return refused(
                RefusalReason::AlreadyGuarded,
                "held by a tree of this supervisor".into(),
            );
        }
        let Some(owner) = owner else {
            return refused(
                RefusalReason::NotOwnerChild,
                "the supervisor has no Windows owner to be its parent".into(),
            );
        };
        let parent = sys::processes()
            .ok()
            .and_then(|all| all.into_iter().find(|&(p, _)| p == number))
            .map(|(_, parent)| parent);
        let created = sys::creation_time(process.as_handle()).unwrap_or(0);
        if parent != Some(owner.pid) || created < owner.created {
            return refused(
                RefusalReason::NotOwnerChild,
                format!("its parent is not the owner (pid {})", owner.pid),
            );
        }
        let never = [self.me, owner.pid];
        let (tree, adopted) = self.setup.take(kind, number, process, &never)?;
        tracing::debug!(
            "{kind:?} {pid}: {} assigned in {} snapshot(s)",
            adopted.assigned,
            adopted.rounds
        );
        let id = tree.id.to_string();
        let members = tree.live();
        self.trees.push(tree);
        Ok((id, members))
    }

    /// Trees that ended on their own or were asked to: a spawned root that exited
    /// (its `exited` event, then the rest torn down as `run` does), a stop event set
    /// by `undertaker kill`, a taken tree whose job emptied (closed quietly).
    fn watch_trees(&mut self) {
        let mut i = 0;
        while i < self.trees.len() {
            let t = &self.trees[i];
            let why = if t.stop_asked() {
                Some("undertaker kill: tearing the tree down")
            } else if matches!(t.root, tree::Root::Child(_)) && !t.root_alive() {
                Some("root exited: tearing the rest down")
            } else if !matches!(t.root, tree::Root::Child(_)) && t.live() == 0 {
                Some("every process of the tree has exited")
            } else {
                None
            };
            match why {
                Some(why) => {
                    let tree = self.trees.remove(i);
                    self.close(tree, why);
                }
                None => i += 1,
            }
        }
    }

    /// Tears one tree down, closes its record; a spawned tree's root status goes out
    /// as `exited` (at once when the root has already exited, else once the teardown
    /// collected it), then `ended`. Returns its processes still running afterwards.
    fn close(&self, mut tree: Tree, why: &str) -> u64 {
        tree.record.note(why);
        if !tree.root_alive() {
            self.root_exited(&mut tree);
        }
        let mut entries = Vec::new();
        let outcome =
            teardown::teardown(&tree.job, tree.root_pid, self.esc, &mut |e| entries.push(e));
        tree.audit(entries);
        self.finish(tree, outcome)
    }

    /// Sends a spawned root's `exited` once (its status is collected then).
    fn root_exited(&self, tree: &mut Tree) {
        if tree.status.is_none() {
            tree.status = tree.root_status();
            if let Some(status) = tree.status {
                emit(&reply::exited(&tree.id, tree.root_pid as i32, status));
            }
        }
    }

    fn finish(&self, mut tree: Tree, outcome: Outcome) -> u64 {
        self.root_exited(&mut tree);
        let live = match outcome {
            Outcome::Stuck(n) => n,
            _ => 0,
        };
        if matches!(tree.root, tree::Root::Child(_)) {
            emit(&reply::ended(&tree.id, live));
        }
        tree.record
            .finish(if live > 0 { Some(125) } else { tree.status });
        live as u64
    }

    /// End of input, the owner's death or the console closing: every tree at once.
    fn tear_down_all(&mut self) {
        let trees = std::mem::take(&mut self.trees);
        for t in &trees {
            t.record.note("supervisor ending: tearing every tree down");
        }
        let mut entries: Vec<Vec<crate::registry::AuditEntry>> = vec![Vec::new(); trees.len()];
        let pairs: Vec<_> = trees.iter().map(|t| (&t.job, t.root_pid)).collect();
        let outcomes =
            teardown::teardown_together(&pairs, self.esc, &mut |i, e| entries[i].push(e));
        for ((tree, outcome), entries) in trees.into_iter().zip(outcomes).zip(entries) {
            tree.audit(entries);
            self.finish(tree, outcome);
        }
    }
}
