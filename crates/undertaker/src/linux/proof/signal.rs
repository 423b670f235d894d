//! The only code in undertaker that delivers signals.
//!
//! A signal needs a [`ProvenProcess`]: a pidfd opened *before* the identity was read,
//! plus the evidence that ties that identity to a guarded tree. Signals then go
//! through the pidfd, so they can never hit whoever reuses the number of a process
//! that exits after the proof was made. Once reaped, the send yields "already gone";
//! a zombie (exited, not reaped) takes the signal as `Delivered`, harmlessly: it is
//! discarded, and the zombie pins its number. What cannot be proven comes back as a
//! typed [`Refusal`].

pub(crate) use crate::audit::{Delivery, Proof};
use crate::escalation::Sig;

impl From<Sig> for Signal {
    fn from(sig: Sig) -> Self {
        match sig {
            Sig::Term => Signal::TERM,
            Sig::Cont => Signal::CONT,
            Sig::Kill => Signal::KILL,
        }
    }
}
use crate::identity::Identity;
use crate::ladder::{self, LiveFacts, Refusal, SelfFacts};
use crate::linux::kernel::poll::readable_now;
use crate::linux::kernel::procfs::{ProcError, Procfs};
use crate::linux::kernel::sys;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::process::{Pid, Signal};

/// A process we hold a pidfd to and have proven to be a member of a guarded tree.
#[derive(Debug)]
pub struct ProvenProcess {
    fd: OwnedFd,
    pub identity: Identity,
    pub ppid: i32,
    pub state: char,
    pub proof: Proof,
}

impl ProvenProcess {
    pub fn pid(&self) -> i32 {
        self.identity.pid
    }

    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// True once the process has exited (zombie or reaped): its pidfd polls readable.
    pub fn has_exited(&self) -> bool {
        readable_now(self.fd.as_fd())
    }

    /// The same proven process through a second pidfd (a pidfd names one process for
    /// its whole life, so the proof carries over).
    pub fn try_clone(&self) -> Option<Self> {
        Some(Self {
            fd: self.fd.try_clone().ok()?,
            identity: self.identity.clone(),
            ppid: self.ppid,
            state: self.state,
            proof: self.proof.clone(),
        })
    }
}

/// Why a candidate was not proven: it is gone (nothing to do), or it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotProven {
    Gone,
    Refused(Refusal),
}

impl From<Refusal> for NotProven {
    fn from(r: Refusal) -> Self {
        NotProven::Refused(r)
    }
}

/// What one look at a tree found: every candidate either proven a member or refused
/// with the reason. Candidates that were gone by the time they were looked at are in
/// neither list.
#[derive(Debug, Default)]
pub struct Members {
    pub proven: Vec<ProvenProcess>,
    pub refused: Vec<(i32, Refusal)>,
}

impl Members {
    /// Proves each of `pids` with `prove` and sorts the results.
    pub fn collect(
        pids: impl IntoIterator<Item = i32>,
        mut prove: impl FnMut(i32) -> Result<ProvenProcess, NotProven>,
    ) -> Self {
        let mut members = Members::default();
        for pid in pids {
            members.add(pid, prove(pid));
        }
        members
    }

    /// Files one candidate's result: proven, refused, or (gone) dropped.
    pub fn add(&mut self, pid: i32, result: Result<ProvenProcess, NotProven>) {
        match result {
            Ok(p) => self.proven.push(p),
            Err(NotProven::Gone) => {}
            Err(NotProven::Refused(r)) => self.refused.push((pid, r)),
        }
    }

    /// Adds `other`'s members, skipping processes already proven here.
    pub fn merge(&mut self, other: Members) {
        for p in other.proven {
            if !self.proven.iter().any(|q| q.pid() == p.pid()) {
                self.proven.push(p);
            }
        }
        self.refused.extend(other.refused);
    }
}

/// A process whose pidfd was opened before its identity was read, not yet proven a
/// member of anything: each `prove_*` adds its own evidence, then [`Opened::proven`].
struct Opened {
    fd: OwnedFd,
    live: LiveFacts,
    identity: Identity,
    state: char,
    info: Option<sys::PidfdInfo>,
}

impl Opened {
    fn proven(self, proof: Proof) -> ProvenProcess {
        ProvenProcess {
            fd: self.fd,
            identity: self.identity,
            ppid: self.live.ppid,
            state: self.state,
            proof,
        }
    }
}

