//! The lock that proves a guardian alive (registry/lock.rs), as Linux takes it: an
//! exclusive `flock`, dropped by the kernel with the last descriptor of the open file.

use std::fs::File;
use std::io;

/// Takes an exclusive `flock` on `file` (waiting for it if `blocking`); `Ok(false)`:
/// someone else holds it.
pub fn lock_file(file: &File, blocking: bool) -> io::Result<bool> {
    use rustix::fs::FlockOperation;
    let op = if blocking {
        FlockOperation::LockExclusive
    } else {
        FlockOperation::NonBlockingLockExclusive
    };
    loop {
        match rustix::fs::flock(file, op) {
            Ok(()) => return Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// How a file of the state directory is opened: never through a symlink, never
/// blocking (a planted FIFO).
pub const STATE_FILE_OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK;
