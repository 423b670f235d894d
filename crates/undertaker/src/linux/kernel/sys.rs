//! The only module with `unsafe`: the few kernel interfaces rustix does not wrap.
//!
//! Every function here is a thin, audited wrapper around one syscall or ioctl. Callers
//! never see raw pointers; errors come back as `std::io::Error`.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

mod child;
mod heap;
mod memory;
pub use child::{
    detach_guardian, fork_guardian, fork_into_new_pid_namespace, install_child_setup,
    reclaim_foreground, spawn_into_cgroup, ExecSpec, Forked, CGROUP_JOIN_FAILED,
};
pub use heap::DlmallocHeap;
pub use memory::{settle_code, settle_heap, settle_idle};

/// `PIDFD_SIGNAL_PROCESS_GROUP` from linux/pidfd.h (Linux 6.9).
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 1 << 2;

/// The crate's one `pidfd_open`; sound only for a number that cannot have been reused
/// yet (our unreaped child) or a process proven afterwards through the pidfd.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    use rustix::process::{Pid, PidfdFlags};
    let raw = Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    Ok(rustix::process::pidfd_open(raw, PidfdFlags::empty())?)
}

/// Sends `sig` to the process group whose id is the pid behind `pidfd`.
///
/// The kernel resolves the group from the pidfd's process, so a recycled number can
/// never be hit. Fails with EINVAL on kernels before 6.9 and ESRCH if the group is empty.
pub fn pidfd_send_signal_to_group(pidfd: BorrowedFd<'_>, sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall with a valid fd, a null siginfo (allowed) and a flag word.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            PIDFD_SIGNAL_PROCESS_GROUP,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What `PIDFD_GET_INFO` reports about a pidfd's process (Linux 6.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidfdInfo {
    pub pid: i32,
    pub ppid: i32,
    pub ruid: u32,
    /// cgroup v2 id, when the kernel filled it in.
    pub cgroup_id: Option<u64>,
}

/// Layout of `struct pidfd_info`, version 0 (64 bytes), from linux/pidfd.h.
#[repr(C)]
#[derive(Default)]
struct RawPidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

const PIDFD_INFO_PID: u64 = 1 << 0;
const PIDFD_INFO_CREDS: u64 = 1 << 1;
const PIDFD_INFO_CGROUPID: u64 = 1 << 2;
/// `_IOWR(0xFF, 11, struct pidfd_info)` with the version-0 size.
const PIDFD_GET_INFO: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<RawPidfdInfo>() as libc::c_ulong) << 16) | (0xFF << 8) | 11;

/// Reads pid, ppid and real uid of a live pidfd's process atomically, without /proc.
///
/// `Ok(None)` when the kernel predates `PIDFD_GET_INFO`; ESRCH when the process is gone.
pub fn pidfd_get_info(pidfd: BorrowedFd<'_>) -> io::Result<Option<PidfdInfo>> {
    let mut raw = RawPidfdInfo {
        mask: PIDFD_INFO_PID | PIDFD_INFO_CREDS | PIDFD_INFO_CGROUPID,
        ..Default::default()
    };
    // SAFETY: the ioctl writes at most size_of::<RawPidfdInfo>() bytes (encoded in the
    // request number) into `raw`, which lives for the whole call.
    let rc = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO as _,
            &mut raw as *mut RawPidfdInfo,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOTTY) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(err),
        };
    }
    if raw.mask & PIDFD_INFO_PID == 0 || raw.mask & PIDFD_INFO_CREDS == 0 {
        return Ok(None);
    }
    Ok(Some(PidfdInfo {
        pid: raw.pid as i32,
        ppid: raw.ppid as i32,
        ruid: raw.ruid,
        cgroup_id: (raw.mask & PIDFD_INFO_CGROUPID != 0).then_some(raw.cgroupid),
    }))
}

/// The signals the guardian consumes through a signalfd instead of handlers.
pub struct BlockedSignals {
    previous: libc::sigset_t,
    fd: OwnedFd,
}

