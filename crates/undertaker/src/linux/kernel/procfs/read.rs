//! Reading small kernel-generated files whole: procfs reports size 0, so the buffer
//! cannot be sized up front.

use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use std::io;
use std::path::Path;

/// Opens `path` for reading with one system call: musl's `open` (std's `File::open`)
/// follows an `O_CLOEXEC` open with an `fcntl` setting it again, for kernels older
/// than any undertaker runs on.
fn open(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

fn read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::io::read(fd, buf)?)
}

/// Reads at most `cap` bytes; the flag says whether the file was longer.
/// procfs reports size 0, so we cannot size the buffer up front. procfs fills a read
/// with as much as fits, so one 4 KiB read covers stat/status and most environments;
/// only a full read is followed by more (the generic growth strategy costs ~12 reads).
pub(super) fn read_capped(path: &Path, cap: usize) -> io::Result<(Vec<u8>, bool)> {
    read_capped_with(path, cap, false)
}

/// [`read_capped`]; `short_is_eof`: the file is produced whole at open/first read
/// (single-record seq_files such as stat and status), so a short read is its end and
/// needs no second read to confirm.
///
/// The first read goes to the stack: with musl's allocator a 4 KiB heap buffer per file
/// was a fresh `mmap` and `munmap` each time (docs/BENCHMARKS.md, "Issue 30"); only
/// what was read is copied to the heap.
pub(super) fn read_capped_with(
    path: &Path,
    cap: usize,
    short_is_eof: bool,
) -> io::Result<(Vec<u8>, bool)> {
    const FIRST: usize = 4096;
    let file = open(path)?;
    let mut first = [0u8; FIRST];
    let want = FIRST.min(cap + 1);
    let mut len = 0;
    loop {
        match read(&file, &mut first[len..want]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if (short_is_eof && len < want) || len == want {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    let mut buf = first[..len].to_vec();
    if len < want || len > cap {
        let truncated = buf.len() > cap;
        buf.truncate(cap);
        return Ok((buf, truncated));
    }
    buf.resize((want * 2).min(cap + 1), 0);
    loop {
        match read(&file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if short_is_eof && len < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if len == buf.len() {
            if len > cap {
                break;
            }
            let grown = (buf.len() * 2).min(cap + 1);
            buf.resize(grown, 0);
        }
    }
    buf.truncate(len);
    let truncated = buf.len() > cap;
    buf.truncate(cap);
    Ok((buf, truncated))
}

/// A small kernel-generated text file (mountinfo), whole: one read for what fits
/// 4 KiB, on the stack ([`read_capped_with`]).
pub fn read_text(path: &Path) -> io::Result<String> {
    read_text_with(path, false)
}

/// [`read_text`] of a file the kernel produces whole at the first read (a
/// single-record seq_file: `/proc/PID/cgroup`, a cgroup's control files), so a short
/// read is its end.
pub fn read_single_text(path: &Path) -> io::Result<String> {
    read_text_with(path, true)
}

fn read_text_with(path: &Path, short_is_eof: bool) -> io::Result<String> {
    const CAP: usize = 16 << 20;
    let (bytes, truncated) = read_capped_with(path, CAP, short_is_eof)?;
    if truncated {
        return Err(io::Error::other(format!(
            "{} is larger than 16 MiB",
            path.display()
        )));
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
