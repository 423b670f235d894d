//! Taking a tree: `register` and `adopt` (a process the host started, proven before it
//! is accepted) and `spawn` (a command undertaker starts itself, as `run` does).

use super::Supervisor;
use crate::identity::TreeId;
use crate::ladder::Refusal;
use crate::linux::commands::guarded::{self, TakenBy};
use crate::linux::commands::record::GuardianKind;
use crate::linux::commands::tree::Tree;
use crate::linux::contain::spawn::{CommandSpec, Launch, StdioSpec};
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::{NotProven, ProvenProcess};
use crate::protocol::{ErrorCode, ProtocolError, RefusalReason, SpawnRequest};
use crate::snapshot::SnapshotEntry;
use crate::{GuardOptions, RunError};
use rustix::fd::OwnedFd;

/// A refusal of the proof, as the protocol names it.
fn refused(pid: i32, why: NotProven) -> ProtocolError {
    let (reason, message) = match why {
        NotProven::Gone => (
            RefusalReason::NoSuchProcess,
            format!("no live process {pid}"),
        ),
        NotProven::Refused(r) => {
            let reason = match &r {
                Refusal::InvalidPid { .. }
                | Refusal::InvalidPgid { .. }
                | Refusal::OwnProcess { .. }
                | Refusal::OwnGroup { .. }
                | Refusal::Ancestor { .. }
                | Refusal::Owner { .. }
                | Refusal::ProtectedGroup { .. } => RefusalReason::Protected,
                Refusal::OtherUid { .. } => RefusalReason::OtherUid,
                Refusal::NotGroupMember { .. } | Refusal::NotGroupLeader { .. } => {
                    RefusalReason::NotGroupLeader
                }
                Refusal::IdentityMissing { .. } => RefusalReason::NoSuchProcess,
                Refusal::UnprovenGroup { .. } => RefusalReason::UnprovenGroup,
                _ => RefusalReason::NotOwnerChild,
            };
            (reason, r.to_string())
        }
    };
    ProtocolError::refused(reason, message)
}

