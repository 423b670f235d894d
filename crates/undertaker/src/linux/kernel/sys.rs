//! The only module with `unsafe`: the few kernel interfaces rustix does not wrap.
//!
//! Every function here is a thin, audited wrapper around one syscall or ioctl. Callers
//! never see raw pointers; errors come back as `std::io::Error`.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

mod memory;
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

    /// Reads every pending signal number without blocking.
    pub fn drain(&self) -> io::Result<Vec<i32>> {
        let mut out = Vec::new();
        loop {
            let mut info = MaybeUninit::<libc::signalfd_siginfo>::uninit();
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: reads at most `size` bytes into `info`, which is exactly that big.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), info.as_mut_ptr().cast(), size) };
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
            if n as usize != size {
                return Ok(out);
            }
            // SAFETY: the kernel filled the whole struct (n == size).
            let info = unsafe { info.assume_init() };
            out.push(info.ssi_signo as i32);
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

/// Runs in the forked child before exec. Restores the soft RLIMIT_NOFILE the guardian
/// raised for itself (`nofile_soft`), and, when stdin is a terminal whose foreground
/// group was the guardian's, hands the terminal to the child's new group so
/// interactive commands can read it (what tini does). SIGTTOU is blocked around the
/// call because a background group may not otherwise change the foreground group.
///
/// `cgroup_procs`, when given, is an open `cgroup.procs` of the tree's cgroup: the child
/// writes "0" to it first, so CMD is in the cgroup before it runs an instruction of its
/// own. If that write fails the exec is abandoned with [`CGROUP_JOIN_FAILED`], so an
/// unguarded CMD never runs.
///
/// `own_session`: CMD leads a new session (`setsid`) instead of a new process group in
/// the guardian's session; see [`prepare_child`].
pub fn install_child_setup(
    cmd: &mut std::process::Command,
    guardian_pgrp: i32,
    nofile_soft: Option<u64>,
    cgroup_procs: Option<RawFd>,
    pdeathsig_guardian: Option<i32>,
    own_session: bool,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure only makes async-signal-safe calls (prctl, getppid, write, sigemptyset,
    // getrlimit, setrlimit, isatty, tcgetpgrp, sigprocmask, tcsetpgrp, getpid) and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = cgroup_procs {
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                if n != 1 {
                    return Err(io::Error::from_raw_os_error(CGROUP_JOIN_FAILED));
                }
            }
            prepare_child(pdeathsig_guardian, guardian_pgrp, nofile_soft, own_session)
                .map_err(io::Error::from_raw_os_error)?;
            Ok(())
        });
    }
}

/// The errno a spawn fails with when the child could not join its cgroup. EBADFD is
/// never produced by execve itself, so the guardian can tell this failure apart from
/// "not found"/"not executable" and report 125 instead.
pub const CGROUP_JOIN_FAILED: i32 = libc::EBADFD;

/// Takes the terminal back for `pgrp` (the guardian's own group) after the child's
/// group handed it over; SIGTTOU is blocked in the guardian already when this runs.
pub fn reclaim_foreground(pgrp: i32) {
    // SAFETY: plain syscalls on fd 0.
    if unsafe { libc::isatty(0) } == 1 {
        set_foreground_quietly(pgrp);
    }
}

