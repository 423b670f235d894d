//! The Job Object tier: one job per tree, created with kill-on-close before CMD
//! exists; CMD is created suspended, assigned, then resumed, so it never runs an
//! instruction outside the job, and every process it starts joins the job
//! (docs/TIERS.md, "job").

use crate::windows::kernel::sys;
use crate::windows::proof::teardown::JobMembers;
use std::ffi::OsString;
use std::io;
use std::os::windows::io::{AsHandle, BorrowedHandle, OwnedHandle};
use std::os::windows::process::CommandExt;

/// CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP: CMD waits to be assigned to the job,
/// and leads its own console group, which the polite round reaches.
const CREATION_FLAGS: u32 = 0x4 | 0x200;

/// CREATE_BREAKAWAY_FROM_JOB: out of our own job, when it cannot hold a nested one.
const CREATE_BREAKAWAY_FROM_JOB: u32 = 0x0100_0000;

/// How a refused assignment's message starts (`start` retries with breakaway).
const ASSIGN_REFUSED: &str = "assign to job";

/// A tree's job. Dropping it closes the handle: if no other handle is open, the kernel
/// terminates every member.
#[derive(Debug)]
pub struct Job {
    handle: OwnedHandle,
}

/// CMD, started inside the job.
#[derive(Debug)]
pub struct Started {
    pub child: std::process::Child,
    pub pid: u32,
}

/// Why CMD could not be started in the job.
#[derive(Debug)]
pub enum StartError {
    /// The command could not be run at all (not found, not executable).
    Spawn(io::Error),
    /// It was created but could not be contained; it was terminated before it ran.
    Contain(String),
}

impl Job {
    /// The name of tree `id`'s job: `ps` opens it by this name to count members.
    pub fn name_of(tree: &str) -> String {
        format!("Local\\undertaker.{tree}")
    }

    pub fn create(tree: &str) -> io::Result<Self> {
        let handle = sys::create_kill_on_close_job(&Self::name_of(tree))?;
        Ok(Self { handle })
    }

    pub fn handle(&self) -> BorrowedHandle<'_> {
        self.handle.as_handle()
    }

    /// Starts `command` suspended, assigns it to the job, proves it a member through
    /// its handle, and resumes it. Standard streams are inherited (passed through).
    pub fn spawn(&self, command: &[OsString], env: &[(&str, &str)]) -> Result<Started, StartError> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| StartError::Contain("no command".into()))?;
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.start(cmd)
    }

    /// Starts `cmd` (its program, arguments, environment, directory and stdio set by
    /// the caller) suspended, assigns it, proves it a member and resumes it.
    ///
    /// When we are ourselves in a job (a host's, an IDE's) and the kernel cannot nest
    /// ours under it (before Windows 8, and under Wine), the assignment is refused;
    /// CMD is then started again with CREATE_BREAKAWAY_FROM_JOB, which that job must
    /// allow (JOB_OBJECT_LIMIT_BREAKAWAY_OK), or the start fails saying so.
    pub fn start(&self, mut cmd: std::process::Command) -> Result<Started, StartError> {
        cmd.creation_flags(CREATION_FLAGS);
        let first = self.start_once(&mut cmd);
        let refused =
            matches!(&first, Err(StartError::Contain(why)) if why.starts_with(ASSIGN_REFUSED));
        if !refused || !sys::is_in_some_job(sys::current_process()).unwrap_or(false) {
            return first;
        }
        cmd.creation_flags(CREATION_FLAGS | CREATE_BREAKAWAY_FROM_JOB);
        self.start_once(&mut cmd).map_err(|e| match e {
            StartError::Spawn(e) => StartError::Contain(format!(
                "our own job does not nest ours and does not allow breakaway \
                 (JOB_OBJECT_LIMIT_BREAKAWAY_OK): {e}"
            )),
            other => other,
        })
    }

    fn start_once(&self, cmd: &mut std::process::Command) -> Result<Started, StartError> {
        let mut child = cmd.spawn().map_err(StartError::Spawn)?;
        let pid = child.id();
        let contained = (|| {
            let process = child.as_handle();
            sys::assign_to_job(self.handle(), process)
                .map_err(|e| format!("{ASSIGN_REFUSED}: {e}"))?;
            if !sys::is_in_job(process, self.handle())
                .map_err(|e| format!("IsProcessInJob: {e}"))?
            {
                return Err("CMD is not in its job after assignment".to_string());
            }
            match sys::resume_threads_of(pid) {
                Ok(0) => Err("CMD has no thread to resume".to_string()),
                Ok(_) => Ok(()),
                Err(e) => Err(format!("resume CMD: {e}")),
            }
        })();
        if let Err(why) = contained {
            // Still suspended: it never ran. Our handle pins it, so this is CMD.
            let _ = child.kill();
            let _ = child.wait();
            return Err(StartError::Contain(why));
        }
        Ok(Started { child, pid })
    }

    /// How many members are still running (`None`: the job could not be asked).
    pub fn active(&self) -> Option<u32> {
        sys::job_active_processes(self.handle()).ok()
    }

    pub fn terminate(&self, code: u32) -> io::Result<()> {
        sys::terminate_job(self.handle(), code)
    }

    pub fn member_pids(&self) -> Vec<u32> {
        sys::job_member_pids(self.handle()).unwrap_or_default()
    }
}

impl JobMembers for Job {
    fn active(&self) -> Option<u32> {
        Job::active(self)
    }

    fn member_pids(&self) -> Vec<u32> {
        Job::member_pids(self)
    }

    fn terminate(&self, code: u32) -> io::Result<()> {
        Job::terminate(self, code)
    }
}

/// Members of the job `tree` as another process sees them (`ps`): `None` when the job
/// is gone (its guardian died and the kernel closed it).
pub fn live_members_of(tree: &str) -> Option<u32> {
    let job = sys::open_job_for_query(&Job::name_of(tree))?;
    sys::job_active_processes(job.as_handle()).ok()
}
