//! The kernel's wait statuses, read through [`crate::exit_status`].

use rustix::process::{WaitIdStatus, WaitStatus};

/// A shell's status for a `waitid` result.
pub(crate) fn of_waitid(status: &WaitIdStatus) -> Option<i32> {
    crate::exit_status::shell_status(status.exit_status(), status.terminating_signal())
}

/// A shell's status for a `wait` result.
pub(crate) fn of_wait(status: &WaitStatus) -> Option<i32> {
    crate::exit_status::shell_status(status.exit_status(), status.terminating_signal())
}
