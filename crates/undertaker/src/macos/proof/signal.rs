//! The one way the macOS backend signals: [`delivery::deliver`]'s rule over libproc,
//! the audit-token call and, below macOS 14.4, `kill()` (docs/PORTING.md, "macOS").

use super::delivery::{self, Kernel};
use crate::macos::kernel::parse::BsdInfo;
use crate::macos::kernel::sys;
use crate::portable::{Delivery, Member, Signal};
use std::ffi::c_int;

/// How signals are bound to the process here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The kernel checks the pid version (macOS 14.4+).
    AuditToken,
    /// The identity is re-read right before `kill()` (the residual in delivery.rs).
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

/// libproc as the delivery rule's kernel.
struct Libproc;

impl Kernel for Libproc {
    fn read(&mut self, pid: i32) -> Option<BsdInfo> {
        sys::bsd_info(pid).ok()
    }

    fn signal_by_token(
        &mut self,
        pid: i32,
        version: u32,
        signal: Signal,
    ) -> Option<Result<(), i32>> {
        sys::signal_by_token(pid, version, raw(signal))
            .map(|r| r.map_err(|e| e.raw_os_error().unwrap_or(0)))
    }

    fn kill(&mut self, pid: i32, signal: Signal) -> bool {
        let (Some(pid), Some(sig)) = (
            rustix::process::Pid::from_raw(pid),
            rustix::process::Signal::from_named_raw(raw(signal)),
        ) else {
            return false;
        };
        rustix::process::kill_process(pid, sig).is_ok()
    }
}

/// Sends `signal` to `member` if the process at its pid is still its serial.
pub fn deliver(member: &Member, signal: Signal) -> Delivery {
    delivery::deliver(&mut Libproc, member, signal)
}
