//! The supervisor's trees over the portable core (docs/TIERS.md, "portable"): each
//! tree a [`Tracking`] of its own backend, looked at on every tick and torn down by
//! the core's teardown with its freeze round, all trees at once on the way out.
//! macOS runs it over libproc and kqueue; Linux's tests run it over /proc and pidfds
//! (`LinuxOs`) with real processes.

use super::{Tree, Trees};
use crate::exit_status::shell_status;
use crate::identity::{TreeId, TREE_MARKER};
use crate::portable::lineage::Scope;
use crate::portable::tracking::{self, Tracking};
use crate::portable::{ProcessTable, Waker};
use crate::protocol::wire::{HeldTier, HelloReply, OwnerPid, TreeKind};
use crate::protocol::{
    ErrorCode, ProtocolError, RefusalReason, Request, SpawnRequest, PROTOCOL_VERSION,
};
use crate::registry::recorder::{Recorder, Start};
use crate::registry::{GuardianRecord, OwnerRecord, RecordedTier};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

/// What the supervisor holds of one tree.
pub(crate) struct Held<T> {
    tracking: Tracking<T>,
    root: Root,
}

/// The tree's first process: our child (`spawn`), or the serial proven at
/// `register`/`adopt` (a number alone could name a stranger later).
enum Root {
    Child(Child),
    Taken { serial: u64 },
}

/// Who the supervisor is and whose: what every tree's record and proof need.
pub(crate) struct Identity {
    pub me: i32,
    pub start: u64,
    pub pgid: i32,
    pub uid: u32,
    /// The owner process (pid, start), when the owner is one: `register` and
    /// `adopt` take only its children.
    pub owner: Option<(i32, u64)>,
    pub owner_record: OwnerRecord,
    /// Never members: our parent, the owner.
    pub protect: Vec<i32>,
    /// The host's process group (`--parent-pgid`): never taken over.
    pub parent_pgid: Option<i32>,
    pub boot_id: String,
}

/// The trees over backend `T`, each tree's backend made by `backend`.
pub(crate) struct PortableTrees<T, F> {
    pub backend: F,
    /// Our own look at the table, for the proofs of `register` and `adopt`.
    pub table: T,
    pub who: Identity,
    pub state_dir: Option<PathBuf>,
    pub label: Option<String>,
    pub grace: Duration,
}

type PortableTree<T> = Tree<Held<T>>;

impl<T, F> PortableTrees<T, F>
where
    T: ProcessTable + Waker + Send,
    F: FnMut() -> std::io::Result<T>,
{
    /// A fresh tree id, its record file and its backend: all before any process
    /// joins it.
    fn open(&mut self, label: Option<String>) -> Result<(TreeId, Recorder, T), String> {
        let id = TreeId::generate(&self.who.boot_id, random().map_err(|e| e.to_string())?);
        let os = (self.backend)().map_err(|e| format!("backend: {e}"))?;
        let record = Recorder::open(
            &id,
            Start {
                state_dir: self.state_dir.as_deref(),
                uid: self.who.uid,
                boot_id: &self.who.boot_id,
                label,
                tier: RecordedTier::Portable,
                guardian: GuardianRecord {
                    pid: self.who.me,
                    starttime: self.who.start,
                    pgid: self.who.pgid,
                    pidfs_inode: None,
                    supervisor: true,
                },
                owner: self.who.owner_record.clone(),
            },
        )
        .map_err(|e| e.to_string())?;
        Ok((id, record, os))
    }

    /// Tree `id`'s scope as we judge it and its member record (beside its record).
    fn scope(&self, os: &mut T, id: &TreeId, record: &Recorder) -> (Scope, Option<PathBuf>) {
        let scope = tracking::scope(os, id, self.who.uid, self.who.me, &self.who.protect, None);
        let members = record
            .is_recording()
            .then(|| tracking::members_path(self.state_dir.as_deref(), id))
            .flatten();
        (scope, members)
    }
}

