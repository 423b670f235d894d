//! The owner on macOS (docs/DESIGN.md §3): a process watched through the portable
//! core's [`Watched`] (kqueue `NOTE_EXIT`, then the identity re-read that closes the
//! register-after-exit race), or an inherited pipe whose end of file is the owner's
//! death (`--owner-fd`).

use crate::macos::contain::portable::MacOs;
use crate::macos::kernel::sys;
use crate::portable::owner::{OwnerGone, Watched};
use crate::portable::{ProcessTable, Wake};
use crate::registry::{OwnerKind, OwnerRecord};
use crate::{OwnerSpec, RunError};
use rustix::fd::{AsFd, OwnedFd};

/// What the guardian watches as its owner.
pub enum Owner {
    Process(Watched),
    Pipe(OwnedFd),
}

/// Resolves and arms the owner before anything starts. `me_start` is the
/// guardian's start: an owner that started later is a reused number, not the owner.
pub fn resolve(
    spec: &OwnerSpec,
    os: &mut MacOs,
    me_start: u64,
) -> Result<(Owner, OwnerRecord), RunError> {
    let process = |os: &mut MacOs, pid: i32, kind: OwnerKind, what: String| {
        let gone = |why: &str| RunError::OwnerGone(format!("{what}: {why}"));
        let facts = os.facts(pid).ok_or_else(|| gone("no such process"))?;
        if facts.start > me_start {
            return Err(gone("that pid names a process started after undertaker"));
        }
        let watched = Watched::arm(os, pid).map_err(|e| match e {
            OwnerGone::Missing => gone("it has exited"),
            OwnerGone::Replaced => gone("that pid now names another process"),
        })?;
        let record = OwnerRecord {
            kind,
            pid: Some(pid),
            starttime: Some(facts.start),
        };
        Ok((Owner::Process(watched), record))
    };
    match *spec {
        OwnerSpec::Parent => {
            let ppid = parent();
            if ppid <= 1 {
                // Reparented to launchd before we looked: the parent is gone.
                return Err(RunError::OwnerGone("parent (already reparented)".into()));
            }
            let armed = process(os, ppid, OwnerKind::Parent, format!("parent {ppid}"))?;
            // Armed on the number we read: still our parent, so the watch is on it.
            if parent() != ppid {
                return Err(RunError::OwnerGone(format!("parent {ppid}")));
            }
            Ok(armed)
        }
        OwnerSpec::Pid(pid) if pid <= 0 => Err(RunError::Usage(format!("invalid owner pid {pid}"))),
        OwnerSpec::Pid(pid) => process(os, pid, OwnerKind::Pid, format!("pid {pid}")),
        OwnerSpec::Fd(n) => {
            let usage = |why: String| RunError::Usage(format!("--owner-fd {n}: {why}"));
            let fd = sys::take_inherited_fd(n).map_err(|e| usage(e.to_string()))?;
            let kind = rustix::fs::fstat(&fd)
                .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode))
                .map_err(|e| usage(e.to_string()))?;
            if !matches!(
                kind,
                rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
            ) {
                return Err(usage(format!(
                    "fd {n} is not the read end of a pipe or a socket"
                )));
            }
            rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK)
                .map_err(|e| usage(e.to_string()))?;
            os.watch_readable(fd.as_fd())
                .map_err(|e| RunError::Setup(format!("watching fd {n}: {e}")))?;
            let mut owner = Owner::Pipe(fd);
            if owner.gone(os, &[]) {
                return Err(RunError::OwnerGone(format!("fd {n} is at end of file")));
            }
            let record = OwnerRecord {
                kind: OwnerKind::Fd,
                pid: None,
                starttime: None,
            };
            Ok((owner, record))
        }
    }
}

fn parent() -> i32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
}

impl Owner {
    /// True once the owner is provably gone. Data on the pipe is drained and ignored.
    pub fn gone(&mut self, os: &mut MacOs, wakes: &[Wake]) -> bool {
        match self {
            Owner::Process(watched) => watched.gone(os, wakes),
            Owner::Pipe(fd) => {
                let _ = os.take_readable(fd.as_fd());
                let mut buf = [0u8; 4096];
                loop {
                    match rustix::io::read(&*fd, &mut buf) {
                        Ok(0) => return true,
                        Ok(_) => continue,
                        Err(rustix::io::Errno::AGAIN) => return false,
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(_) => return true,
                    }
                }
            }
        }
    }

    /// The owner process's pid, when the owner is a process.
    pub fn pid(&self) -> Option<i32> {
        match self {
            Owner::Process(w) => Some(w.pid),
            Owner::Pipe(_) => None,
        }
    }
}
