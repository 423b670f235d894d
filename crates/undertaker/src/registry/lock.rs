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
use std::sync::atomic::{AtomicBool, Ordering};

/// An exclusive lock on a file, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
    /// The file is known to end with a whole line: this holder wrote its end
    /// (created it, or its last append went out whole). Only the holder appends,
    /// so the torn-line check before an append is needed only when this is unset.
    ends_whole: AtomicBool,
}

/// What [`FileLock::probe`] found.
#[derive(Debug)]
pub enum Probe {
    /// The lock was free: it is ours now.
    Free(FileLock),
    /// Someone holds the lock: the file as opened (at offset 0).
    Held(File),
    /// The file was unlinked or replaced while we took its lock (its holder finished
    /// with it).
    Replaced,
}

impl FileLock {
    /// Creates a file already locked, opened for appending, with `first` as its
    /// content: built under a temporary name and renamed into place, so nobody ever
    /// sees it unlocked or empty.
    pub fn create_held_with(path: &Path, first: &[u8]) -> io::Result<Self> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = open_appending(&tmp, true)?;
        let placed = (|| {
            if !crate::os::lock_file(&file, true)? {
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
            ends_whole: AtomicBool::new(first.ends_with(b"\n")),
        })
    }

    /// [`FileLock::try_acquire`], with the file opened for appending.
    pub fn try_acquire_appending(path: &Path) -> io::Result<Option<Self>> {
        let file = open_appending(path, false)?;
        if !crate::os::lock_file(&file, false)? || !same_file(&file, path) {
            return Ok(None);
        }
        Ok(Some(Self {
            file,
            path: path.to_path_buf(),
            ends_whole: AtomicBool::new(false),
        }))
    }

    /// Appends `bytes` (the file was opened with `O_APPEND`: one `write` lands whole
    /// at the end, never interleaved with another writer's). A line an earlier write
    /// left without its end (a full disk cut it short) first gets one, so `bytes` are
    /// never glued onto it: readers skip the torn line and keep the ones after it.
    pub fn append(&self, bytes: &[u8]) -> io::Result<()> {
        let known_whole = self.ends_whole.swap(false, Ordering::Relaxed);
        let written = match !known_whole && ends_mid_line(&self.file)? {
            true => {
                let mut whole = Vec::with_capacity(bytes.len() + 1);
                whole.push(b'\n');
                whole.extend_from_slice(bytes);
                (&self.file).write_all(&whole)
            }
            false => (&self.file).write_all(bytes),
        };
        // A failed write may have left part of `bytes`: the next append looks again.
        if written.is_ok() && bytes.ends_with(b"\n") {
            self.ends_whole.store(true, Ordering::Relaxed);
        }
        written
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
        match Self::probe(path)? {
            Probe::Free(lock) => Ok(Some(lock)),
            Probe::Held(_) | Probe::Replaced => Ok(None),
        }
    }

    /// [`FileLock::try_acquire`] that keeps the file open when someone holds its lock,
    /// so its record can be read without opening it a second time (a `ps` of 1 000
    /// live trees reads 1 000 of them).
    pub fn probe(path: &Path) -> io::Result<Probe> {
        let file = open_rw(path, false)?;
        if !crate::os::lock_file(&file, false)? {
            return Ok(Probe::Held(file));
        }
        if !same_file(&file, path) {
            return Ok(Probe::Replaced);
        }
        Ok(Probe::Free(Self {
            file,
            path: path.to_path_buf(),
            ends_whole: AtomicBool::new(false),
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
            if crate::os::lock_file(&file, false)? {
                return Ok(Some(Self {
                    file,
                    path: path.to_path_buf(),
                    ends_whole: AtomicBool::new(false),
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
    open_state_file(o, path)
}

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create(create);
    open_state_file(o, path)
}

/// Opens a file of the state dir for reading (see [`open_state_file`]).
pub(crate) fn open_for_reading(path: &Path) -> io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    open_state_file(o, path)
}

/// Opens a file of the state dir: never through a symlink, never blocking (a FIFO
/// planted there would block the open, or a read, until someone writes to it), and
/// only a regular file (anything else is refused with `InvalidData`). Close-on-exec.
#[cfg_attr(not(unix), allow(unused_mut))]
fn open_state_file(mut o: std::fs::OpenOptions, path: &Path) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // std opens with O_CLOEXEC already; NOFOLLOW keeps a planted symlink out.
        o.mode(0o600).custom_flags(crate::os::STATE_FILE_OPEN_FLAGS);
    }
    let file = o.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Whether the file's last byte is not a newline (an empty file ends no line).
#[cfg(unix)]
fn ends_mid_line(file: &File) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let mut last = [b'\n'];
    if len > 0 {
        file.read_at(&mut last, len - 1)?;
    }
    Ok(last[0] != b'\n')
}

#[cfg(not(unix))]
fn ends_mid_line(_file: &File) -> io::Result<bool> {
    Ok(false)
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
        assert_eq!(crate::registry::record_file::holder(&mut got), None);
        got.remove();
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_append_after_a_torn_line_starts_a_line_of_its_own() {
        let dir = std::env::temp_dir().join(format!("ut-torn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.tree");
        let held = FileLock::create_held_with(&path, b"one\n").unwrap();
        // What a write cut short by a full disk leaves: a line without its end.
        held.append(b"{\"audit\":{\"act").unwrap();
        held.append(b"three\n").unwrap();
        held.append(b"four\n").unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"one\n{\"audit\":{\"act\nthree\nfour\n"
        );
        drop(held);
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
