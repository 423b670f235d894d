//! Taking a running process into a job (`supervise`'s `register` and `adopt`), with
//! the descendants it started before it was assigned (docs/PORTING.md, "Windows").
//!
//! A process created after its parent joined the job is in the job from its first
//! instruction; one created before is not, and neither are its own children. So after
//! the assignment, Toolhelp snapshots are taken until one adds nothing: each process
//! whose parent pid names a member, created after that member (Windows never updates
//! a parent pid, so an older process on that number is a stranger), is opened,
//! assigned, and proven a member through its handle. What escapes: a descendant
//! whose parent exited before the snapshot that would have named it (its parent
//! number leads nowhere), and breakaway, which our jobs never allow.

use crate::windows::contain::job::Job;
use crate::windows::kernel::sys;
use std::collections::HashMap;
use std::io;
use std::os::windows::io::{AsHandle, OwnedHandle};

/// Snapshots taken at most: a tree that keeps starting processes outside the job
/// faster than we assign them is still bounded.
const MAX_ROUNDS: usize = 64;

/// What an adoption took.
#[derive(Debug)]
pub struct Adopted {
    /// Processes assigned by us (the root and the descendants found outside the job).
    pub assigned: usize,
    /// Snapshots it took until one added nothing.
    pub rounds: usize,
}

/// Assigns `root` (opened with [`sys::Access::Assign`] and proven by the caller) to
/// `job`, then the descendants outside the job, to a fixed point. `never` lists pids
/// that must never be taken (the supervisor, its owner).
pub fn adopt(job: &Job, root: &OwnedHandle, root_pid: u32, never: &[u32]) -> io::Result<Adopted> {
    sys::assign_to_job(job.handle(), root.as_handle())?;
    if !sys::is_in_job(root.as_handle(), job.handle())? {
        return Err(io::Error::other("not in the job after assignment"));
    }
    let root_created = sys::creation_time(root.as_handle())?;
    // Member pid -> creation time; handles held so no number is reused meanwhile.
    let mut known: HashMap<u32, u64> = HashMap::from([(root_pid, root_created)]);
    let mut held: Vec<OwnedHandle> = Vec::new();
    let mut assigned = 1;
    let mut rounds = 0;
    while rounds < MAX_ROUNDS {
        rounds += 1;
        let mut added = 0;
        for (pid, parent) in sys::processes()? {
            if known.contains_key(&pid) || never.contains(&pid) || pid == 0 {
                continue;
            }
            let Some(&parent_created) = known.get(&parent) else {
                continue;
            };
            let Ok(h) = sys::open_process(pid, sys::Access::Assign) else {
                continue; // exited, or not ours to open
            };
            let Ok(created) = sys::creation_time(h.as_handle()) else {
                continue;
            };
            if created < parent_created || created < root_created {
                continue; // an older process on a number a member's parent once had
            }
            if !sys::is_in_job(h.as_handle(), job.handle())? {
                if sys::exit_code(h.as_handle()).is_some() {
                    continue;
                }
                sys::assign_to_job(job.handle(), h.as_handle()).map_err(|e| {
                    io::Error::new(e.kind(), format!("descendant {pid} (parent {parent}): {e}"))
                })?;
                if !sys::is_in_job(h.as_handle(), job.handle())? {
                    return Err(io::Error::other(format!(
                        "descendant {pid} is not in the job after assignment"
                    )));
                }
                assigned += 1;
                added += 1;
            }
            known.insert(pid, created);
            held.push(h);
        }
        if added == 0 {
            break;
        }
    }
    Ok(Adopted { assigned, rounds })
}
