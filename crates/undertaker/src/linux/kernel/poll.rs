//! Waiting on file descriptors with a deadline: the one place a `Duration` becomes the
//! kernel's `Timespec`.

use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::BorrowedFd;
use rustix::time::Timespec;
use std::time::{Duration, Instant};

/// `d` as the kernel's `Timespec`.
pub(crate) fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// Polls `fds` until one is ready or `deadline` passes (`None`: no deadline). Returns
/// at once when the deadline has already passed; errors (EINTR included) just return:
/// every caller re-checks what it waits for.
pub(crate) fn poll_until(fds: &mut [PollFd<'_>], deadline: Option<Instant>) {
    let timeout = match deadline {
        None => None,
        Some(end) => match end.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Some(timespec(left)),
            _ => return,
        },
    };
    let _ = poll(fds, timeout.as_ref());
}

/// True when `fd` polls readable right now: for a pidfd, its process has exited
/// (zombie or reaped); for a pipe's read end, data or end of file is there.
pub(crate) fn readable_now(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&timespec(Duration::ZERO))), Ok(n) if n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timespec_splits_seconds_and_nanoseconds() {
        let ts = timespec(Duration::from_millis(2_500));
        assert_eq!((ts.tv_sec, ts.tv_nsec), (2, 500_000_000));
        assert_eq!(timespec(Duration::MAX).tv_sec, i64::MAX);
    }

    #[test]
    fn a_passed_deadline_returns_at_once() {
        let start = Instant::now();
        poll_until(&mut [], Some(start));
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