/// Gathers proofs and delivers signals on behalf of one undertaker process.
#[derive(Debug, Clone)]
pub struct Signaller {
    me: SelfFacts,
    procfs: Procfs,
    /// The process group the host started undertaker in. The guardian runs in a
    /// group of its own (see `commands::sentinel`), but the terminal is handed to CMD
    /// only from this group, and back to it at the end.
    host_pgrp: i32,
    /// Our own /proc stat, read at most once (see [`Signaller::own_stat`]).
    own_stat: std::sync::OnceLock<Box<crate::linux::kernel::procfs::Stat>>,
    /// See [`Signaller::launch_parent`].
    launch_parent: Option<Box<crate::linux::kernel::procfs::Stat>>,
}

impl Signaller {
    /// Reads our own pid, real process group, uid, ancestors (our parent's stat, the
    /// links above it through pidfds where the kernel tells them) and boot id.
    pub fn for_current_process(procfs: Procfs) -> Result<Self, ProcError> {
        // Our own facts come from system calls: no /proc read on `run`'s start path
        // for what the kernel tells directly (issue 30).
        use rustix::process::{getpid, getppid, getuid};
        let pid = getpid().as_raw_nonzero().get();
        let pgrp = crate::linux::kernel::sys::process_group();
        let uid = getuid().as_raw();
        let parent_now = || getppid().map_or(0, |p| p.as_raw_nonzero().get());
        let mut ancestors = Vec::new();
        let mut parent = None;
        let mut cursor = parent_now();
        let mut pidfd_info = true;
        while cursor > 0 && ancestors.len() < 4096 {
            ancestors.push(cursor);
            // Above our parent only the parent links are needed.
            if ancestors.len() > 1 {
                if let Some(ppid) = parent_by_pidfd(cursor, &mut pidfd_info) {
                    cursor = ppid;
                    continue;
                }
            }
            match procfs.stat(cursor) {
                Ok(s) => {
                    cursor = s.ppid;
                    if ancestors.len() == 1 {
                        parent = Some(Box::new(s));
                    }
                }
                Err(_) => break,
            }
        }
        // Still our parent after the read, so the stat was its own: a number is
        // never reused while its process is our parent.
        let launch_parent = parent.filter(|s| s.pid == parent_now());
        let boot_id = procfs.boot_id()?;
        Ok(Self {
            me: SelfFacts {
                pid,
                pgrp,
                uid,
                ancestors,
                owner_line: Vec::new(),
                boot_id,
                protected_groups: Vec::new(),
            },
            procfs,
            host_pgrp: pgrp,
            own_stat: std::sync::OnceLock::new(),
            launch_parent,
        })
    }

    /// The same facts for a child this process forked (no exec) that then moved into
    /// its own process group: its parent, this process, joins the ancestors. Reads
    /// nothing from /proc.
    pub fn for_forked_child(&self) -> Self {
        let mut me = self.me.clone();
        me.ancestors.insert(0, me.pid);
        me.pid = rustix::process::getpid().as_raw_nonzero().get();
        me.pgrp = rustix::process::getpgrp().as_raw_nonzero().get();
        Self {
            me,
            procfs: self.procfs.clone(),
            host_pgrp: self.host_pgrp,
            own_stat: std::sync::OnceLock::new(),
            launch_parent: self.launch_parent.clone(),
        }
    }

    /// The /proc stat of the parent of the process the host started (the first
    /// undertaker process; a forked child keeps its parent's), as the ancestor walk
    /// read it at start, proven that parent's: it still was after the read. Start-up
    /// records the host and the owner from it instead of reading it again. Fields the
    /// parent may change (its group, its own parent) must not be taken from it later.
    pub fn launch_parent(&self) -> Option<&crate::linux::kernel::procfs::Stat> {
        self.launch_parent.as_deref()
    }

    /// Our own /proc stat, read once per process: the start-up path asks for our
    /// start time (the record, the tree cgroup's name) and controlling terminal
    /// (CMD's session), which never change. Fields we change ourselves (the process
    /// group) must not be read from it.
    pub fn own_stat(&self) -> Result<crate::linux::kernel::procfs::Stat, ProcError> {
        if let Some(stat) = self.own_stat.get() {
            return Ok((**stat).clone());
        }
        let stat = self.procfs.stat(self.me.pid)?;
        Ok((**self.own_stat.get_or_init(|| Box::new(stat))).clone())
    }

