//! The supervisor's answers to its host's requests (docs/SUPERVISE.md, "JSON
//! requests" and "Plain lines"): each line parsed, acted on, answered; a refusal
//! also goes to the audit log.

use super::channel::{emit, Incoming};
use super::Supervisor;
use crate::identity::TreeId;
use crate::linux::commands::tree::{Cause, Tree};
use crate::linux::proof::pidref::PidRef;
use crate::protocol::framing::Frame;
use crate::protocol::reply;
use crate::protocol::wire::{
    AdoptReply, HeldTier, HelloReply, KillReply, ListReply, ListedTree, OkReply, OwnerPid,
    RegisterReply, ReleaseReply, SpawnReply, TreeKind, UnregisterReply,
};
use crate::protocol::{parse_line, Envelope, ErrorCode, ProtocolError, Request, PROTOCOL_VERSION};
use crate::{OwnerSpec, Tier};

impl Supervisor<'_> {
    pub(super) fn handle(&mut self, incoming: Incoming) {
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
        let target = match &request {
            Request::Adopt { pid } => *pid,
            Request::AdoptGroup { pgid, .. } => Some(*pgid),
            _ => pgid,
        };
        let answer = match incoming.fds {
            Ok(fds) => self.answer(request, fds),
            Err(refused) => Err(refused),
        };
        match answer {
            Ok(answer) => emit(&reply::ok(id.as_ref(), &answer)),
            Err(e) => {
                let refusal = e.reason.map(|r| (r, e.message.clone()));
                emit(&reply::error(&e.answering(op, id, pgid)));
                // After the reply: the host is not kept waiting for the database.
                if let Some((reason, message)) = refusal {
                    (self.refusals).refused(op.as_str(), target, reason.as_str(), &message);
                }
            }
        }
    }

    pub(super) fn answer(
        &mut self,
        request: Request,
        fds: Vec<rustix::fd::OwnedFd>,
    ) -> Result<OkReply, ProtocolError> {
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
        let tree = |id: &TreeId| id.as_str().to_owned();
        Ok(match request {
            Request::Hello => OkReply::Hello(self.hello()),
            Request::Register { pgid } => {
                let (id, members) = self.register(pgid)?;
                OkReply::Register(RegisterReply {
                    pgid,
                    tree: tree(&id),
                    members: members as u64,
                })
            }
            Request::Unregister { pgid } => OkReply::Unregister(self.unregister(pgid)?),
            Request::Adopt { pid } => {
                let (id, pid, members) = self.adopt(pid, fds)?;
                OkReply::Adopt(AdoptReply {
                    pid: Some(pid),
                    pgid: None,
                    tree: tree(&id),
                    members: members as u64,
                })
            }
            Request::AdoptGroup { pgid, snapshot } => {
                let (id, members) = self.adopt_group(pgid, &snapshot)?;
                OkReply::Adopt(AdoptReply {
                    pid: None,
                    pgid: Some(pgid),
                    tree: tree(&id),
                    members: members as u64,
                })
            }
            Request::Spawn(req) => {
                let (id, pid) = self.spawn(req, fds)?;
                OkReply::Spawn(SpawnReply {
                    tree: tree(&id),
                    pid,
                })
            }
            Request::Kill { tree: id } => {
                let taken = self.take_out(&id)?;
                let live = self.end_tree(taken, Cause::Terminated);
                OkReply::Kill(KillReply {
                    tree: tree(&id),
                    live: live as u64,
                })
            }
            Request::Release { tree: id } => {
                let taken = self.take_out(&id)?;
                self.release(taken);
                OkReply::Release(ReleaseReply { tree: tree(&id) })
            }
            Request::List => OkReply::List(self.list()),
        })
    }

    /// Our own start time (tree cgroup names carry it).
    pub(super) fn starttime(&self) -> u64 {
        let me = self.signaller.me().pid;
        self.signaller.procfs().stat(me).map_or(0, |s| s.starttime)
    }

    fn hello(&self) -> HelloReply {
        HelloReply {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").into(),
            // `run` refuses the pidns tier for a supervisor: it is one of these three.
            tier: match self.containment.tier() {
                Tier::Cgroup => HeldTier::Cgroup,
                Tier::Portable => HeldTier::Portable,
                _ => HeldTier::Subreaper,
            },
            pid: self.signaller.me().pid,
            owner: OwnerPid {
                pid: match self.opts.owner {
                    OwnerSpec::Fd(_) => None,
                    _ => self.owner_process.as_ref().map(PidRef::pid),
                },
            },
            socket: self.channel.is_socket(),
        }
    }

    fn unregister(&mut self, pgid: i32) -> Result<UnregisterReply, ProtocolError> {
        // The newest registration of that number.
        let i = (self.trees.iter())
            .rposition(|t| t.group() == Some(pgid))
            .ok_or_else(|| {
                ProtocolError::new(
                    ErrorCode::NotRegistered,
                    format!("group {pgid} is not registered"),
                )
            })?;
        let tree = self.trees.remove(i);
        let id = tree.id().clone();
        self.release(tree);
        Ok(UnregisterReply {
            pgid,
            tree: id.as_str().to_owned(),
        })
    }

    fn take_out(&mut self, id: &TreeId) -> Result<Tree, ProtocolError> {
        let i = self
            .trees
            .iter()
            .position(|t| t.id() == id)
            .ok_or_else(|| {
                ProtocolError::new(ErrorCode::UnknownTree, format!("no tree {id} here"))
            })?;
        Ok(self.trees.remove(i))
    }

    /// Stops guarding `tree`; nothing is signalled. In the cgroup tier its processes
    /// leave the tree's cgroup for the one its root came from (ours for `spawn`).
    fn release(&mut self, tree: Tree) {
        if let Some(cg) = tree.cgroup() {
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
        if let Some(root) = tree.root() {
            self.host.forget_root(root.pid());
            self.released_any = true;
        }
        tree.forget_members();
        tree.release();
    }

    /// Every tree with its live members, from one /proc scan for the whole answer
    /// (a scan per tree made `list` of 300 trees take a second, with every other
    /// request and the owner watch waiting behind it).
    fn list(&mut self) -> ListReply {
        let mut table = None;
        let signaller = &self.signaller;
        let trees = (self.trees.iter_mut())
            .map(|t| {
                let root_pid = t.root_pid();
                let (kind, pgid) = match (t.is_taken(), t.group()) {
                    (false, _) => (TreeKind::Spawn, None),
                    (true, Some(pgid)) => (TreeKind::Register, Some(pgid)),
                    (true, None) => (TreeKind::Adopt, None),
                };
                let pgid = pgid.or_else(|| {
                    let pid = root_pid?;
                    signaller.procfs().stat(pid).ok().map(|s| s.pgrp)
                });
                ListedTree {
                    tree: t.id().as_str().to_owned(),
                    kind,
                    pid: root_pid,
                    pgid,
                    label: t.label().map(str::to_owned),
                    live: t.live_count(signaller, &mut table) as u64,
                }
            })
            .collect();
        ListReply { trees }
    }
}