impl BlockedSignals {
    /// Blocks `signals` for this thread and opens a non-blocking, close-on-exec
    /// signalfd for them. `install_child_setup` gives children an empty mask back.
    pub fn new(signals: &[i32]) -> io::Result<Self> {
        // SAFETY: sigset_t is plain data initialised by sigemptyset before use; the
        // pointers passed are to locals that outlive the calls.
        unsafe {
            let mut set = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(set.as_mut_ptr());
            let mut set = set.assume_init();
            for &sig in signals {
                if libc::sigaddset(&mut set, sig) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, previous.as_mut_ptr());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            let previous = previous.assume_init();
            let raw = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
            if raw < 0 {
                let err = io::Error::last_os_error();
                libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
                return Err(err);
            }
            Ok(Self {
                previous,
                fd: OwnedFd::from_raw_fd(raw),
            })
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Reads every pending signal number without blocking. The kernel fills a read
    /// with as many pending signals as fit and stops short only when none is left, so
    /// a read that is not full ends the drain without a last read that finds nothing
    /// (one system call less per wake-up, on the exit path of both processes).
    pub fn drain(&self) -> io::Result<Vec<i32>> {
        const BATCH: usize = 16;
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let mut out = Vec::new();
        loop {
            let mut infos = [MaybeUninit::<libc::signalfd_siginfo>::uninit(); BATCH];
            // SAFETY: reads at most `BATCH * size` bytes into `infos`, which is exactly
            // that big.
            let n =
                unsafe { libc::read(self.fd.as_raw_fd(), infos.as_mut_ptr().cast(), BATCH * size) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::WouldBlock {
                    return Ok(out);
                }
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            let whole = n as usize / size;
            for info in &infos[..whole] {
                // SAFETY: the kernel filled the first `whole` structs entirely.
                let info = unsafe { info.assume_init_ref() };
                out.push(info.ssi_signo as i32);
            }
            if whole < BATCH {
                return Ok(out);
            }
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// The real-time signals programs may use (glibc keeps the first two or three).
pub fn realtime_signals() -> (i32, i32) {
    (libc::SIGRTMIN(), libc::SIGRTMAX())
}

/// Any valid signal number as a rustix `Signal`, real-time ones included (rustix
/// names only the classic ones).
pub fn any_signal(sig: i32) -> Option<rustix::process::Signal> {
    let (rt_min, rt_max) = realtime_signals();
    if let Some(named) = rustix::process::Signal::from_named_raw(sig) {
        return Some(named);
    }
    // SAFETY: a real-time signal number in the range the C library reports free.
    (rt_min..=rt_max)
        .contains(&sig)
        .then(|| unsafe { rustix::process::Signal::from_raw_unchecked(sig) })
}

/// Sets `sig` back to its default action if it is ignored (as inherited).
pub fn reset_if_ignored(sig: i32) {
    // SAFETY: sigaction with a null new action only reads; the second call installs
    // SIG_DFL, which needs no handler memory.
    unsafe {
        let mut old = MaybeUninit::<libc::sigaction>::zeroed();
        if libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) == 0
            && old.assume_init().sa_sigaction == libc::SIG_IGN
        {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// Ignores `sig` in this process (children get the default back in `prepare_child`).
pub fn ignore(sig: i32) {
    // SAFETY: installs SIG_IGN; no handler memory involved.
    unsafe {
        libc::signal(sig, libc::SIG_IGN);
    }
}

/// Borrows a raw fd number the caller was told to watch (`--owner-fd N`), after
/// checking it is open. The returned fd is owned: the guardian becomes its only user.
pub fn take_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only inspects the descriptor table.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is open (checked above) and nothing else in this process owns it:
    // it was inherited and is named only by the command line.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Keep it away from CMD: the tree must not hold the owner's pipe.
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)?;
    Ok(owned)
}

/// `kill(-1, sig)`: every process the caller may signal, except itself. Only
/// `signal::signal_whole_namespace` calls this, and only as PID 1 of a namespace that
/// holds nothing but the guarded tree.
pub(crate) fn kill_all_visible(sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall.
    let rc = unsafe { libc::kill(-1, sig) };
    (rc == 0).then_some(()).ok_or_else(io::Error::last_os_error)
}

/// Our process group id; 0 when the group lives outside our PID namespace (what
/// /proc/self/stat shows then too, and which rustix's `getpgrp` refuses).
pub fn process_group() -> i32 {
    // SAFETY: plain syscall without arguments.
    unsafe { libc::getpgrp() }
}

/// Ends a forked child at once: no atexit handlers, no flushing of buffers that
/// belong to the parent's copy of stdio.
pub fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// The pid `SO_PEERCRED` gives for `fd`: a connected Unix socket's peer when it
/// connected, or for a socket pair the process that made it. `None` when the kernel
/// has no pid to give (0: not a Unix socket, or a peer outside our PID namespace),
/// which rustix's `UCred` (a non-zero `Pid`) cannot hold.
pub(crate) fn socket_peer_pid(fd: BorrowedFd<'_>) -> Option<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes; the kernel writes at most `len`
    // bytes and stores the length it wrote.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    let whole = len as usize == std::mem::size_of::<libc::ucred>();
    (rc == 0 && whole && cred.pid > 0).then_some(cred.pid)
}

/// `statmount(2)` (Linux 6.8; one number on every architecture undertaker builds for).
const SYS_STATMOUNT: libc::c_long = 457;
const STATMOUNT_SB_BASIC: u64 = 0x1;
const STATMOUNT_MNT_ROOT: u64 = 0x8;
/// `struct statmount`'s size, the same in every kernel since 6.8 (new fields take
/// spare room): the strings follow it.
const STATMOUNT_HEADER: usize = 512;

/// What `statmount(2)` reports of one mount: its filesystem's magic number and the
/// directory of the filesystem it shows at its root, as mountinfo's fourth field
/// (unescaped) prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountRoot {
    pub magic: u64,
    pub root: String,
}

/// `statmount(2)` of the mount with unique id `mnt_id` (statx's `STATX_MNT_ID_UNIQUE`):
/// its superblock's magic and its root. An error when the kernel has no statmount, a
/// filter refuses it or the root does not fit 4 KiB: the caller reads mountinfo then.
pub fn statmount_root(mnt_id: u64) -> io::Result<MountRoot> {
    /// `struct mnt_id_req`, version 0.
    #[repr(C)]
    struct Request {
        size: u32,
        spare: u32,
        mnt_id: u64,
        param: u64,
    }
    let req = Request {
        size: std::mem::size_of::<Request>() as u32,
        spare: 0,
        mnt_id,
        param: STATMOUNT_SB_BASIC | STATMOUNT_MNT_ROOT,
    };
    /// `struct statmount` and its strings; 8-byte aligned like the struct. On the
    /// stack: no allocation.
    #[repr(C, align(8))]
    struct Reply([u8; STATMOUNT_HEADER + 4096]);
    let mut reply = Reply([0; STATMOUNT_HEADER + 4096]);
    // SAFETY: the kernel reads `req` (its size is in `req.size`) and writes at most
    // the given size into `reply`, which lives for the whole call.
    let rc = unsafe {
        libc::syscall(
            SYS_STATMOUNT,
            &req as *const Request,
            reply.0.as_mut_ptr(),
            reply.0.len(),
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let buf = &reply.0;
    let u64_at = |at: usize| u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap_or([0; 8]));
    // Fields of `struct statmount` (linux/mount.h): mask at byte 8, sb_magic at 24,
    // mnt_root (an offset into the strings) at 104.
    let (mask, magic) = (u64_at(8), u64_at(24));
    let root_at = u32::from_ne_bytes(buf[104..108].try_into().unwrap_or([0; 4])) as usize;
    let wanted = STATMOUNT_SB_BASIC | STATMOUNT_MNT_ROOT;
    if mask & wanted != wanted {
        return Err(io::Error::other(
            "statmount did not report the mount's root",
        ));
    }
    let root = buf[STATMOUNT_HEADER..]
        .get(root_at..)
        .and_then(|s| std::ffi::CStr::from_bytes_until_nul(s).ok())
        .ok_or_else(|| io::Error::other("statmount's root is not a string"))?;
    Ok(MountRoot {
        magic,
        root: root.to_string_lossy().into_owned(),
    })
}
