//! Starting processes: the guardian's fork, the namespace init's fork, CMD's clone3
//! into its cgroup, and what every child does between fork and exec (its group or
//! session, PDEATHSIG, signal mask, NOFILE limit, terminal). The policy of a child's
//! birth lives here; `sys` itself keeps the one-syscall wrappers.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

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

/// Starts `spec` with one `clone3(CLONE_PIDFD)`, born inside the cgroup `cgroup_dir`
/// (an open cgroup2 directory) when given (`CLONE_INTO_CGROUP`): no migration through
/// cgroup.procs (whose RCU synchronisation costs milliseconds) and the pidfd comes
/// with the child, before anything could reap it. Returns `Some((pid, pidfd))`, or
/// `None` when the kernel lacks clone3/CLONE_INTO_CGROUP (nothing was started: fall
/// back).
///
/// The child does what the std spawn path with `install_child_setup` does: own
/// process group, default SIGPIPE, empty signal mask, the caller's soft NOFILE limit,
/// the terminal's foreground, then `execvpe`. If that fails, the child exits and its
/// errno comes back to the caller, which reaps it.
///
/// On x86_64 the child is not a copy of the guardian: `CLONE_VM | CLONE_VFORK` (what
/// `posix_spawn` does), so no page table is copied and no page of the guardian's is
/// copied on write afterwards; the guardian sleeps until the child has exec'd or
/// exited. Elsewhere it is a fork.
pub fn spawn_into_cgroup(
    spec: &ExecSpec,
    cgroup_dir: Option<BorrowedFd<'_>>,
) -> io::Result<Option<(i32, OwnedFd)>> {
    let mut argv: Vec<*const libc::c_char> = spec.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = spec.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let child = ChildPlan {
        spec,
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
    };
    let (pid, pidfd, failed) = match start_child(&child, cgroup_dir) {
        Ok(started) => started,
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG) => Ok(None),
                _ => Err(e),
            }
        }
    };
    if let Some(errno) = failed {
        // The exec failed: collect the child so it leaves no zombie.
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(pidfd.as_fd()),
            rustix::process::WaitIdOptions::EXITED,
        );
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Some((pid, pidfd)))
}

/// Everything the child reads, prepared before the clone so that it allocates nothing.
struct ChildPlan<'a> {
    spec: &'a ExecSpec,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
}

/// The child's side: setup, then exec. Returns only on failure, with the errno and
/// the exit status the child ends with.
///
/// # Safety
/// Only in a child of the clone, before exec: plain syscalls on memory the plan
/// points to, which the parent keeps alive until the child has exec'd or exited.
unsafe fn child_exec(plan: &ChildPlan<'_>) -> (i32, i32) {
    let spec = plan.spec;
    if let Err(errno) = prepare_child(
        Some(spec.guardian_pid),
        spec.guardian_pgrp,
        spec.nofile_soft,
        spec.own_session,
    ) {
        return (errno, 125);
    }
    libc::execvpe(spec.program.as_ptr(), plan.argv, plan.envp);
    (*libc::__errno_location(), 127)
}

/// The vfork child's state in memory it shares with the guardian: the plan it reads
/// and the errno it leaves when it could not exec (0: it exec'd).
#[cfg(target_arch = "x86_64")]
#[repr(C)]
struct VforkChild<'a> {
    plan: &'a ChildPlan<'a>,
    failed: i32,
}

/// The vfork child's entry on its own stack; never returns.
#[cfg(target_arch = "x86_64")]
extern "C" fn vfork_child_main(child: *mut VforkChild<'_>) -> ! {
    // SAFETY: `child` points into the guardian's frame, which stays put while the
    // guardian sleeps in clone3 (CLONE_VFORK) until we exec or exit; see child_exec.
    unsafe {
        let (errno, code) = child_exec((*child).plan);
        std::ptr::write_volatile(&mut (*child).failed, errno.max(1));
        libc::_exit(code)
    }
}

