//! The PID-namespace tier: the tree lives in a new PID namespace whose PID 1 is a
//! small undertaker init forked from the guardian. When that init dies, the kernel
//! SIGKILLs every process of the namespace, and no process can leave it, so a
//! `kill -9` of the guardian (which takes the init with it through PDEATHSIG) leaves
//! nothing behind, without any sweep.
//!
//! The init is a fork of the (single-threaded) guardian, not an exec: after clone3
//! with CLONE_NEWUSER it holds every capability of its new user namespace, which an
//! exec as a non-root uid would drop before it could mount /proc.

use super::dispositions::{on_signal, OnSignal};
use crate::identity::{TreeId, TREE_MARKER};
use crate::linux::kernel::poll::{readable_now, timespec};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::kernel::sys::{self, BlockedSignals, Forked};
use crate::linux::kernel::wait_status;
use crate::linux::proof::signal::{signal_whole_namespace, NamespaceInit, Signaller};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::{AsFd, OwnedFd};
use rustix::mount::{MountFlags, MountPropagationFlags};
use rustix::process::{Signal, WaitId, WaitIdOptions, WaitOptions};
use std::ffi::OsString;
use std::time::{Duration, Instant};

/// Why the namespace could not be set up, as an exit status of the init (the guardian
/// reports it; the probe maps it back to a reason).
const SETUP_MAPS: i32 = 121;
const SETUP_PRIVATE: i32 = 122;
const SETUP_PROC: i32 = 123;

/// What the init needs to start CMD.
pub struct InitSpec<'a> {
    pub command: &'a [OsString],
    pub tree: &'a TreeId,
    pub grace: Duration,
    /// Soft RLIMIT_NOFILE to give back to CMD.
    pub nofile: Option<u64>,
    /// CMD leads its own session (no terminal involved).
    pub own_session: bool,
    /// The process group the host started undertaker in: the terminal goes to CMD
    /// only when this group had it.
    pub host_pgrp: i32,
}

/// The guardian's handle on the namespace's init.
pub struct NamespaceHandle {
    pub pid: i32,
    pub pidfd: OwnedFd,
    /// Held open while the guardian lives: the init treats end of file as our death.
    pub alive: OwnedFd,
}

/// True when this process has exactly one thread, the condition for forking a copy
/// that keeps running Rust code.
pub fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.count() == 1)
}

fn needs_user_ns() -> bool {
    !rustix::process::geteuid().is_root()
}

/// In the fresh child: map our own uid/gid (when a user namespace was created), make
/// mounts private, mount a /proc that shows the new namespace. Returns an exit code
/// naming the failing step.
fn setup_namespace(user_ns: bool, uid: u32, gid: u32) -> Result<(), (i32, String)> {
    if user_ns {
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/self/{file}"), text)
                .map_err(|e| (SETUP_MAPS, format!("writing /proc/self/{file}: {e}")))
        };
        write("setgroups", "deny".into())?;
        write("uid_map", format!("{uid} {uid} 1\n"))?;
        write("gid_map", format!("{gid} {gid} 1\n"))?;
    }
    // Private first, so the new /proc does not propagate back to the host.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| (SETUP_PRIVATE, format!("making mounts private: {e}")))?;
    rustix::mount::mount(
        "proc",
        "/proc",
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
    .map_err(|e| (SETUP_PROC, format!("mounting /proc: {e}")))
}

/// What `run` checks before choosing this tier: the init is forked from this process,
/// which must be single-threaded. Whether the kernel grants the namespaces is known
/// when [`start`] creates them.
pub fn can_fork_init() -> Result<(), String> {
    if !single_threaded() {
        return Err("this process has several threads (the init is forked from it)".into());
    }
    Ok(())
}

