//! Which signals the guardian takes, and what each one does (docs/TIERS.md, "Signals
//! sent to the guardian"). No catchable signal may end the guardian silently: every
//! one is read from the signalfd and either forwarded to CMD, as tini does, or starts
//! the teardown. The two that report the guardian's own failed writes (SIGPIPE,
//! SIGXFSZ) are ignored: the write returns an error instead.
//!
//! Dispositions inherited as "ignored" are reset first: an ignored signal is dropped
//! before it could reach the signalfd, and an ignored SIGCHLD makes the kernel reap
//! CMD before its status can be read.

use crate::linux::kernel::sys::{self, BlockedSignals};

/// What the guardian does with a signal it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnSignal {
    /// Passed on to CMD unchanged.
    Forward,
    /// The tree is torn down (SIGTERM, and the signals whose default would end the
    /// guardian with a fault or a resource limit).
    Teardown,
    /// SIGCHLD: reap.
    Reap,
}

pub(crate) fn on_signal(sig: i32) -> OnSignal {
    match sig {
        libc::SIGCHLD => OnSignal::Reap,
        libc::SIGTERM
        | libc::SIGILL
        | libc::SIGTRAP
        | libc::SIGABRT
        | libc::SIGBUS
        | libc::SIGFPE
        | libc::SIGSEGV
        | libc::SIGSYS
        | libc::SIGXCPU => OnSignal::Teardown,
        _ => OnSignal::Forward,
    }
}

/// Signals left ignored: they report the guardian's own writes failing.
const IGNORED: [i32; 2] = [libc::SIGPIPE, libc::SIGXFSZ];

/// Every signal the guardian reads from its signalfd: all catchable ones (1–31 and the
/// real-time range the C library leaves to programs) but [`IGNORED`].
pub(crate) fn taken() -> Vec<i32> {
    let (rt_min, rt_max) = sys::realtime_signals();
    (1..32)
        .chain(rt_min..=rt_max)
        .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP && !IGNORED.contains(&s))
        .collect()
}

/// Blocks every signal of [`taken`] into a signalfd, resets those inherited as ignored
/// to their default (harmless while blocked), and ignores [`IGNORED`]. A real fault
/// still kills: the kernel unblocks a fault it raises itself.
pub(crate) fn take_all() -> std::io::Result<BlockedSignals> {
    let signals = taken();
    let blocked = BlockedSignals::new(&signals)?;
    for &sig in &signals {
        sys::reset_if_ignored(sig);
    }
    for sig in IGNORED {
        sys::ignore(sig);
    }
    Ok(blocked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catchable_signal_has_a_fate() {
        let taken = taken();
        for sig in [
            libc::SIGALRM,
            libc::SIGPWR,
            libc::SIGVTALRM,
            libc::SIGTERM,
            40,
        ] {
            assert!(taken.contains(&sig), "{sig}");
        }
        for sig in [libc::SIGKILL, libc::SIGSTOP, libc::SIGPIPE, libc::SIGXFSZ] {
            assert!(!taken.contains(&sig), "{sig}");
        }
        assert_eq!(on_signal(libc::SIGALRM), OnSignal::Forward);
        assert_eq!(on_signal(libc::SIGSYS), OnSignal::Teardown);
        assert_eq!(on_signal(libc::SIGCHLD), OnSignal::Reap);
    }
}
