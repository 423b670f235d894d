//! Advisory file locks: the liveness proof of a guardian, and the guard around
//! corrupt-database recovery.
//!
//! A live guardian holds an exclusive `flock` on its record file `trees/<id>.tree`
//! (see [`super::record_file`]) for its whole life.
//! The kernel drops the lock when the last descriptor of that open file goes away, so
//! the lock is free exactly when the guardian is dead, however it died, and this holds
//! even when the database is lost. The descriptor is close-on-exec, so CMD never
//! inherits it (it only shares it between fork and exec).

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// An exclusive lock on a file, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

/// Who held a record file's lock, from the record's first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub guardian_pid: i32,
    pub guardian_starttime: u64,
    pub boot_id: String,
}

impl FileLock {
    /// Creates a file already locked, opened for appending, with `first` as its
    /// content: built under a temporary name and renamed into place, so nobody ever
    /// sees it unlocked or empty.
    pub fn create_held_with(path: &Path, first: &[u8]) -> io::Result<Self> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = open_appending(&tmp, true)?;
        let placed = (|| {
            if !flock(&file, true)? {
                return Err(io::Error::other("fresh record file is locked"));
            }
            file.write_all(first)?;
            std::fs::rename(&tmp, path)
        })();
        if let Err(e) = placed {
            // A full disk fails the write: leave no half-made file behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    /// [`FileLock::try_acquire`], with the file opened for appending.
    pub fn try_acquire_appending(path: &Path) -> io::Result<Option<Self>> {
        let file = open_appending(path, false)?;
        if !flock(&file, false)? || !same_file(&file, path) {
            return Ok(None);
        }
        Ok(Some(Self {
            file,
            path: path.to_path_buf(),
        }))
    }

    /// Appends `bytes` (the file was opened with `O_APPEND`: one `write` lands whole
    /// at the end, never interleaved with another writer's).
    pub fn append(&self, bytes: &[u8]) -> io::Result<()> {
        (&self.file).write_all(bytes)
    }

    /// The whole file, read through the locked descriptor.
    pub fn read_all(&mut self) -> io::Result<Vec<u8>> {
        use std::io::Seek;
        let mut out = Vec::new();
        self.file.seek(io::SeekFrom::Start(0))?;
        self.file.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Takes the lock if it is free. `Ok(None)`: someone holds it. Also `Ok(None)` when
    /// the file was unlinked or replaced while we waited (its holder finished with it).
    pub fn try_acquire(path: &Path) -> io::Result<Option<Self>> {
        let file = open_rw(path, false)?;
        if !flock(&file, false)? {
            return Ok(None);
        }
        if !same_file(&file, path) {
            return Ok(None);
        }
        Ok(Some(Self {
            file,
            path: path.to_path_buf(),
        }))
    }

    /// Waits up to `limit` for the lock (creating the file if needed). `Ok(None)`: still
    /// held by someone else. Never unbounded: a holder that is stopped or stuck must
    /// not stop us for good.
    pub fn acquire_within(path: &Path, limit: std::time::Duration) -> io::Result<Option<Self>> {
        let file = open_rw(path, true)?;
        let end = std::time::Instant::now() + limit;
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            if flock(&file, false)? {
                return Ok(Some(Self {
                    file,
                    path: path.to_path_buf(),
                }));
            }
            let now = std::time::Instant::now();
            if now >= end {
                return Ok(None);
            }
            std::thread::sleep(pause.min(end - now));
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
        }
    }

    /// Who held the lock: read from a record file's first line.
    pub fn info(&mut self) -> Option<LockInfo> {
        let read = super::record_file::parse(&self.read_all().ok()?)?;
        Some(LockInfo {
            guardian_pid: read.tree.guardian.pid,
            guardian_starttime: read.tree.guardian.starttime,
            boot_id: read.tree.boot_id,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Deletes the lock file while still holding it: the tree is finished with.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn open_appending(path: &Path, create: bool) -> io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).append(true).create(create);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(libc_nofollow());
    }
    o.open(path)
}

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create(create);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // std opens with O_CLOEXEC already; NOFOLLOW keeps a planted symlink out.
        o.mode(0o600).custom_flags(libc_nofollow());
    }
    o.open(path)
}

#[cfg(target_os = "linux")]
fn libc_nofollow() -> i32 {
    libc::O_NOFOLLOW
}

#[cfg(all(unix, not(target_os = "linux")))]
fn libc_nofollow() -> i32 {
    0
}

#[cfg(target_os = "linux")]
fn flock(file: &File, blocking: bool) -> io::Result<bool> {
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

#[cfg(not(target_os = "linux"))]
fn flock(_file: &File, _blocking: bool) -> io::Result<bool> {
    Err(io::Error::other(
        "file locks are not implemented on this platform",
    ))
}

#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &File, _path: &Path) -> bool {
    true
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn held_lock_is_seen_held_then_free_and_appends_whole_lines() {
        let dir = std::env::temp_dir().join(format!("ut-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.tree");
        let held = FileLock::create_held_with(&path, b"one\n").unwrap();
        assert!(FileLock::try_acquire(&path).unwrap().is_none());
        held.append(b"two\n").unwrap();
        drop(held);
        let mut got = FileLock::try_acquire_appending(&path)
            .unwrap()
            .expect("free");
        got.append(b"three\n").unwrap();
        assert_eq!(got.read_all().unwrap(), b"one\ntwo\nthree\n");
        // Not a record file: no holder to name.
        assert_eq!(got.info(), None);
        got.remove();
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn waiting_for_a_held_lock_is_bounded() {
        let dir = std::env::temp_dir().join(format!("ut-lockw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.lock");
        let held = FileLock::acquire_within(&path, std::time::Duration::ZERO)
            .unwrap()
            .expect("free");
        let start = std::time::Instant::now();
        let got = FileLock::acquire_within(&path, std::time::Duration::from_millis(100)).unwrap();
        assert!(got.is_none());
        assert!(start.elapsed() >= std::time::Duration::from_millis(100));
        drop(held);
        assert!(FileLock::acquire_within(&path, std::time::Duration::ZERO)
            .unwrap()
            .is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