impl<T, F> Trees for PortableTrees<T, F>
where
    T: ProcessTable + Waker + Send,
    F: FnMut() -> std::io::Result<T>,
{
    type Held = Held<T>;

    fn hello(&self) -> HelloReply {
        HelloReply {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").into(),
            tier: HeldTier::Portable,
            pid: self.who.me,
            owner: OwnerPid {
                pid: self.who.owner.map(|(pid, _)| pid),
            },
            socket: false,
        }
    }

    /// The command in its own process group with the tree's marker, its stdio the
    /// null device (the supervisor's own stdio is the channel), seeded as `run`
    /// seeds CMD.
    fn spawn(&mut self, req: &SpawnRequest) -> Result<PortableTree<T>, ProtocolError> {
        let label = req.label.clone().or(self.label.clone());
        let (program, mut cmd) = super::spawn_command(req)?;
        let (id, record, mut os) = self
            .open(label.clone())
            .map_err(|e| ProtocolError::new(ErrorCode::SpawnFailed, e))?;
        let (scope, members) = self.scope(&mut os, &id, &record);
        cmd.env(TREE_MARKER, id.as_str()).process_group(0);
        let child = cmd.spawn().map_err(|e| super::spawn_failed(program, &e))?;
        let pid = child.id() as i32;
        if let Some(f) = os.facts(pid) {
            record.root_record(f.root_record());
        }
        Ok(Tree {
            id,
            kind: TreeKind::Spawn,
            root_pid: pid,
            label,
            record,
            status: None,
            held: Held {
                tracking: Tracking::of_command(os, scope, pid, members),
                root: Root::Child(child),
            },
        })
    }

    /// Proves `pid` (the owner's child, started no earlier than the owner, not us,
    /// not the owner, not in the host's group, not held already), then seeds a new
    /// tree with it by serial: its descendants follow by lineage.
    fn take(
        &mut self,
        kind: TreeKind,
        pid: i32,
        held: &[PortableTree<T>],
    ) -> Result<PortableTree<T>, ProtocolError> {
        let refused =
            |reason, why: String| Err(ProtocolError::refused(reason, format!("pid {pid}: {why}")));
        let owner = self.who.owner;
        if pid == self.who.me || owner.is_some_and(|(o, _)| o == pid) {
            return refused(
                RefusalReason::Protected,
                "the supervisor or its owner".into(),
            );
        }
        let Some(facts) = self.table.facts(pid) else {
            return refused(RefusalReason::NoSuchProcess, "no such process".into());
        };
        if self.who.parent_pgid == Some(facts.pgid) {
            return refused(
                RefusalReason::Protected,
                "in the host's own process group".into(),
            );
        }
        if held.iter().any(|t| t.held.tracking.holds(facts.serial)) {
            return refused(
                RefusalReason::AlreadyGuarded,
                "held by a tree of this supervisor".into(),
            );
        }
        let Some((owner, owner_start)) = owner else {
            return refused(
                RefusalReason::NotOwnerChild,
                "the supervisor has no owner process to be its parent".into(),
            );
        };
        if facts.ppid != owner || facts.start < owner_start {
            return refused(
                RefusalReason::NotOwnerChild,
                format!("its parent is not the owner (pid {owner})"),
            );
        }
        let label = self.label.clone();
        let (id, record, mut os) = self
            .open(label.clone())
            .map_err(|e| ProtocolError::new(ErrorCode::Refused, e))?;
        let (scope, members) = self.scope(&mut os, &id, &record);
        let mut tracking = Tracking::of_record(os, scope, members);
        tracking.seed_proven(&[(pid, facts.serial)]);
        if !tracking.holds(facts.serial) {
            tracking.forget();
            return refused(RefusalReason::NoSuchProcess, "it has exited".into());
        }
        record.root_record(facts.root_record());
        record.note(&format!("{kind:?} of pid {pid}"));
        Ok(Tree {
            id,
            kind,
            root_pid: pid,
            label,
            record,
            status: None,
            held: Held {
                tracking,
                root: Root::Taken {
                    serial: facts.serial,
                },
            },
        })
    }

    fn cannot(&self, request: &Request) -> ProtocolError {
        let why = match request {
            Request::AdoptGroup { .. } => {
                "adopt by snapshot is Linux only (its cgroup move): adopt by `pid`"
            }
            _ => "adopt needs `pid` here: a pidfd travels only on a Unix socket (Linux)",
        };
        ProtocolError::new(ErrorCode::BadRequest, why)
    }

    fn root_alive(&mut self, tree: &mut PortableTree<T>) -> bool {
        let held = &mut tree.held;
        match &mut held.root {
            Root::Child(child) => matches!(child.try_wait(), Ok(None)),
            Root::Taken { serial } => held
                .tracking
                .os()
                .facts(tree.root_pid)
                .is_some_and(|f| f.serial == *serial),
        }
    }

    fn live(&mut self, tree: &mut PortableTree<T>) -> u64 {
        tree.held.tracking.live() as u64
    }

    /// `undertaker kill` cannot reach one tree of a portable supervisor
    /// (docs/SUPERVISE.md): it says so instead.
    fn stop_asked(&mut self, _tree: &PortableTree<T>) -> bool {
        false
    }

    fn root_status(&mut self, tree: &mut PortableTree<T>) -> Option<i32> {
        match &mut tree.held.root {
            Root::Child(child) => child
                .wait()
                .ok()
                .and_then(|s| shell_status(s.code(), s.signal())),
            Root::Taken { .. } => None,
        }
    }

    fn look(&mut self, tree: &mut PortableTree<T>) {
        tree.held.tracking.track();
    }

    /// The members go on unguarded; the member record goes, the record says
    /// `released`.
    fn release(&mut self, mut tree: PortableTree<T>) -> Result<(), String> {
        tree.held.tracking.forget();
        tree.record.release();
        Ok(())
    }

    /// Every tree's teardown on its own thread, so that `n` trees take one grace,
    /// not `n`.
    fn tear_down(&mut self, trees: &mut [PortableTree<T>]) -> Vec<usize> {
        let grace = self.grace;
        let reports: Vec<_> = std::thread::scope(|s| {
            let running: Vec<_> = trees
                .iter_mut()
                .map(|t| s.spawn(move || t.held.tracking.tear_down(grace)))
                .collect();
            running.into_iter().map(|r| r.join().ok()).collect()
        });
        trees
            .iter()
            .zip(reports)
            .map(|(tree, report)| {
                let Some(report) = report else {
                    tree.record.note("teardown failed: its thread panicked");
                    return 1;
                };
                tree.record.note_by("supervisor", &report.summary());
                if report.stuck.is_empty() {
                    tree.held.tracking.forget();
                }
                report.stuck.len()
            })
            .collect()
    }
}

/// 12 random bytes for a tree's id.
pub(crate) fn random() -> std::io::Result<[u8; 12]> {
    let mut bytes = [0u8; 12];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}
