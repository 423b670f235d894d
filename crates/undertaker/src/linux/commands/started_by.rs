//! Who started this `undertaker run`: the host a person knows (an agent, a shell),
//! found behind any launcher (`npx`, `uvx`, `sh -c`) between it and undertaker, and
//! proven at start (docs/GUARANTEES.md, "Which host a tree belongs to").
//!
//! A host that talks to its server over undertaker's stdin and stdout made those
//! pipes (or socket pair) and kept their far ends: the write end of our stdin, the
//! read end of our stdout. A launcher only inherits the ends undertaker has, so the
//! nearest ancestor holding a far end is the host however many launchers sit
//! between. When stdio are no pipe or socket, or no ancestor holds a far end (in a
//! shell pipeline the other side is a sibling), the host is undertaker's parent.

use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::registry::{HostEvidence, HostRecord, StartRecord};
use rustix::fd::BorrowedFd;
use rustix::fs::{FileType, OFlags};
use std::ffi::OsString;

/// How far up the search goes: launchers nest a few deep (`npx` → `npm exec` → a
/// shell), never dozens.
const MAX_HOPS: usize = 8;

/// What a host holds of undertaker's stdio.
enum FarEnd {
    /// Pipe `inode`, opened with access mode `mode` (the other direction than ours).
    Pipe { inode: u64, mode: u32 },
    /// A socket pair's creator (`SO_PEERCRED`), as a pid in our namespace.
    SocketCreator(i32),
}

fn far_end(fd: BorrowedFd<'_>) -> Option<FarEnd> {
    let st = rustix::fs::fstat(fd).ok()?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Fifo => {
            let ours = rustix::fs::fcntl_getfl(fd).ok()? & OFlags::RWMODE;
            let mode = if ours == OFlags::RDONLY {
                OFlags::WRONLY
            } else if ours == OFlags::WRONLY {
                OFlags::RDONLY
            } else {
                return None;
            };
            Some(FarEnd::Pipe {
                inode: st.st_ino,
                mode: mode.bits(),
            })
        }
        FileType::Socket => {
            let cred = rustix::net::sockopt::socket_peercred(fd).ok()?;
            let pid = cred.pid.as_raw_nonzero().get();
            Some(FarEnd::SocketCreator(pid))
        }
        _ => None,
    }
}

fn holds(procfs: &Procfs, pid: i32, end: &FarEnd) -> bool {
    match *end {
        FarEnd::Pipe { inode, mode } => procfs
            .pipe_ends(pid, inode)
            .is_ok_and(|modes| modes.iter().any(|&m| m == mode || m == OFlags::RDWR.bits())),
        FarEnd::SocketCreator(creator) => creator == pid,
    }
}

/// The index in `ancestors` (nearest first) of the host, and how it was found.
fn find_host(procfs: &Procfs, ancestors: &[i32]) -> Option<(usize, HostEvidence)> {
    if ancestors.is_empty() {
        return None;
    }
    let ends: Vec<FarEnd> = [rustix::stdio::stdin(), rustix::stdio::stdout()]
        .into_iter()
        .filter_map(far_end)
        .collect();
    if !ends.is_empty() {
        let found = (ancestors.iter().take(MAX_HOPS))
            .position(|&pid| ends.iter().any(|end| holds(procfs, pid, end)));
        if let Some(i) = found {
            return Some((i, HostEvidence::Stdio));
        }
    }
    Some((0, HostEvidence::Parent))
}

/// The host's record, proven: its start time is read while a pidfd pins it, then
/// every link between us and it is checked unchanged, so the number was our
/// ancestor's all along (an ancestor's number is never reused while it lives).
fn prove(
    procfs: &Procfs,
    ancestors: &[i32],
    i: usize,
    found_by: HostEvidence,
) -> Option<HostRecord> {
    let pid = ancestors[i];
    let pinned = PidRef::open(pid).ok()?;
    let stat = procfs.stat(pid).ok()?;
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    let chain_intact = parent == Some(ancestors[0])
        && (0..i).all(|k| {
            procfs
                .stat(ancestors[k])
                .is_ok_and(|s| s.ppid == ancestors[k + 1])
        });
    (chain_intact && !pinned.exited()).then_some(HostRecord {
        pid,
        starttime: stat.starttime,
        name: stat.comm,
        found_by,
    })
}

/// Who started this process (the one the host's launch made) and with what.
pub(crate) fn identify(signaller: &Signaller, command: &[OsString]) -> StartRecord {
    let me = signaller.me();
    let procfs = signaller.procfs();
    let found = find_host(procfs, &me.ancestors);
    let host = found.and_then(|(i, by)| prove(procfs, &me.ancestors, i, by));
    let host_child_pid = match found {
        Some((0, _)) => Some(me.pid),
        Some((i, _)) => Some(me.ancestors[i - 1]),
        None => None,
    };
    StartRecord {
        pid: Some(me.pid),
        host_child_pid: host.as_ref().and(host_child_pid),
        host,
        command: (command.iter())
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
    }
}