/// Checks that a new PID namespace (with a user namespace when not root) can be
/// created and set up here, by doing it in a short-lived child (`doctor`).
pub fn probe() -> Result<(), String> {
    can_fork_init()?;
    let user_ns = needs_user_ns();
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let what = if user_ns {
        "user+pid namespaces"
    } else {
        "pid namespace"
    };
    match sys::fork_into_new_pid_namespace(user_ns) {
        Err(e) => Err(format!("cannot create a {what}: {e}")),
        Ok(Forked::Child) => {
            let code = match setup_namespace(user_ns, uid, gid) {
                Ok(()) => 0,
                Err((code, _)) => code,
            };
            sys::exit_immediately(code)
        }
        Ok(Forked::Parent { pidfd, .. }) => {
            let status = wait_pidfd(&pidfd);
            match status {
                Some(0) => Ok(()),
                Some(SETUP_MAPS) => Err("cannot map our uid/gid in a new user namespace".into()),
                Some(SETUP_PRIVATE) => {
                    Err("cannot make mounts private in a new mount namespace".into())
                }
                Some(SETUP_PROC) => Err("cannot mount /proc in the new namespace".into()),
                other => Err(format!("namespace probe child ended with {other:?}")),
            }
        }
    }
}

/// Blocks until our child behind `pidfd` exits and reaps it; its shell-style status.
pub(crate) fn wait_pidfd(pidfd: &OwnedFd) -> Option<i32> {
    loop {
        match rustix::process::waitid(WaitId::PidFd(pidfd.as_fd()), WaitIdOptions::EXITED) {
            Ok(Some(st)) => return wait_status::of_waitid(&st),
            Ok(None) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
    }
}

/// Forks the namespace's init, which starts CMD. Returns in the guardian only; the
/// child runs the init and exits.
pub fn start(spec: &InitSpec<'_>, signals: &BlockedSignals) -> Result<NamespaceHandle, String> {
    if !single_threaded() {
        return Err("the guardian has several threads; the init must be forked from a single-threaded process".into());
    }
    let user_ns = needs_user_ns();
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let was_foreground = rustix::termios::isatty(rustix::stdio::stdin())
        && rustix::termios::tcgetpgrp(rustix::stdio::stdin())
            .ok()
            .map(|p| p.as_raw_nonzero().get())
            == Some(spec.host_pgrp);
    let (alive_read, alive_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    match sys::fork_into_new_pid_namespace(user_ns) {
        Err(e) => Err(format!("cannot create a PID namespace: {e}")),
        Ok(Forked::Child) => {
            drop(alive_write);
            let code = match run_init(
                spec,
                signals,
                &alive_read,
                user_ns,
                uid,
                gid,
                was_foreground,
            ) {
                Ok(code) => code,
                Err((code, msg)) => {
                    // A closed stderr must not stop the init from exiting cleanly.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "undertaker: pidns init: {msg}");
                    code
                }
            };
            sys::exit_immediately(code)
        }
        Ok(Forked::Parent { pid, pidfd }) => {
            drop(alive_read);
            Ok(NamespaceHandle {
                pid,
                pidfd,
                alive: alive_write,
            })
        }
    }
}

/// PID 1 of the namespace: start CMD, forward signals, reap everything, and on CMD's
/// exit or SIGTERM TERM the whole namespace, wait the grace period, and exit (the
/// kernel then KILLs whatever is left). Returns the exit status (CMD's).
fn run_init(
    spec: &InitSpec<'_>,
    signals: &BlockedSignals,
    alive: &OwnedFd,
    user_ns: bool,
    uid: u32,
    gid: u32,
    was_foreground: bool,
) -> Result<i32, (i32, String)> {
    // A namespace the kernel made but we cannot set up (a mount refused): exit 125
    // with the reason, before CMD (docs/TIERS.md).
    setup_namespace(user_ns, uid, gid).map_err(|(_, msg)| (125, msg))?;
    // Die with the guardian. PDEATHSIG is safe here: both sides are our own
    // single-threaded processes. Then re-check, as bubblewrap does (PR #730): if the
    // guardian died before the prctl, the signal will never come. getppid() is 0 in a
    // new namespace, so the check is the alive pipe: end of file = guardian gone.
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(|e| (125, format!("PR_SET_PDEATHSIG: {e}")))?;
    if readable_now(alive.as_fd()) {
        return Ok(125);
    }
    let init = NamespaceInit::after_fork_into_new_namespace()
        .ok_or((125, "not PID 1 of the new namespace".to_string()))?;
    let signaller = Signaller::for_current_process(Procfs::new())
        .map_err(|e| (125, format!("reading /proc/self: {e}")))?;

    let Some(program) = spec.command.first() else {
        return Err((2, "no command given".to_string()));
    };
    // The guardian's group is not visible in here, so tcgetpgrp() reports 0 while it is
    // in the foreground; i32::MIN never matches, so a background guardian hands nothing.
    let fg = if was_foreground { 0 } else { i32::MIN };
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != TREE_MARKER)
        .collect();
    env.push((TREE_MARKER.into(), spec.tree.as_str().into()));
    // CMD is no copy of this init (see `sys::spawn_into_cgroup`); clone3 works here,
    // since it made this namespace.
    let started = crate::linux::contain::spawn::exec_spec(
        spec.command,
        env,
        fg,
        spec.nofile,
        spec.own_session,
    )
    .and_then(|exec| sys::spawn_into_cgroup(&exec, None))
    .map_err(|e| {
        let err = crate::linux::contain::spawn::spawn_error(program, e);
        (err.exit_code(), err.to_string())
    })?;
    let Some((cmd_pid, cmd_fd)) = started else {
        return Err((125, "clone3 refused to start the command".to_string()));
    };

    let mut status: Option<i32> = None;
    let mut teardown_until: Option<Instant> = None;
    loop {
        let timeout = teardown_until.map(|end| end.saturating_duration_since(Instant::now()));
        if timeout == Some(Duration::ZERO) {
            break;
        }
        let ts = timeout.map(timespec);
        let sfd = signals.fd();
        let mut fds = [
            PollFd::new(&sfd, PollFlags::IN),
            PollFd::new(alive, PollFlags::IN),
        ];
        let _ = poll(&mut fds, ts.as_ref());
        if readable_now(alive.as_fd()) {
            // The guardian is gone; PDEATHSIG is on its way. Leave now: our exit
            // kills the namespace.
            return Ok(status.unwrap_or(137));
        }
        let mut terminate = false;
        for sig in signals.drain().unwrap_or_default() {
            match on_signal(sig) {
                OnSignal::Reap => {}
                OnSignal::Teardown => terminate = true,
                OnSignal::Forward if status.is_none() => {
                    if let Some(sig) = sys::any_signal(sig) {
                        let _ = signaller.signal_own_child(cmd_fd.as_fd(), sig);
                    }
                }
                OnSignal::Forward => {}
            }
        }
        let none_left = reap_all(cmd_pid, &mut status);
        if teardown_until.is_none() && (terminate || status.is_some()) {
            // kill(-1) in here reaches exactly the tree: see signal_whole_namespace.
            signal_whole_namespace(&init, Signal::TERM);
            signal_whole_namespace(&init, Signal::CONT);
            teardown_until = Some(Instant::now() + spec.grace);
            if reap_all(cmd_pid, &mut status) {
                break;
            }
        } else if teardown_until.is_some() && none_left {
            break;
        }
    }
    // Whatever is left dies with us (the kernel SIGKILLs the namespace), CMD included.
    Ok(status.unwrap_or(crate::exit_status::killed_by(libc::SIGKILL)))
}

/// Reaps every exited child; records CMD's status. True when no child is left.
fn reap_all(cmd_pid: i32, status: &mut Option<i32>) -> bool {
    loop {
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some((pid, st))) => {
                // CMD was unreaped until this call, so the number is its own.
                if pid.as_raw_nonzero().get() == cmd_pid && status.is_none() {
                    *status = wait_status::of_wait(&st);
                }
            }
            Ok(None) => return false,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return true,
        }
    }
}