/// The child's side of every spawn (std's `pre_exec` and the clone3 path), run
/// between fork and exec, so it only makes syscalls on stack values: no allocation.
///
/// - If the guardian dies from here on, CMD dies with it (PDEATHSIG): a guardian
///   killed mid-spawn must not leave a CMD that starts after a sweep looked. Safe here
///   (docs/DESIGN.md §3, "Owner"): the guardian is our own single-threaded process. The `getppid`
///   re-check catches a guardian that died before the prctl (returns ESRCH).
/// - An empty signal mask: the guardian blocks the signals its signalfd reads, and a
///   blocked SIGTERM would never reach CMD. SIGPIPE and SIGXFSZ, which the guardian
///   ignores, back at their default.
/// - The soft RLIMIT_NOFILE the guardian raised for itself, restored.
/// - Its own process group. With `own_session` (no terminal involved) the group leads
///   a new session, which only CMD's descendants can ever enter: `setpgid` into a
///   group of another session is refused, so the group holds no stranger and may be
///   signalled as a whole. Otherwise (a terminal, whose job control needs CMD in the
///   guardian's session) it is a new group in the guardian's session, which any
///   process of that session could join.
/// - The terminal handed to CMD's group when it was the guardian's (what tini does).
fn prepare_child(
    pdeathsig_guardian: Option<i32>,
    guardian_pgrp: i32,
    nofile_soft: Option<u64>,
    own_session: bool,
) -> Result<(), i32> {
    // SAFETY: plain syscalls on stack values; see above.
    unsafe {
        let grouped = if own_session {
            libc::setsid() >= 0
        } else {
            libc::setpgid(0, 0) == 0
        };
        if !grouped {
            return Err(*libc::__errno_location());
        }
        // None: the portable tier, which has no PDEATHSIG (docs/TIERS.md).
        if let Some(guardian_pid) = pdeathsig_guardian {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0
                || libc::getppid() != guardian_pid
            {
                return Err(libc::ESRCH);
            }
        }
        let mut none = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(none.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
        // The guardian ignores these for its own writes; CMD gets the defaults.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
        if let Some(soft) = nofile_soft {
            let mut lim = MaybeUninit::<libc::rlimit>::uninit();
            if libc::getrlimit(libc::RLIMIT_NOFILE, lim.as_mut_ptr()) == 0 {
                let mut lim = lim.assume_init();
                lim.rlim_cur = soft as libc::rlim_t;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
        if !own_session && libc::isatty(0) == 1 && libc::tcgetpgrp(0) == guardian_pgrp {
            set_foreground_quietly(libc::getpid());
        }
    }
    Ok(())
}

/// Makes `pgrp` the foreground group of the terminal on fd 0 with SIGTTOU blocked
/// meanwhile (a background caller would otherwise be stopped by it), then restores the
/// signal mask. Runs after fork in `pre_exec` too, so it only makes syscalls on the
/// stack: no allocation, async-signal-safe.
fn set_foreground_quietly(pgrp: i32) {
    // SAFETY: sigset_t values live on the stack and are initialised by sigemptyset
    // before use; tcsetpgrp on fd 0 has no memory preconditions.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        let mut set = set.assume_init();
        libc::sigaddset(&mut set, libc::SIGTTOU);
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, old.as_mut_ptr());
        libc::tcsetpgrp(0, pgrp);
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
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

/// Which side of a [`fork_into_new_pid_namespace`] we are on.
pub enum Forked {
    /// The new process: PID 1 of the new namespace, a copy of the caller.
    Child,
    Parent {
        pid: i32,
        pidfd: OwnedFd,
    },
}

/// `struct clone_args` (linux/sched.h) up to `cgroup` (CLONE_ARGS_SIZE_VER2). Older
/// kernels accept the larger size as long as the fields they do not know are zero.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// clone3 without CLONE_VM — a fork — with CLONE_PIDFD added to `flags`, into the
/// cgroup `cgroup` when given. The parent gets the child's pid and a pidfd that exists
/// before anything could reap the child.
///
/// # Safety
/// The caller must be single-threaded (no lock can be held by a thread that does not
/// exist in the child), and on the `Child` side may only make async-signal-safe calls
/// before exec or `_exit`, unless it goes on as its own single-threaded process.
unsafe fn fork3(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: flags | libc::CLONE_PIDFD as u64 | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.map_or(0, |fd| fd.as_raw_fd() as u64),
        ..Default::default()
    };
    // SAFETY: the kernel reads `args` and writes the pidfd into `pidfd`, both of which
    // outlive the call; the caller upholds the fork contract above.
    let rc = libc::syscall(
        libc::SYS_clone3,
        &args as *const CloneArgs,
        std::mem::size_of::<CloneArgs>(),
    );
    match rc {
        n if n < 0 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent {
            pid: pid as i32,
            // SAFETY: CLONE_PIDFD succeeded, so the kernel stored a new fd we own.
            pidfd: OwnedFd::from_raw_fd(pidfd),
        }),
    }
}

/// Forks into a new PID and mount namespace, and a new user namespace when
/// `user_ns`. The child continues as a copy of the caller, so the caller must be
/// single-threaded (checked by the caller). The parent gets a pidfd from
/// CLONE_PIDFD, so the child is never addressed by number.
pub fn fork_into_new_pid_namespace(user_ns: bool) -> io::Result<Forked> {
    let mut flags = (libc::CLONE_NEWPID | libc::CLONE_NEWNS) as u64;
    if user_ns {
        flags |= libc::CLONE_NEWUSER as u64;
    }
    // SAFETY: the caller checked it is single-threaded; the child becomes the
    // namespace's own single-threaded init.
    unsafe { fork3(flags, None) }
}

/// Forks the guardian off the process the host started (which stays behind as the
/// sentinel, see `linux/commands/sentinel.rs`). The parent gets the child's pid and a pidfd
/// from CLONE_PIDFD, so the guardian is never addressed by number.
pub fn fork_guardian() -> io::Result<Forked> {
    // SAFETY: `undertaker run` is single-threaded up to here (no thread is ever
    // started), and the child goes on as its own single-threaded process.
    unsafe { fork3(0, None) }
}

/// The guardian's first steps after [`fork_guardian`]: its own process group, so a
/// signal to the host's group (which holds the sentinel) does not reach it, and
/// SIGTERM — its "tear down" signal — when the sentinel dies, however it dies. The
/// sentinel is our own single-threaded parent, so PDEATHSIG means exactly its death.
/// Fails when the sentinel died before the prctl (we were already reparented).
/// `pdeathsig` false (the portable tier): no PDEATHSIG; the guardian watches the
/// sentinel's pidfd instead.
pub fn detach_guardian(sentinel_pid: i32, pdeathsig: bool) -> io::Result<()> {
    // SAFETY: plain syscalls with integer arguments.
    unsafe {
        if libc::setpgid(0, 0) != 0
            || (pdeathsig
                && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0)
        {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != sentinel_pid {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// `kill(-1, sig)`: every process the caller may signal, except itself. Only
/// `signal::signal_whole_namespace` calls this, and only as PID 1 of a namespace that
/// holds nothing but the guarded tree.
pub(crate) fn kill_all_visible(sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall.
    let rc = unsafe { libc::kill(-1, sig) };
    (rc == 0).then_some(()).ok_or_else(io::Error::last_os_error)
}

/// Ends a forked child at once: no atexit handlers, no flushing of buffers that
/// belong to the parent's copy of stdio.
pub fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// What the child of [`spawn_into_cgroup`] runs, prepared before the clone so the
/// child allocates nothing.
pub struct ExecSpec {
    pub program: std::ffi::CString,
    pub argv: Vec<std::ffi::CString>,
    pub envp: Vec<std::ffi::CString>,
    pub guardian_pgrp: i32,
    pub guardian_pid: i32,
    pub nofile_soft: Option<u64>,
    /// CMD leads its own session (see `prepare_child`).
    pub own_session: bool,
}

/// Starts `spec` directly inside the cgroup `cgroup_dir` (an open cgroup2 directory)
/// with `clone3(CLONE_INTO_CGROUP | CLONE_PIDFD)`: no migration through cgroup.procs
/// (whose RCU synchronisation costs milliseconds) and the pidfd comes with the child,
/// before anything could reap it. Returns `Some((pid, pidfd))`, or `None` when the
/// kernel lacks clone3/CLONE_INTO_CGROUP (nothing was started: fall back).
///
/// The child does what the std spawn path with `install_child_setup` does: own
/// process group, default SIGPIPE, empty signal mask, the caller's soft NOFILE limit,
/// the terminal's foreground, then `execvpe`. An exec failure's errno comes back
/// through a close-on-exec pipe and the child is reaped.
pub fn spawn_into_cgroup(
    spec: &ExecSpec,
    cgroup_dir: BorrowedFd<'_>,
) -> io::Result<Option<(i32, OwnedFd)>> {
    let mut argv: Vec<*const libc::c_char> = spec.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = spec.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let (report_r, report_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)?;
    // SAFETY: the guardian is single-threaded; the child only makes plain syscalls on
    // memory prepared above and ends in execvpe or _exit.
    let forked = match unsafe { fork3(0, Some(cgroup_dir)) } {
        Ok(f) => f,
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG) => Ok(None),
                _ => Err(e),
            }
        }
    };
    let (pid, pidfd) = match forked {
        Forked::Parent { pid, pidfd } => (pid, pidfd),
        Forked::Child => {
            // SAFETY: in the child; see above.
            unsafe {
                if let Err(errno) = prepare_child(
                    Some(spec.guardian_pid),
                    spec.guardian_pgrp,
                    spec.nofile_soft,
                    spec.own_session,
                ) {
                    let bytes = errno.to_ne_bytes();
                    libc::write(report_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                    libc::_exit(125);
                }
                libc::execvpe(spec.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
                let errno = *libc::__errno_location();
                let bytes = errno.to_ne_bytes();
                libc::write(report_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127);
            }
        }
    };
    drop(report_w);
    let mut buf = [0u8; 4];
    let n = loop {
        match rustix::io::read(&report_r, &mut buf) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other.unwrap_or(0),
        }
    };
    if n == 4 {
        // The exec failed: collect the child so it leaves no zombie.
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(pidfd.as_fd()),
            rustix::process::WaitIdOptions::EXITED,
        );
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(buf)));
    }
    Ok(Some((pid, pidfd)))
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
