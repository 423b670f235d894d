//! `undertaker supervise`: one guardian process holding many trees (docs/SUPERVISE.md).
//!
//! [`run`] reads as its steps: signals → owner → containment → channel → serve →
//! tear everything down → exit 0. One thread, one poll loop over the signalfd, the
//! control channel, the owner, and each tree's root. Trees are [`held::HeldTree`]s;
//! what is global to the process (signals, reaping) is [`process::Process`].

mod channel;
mod held;
mod process;
mod take;

use crate::identity::TreeId;
use crate::linux::contain::containment::Containment;
use crate::linux::contain::dispositions;
use crate::linux::contain::owner::Owner;
use crate::linux::contain::spawn::raise_fd_limit;
use crate::linux::kernel::poll::readable_now;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::protocol::framing::Frame;
use crate::protocol::reply::{self, Fields};
use crate::protocol::{parse_line, Envelope, ErrorCode, ProtocolError, Request, PROTOCOL_VERSION};
use crate::registry::OwnerRecord;
use crate::{OwnerSpec, RunError, SuperviseOptions, Tier};
use channel::{emit, Channel, Incoming};
use held::{HeldTree, Kind};
use process::Process;
use rustix::event::PollFlags;
use rustix::fd::{AsFd, BorrowedFd};
use serde_json::{json, Value};

/// Runs the supervisor until its input ends, its owner dies or SIGTERM; every tree
/// is then torn down. Returns 0.
pub fn run(opts: &SuperviseOptions) -> Result<i32, RunError> {
    let signals =
        dispositions::take_all().map_err(|e| RunError::Setup(format!("signalfd: {e}")))?;
    if opts.tier == Tier::Pidns {
        return Err(RunError::Usage(
            "supervise does not offer the pidns tier (one namespace init per tree is what `run` is for)"
                .into(),
        ));
    }
    let mut owner = Owner::resolve(&opts.owner)?;
    let owner_process = owner_process(&opts.owner);
    // Our own session: a host that signals its own process group must not take us
    // down before the trees (already a leader: nothing to do).
    let _ = rustix::process::setsid();
    let signaller = Signaller::for_current_process(Procfs::new())
        .map_err(|e| RunError::Setup(format!("reading /proc/self: {e}")))?;
    let starttime = signaller
        .procfs()
        .stat(signaller.me().pid)
        .map_err(|e| RunError::Setup(format!("reading /proc/self/stat: {e}")))?
        .starttime;
    let containment = Containment::choose(opts.tier)?;
    let nofile = raise_fd_limit();
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| RunError::Setup(format!("PR_SET_CHILD_SUBREAPER: {e}")))?;
    let channel = Channel::from_stdin(signaller.me().uid)?;
    let owner_record = owner.record(&opts.owner, signaller.procfs());
    if owner.gone() {
        return Err(RunError::OwnerGone(owner.describe()));
    }
    let mut sup = Supervisor {
        opts,
        signaller,
        starttime,
        containment,
        process: Process::new(signals, nofile),
        channel,
        owner_process,
        owner_record,
        trees: Vec::new(),
        released_any: false,
    };
    // Serving: now, off the start-up path, finish a few dead guardians' trees.
    crate::linux::commands::heal::start_in_background(opts.state_dir.clone());
    sup.serve(&mut owner);
    sup.tear_down_everything();
    Ok(0)
}

/// The process whose children `register`/`adopt` accept: `--owner PID`, else our
/// parent (also with `--owner-fd`: the pipe says when, the parent says who).
fn owner_process(spec: &OwnerSpec) -> Option<PidRef> {
    let pid = match spec {
        OwnerSpec::Pid(pid) => *pid,
        OwnerSpec::Parent | OwnerSpec::Fd(_) => rustix::process::getppid()?.as_raw_nonzero().get(),
    };
    let owner = PidRef::open(pid).ok()?;
    // Re-check after opening: a parent that died first left us watching a stranger.
    let still = match spec {
        OwnerSpec::Pid(_) => true,
        _ => rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) == Some(pid),
    };
    (still && !owner.exited()).then_some(owner)
}

pub(crate) struct Supervisor<'a> {
    opts: &'a SuperviseOptions,
    signaller: Signaller,
    /// Our own start time (the cgroup name carries it).
    starttime: u64,
    containment: Containment,
    process: Process,
    channel: Channel,
    owner_process: Option<PidRef>,
    owner_record: OwnerRecord,
    trees: Vec<HeldTree>,
    /// A tree was released: its processes are still our descendants, so the final
    /// teardown may no longer take every descendant of ours.
    released_any: bool,
}

