//! Taking a tree: `register` and `adopt` (a process the host started, proven before it
//! is accepted) and `spawn` (a command undertaker starts itself, as `run` does).

use super::held::{HeldTree, Kind, ProcTable};
use super::Supervisor;
use crate::identity::{TreeId, TREE_MARKER};
use crate::ladder::Refusal;
use crate::linux::commands::record::Recorder;
use crate::linux::contain::cgroup::{self, CgroupTree};
use crate::linux::contain::containment::Containment;
use crate::linux::contain::spawn::spawn_error;
use crate::linux::kernel::sys;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::{Members, NotProven, ProvenProcess};
use crate::protocol::{ErrorCode, ProtocolError, RefusalReason, SpawnRequest};
use crate::{RunError, RunOptions};
use rustix::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

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
                | Refusal::Ancestor { .. } => RefusalReason::Protected,
                Refusal::OtherUid { .. } => RefusalReason::OtherUid,
                Refusal::NotGroupMember { .. } | Refusal::NotGroupLeader { .. } => {
                    RefusalReason::NotGroupLeader
                }
                Refusal::IdentityMissing { .. } => RefusalReason::NoSuchProcess,
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
        if let Some(t) = self
            .trees
            .iter()
            .find(|t| t.pgid == Some(pgid) && t.anchors.first().is_some_and(|a| !a.has_exited()))
        {
            return Ok((t.id.clone(), t.live_count(&self.signaller)));
        }
        let leader = self.prove_handed(pgid)?;
        if leader.identity.pgid != pgid {
            return Err(ProtocolError::refused(
                RefusalReason::NotGroupLeader,
                format!(
                    "process {pgid} is in group {}, not {pgid}",
                    leader.identity.pgid
                ),
            ));
        }
        self.take(Kind::Register, leader, Some(pgid))
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
        let (tree, members) = self.take(Kind::Adopt, leader, None)?;
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
        let held = self.trees.iter().any(|t| {
            t.root_pid == pid || t.anchors.iter().any(|a| a.pid() == pid && !a.has_exited())
        });
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

    fn tree_options(&self, label: Option<String>, command: Vec<std::ffi::OsString>) -> RunOptions {
        RunOptions {
            command,
            label: label.or_else(|| self.opts.label.clone()),
            grace: self.opts.grace,
            owner: self.opts.owner.clone(),
            tier: self.containment.tier(),
            state_dir: self.opts.state_dir.clone(),
        }
    }

    fn new_tree_id(&self) -> Result<TreeId, ProtocolError> {
        let mut random = [0u8; 12];
        rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
            .map_err(|e| ProtocolError::new(ErrorCode::SpawnFailed, format!("getrandom: {e}")))?;
        Ok(TreeId::generate(&self.signaller.me().boot_id, random))
    }

    /// Records the tree, then brings `leader`'s group (when `pgid`) and descendants
    /// under guard: into the tree's cgroup in the cgroup tier, pidfds held in any.
    fn take(
        &mut self,
        kind: Kind,
        leader: ProvenProcess,
        pgid: Option<i32>,
    ) -> Result<(TreeId, usize), ProtocolError> {
        let id = self.new_tree_id()?;
        let opts = self.tree_options(None, Vec::new());
        let label = opts.label.clone();
        let recorder = self.record(&opts, &id)?;
        let procfs = self.signaller.procfs();
        let root_pid = leader.pid();
        let root_starttime = leader.identity.starttime;
        let cgroup = self.tree_cgroup(&id, &recorder)?;
        let mut members = self.collect(leader, pgid);
        if let Some(cg) = &cgroup {
            // Members forked while we moved the others: a second pass catches them.
            for _ in 0..2 {
                for m in &members.proven {
                    move_proven(cg, m, procfs);
                }
                let fresh = self.collect_more(&members, pgid);
                if fresh.proven.len() == members.proven.len() {
                    break;
                }
                members = fresh;
            }
        }
        recorder.set_root(procfs, root_pid);
        let count = members.proven.len();
        self.trees.push(HeldTree {
            id: id.clone(),
            kind,
            label,
            pgid,
            root_pid,
            root_starttime,
            root: None,
            root_status: None,
            anchors: members.proven,
            cgroup,
            recorder,
            root_done: false,
        });
        Ok((id, count))
    }

    fn record(&self, opts: &RunOptions, id: &TreeId) -> Result<Recorder, ProtocolError> {
        Recorder::start(
            opts,
            id,
            self.containment.tier().into(),
            &self.signaller,
            self.owner_record.clone(),
        )
        .map_err(|e| ProtocolError::new(ErrorCode::SpawnFailed, e.to_string()))
    }

    /// The tree's own cgroup (cgroup tier), recorded before anything moves into it.
    fn tree_cgroup(
        &self,
        id: &TreeId,
        recorder: &Recorder,
    ) -> Result<Option<CgroupTree>, ProtocolError> {
        let Containment::Cgroup(loc) = &self.containment else {
            return Ok(None);
        };
        let cg = CgroupTree::create(loc, id, self.signaller.me().pid, self.starttime)
            .map_err(|why| ProtocolError::new(ErrorCode::SpawnFailed, why))?;
        recorder.set_cgroup(&cg.path, cg.id);
        Ok(Some(cg))
    }

    /// The leader, the members of its group (while it lives to pin the number), and
    /// every descendant of those.
    fn collect(&self, leader: ProvenProcess, pgid: Option<i32>) -> Members {
        let mut start = Members::default();
        let table = ProcTable::scan(self.signaller.procfs());
        if let Some(pgid) = pgid {
            for pid in group_candidates(self.signaller.procfs(), pgid, leader.pid()) {
                if let Ok(p) = self.signaller.prove_in_group(pid, &leader) {
                    start.proven.push(p);
                }
            }
        }
        start.proven.insert(0, leader);
        table.walk(&self.signaller, start)
    }

    fn collect_more(&self, known: &Members, pgid: Option<i32>) -> Members {
        let leader = &known.proven[0];
        let mut start = Members::default();
        start
            .proven
            .extend(known.proven.iter().filter_map(ProvenProcess::try_clone));
        if let Some(pgid) = pgid {
            for pid in group_candidates(self.signaller.procfs(), pgid, leader.pid()) {
                if start.proven.iter().any(|p| p.pid() == pid) {
                    continue;
                }
                if let Ok(p) = self.signaller.prove_in_group(pid, leader) {
                    start.proven.push(p);
                }
            }
        }
        let table = ProcTable::scan(self.signaller.procfs());
        table.walk(&self.signaller, start)
    }

    /// `spawn`: starts the command as a new tree, exactly as `run` starts CMD (own
    /// group, marker, PDEATHSIG, born in the tree's cgroup), recorded first.
    pub(super) fn spawn(
        &mut self,
        req: SpawnRequest,
        fds: Vec<OwnedFd>,
    ) -> Result<(TreeId, i32), ProtocolError> {
        let stdio: [Stdio; 3] = match <[OwnedFd; 3]>::try_from(fds) {
            Ok([i, o, e]) => [i.into(), o.into(), e.into()],
            Err(fds) if fds.is_empty() => [Stdio::null(), Stdio::null(), Stdio::null()],
            Err(fds) => {
                return Err(ProtocolError::new(
                    ErrorCode::BadFds,
                    format!("spawn takes 0 or 3 file descriptors, got {}", fds.len()),
                ))
            }
        };
        let id = self.new_tree_id()?;
        let command = req.argv.iter().map(Into::into).collect();
        let opts = self.tree_options(req.label.clone(), command);
        let label = opts.label.clone();
        let recorder = self.record(&opts, &id)?;
        let cgroup = self.tree_cgroup(&id, &recorder)?;
        let root = self
            .start_command(&req, &id, stdio, cgroup.as_ref())
            .inspect_err(|_| {
                if let Some(cg) = &cgroup {
                    let _ = cg.remove(Duration::ZERO);
                }
            })?;
        let root_pid = root.pid();
        recorder.set_root(self.signaller.procfs(), root_pid);
        let root_starttime = self
            .signaller
            .procfs()
            .stat(root_pid)
            .map(|s| s.starttime)
            .unwrap_or(self.starttime);
        self.process.add_root(root_pid);
        self.trees.push(HeldTree {
            id: id.clone(),
            kind: Kind::Spawn,
            label,
            pgid: None,
            root_pid,
            root_starttime,
            root: Some(root),
            root_status: None,
            anchors: Vec::new(),
            cgroup,
            recorder,
            root_done: false,
        });
        Ok((id, root_pid))
    }

    fn start_command(
        &self,
        req: &SpawnRequest,
        id: &TreeId,
        [stdin, stdout, stderr]: [Stdio; 3],
        cgroup: Option<&CgroupTree>,
    ) -> Result<PidRef, ProtocolError> {
        let (program, args) = req.argv.split_first().ok_or_else(|| {
            ProtocolError::new(ErrorCode::BadRequest, "\"argv\" must not be empty")
        })?;
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        if req.env_clear {
            cmd.env_clear();
        }
        cmd.envs(req.env.iter().map(|(k, v)| (k, v)))
            .env(TREE_MARKER, id.as_str())
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr);
        if let Some(dir) = &req.cwd {
            cmd.current_dir(dir);
        }
        let join = cgroup
            .map(CgroupTree::open_procs_for_join)
            .transpose()
            .map_err(|e| {
                ProtocolError::new(ErrorCode::SpawnFailed, format!("cgroup.procs: {e}"))
            })?;
        let me = self.signaller.me();
        sys::install_child_setup(
            &mut cmd,
            me.pgrp,
            self.process.nofile,
            join.as_ref().map(|fd| fd.as_raw_fd()),
            me.pid,
            // Its own session, as MCP SDKs start servers: the supervisor has no
            // terminal to share (it left the host's session).
            true,
        );
        let child = cmd.spawn().map_err(|e| {
            if e.raw_os_error() == Some(sys::CGROUP_JOIN_FAILED) {
                return ProtocolError::new(
                    ErrorCode::SpawnFailed,
                    "could not move the command into its cgroup; it was not started",
                );
            }
            if req.cwd.is_some() && e.kind() == std::io::ErrorKind::NotFound {
                // std reports a missing cwd as NotFound too: say which one.
                if !std::path::Path::new(req.cwd.as_deref().unwrap_or("")).is_dir() {
                    return ProtocolError::new(
                        ErrorCode::SpawnFailed,
                        format!("cwd {:?}: {e}", req.cwd.as_deref().unwrap_or("")),
                    );
                }
            }
            match spawn_error(program.as_ref(), e) {
                RunError::NotFound(p) => {
                    ProtocolError::new(ErrorCode::NotFound, format!("{p}: command not found"))
                }
                e @ RunError::NotExecutable(..) => {
                    ProtocolError::new(ErrorCode::NotExecutable, e.to_string())
                }
                e => ProtocolError::new(ErrorCode::SpawnFailed, e.to_string()),
            }
        })?;
        drop(join);
        let pid = child.id() as i32;
        // Nothing has reaped it yet, so this pidfd is the child's and nobody else's.
        let root = PidRef::open(pid).map_err(|e| {
            ProtocolError::new(ErrorCode::SpawnFailed, format!("pidfd_open({pid}): {e}"))
        })?;
        drop(child);
        Ok(root)
    }
}

/// Processes whose group is `pgid` now (read from /proc; each is proven afterwards).
fn group_candidates(
    procfs: &crate::linux::kernel::procfs::Procfs,
    pgid: i32,
    leader: i32,
) -> Vec<i32> {
    procfs
        .pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|&pid| pid != leader)
        .filter(|&pid| procfs.stat(pid).is_ok_and(|s| s.pgrp == pgid))
        .collect()
}

/// Moves a proven member into the tree's cgroup. cgroup.procs takes a number, not a
/// pidfd: the number named the member during the write only if the member is still
/// alive afterwards. If it died meanwhile, whatever process now has that number and
/// landed in our cgroup is moved back where the member came from: it is not ours.
fn move_proven(
    cg: &CgroupTree,
    member: &ProvenProcess,
    procfs: &crate::linux::kernel::procfs::Procfs,
) {
    let pid = member.pid();
    let origin = cgroup::dir_of_process(procfs, pid);
    if let Err(e) = cg.move_in(pid) {
        tracing::warn!(pid, "cannot move into {}: {e}", cg.path.display());
        return;
    }
    if member.has_exited() && cg.pids().contains(&pid) {
        if let Some(origin) = origin {
            let _ = cgroup::move_to(&origin, pid);
        }
    }
}
