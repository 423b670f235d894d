//! The rule by which the macOS backend signals a member, written over a small
//! [`Kernel`] trait so that Linux tests run it against fixtures (`proof/signal.rs`
//! is its libproc implementation; docs/PORTING.md, "macOS").
//!
//! Each delivery re-reads the process (flavor 18); a different uniqueid, or a zombie,
//! means the member is gone. Then:
//! - macOS 14.4+: `proc_signal_with_audittoken` with the pid version just read; the
//!   kernel refuses (`ESRCH`) if the process exec'd or the number was reused since.
//!   An exec is retried with the new version, [`MAX_TRIES`] times at most (a process
//!   that execs in a tight loop is left unsignalled rather than signalled blind).
//! - before 14.4: `kill()` right after the re-read. **Residual:** the member exits,
//!   is reaped and its number is handed to another process (a full wrap of the pid
//!   counter, 99 999 → 100) between the re-read and the `kill`. `doctor` reports
//!   which of the two is in use.

use crate::macos::kernel::parse::BsdInfo;
use crate::portable::{Delivery, Member, Signal};

/// Reads before a member that keeps exec'ing is given up on.
pub const MAX_TRIES: usize = 3;

/// What the rule needs of the kernel.
pub trait Kernel {
    /// One flavor-18 read; `None` if there is no process at `pid`.
    fn read(&mut self, pid: i32) -> Option<BsdInfo>;
    /// `proc_signal_with_audittoken(pid, version)`: `Some(Ok)` delivered,
    /// `Some(Err(errno))` refused, `None` when the call does not exist here.
    fn signal_by_token(
        &mut self,
        pid: i32,
        version: u32,
        signal: Signal,
    ) -> Option<Result<(), i32>>;
    /// `kill(pid, signal)`; true if delivered.
    fn kill(&mut self, pid: i32, signal: Signal) -> bool;
}

/// `ESRCH`: the same value on macOS and Linux.
const ESRCH: i32 = 3;

/// Sends `signal` to `member` if the process at its pid is still its serial.
pub fn deliver(kernel: &mut impl Kernel, member: &Member, signal: Signal) -> Delivery {
    for _ in 0..MAX_TRIES {
        let Some(now) = kernel.read(member.pid) else {
            return Delivery::AlreadyGone;
        };
        if now.uniqueid != member.serial || now.is_zombie() {
            return Delivery::AlreadyGone;
        }
        match kernel.signal_by_token(member.pid, now.version, signal) {
            Some(Ok(())) => return Delivery::Delivered,
            // A new version (it exec'd) or gone: the next read tells which.
            Some(Err(ESRCH)) => continue,
            Some(Err(errno)) => {
                tracing::debug!(pid = member.pid, errno, "token signal refused");
                return Delivery::AlreadyGone;
            }
            // Below 14.4: the identity was read just now; this is the residual window.
            None => {
                return if kernel.kill(member.pid, signal) {
                    Delivery::Delivered
                } else {
                    Delivery::AlreadyGone
                };
            }
        }
    }
    tracing::debug!(pid = member.pid, "exec'd on every try: not signalled");
    Delivery::AlreadyGone
}

#[cfg(test)]
mod tests;