    /// Protects `owner` and its ancestors like our own (see `SelfFacts::owner_line`).
    /// Our own ancestors are protected already and are not repeated.
    pub fn protect_owner(&mut self, owner: i32) {
        let mut cursor = owner;
        while cursor > 1 && self.me.owner_line.len() < 4096 {
            if cursor == self.me.pid || self.me.ancestors.contains(&cursor) {
                break;
            }
            self.me.owner_line.push(cursor);
            match self.procfs.stat(cursor) {
                Ok(s) => cursor = s.ppid,
                Err(_) => break,
            }
        }
    }

    /// The process group the host started undertaker in.
    pub fn host_pgrp(&self) -> i32 {
        self.host_pgrp
    }

    pub fn me(&self) -> &SelfFacts {
        &self.me
    }

    pub fn procfs(&self) -> &Procfs {
        &self.procfs
    }

    /// Opens a pidfd for `pid`, then reads its identity. The order matters: the
    /// identity read afterwards can be trusted once the pidfd is seen still alive.
    ///
    /// Also returns what PIDFD_GET_INFO said (read before the liveness check), so
    /// provers need not ask the kernel again.
    #[allow(clippy::type_complexity)]
    fn open_then_read(&self, pid: i32) -> Result<Opened, NotProven> {
        ladder::check_pid(&self.me, pid)?;
        Pid::from_raw(pid).ok_or(Refusal::InvalidPid { pid })?;
        let fd = sys::pidfd_open(pid).map_err(|e| {
            if e.raw_os_error() == Some(libc::ESRCH) {
                NotProven::Gone
            } else {
                NotProven::Refused(Refusal::IdentityMissing { pid })
            }
        })?;
        self.read_opened(pid, fd)
    }

    /// Reads the identity of the process `fd` (a pidfd) names, numbered `pid` here.
    fn read_opened(&self, pid: i32, fd: OwnedFd) -> Result<Opened, NotProven> {
        let stat = self.procfs.stat(pid).map_err(|_| NotProven::Gone)?;
        let info = sys::pidfd_get_info(fd.as_fd()).map_err(|_| NotProven::Gone)?;
        let (ppid, uid) = match info {
            Some(info) => (info.ppid, info.ruid),
            None => (
                stat.ppid,
                self.procfs.real_uid(pid).map_err(|_| NotProven::Gone)?,
            ),
        };
        // Still alive after the reads: the /proc data described the pidfd's process.
        if readable_now(fd.as_fd()) {
            return Err(NotProven::Gone);
        }
        let live = LiveFacts {
            pid,
            ppid,
            pgid: stat.pgrp,
            uid,
            starttime: stat.starttime,
        };
        let identity = Identity {
            boot_id: self.me.boot_id.clone(),
            pid,
            starttime: stat.starttime,
            pgid: stat.pgrp,
            sid: stat.session,
            uid,
            pidfs_inode: pidfs_inode(fd.as_fd()),
        };
        Ok(Opened {
            fd,
            live,
            identity,
            state: stat.state,
            info,
        })
    }

    /// Sends `sig` to one proven process through its pidfd.
    pub fn signal(&self, target: &ProvenProcess, sig: Signal) -> Result<Delivery, Refusal> {
        ladder::check_pid(&self.me, target.pid())?;
        match rustix::process::pidfd_send_signal(target.fd.as_fd(), sig) {
            Ok(()) => Ok(Delivery::Delivered),
            Err(rustix::io::Errno::SRCH) => Ok(Delivery::AlreadyGone),
            Err(e) => Err(Refusal::NotOurs {
                pid: target.pid(),
                why: format!("kernel refused: {e}"),
            }),
        }
    }

    /// Sends `sig` to our own child through the pidfd opened before anything could
    /// reap it: the number cannot have been reused while the child was unreaped.
    pub fn signal_own_child(&self, child_pidfd: BorrowedFd<'_>, sig: Signal) -> Delivery {
        match rustix::process::pidfd_send_signal(child_pidfd, sig) {
            Ok(()) => Delivery::Delivered,
            Err(_) => Delivery::AlreadyGone,
        }
    }

