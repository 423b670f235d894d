//! The owner watch on Windows: a handle to the owner process, proven to be the owner
//! by its creation time being before ours (a process created after us cannot be our
//! parent, nor the owner named on our command line), or an inherited pipe whose end
//! of file says the owner is gone.

use crate::registry::{OwnerKind, OwnerRecord};
use crate::windows::kernel::sys;
use crate::{OwnerSpec, RunError};
use std::io::Read;
use std::os::windows::io::{AsHandle, BorrowedHandle, OwnedHandle};

/// What the guardian waits on for the owner's death.
#[derive(Debug)]
pub enum Owner {
    /// The owner's process handle: signalled when it exits.
    Process(OwnedHandle),
    /// An event a reader thread sets at the pipe's end of file.
    Pipe(OwnedHandle),
    /// Started from outside Windows (no Windows parent, as under Wine from a Linux
    /// shell): nothing to watch; the job still dies with undertaker.
    Unwatched,
}

impl Owner {
    /// The handle to wait on, if any.
    pub fn waitable(&self) -> Option<BorrowedHandle<'_>> {
        match self {
            Owner::Process(h) | Owner::Pipe(h) => Some(h.as_handle()),
            Owner::Unwatched => None,
        }
    }
}

/// Resolves and proves the owner before CMD exists. An owner already gone is
/// [`RunError::OwnerGone`]; a bad `--owner-fd` is a usage error.
pub fn resolve(spec: &OwnerSpec) -> Result<(Owner, OwnerRecord), RunError> {
    let me =
        sys::own_creation_time().map_err(|e| RunError::Setup(format!("own creation time: {e}")))?;
    match *spec {
        OwnerSpec::Parent => {
            let ppid =
                sys::parent_pid().map_err(|e| RunError::Setup(format!("parent pid: {e}")))?;
            if ppid == 0 {
                tracing::warn!(
                    "no Windows parent process: the owner is not watched (use --owner-fd)"
                );
                let record = OwnerRecord {
                    kind: OwnerKind::None,
                    pid: None,
                    starttime: None,
                };
                return Ok((Owner::Unwatched, record));
            }
            let (h, started) = open_proven(ppid, me)?;
            Ok((Owner::Process(h), record(OwnerKind::Parent, ppid, started)))
        }
        OwnerSpec::Pid(pid) => {
            let pid = u32::try_from(pid)
                .map_err(|_| RunError::Usage(format!("--owner {pid}: not a pid")))?;
            let (h, started) = open_proven(pid, me)?;
            Ok((Owner::Process(h), record(OwnerKind::Pid, pid, started)))
        }
        OwnerSpec::Fd(value) => {
            let pipe = sys::inherited_handle(value).map_err(|e| {
                RunError::Usage(format!("--owner-fd {value}: not an open handle: {e}"))
            })?;
            if !sys::is_pipe(pipe.as_handle()) {
                return Err(RunError::Usage(format!("--owner-fd {value}: not a pipe")));
            }
            let gone =
                sys::create_event(None).map_err(|e| RunError::Setup(format!("event: {e}")))?;
            let signal = gone
                .try_clone()
                .map_err(|e| RunError::Setup(format!("event: {e}")))?;
            std::thread::Builder::new()
                .name("owner-pipe".into())
                .spawn(move || {
                    let mut pipe = std::fs::File::from(pipe);
                    let mut buf = [0u8; 64];
                    // Data is ignored; end of file or a broken pipe is the owner's death.
                    while matches!(pipe.read(&mut buf), Ok(n) if n > 0) {}
                    let _ = sys::set_event(signal.as_handle());
                })
                .map_err(|e| RunError::Setup(format!("owner thread: {e}")))?;
            let record = OwnerRecord {
                kind: OwnerKind::Fd,
                pid: None,
                starttime: None,
            };
            Ok((Owner::Pipe(gone), record))
        }
    }
}

fn record(kind: OwnerKind, pid: u32, started: u64) -> OwnerRecord {
    OwnerRecord {
        kind,
        pid: Some(pid as i32),
        starttime: Some(started),
    }
}

/// Opens `pid` and proves it existed before us and is still running.
fn open_proven(pid: u32, me: u64) -> Result<(OwnedHandle, u64), RunError> {
    let gone = |why: String| RunError::OwnerGone(format!("pid {pid}: {why}"));
    let h = sys::open_process(pid, sys::Access::Watch).map_err(|e| gone(e.to_string()))?;
    let started = sys::creation_time(h.as_handle()).map_err(|e| gone(e.to_string()))?;
    if started > me {
        return Err(gone(
            "that pid now names a process created after undertaker".into(),
        ));
    }
    if sys::exit_code(h.as_handle()).is_some() {
        return Err(gone("it has exited".into()));
    }
    Ok((h, started))
}