impl Supervisor<'_> {
    /// Serves requests until end of input, the owner's death, or a teardown signal.
    fn serve(&mut self, owner: &mut Owner) {
        loop {
            if self.process.terminate || owner.gone() {
                return;
            }
            let mut fds: Vec<(BorrowedFd<'_>, PollFlags)> =
                vec![(self.channel.fd(), PollFlags::IN)];
            if let Owner::Process { fd, .. } | Owner::Pipe { fd } = &*owner {
                fds.push((fd.as_fd(), PollFlags::IN));
            }
            fds.extend(
                self.trees
                    .iter()
                    .filter_map(|t| t.root_fd())
                    .map(|fd| (fd, PollFlags::IN)),
            );
            self.process.wait(None, &fds);
            drop(fds);
            if self.process.terminate {
                return;
            }
            self.process.reap();
            self.roots_exited();
            if readable_now(self.channel.fd()) {
                let Some(lines) = self.channel.read() else {
                    return;
                };
                for incoming in lines {
                    self.handle(incoming);
                    if self.process.terminate {
                        return;
                    }
                }
            }
        }
    }

    /// A spawned root exited: `exited` event, the rest of its tree torn down as `run`
    /// does when CMD exits. A registered leader exited: the tree stays while members
    /// remain, and goes quietly once it is empty.
    fn roots_exited(&mut self) {
        let mut i = 0;
        while i < self.trees.len() {
            let tree = &mut self.trees[i];
            if !tree.root_fd().is_some_and(readable_now) {
                i += 1;
                continue;
            }
            tree.root_done = true;
            if tree.kind == Kind::Spawn {
                let tree = self.trees.remove(i);
                self.end_tree(tree);
            } else if tree.live_count(&self.signaller) == 0
                && !tree.cgroup.as_ref().is_some_and(|c| c.is_populated())
            {
                let tree = self.trees.remove(i);
                tree.finish(None);
            } else {
                i += 1;
            }
        }
    }

    /// Closes registered and adopted trees with nothing left to guard: every process
    /// taken at registration has exited and the tree's cgroup (if any) is empty. What
    /// they left outside a cgroup cannot be found again anyway (the subreaper tier's
    /// limit), and a number reused later must not look registered.
    fn prune(&mut self) {
        let empty = |t: &HeldTree| {
            t.kind != Kind::Spawn
                && t.anchors.iter().all(|a| a.has_exited())
                && !t.cgroup.as_ref().is_some_and(|c| c.is_populated())
        };
        let (gone, kept): (Vec<HeldTree>, Vec<HeldTree>) =
            std::mem::take(&mut self.trees).into_iter().partition(empty);
        self.trees = kept;
        for tree in gone {
            tree.finish(None);
        }
    }

    /// Tears one tree down and closes it; a spawned root's status goes out as `exited`.
    /// Returns the members still alive afterwards.
    fn end_tree(&mut self, mut tree: HeldTree) -> usize {
        let stuck = held::tear_down(
            &[&tree],
            false,
            &self.signaller,
            &mut self.process,
            self.opts.grace,
        );
        self.collect_status(&mut tree);
        let live = if stuck > 0 {
            tree.live_count(&self.signaller)
        } else {
            0
        };
        tree.finish(None);
        live
    }

    /// Collects a spawned root's status (through its pidfd, or as reaped for it) and
    /// reports it.
    fn collect_status(&mut self, tree: &mut HeldTree) {
        let Some(root) = &tree.root else { return };
        if tree.root_status.is_none() {
            tree.root_status = match root.try_wait_status() {
                Some(st) => Some(st),
                None => self.process.reaped_status(root.pid()).flatten(),
            };
        }
        self.process.take_root(root.pid());
        if let Some(status) = tree.root_status {
            emit(&reply::exited(&tree.id, root.pid(), status));
        }
    }

    fn handle(&mut self, incoming: Incoming) {
        let line = match incoming.frame {
            Frame::Line(line) => line,
            Frame::TooLong => {
                let e = ProtocolError::new(
                    ErrorCode::LineTooLong,
                    format!("line longer than {} bytes", crate::protocol::MAX_LINE),
                );
                emit(&reply::error(&e));
                return;
            }
        };
        self.prune();
        let Envelope { id, request } = match parse_line(&line) {
            Ok(Some(envelope)) => envelope,
            Ok(None) => return,
            Err(e) => {
                emit(&reply::error(&e));
                return;
            }
        };
        let op = request.op();
        let pgid = match &request {
            Request::Register { pgid } | Request::Unregister { pgid } => Some(*pgid),
            _ => None,
        };
        match self.answer(request, incoming.fds) {
            Ok(fields) => emit(&reply::ok(op, id.as_ref(), fields)),
            Err(e) => emit(&reply::error(&e.answering(op, id, pgid))),
        }
    }

    fn answer(
        &mut self,
        request: Request,
        fds: Vec<rustix::fd::OwnedFd>,
    ) -> Result<Fields, ProtocolError> {
        let takes_fds = matches!(request, Request::Spawn(_) | Request::Adopt { .. });
        if !fds.is_empty() && !takes_fds {
            return Err(ProtocolError::new(
                ErrorCode::BadFds,
                format!(
                    "{} takes no file descriptors, got {}",
                    request.op(),
                    fds.len()
                ),
            ));
        }
        match request {
            Request::Hello => Ok(self.hello()),
            Request::Register { pgid } => {
                let (tree, members) = self.register(pgid)?;
                Ok(fields(
                    json!({"pgid": pgid, "tree": tree.as_str(), "members": members}),
                ))
            }
            Request::Unregister { pgid } => self.unregister(pgid),
            Request::Adopt { pid } => {
                let (tree, pid, members) = self.adopt(pid, fds)?;
                Ok(fields(
                    json!({"pid": pid, "tree": tree.as_str(), "members": members}),
                ))
            }
            Request::Spawn(req) => {
                let (tree, pid) = self.spawn(req, fds)?;
                Ok(fields(json!({"tree": tree.as_str(), "pid": pid})))
            }
            Request::Kill { tree } => {
                let tree = self.take_out(&tree)?;
                let id = tree.id.clone();
                let live = self.end_tree(tree);
                Ok(fields(json!({"tree": id.as_str(), "live": live})))
            }
            Request::Release { tree } => {
                let tree = self.take_out(&tree)?;
                let id = tree.id.clone();
                self.release(tree);
                Ok(fields(json!({"tree": id.as_str()})))
            }
            Request::List => Ok(self.list()),
        }
    }

    fn hello(&self) -> Fields {
        fields(json!({
            "protocol": PROTOCOL_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            "tier": self.containment.tier().as_str(),
            "pid": self.signaller.me().pid,
            "owner": {"pid": match self.opts.owner {
                OwnerSpec::Fd(_) => None,
                _ => self.owner_process.as_ref().map(PidRef::pid),
            }},
            "socket": self.channel.is_socket(),
        }))
    }

    fn unregister(&mut self, pgid: i32) -> Result<Fields, ProtocolError> {
        // The newest registration of that number.
        let i = self
            .trees
            .iter()
            .rposition(|t| t.kind == Kind::Register && t.pgid == Some(pgid))
            .ok_or_else(|| {
                ProtocolError::new(
                    ErrorCode::NotRegistered,
                    format!("group {pgid} is not registered"),
                )
            })?;
        let tree = self.trees.remove(i);
        let id = tree.id.clone();
        self.release(tree);
        Ok(fields(json!({"pgid": pgid, "tree": id.as_str()})))
    }

    fn take_out(&mut self, id: &TreeId) -> Result<HeldTree, ProtocolError> {
        let i = self.trees.iter().position(|t| &t.id == id).ok_or_else(|| {
            ProtocolError::new(ErrorCode::UnknownTree, format!("no tree {id} here"))
        })?;
        Ok(self.trees.remove(i))
    }

    /// Stops guarding `tree`; nothing is signalled. In the cgroup tier its processes
    /// leave the tree's cgroup for the one its root came from (ours for `spawn`).
    fn release(&mut self, tree: HeldTree) {
        if let Some(cg) = &tree.cgroup {
            let home = crate::linux::contain::cgroup::dir_of_process(
                self.signaller.procfs(),
                self.signaller.me().pid,
            );
            if let Some(home) = home {
                for pid in cg.pids() {
                    let _ = crate::linux::contain::cgroup::move_to(&home, pid);
                }
            }
        }
        if let Some(root) = &tree.root {
            self.process.take_root(root.pid());
            self.released_any = true;
        }
        tree.finish(None);
    }

    fn list(&self) -> Fields {
        let trees: Vec<Value> = self
            .trees
            .iter()
            .map(|t| {
                let pgid = match t.kind {
                    Kind::Register => t.pgid,
                    _ => self
                        .signaller
                        .procfs()
                        .stat(t.root_pid)
                        .ok()
                        .map(|s| s.pgrp),
                };
                json!({
                    "tree": t.id.as_str(),
                    "kind": t.kind.as_str(),
                    "pid": t.root_pid,
                    "pgid": pgid,
                    "label": t.label,
                    "live": t.live_count(&self.signaller),
                })
            })
            .collect();
        fields(json!({ "trees": trees }))
    }

    /// End of input, owner death or SIGTERM: every tree at once (SIGTERM to all, one
    /// grace period, SIGKILL), then every record closed.
    fn tear_down_everything(&mut self) {
        let trees = std::mem::take(&mut self.trees);
        if !trees.is_empty() || !self.released_any {
            let refs: Vec<&HeldTree> = trees.iter().collect();
            held::tear_down(
                &refs,
                !self.released_any,
                &self.signaller,
                &mut self.process,
                self.opts.grace,
            );
        }
        for mut tree in trees {
            self.collect_status(&mut tree);
            tree.finish(None);
        }
        self.process.reap();
    }
}

fn fields(value: Value) -> Fields {
    match value {
        Value::Object(map) => map,
        _ => Fields::new(),
    }
}