    /// Sends `sig` to the process group a proven leader leads, through the leader's
    /// pidfd (`PIDFD_SIGNAL_PROCESS_GROUP`, Linux ≥ 6.9): the kernel resolves the group
    /// from the process, not from a number, so a recycled pgid cannot be hit. Older
    /// kernels get `LeaderNotPinned`; callers then signal members one by one.
    pub fn signal_group(&self, leader: &ProvenProcess, sig: Signal) -> Result<Delivery, Refusal> {
        let pgid = leader.identity.pgid;
        ladder::check_group(
            &self.me,
            pgid,
            &LiveFacts {
                pid: leader.pid(),
                ppid: leader.ppid,
                pgid,
                uid: leader.identity.uid,
                starttime: leader.identity.starttime,
            },
        )?;
        match sys::pidfd_send_signal_to_group(leader.fd.as_fd(), sig.as_raw()) {
            Ok(()) => Ok(Delivery::Delivered),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(Delivery::AlreadyGone),
            Err(_) => Err(Refusal::LeaderNotPinned { pgid }),
        }
    }
}

/// The pid (in our namespace) of the process a pidfd names; `Some(-1)` or `Some(0)`
/// when it exited; `None` when `fd` is not a pidfd.
fn pidfd_pid(fd: BorrowedFd<'_>) -> Option<i32> {
    match sys::pidfd_get_info(fd) {
        Ok(Some(info)) => return Some(info.pid),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Some(-1),
        Err(_) => return None,
        Ok(None) => {}
    }
    use std::os::fd::AsRawFd;
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `pid`'s parent (0 outside our PID namespace) as `PIDFD_GET_INFO` tells it (Linux
/// 6.13): the same `real_parent` as `/proc/PID/stat`'s field without the kernel
/// formatting the file (0.6 us against 2 us a call here). `None` when it cannot tell
/// (`supported` turns false on an older kernel, and the walk reads stat from then on),
/// or the process is exiting: `/proc` still shows an exiting process's parent.
fn parent_by_pidfd(pid: i32, supported: &mut bool) -> Option<i32> {
    if !*supported {
        return None;
    }
    let fd = sys::pidfd_open(pid).ok()?;
    match sys::pidfd_get_info(fd.as_fd()) {
        Ok(Some(info)) if info.pid == pid => Some(info.ppid),
        Ok(None) => {
            *supported = false;
            None
        }
        _ => None,
    }
}

/// Proof that this process is PID 1 of a PID namespace it created for one tree: only
/// `pidns` builds it, in the child of the namespace-creating fork.
#[derive(Debug)]
pub struct NamespaceInit {
    _private: (),
}

impl NamespaceInit {
    /// `None` unless we really are PID 1 (of the namespace we were just forked into).
    pub(crate) fn after_fork_into_new_namespace() -> Option<Self> {
        (rustix::process::getpid().as_raw_nonzero().get() == 1).then_some(Self { _private: () })
    }
}

/// Sends `sig` to every process of the namespace we are init of (`kill(-1, sig)`).
///
/// Justification: `kill(-1)` reaches every process the caller may signal in its own
/// PID namespace and below. As PID 1 of a namespace created for this one tree, that
/// set is exactly the tree: nothing else was ever in the namespace, and processes of
/// outer namespaces are not visible from it. The [`NamespaceInit`] token can only exist
/// in that situation, so this cannot run in the host's namespace.
pub fn signal_whole_namespace(_init: &NamespaceInit, sig: Signal) -> Delivery {
    match sys::kill_all_visible(sig.as_raw()) {
        Ok(()) => Delivery::Delivered,
        Err(_) => Delivery::AlreadyGone,
    }
}

/// A process's serial for the portable tier: its pidfs inode (never reused within a
/// boot), or, before Linux 6.9, its start time and pid together (unique unless the
/// whole pid space wraps within one clock tick).
pub(crate) fn serial_of(identity: &Identity) -> u64 {
    identity
        .pidfs_inode
        .unwrap_or((identity.starttime << 22) | identity.pid as u64)
}

pub(crate) fn pidfs_inode(fd: BorrowedFd<'_>) -> Option<u64> {
    /// `PID_FS_MAGIC` from linux/magic.h: pidfds are pidfs inodes since Linux 6.9.
    const PID_FS_MAGIC: i64 = 0x5049_4446;
    // Every pidfd of a boot lives on the same filesystem: ask once, not per process.
    static ON_PIDFS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on_pidfs = *ON_PIDFS.get_or_init(|| {
        // f_type is a signed word whose width varies by architecture.
        #[allow(clippy::unnecessary_cast)]
        rustix::fs::fstatfs(fd).is_ok_and(|fs| fs.f_type as i64 == PID_FS_MAGIC)
    });
    if !on_pidfs {
        return None;
    }
    rustix::fs::fstat(fd).ok().map(|st| st.st_ino)
}

#[cfg(test)]
mod tests;

mod proofs;

mod by_snapshot;