/// Bytes of the vfork child's stack: what glibc's `posix_spawn` gives its child
/// (execvpe builds the PATH candidates on the stack) besides the argument vector.
#[cfg(target_arch = "x86_64")]
const VFORK_STACK: usize = 64 * 1024;

/// The vfork child's stack: a fresh anonymous mapping, unmapped on drop. Not from the
/// heap or our own stack: their pages may still be shared copy-on-write with the
/// sentinel (the guardian is its fork), and the child writing into them would give
/// each process a private copy for as long as the tree lives.
#[cfg(target_arch = "x86_64")]
struct ChildStack {
    base: *mut libc::c_void,
}

#[cfg(target_arch = "x86_64")]
impl ChildStack {
    fn new() -> io::Result<Self> {
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                VFORK_STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { base })
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used: the child has exec'd or
        // exited before clone3 returned (CLONE_VFORK).
        unsafe { libc::munmap(self.base, VFORK_STACK) };
    }
}

/// x86_64: `clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD [| CLONE_INTO_CGROUP])` with a
/// stack of its own for the child, which starts in [`vfork_child_main`]. Returns the
/// pid, the pidfd, and the child's errno if it could not exec.
#[cfg(target_arch = "x86_64")]
fn start_child(
    plan: &ChildPlan<'_>,
    cgroup: Option<BorrowedFd<'_>>,
) -> io::Result<(i32, OwnedFd, Option<i32>)> {
    let stack = ChildStack::new()?;
    let mut child = VforkChild { plan, failed: 0 };
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64
            | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: VFORK_STACK as u64,
        cgroup: cgroup.map_or(0, |fd| fd.as_raw_fd() as u64),
        ..Default::default()
    };
    let rc: i64;
    // SAFETY: the kernel reads `args` and writes `pidfd`; the child runs on `stack`
    // (page-aligned, VFORK_STACK bytes, ours until we return) and starts in
    // vfork_child_main with `child` in rdi; registers other than rax, rcx and r11
    // survive the syscall in both processes. CLONE_VFORK keeps this frame asleep
    // until the child has exec'd or exited, so everything it points to stays valid.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call {entry}",
            "ud2",
            "2:",
            entry = sym vfork_child_main,
            in("r12") &mut child as *mut VforkChild<'_>,
            inlateout("rax") libc::SYS_clone3 => rc,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc as i32));
    }
    // SAFETY: CLONE_PIDFD succeeded, so the kernel stored a new fd we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: the child wrote this (if at all) before its exec or exit, which the
    // kernel completed before waking us.
    let failed = unsafe { std::ptr::read_volatile(&child.failed) };
    drop(stack);
    Ok((rc as i32, pidfd, (failed != 0).then_some(failed)))
}

/// Other architectures: a fork (clone3 without CLONE_VM); the child's errno comes
/// back through a close-on-exec pipe.
#[cfg(not(target_arch = "x86_64"))]
fn start_child(
    plan: &ChildPlan<'_>,
    cgroup: Option<BorrowedFd<'_>>,
) -> io::Result<(i32, OwnedFd, Option<i32>)> {
    let (report_r, report_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)?;
    // SAFETY: the guardian is single-threaded; the child only makes plain syscalls on
    // memory prepared by the caller and ends in execvpe or _exit.
    let (pid, pidfd) = match unsafe { fork3(0, cgroup)? } {
        Forked::Parent { pid, pidfd } => (pid, pidfd),
        Forked::Child => unsafe {
            let (errno, code) = child_exec(plan);
            let bytes = errno.to_ne_bytes();
            libc::write(report_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(code);
        },
    };
    drop(report_w);
    let mut buf = [0u8; 4];
    let n = loop {
        match rustix::io::read(&report_r, &mut buf) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other.unwrap_or(0),
        }
    };
    Ok((pid, pidfd, (n == 4).then(|| i32::from_ne_bytes(buf))))
}
