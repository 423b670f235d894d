//! What the Windows supervisor holds of one tree (the neutral
//! [`crate::supervisor::Tree`] has the rest): its kill-on-close job (only the
//! supervisor holds the handle), its root and the stop event `undertaker kill` sets.

use crate::identity::{TreeId, TREE_MARKER};
use crate::protocol::wire::TreeKind;
use crate::protocol::{ErrorCode, ProtocolError, RefusalReason, SpawnRequest};
use crate::registry::record_file::Line;
use crate::registry::OwnerRecord;
use crate::supervisor;
use crate::windows::commands::guardian::stop_event_name;
use crate::windows::commands::record::Recorder;
use crate::windows::commands::record::BOOT_ID;
use crate::windows::contain::adopt::{self, Adopted};
use crate::windows::contain::job::{Job, StartError};
use crate::windows::kernel::sys;
use std::os::windows::io::{AsHandle, BorrowedHandle, OwnedHandle};
use std::path::Path;

/// The tree's first process: our child (spawn), or a handle opened and proven at
/// registration, which pins its number.
pub enum Root {
    Child(std::process::Child),
    Taken(OwnedHandle),
}

pub struct Held {
    pub job: Job,
    pub root: Root,
    pub stop: Option<OwnedHandle>,
}

pub type Tree = supervisor::Tree<Held>;

/// Where new trees are recorded, and whose they are.
pub struct Setup<'a> {
    pub state_dir: Option<&'a Path>,
    pub label: Option<&'a str>,
    pub owner: &'a OwnerRecord,
}

impl Setup<'_> {
    /// A fresh tree id, its job and stop event, its record file: all before any
    /// process joins it.
    fn open(
        &self,
        label: Option<String>,
    ) -> Result<(TreeId, Job, Option<OwnedHandle>, Recorder), String> {
        let mut random = [0u8; 12];
        sys::random_bytes(&mut random).map_err(|e| e.to_string())?;
        let id = TreeId::generate(BOOT_ID, random);
        let job = Job::create(id.as_str()).map_err(|e| format!("job object: {e}"))?;
        let stop = sys::create_event(Some(&stop_event_name(id.as_str())))
            .map_err(|e| {
                tracing::warn!("tree {id}: no stop event (undertaker kill cannot reach it): {e}")
            })
            .ok();
        let record = Recorder::start(self.state_dir, label, &id, self.owner.clone(), true)
            .map_err(|e| e.to_string())?;
        Ok((id, job, stop, record))
    }

    /// `spawn`: the command started suspended, assigned, resumed (as `run` starts
    /// CMD), its stdio the null device: the supervisor's own stdio is the channel.
    pub fn spawn(&self, req: &SpawnRequest) -> Result<Tree, ProtocolError> {
        let label = req.label.clone().or(self.label.map(str::to_owned));
        let (id, job, stop, record) = self
            .open(label.clone())
            .map_err(|e| ProtocolError::new(ErrorCode::SpawnFailed, e))?;
        let (program, mut cmd) = supervisor::spawn_command(req)?;
        cmd.env(TREE_MARKER, id.as_str());
        let started = job.start(cmd).map_err(|e| match e {
            StartError::Spawn(e) => supervisor::spawn_failed(program, &e),
            StartError::Contain(why) => ProtocolError::new(ErrorCode::SpawnFailed, why),
        })?;
        record.root(started.pid, started.child.as_handle());
        Ok(Tree {
            id,
            kind: TreeKind::Spawn,
            root_pid: started.pid as i32,
            label,
            record,
            status: None,
            held: Held {
                job,
                root: Root::Child(started.child),
                stop,
            },
        })
    }

    /// `register` / `adopt`: `process` (opened with [`sys::Access::Assign`] and proven
    /// by the caller) and its descendants, into a new job (contain/adopt.rs).
    pub fn take(
        &self,
        kind: TreeKind,
        pid: u32,
        process: OwnedHandle,
        never: &[u32],
    ) -> Result<(Tree, Adopted), ProtocolError> {
        let label = self.label.map(str::to_owned);
        let (id, job, stop, record) = self
            .open(label.clone())
            .map_err(|e| ProtocolError::new(ErrorCode::Refused, e))?;
        let adopted = adopt::adopt(&job, &process, pid, never).map_err(|e| {
            if sys::exit_code(process.as_handle()).is_some() {
                return ProtocolError::refused(
                    RefusalReason::NoSuchProcess,
                    format!("pid {pid} exited"),
                );
            }
            if sys::is_in_some_job(process.as_handle()).unwrap_or(false) {
                return ProtocolError::refused(
                    RefusalReason::OtherJob,
                    format!("pid {pid} is in a job that cannot take ours as a child: {e}"),
                );
            }
            ProtocolError::new(ErrorCode::Refused, format!("pid {pid}: assign to job: {e}"))
        })?;
        record.root(pid, process.as_handle());
        record.note(&format!(
            "{kind:?} of pid {pid}: {} process(es) assigned in {} snapshot(s)",
            adopted.assigned, adopted.rounds
        ));
        let tree = Tree {
            id,
            kind,
            root_pid: pid as i32,
            label,
            record,
            status: None,
            held: Held {
                job,
                root: Root::Taken(process),
                stop,
            },
        };
        Ok((tree, adopted))
    }
}

impl Held {
    pub fn root_handle(&self) -> BorrowedHandle<'_> {
        match &self.root {
            Root::Child(c) => c.as_handle(),
            Root::Taken(h) => h.as_handle(),
        }
    }

    pub fn root_alive(&self) -> bool {
        sys::exit_code(self.root_handle()).is_none()
    }

    /// Its processes running now, as the job counts them.
    pub fn live(&self) -> u64 {
        self.job.active().map_or(0, u64::from)
    }

    /// Whether `undertaker kill` asked for this tree.
    pub fn stop_asked(&self) -> bool {
        self.stop.as_ref().is_some_and(|e| {
            matches!(
                sys::wait_any(&[e.as_handle()], Some(std::time::Duration::ZERO)),
                Ok(Some(0))
            )
        })
    }

    /// A spawned root's status once it has exited (waits for it: call after teardown).
    pub fn root_status(&mut self) -> Option<i32> {
        match &mut self.root {
            Root::Child(c) => c.wait().ok().and_then(|s| s.code()),
            Root::Taken(_) => None,
        }
    }
}

/// Stops guarding: kill-on-close is cleared before the handle closes, so the
/// members outlive the job and the supervisor; the record says `released`.
pub fn release(mut tree: Tree) -> Result<(), String> {
    sys::set_kill_on_close(tree.held.job.handle(), false)
        .map_err(|e| format!("clearing kill-on-close: {e}"))?;
    tree.record.release();
    Ok(())
}

pub fn audit(tree: &Tree, entries: Vec<crate::registry::AuditEntry>) {
    let lines: Vec<Line> = entries.into_iter().map(Line::Audit).collect();
    tree.record.write(&lines);
}
