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
use crate::linux::kernel::sys;
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
        FileType::Socket => sys::socket_peer_pid(fd).map(FarEnd::SocketCreator),
        _ => None,
    }
}

/// What an ancestor holds of one of undertaker's stdio ends.
enum Holds {
    /// The far end: the host.
    FarEnd,
    /// Only the end undertaker has, or (a socket) we cannot tell: a launcher that
    /// passed it down; the search goes on above it.
    OursOnly,
    /// Neither end.
    Nothing,
}

fn holds(procfs: &Procfs, pid: i32, end: &FarEnd) -> Holds {
    match *end {
        FarEnd::Pipe { inode, mode } => match procfs.pipe_ends(pid, inode) {
            Ok(modes) if modes.iter().any(|&m| m == mode || m == OFlags::RDWR.bits()) => {
                Holds::FarEnd
            }
            Ok(modes) if !modes.is_empty() => Holds::OursOnly,
            _ => Holds::Nothing,
        },
        FarEnd::SocketCreator(creator) if creator == pid => Holds::FarEnd,
        FarEnd::SocketCreator(_) => Holds::OursOnly,
    }
}

/// The index in `ancestors` (nearest first) of the host, and how it was found.
///
/// The search climbs only through launchers, which hold the ends undertaker has: an
/// ancestor holding no end of any of our stdio pipes did not pass them down (in
/// `producer | undertaker run …` the shell closed its copies; the writer is a
/// sibling), so no ancestor above it can be the host found through them, and the
/// search stops there, without reading every fd of every ancestor up to init.
fn find_host(procfs: &Procfs, ancestors: &[i32]) -> Option<(usize, HostEvidence)> {
    if ancestors.is_empty() {
        return None;
    }
    let ends: Vec<FarEnd> = [rustix::stdio::stdin(), rustix::stdio::stdout()]
        .into_iter()
        .filter_map(far_end)
        .collect();
    for (i, &pid) in ancestors.iter().take(MAX_HOPS).enumerate() {
        let mut passed_down = false;
        for end in &ends {
            match holds(procfs, pid, end) {
                Holds::FarEnd => return Some((i, HostEvidence::Stdio)),
                Holds::OursOnly => passed_down = true,
                Holds::Nothing => {}
            }
        }
        if !passed_down {
            break;
        }
    }
    Some((0, HostEvidence::Parent))
}

/// The host's record, proven: its start time is read while a pidfd pins it, then
/// every link between us and it is checked unchanged, so the number was our
/// ancestor's all along (an ancestor's number is never reused while it lives). Our
/// parent needs no pin: the ancestor walk's read of it, proven by our parent being
/// unchanged after it ([`Signaller::launch_parent`]), and the same check here.
fn prove(
    signaller: &Signaller,
    ancestors: &[i32],
    i: usize,
    found_by: HostEvidence,
) -> Option<HostRecord> {
    let procfs = signaller.procfs();
    let pid = ancestors[i];
    let parent = || rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if let Some(stat) = signaller.launch_parent().filter(|s| i == 0 && s.pid == pid) {
        return (parent() == Some(pid)).then(|| HostRecord {
            pid,
            starttime: stat.starttime,
            name: stat.comm.clone(),
            found_by,
        });
    }
    let pinned = PidRef::open(pid).ok()?;
    let stat = procfs.stat(pid).ok()?;
    // Asked after the read: the links it checks must hold once the start time is in.
    let chain_intact = parent() == Some(ancestors[0])
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

/// Most bytes of CMD's arguments recorded: `ps` reads every live record file, and a
/// person reads the start of a command line.
const MAX_COMMAND: usize = 4096;

/// CMD's arguments as text, cut (at a character boundary, marked "…") once they add
/// up to [`MAX_COMMAND`] bytes.
fn recorded_command(command: &[OsString]) -> Vec<String> {
    let mut left = MAX_COMMAND;
    let mut out = Vec::new();
    for arg in command {
        let arg = arg.to_string_lossy();
        if arg.len() <= left {
            left -= arg.len();
            out.push(arg.into_owned());
            continue;
        }
        let cut = (0..=left)
            .rev()
            .find(|&i| arg.is_char_boundary(i))
            .unwrap_or(0);
        out.push(format!("{}…", &arg[..cut]));
        break;
    }
    out
}

/// Who started this process (the one the host's launch made) and with what.
pub(crate) fn identify(signaller: &Signaller, command: &[OsString]) -> StartRecord {
    let me = signaller.me();
    let procfs = signaller.procfs();
    let found = find_host(procfs, &me.ancestors);
    let host = found.and_then(|(i, by)| prove(signaller, &me.ancestors, i, by));
    let host_child_pid = match found {
        Some((0, _)) => Some(me.pid),
        Some((i, _)) => Some(me.ancestors[i - 1]),
        None => None,
    };
    StartRecord {
        pid: Some(me.pid),
        host_child_pid: host.as_ref().and(host_child_pid),
        host,
        command: recorded_command(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_command_is_cut_at_a_character_boundary() {
        let short: Vec<OsString> = vec!["sh".into(), "-c".into(), "exit 0".into()];
        assert_eq!(recorded_command(&short), ["sh", "-c", "exit 0"]);
        let long: Vec<OsString> = vec!["node".into(), "é".repeat(MAX_COMMAND).into(), "x".into()];
        let got = recorded_command(&long);
        assert_eq!(got.len(), 2);
        assert!(got[1].ends_with('…'));
        assert!(got.iter().map(String::len).sum::<usize>() <= MAX_COMMAND + "…".len());
    }
}