impl Supervisor<'_> {
    /// `register <pgid>`: the leader must be a live child of the owner, of our uid,
    /// leading group `pgid`. Its group's members and their descendants come with it.
    pub(super) fn register(&mut self, pgid: i32) -> Result<(TreeId, usize), ProtocolError> {
        if let Some(held) = self.holding_group(pgid) {
            return Ok(held);
        }
        let proven = self.prove_handed(pgid);
        if proven.is_err() && !self.predecessors_checked {
            // A replay after a restart: the group may be a dead predecessor's.
            self.take_over_predecessors();
            if let Some(held) = self.holding_group(pgid) {
                return Ok(held);
            }
        }
        let leader = proven.map_err(|e| {
            // No process leads that number and no tree of ours (taken over from an
            // earlier supervisor of this owner) proves the group: never a bare number.
            if e.reason == Some(RefusalReason::NoSuchProcess) {
                ProtocolError::refused(
                    RefusalReason::UnprovenGroup,
                    format!("no process {pgid}, and no snapshot proves group {pgid}"),
                )
            } else {
                e
            }
        })?;
        if leader.identity.pgid != pgid {
            return Err(ProtocolError::refused(
                RefusalReason::NotGroupLeader,
                format!(
                    "process {pgid} is in group {}, not {pgid}",
                    leader.identity.pgid
                ),
            ));
        }
        self.take(leader, Some(pgid))
    }

    /// The tree already holding group `pgid`: one of its processes is alive and still
    /// in the group, so the number still names the group it took.
    pub(super) fn holding_group(&mut self, pgid: i32) -> Option<(TreeId, usize)> {
        let procfs = self.signaller.procfs();
        let t = (self.trees.iter_mut()).find(|t| t.holds_group(procfs, pgid))?;
        let live = t.members(&self.signaller, &mut None).proven.len();
        Some((t.id().clone(), live))
    }

    /// `adopt` with `pgid` and `snapshot` (pi-crew's spawn record): group `pgid`, proven
    /// by one process of the snapshot alive with its recorded start time and still in
    /// the group; no parentage needed (docs/SUPERVISE.md).
    pub(super) fn adopt_group(
        &mut self,
        pgid: i32,
        snapshot: &[SnapshotEntry],
    ) -> Result<(TreeId, usize), ProtocolError> {
        if let Some(held) = self.holding_group(pgid) {
            return Ok(held);
        }
        // A live leader is proven as `register` proves it, as the owner's child: a
        // snapshot proves a group only through a member that is not its leader.
        let leader_alive = (self.signaller.procfs().stat(pgid)).is_ok_and(|s| s.state != 'Z');
        if leader_alive {
            return self.register(pgid);
        }
        let anchor = self
            .signaller
            .prove_group_by_snapshot(pgid, snapshot)
            .map_err(|e| match e {
                NotProven::Gone => ProtocolError::refused(
                    RefusalReason::UnprovenGroup,
                    format!("no process of the snapshot proves group {pgid}"),
                ),
                e => refused(pgid, e),
            })?;
        self.check_not_held(anchor.pid())?;
        self.take(anchor, Some(pgid))
    }

    /// `adopt`: the process and its descendants. Named by `pid`, it must be a live
    /// child of the owner, of our uid; passed as a pidfd, the pidfd is the proof.
    pub(super) fn adopt(
        &mut self,
        pid: Option<i32>,
        fds: Vec<OwnedFd>,
    ) -> Result<(TreeId, i32, usize), ProtocolError> {
        let leader = match (<[OwnedFd; 1]>::try_from(fds), pid) {
            (Ok([fd]), pid) => self.prove_pidfd(fd, pid)?,
            (Err(fds), Some(pid)) if fds.is_empty() => self.prove_handed(pid)?,
            (Err(fds), None) if fds.is_empty() => {
                return Err(ProtocolError::new(
                    ErrorCode::BadRequest,
                    "missing \"pid\" (or a pidfd passed with the line)",
                ))
            }
            (Err(fds), _) => {
                return Err(ProtocolError::new(
                    ErrorCode::BadFds,
                    format!("adopt takes 0 or 1 file descriptor, got {}", fds.len()),
                ))
            }
        };
        let pid = leader.pid();
        let (tree, members) = self.take(leader, None)?;
        Ok((tree, pid, members))
    }

    fn prove_pidfd(&self, fd: OwnedFd, pid: Option<i32>) -> Result<ProvenProcess, ProtocolError> {
        let proven = self.signaller.prove_passed_pidfd(fd).ok_or_else(|| {
            ProtocolError::new(ErrorCode::BadFds, "the descriptor passed is not a pidfd")
        })?;
        let proven = proven.map_err(|e| refused(pid.unwrap_or(0), e))?;
        if pid.is_some_and(|p| p != proven.pid()) {
            return Err(ProtocolError::new(
                ErrorCode::BadRequest,
                format!(
                    "\"pid\" {} is not the pidfd's process {}",
                    pid.unwrap_or(0),
                    proven.pid()
                ),
            ));
        }
        self.check_not_held(proven.pid())?;
        Ok(proven)
    }

    fn check_not_held(&self, pid: i32) -> Result<(), ProtocolError> {
        let held = self.trees.iter().any(|t| t.anchors_pid(pid));
        if held {
            return Err(ProtocolError::refused(
                RefusalReason::AlreadyGuarded,
                format!("process {pid} is already in a tree of this supervisor"),
            ));
        }
        Ok(())
    }

    fn prove_handed(&self, pid: i32) -> Result<ProvenProcess, ProtocolError> {
        let Some(owner) = &self.owner_process else {
            return Err(ProtocolError::refused(
                RefusalReason::NotOwnerChild,
                "this supervisor has no owner process to check parentage against",
            ));
        };
        let proven = self
            .signaller
            .prove_owner_child(pid, owner.pid(), owner.fd())
            .map_err(|e| refused(pid, e))?;
        self.check_not_held(pid)?;
        Ok(proven)
    }

    /// What a new tree of this supervisor is recorded with: the supervisor's
    /// options, with the request's label if it has one.
    pub(super) fn tree_options(&self, label: Option<String>) -> GuardOptions {
        GuardOptions {
            label: label.or_else(|| self.opts.label.clone()),
            ..self.opts.clone()
        }
    }

    pub(super) fn new_tree_id(&self) -> Result<TreeId, ProtocolError> {
        Tree::new_id(&self.signaller)
            .map_err(|e| ProtocolError::new(ErrorCode::SpawnFailed, format!("getrandom: {e}")))
    }

    /// Records a tree (before anything is started or moved).
    pub(super) fn record(&self, label: Option<String>) -> Result<Tree, ProtocolError> {
        let id = self.new_tree_id()?;
        Tree::create(
            &self.tree_options(label),
            id,
            self.containment.clone(),
            &self.signaller,
            self.owner_record.clone(),
            GuardianKind::Supervisor {
                unreachable: self.control_unreachable.as_deref(),
            },
        )
        .map_err(|e| protocol_error(&e))
    }

    /// Records the tree, then brings `leader`'s group (when `pgid`) and descendants
    /// under guard (see `Tree::take`).
    fn take(
        &mut self,
        leader: ProvenProcess,
        pgid: Option<i32>,
    ) -> Result<(TreeId, usize), ProtocolError> {
        let mut tree = self.record(None)?;
        let taken = pgid.map_or(TakenBy::Process, TakenBy::Group);
        let count =
            (tree.take(&self.signaller, leader, pgid, taken)).map_err(|e| protocol_error(&e))?;
        let id = tree.id().clone();
        self.trees.push(tree);
        Ok((id, count))
    }

    /// `spawn`: starts the command as a new tree, exactly as `run` starts CMD (own
    /// group, marker, PDEATHSIG, born in the tree's cgroup), recorded first; its own
    /// session, as MCP SDKs start servers (the supervisor has no terminal to share).
    pub(super) fn spawn(
        &mut self,
        req: SpawnRequest,
        fds: Vec<OwnedFd>,
    ) -> Result<(TreeId, i32), ProtocolError> {
        let stdio = match <[OwnedFd; 3]>::try_from(fds) {
            Ok(fds) => StdioSpec::Fds(fds),
            Err(fds) if fds.is_empty() => StdioSpec::Null,
            Err(fds) => {
                return Err(ProtocolError::new(
                    ErrorCode::BadFds,
                    format!("spawn takes 0 or 3 file descriptors, got {}", fds.len()),
                ))
            }
        };
        if req.argv.is_empty() {
            return Err(ProtocolError::new(
                ErrorCode::BadRequest,
                "\"argv\" must not be empty",
            ));
        }
        let command = CommandSpec {
            argv: req.argv.into_iter().map(Into::into).collect(),
            env: (req.env.into_iter())
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            env_clear: req.env_clear,
            cwd: req.cwd.map(Into::into),
            stdio,
        };
        let mut tree = self.record(req.label)?.among_many();
        let id = tree.id().clone();
        tree.audit_line(guarded::spawn_entry());
        tree.spawn(&Launch {
            command: &command,
            grace: self.opts.grace,
            tree: &id,
            signaller: &self.signaller,
            nofile: self.host.nofile,
            signals: &self.host.signals,
            own_session: true,
        })
        .map_err(|e| protocol_error(&e))?;
        drop(command);
        tree.settle();
        let pid = tree.root().map_or(0, PidRef::pid);
        self.host.add_root(pid);
        self.trees.push(tree);
        Ok((id, pid))
    }
}

/// A command's start-up failure, as the protocol names it.
fn protocol_error(e: &RunError) -> ProtocolError {
    match e {
        RunError::NotFound(p) => {
            ProtocolError::new(ErrorCode::NotFound, format!("{p}: command not found"))
        }
        RunError::NotExecutable(..) => ProtocolError::new(ErrorCode::NotExecutable, e.to_string()),
        RunError::Usage(why) => ProtocolError::new(ErrorCode::BadRequest, why.clone()),
        _ => ProtocolError::new(ErrorCode::SpawnFailed, e.to_string()),
    }
}
