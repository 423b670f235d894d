//! The one way the macOS backend signals: by a member's `p_uniqueid`, never by number
//! alone (docs/PORTING.md, "macOS"). Each delivery re-reads the process (flavor 18),
//! and a different uniqueid means the member is gone. Then:
//!
//! - macOS 14.4+: `proc_signal_with_audittoken` with the pid version just read; the
//!   kernel refuses (`ESRCH`) if the process exec'd or the number was reused since. An
//!   exec is retried with the new version, a few times at most (a process that execs
//!   in a tight loop is left unsignalled rather than signalled blind).
//! - before 14.4: `kill()` right after the re-read. **Residual:** the process exits,
//!   is reaped and its number is handed to another process (a full wrap of the pid
//!   counter, 99 999 → 100) between the re-read and the `kill`. `doctor` reports
//!   which of the two is in use.

use crate::macos::kernel::sys;
use crate::portable::{Delivery, Member, Signal};
use std::ffi::c_int;

/// Tries before a member that keeps exec'ing is given up on.
const MAX_TRIES: usize = 3;

/// How signals are bound to the process here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The kernel checks the pid version (macOS 14.4+).
    AuditToken,
    /// The identity is re-read right before `kill()` (the residual above).
    Recheck,
}

pub fn binding() -> Binding {
    if sys::has_signal_with_audittoken() {
        Binding::AuditToken
    } else {
        Binding::Recheck
    }
}

fn raw(signal: Signal) -> c_int {
    match signal {
        Signal::Term => libc::SIGTERM,
        Signal::Cont => libc::SIGCONT,
        Signal::Stop => libc::SIGSTOP,
        Signal::Kill => libc::SIGKILL,
    }
}

/// Sends `signal` to `member` if the process at its pid is still its serial.
pub fn deliver(member: &Member, signal: Signal) -> Delivery {
    for _ in 0..MAX_TRIES {
        let Ok(now) = sys::bsd_info(member.pid) else {
            return Delivery::AlreadyGone;
        };
        if now.uniqueid != member.serial || now.is_zombie() {
            return Delivery::AlreadyGone;
        }
        match sys::signal_by_token(member.pid, now.version, raw(signal)) {
            Some(Ok(())) => return Delivery::Delivered,
            // A new version (it exec'd) or gone: the next read tells which.
            Some(Err(e)) if e.raw_os_error() == Some(libc::ESRCH) => continue,
            Some(Err(e)) => {
                tracing::debug!(pid = member.pid, error = %e, "token signal refused");
                return Delivery::AlreadyGone;
            }
            None => return kill_after_recheck(member.pid, signal),
        }
    }
    tracing::debug!(pid = member.pid, "exec'd on every try: not signalled");
    Delivery::AlreadyGone
}

/// Below 14.4: the identity was read just now; this is the residual window.
fn kill_after_recheck(pid: i32, signal: Signal) -> Delivery {
    let (Some(pid), Some(sig)) = (
        rustix::process::Pid::from_raw(pid),
        rustix::process::Signal::from_named_raw(raw(signal)),
    ) else {
        return Delivery::AlreadyGone;
    };
    match rustix::process::kill_process(pid, sig) {
        Ok(()) => Delivery::Delivered,
        Err(_) => Delivery::AlreadyGone,
    }
}
