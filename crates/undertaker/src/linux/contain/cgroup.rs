//! The cgroup v2 tier: one cgroup per tree, inherited by every fork, killed at once.
//!
//! Where tree cgroups go is `cgroup_place`'s business (beneath our own cgroup when
//! possible). Tree cgroups are leaves and undertaker never enables controllers, so the
//! v2 "no internal processes" rule cannot bite: processes only ever live in leaves or
//! in the cgroup we were already in, whose `subtree_control` we leave alone.
//!
//! A tree cgroup is named `undertaker.<tree id>.<pidns inode>.<guardian pid>.<guardian
//! starttime>` (cgroupfs holds no regular files, so the name is the record). A sweep
//! finds leftovers with [`list_tree_cgroups`] even without a registry row, and judges
//! the guardian by its pid and start time when it ran in the sweeper's own PID
//! namespace, dead when its namespace provably has no process left, else unknown.

mod replace;

use crate::identity::TreeId;
// A tree cgroup's name (the one module both this and `cgroup_place` read it through).
pub use crate::linux::contain::cgroup_name::{dir_name, parse_dir_name, NAME_PREFIX};
use crate::linux::contain::cgroup_place::{is_tree_cgroup_path, may_hold_trees};
use crate::linux::kernel::poll::poll_until;
// Placement and the mount live in `cgroup_place`; the tier is used through this module.
pub use crate::linux::contain::cgroup_place::{current_mount, locate, CgroupMount, Location};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::empty_pidns;
use crate::linux::proof::signal::{Members, ProvenProcess, Signaller};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup directory `pid` is in now.
pub fn dir_of_process(procfs: &Procfs, pid: i32) -> Option<PathBuf> {
    let rel = procfs.cgroup_v2_path(pid).ok()??;
    current_mount().ok()?.dir_of(&rel)
}

/// Writes `pid` to `dir`'s cgroup.procs.
pub fn move_to(dir: &Path, pid: i32) -> io::Result<()> {
    std::fs::write(dir.join("cgroup.procs"), pid.to_string())
}

/// Inode of our PID namespace (`/proc/self/ns/pid`): the number its link reads
/// (`pid:[4026531836]`, the namespace's inode, namespaces(7)). A `stat` through the
/// link gives the same number and costs about twice as much: nsfs makes a dentry for
/// it (run's start path names the tree cgroup with it).
pub fn own_pidns() -> Option<u64> {
    let mut buf = [0u8; 64];
    let n = rustix::fs::readlinkat_raw(rustix::fs::CWD, "/proc/self/ns/pid", &mut buf[..]).ok()?;
    parse_pidns_link(&buf[..n])
}

/// The inode number in a `/proc/PID/ns/pid` link (`pid:[N]`).
fn parse_pidns_link(link: &[u8]) -> Option<u64> {
    let digits = link.strip_prefix(b"pid:[")?.strip_suffix(b"]")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A tree's cgroup. `path` and `id` are what the registry records.
#[derive(Debug)]
pub struct CgroupTree {
    pub path: PathBuf,
    /// The cgroup id (the directory's inode on cgroupfs; what PIDFD_GET_INFO reports).
    pub id: u64,
    /// The path as /proc/PID/cgroup prints it.
    pub rel: String,
    events: OwnedFd,
}

impl CgroupTree {
    /// Creates the cgroup for `tree` in `loc`.
    pub fn create(
        loc: &Location,
        tree: &TreeId,
        guardian_pid: i32,
        guardian_starttime: u64,
    ) -> Result<Self, String> {
        let pidns = own_pidns().unwrap_or(0);
        let path = loc
            .parent
            .join(dir_name(tree, pidns, guardian_pid, guardian_starttime));
        rustix::fs::mkdir(&path, Mode::from_raw_mode(0o755))
            .map_err(|e| format!("cannot create cgroup {}: {e}", path.display()))?;
        Self::open_in(&loc.mount, path.clone()).map_err(|e| {
            let _ = rustix::fs::rmdir(&path);
            format!("cannot open cgroup {}: {e}", path.display())
        })
    }

    /// Opens an existing tree cgroup (for a sweep or a take-over). Only a tree cgroup
    /// in a place that may hold trees is opened: a record naming any other cgroup is
    /// not acted on.
    pub fn open(path: &Path) -> io::Result<Self> {
        let mount = current_mount().map_err(io::Error::other)?;
        if !is_tree_cgroup_path(&mount, path) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a tree cgroup", path.display()),
            ));
        }
        Self::open_in(&mount, path.to_path_buf())
    }

    fn open_in(mount: &CgroupMount, path: PathBuf) -> io::Result<Self> {
        let rel = mount
            .rel_of(&path)
            .ok_or_else(|| io::Error::other("not under the cgroup2 mount"))?;
        let id = rustix::fs::stat(&path)?.st_ino;
        let events = rustix::fs::open(
            path.join("cgroup.events"),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            path,
            id,
            rel,
            events,
        })
    }

    /// Opens `cgroup.procs` for the child to write "0" to before exec.
    pub fn open_procs_for_join(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            self.path.join("cgroup.procs"),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// The `cgroup.events` fd, to poll for POLLPRI.
    pub fn events_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }

    /// `populated` from cgroup.events. Reading re-arms the POLLPRI notification.
    /// Unreadable counts as populated: never conclude "empty" without evidence.
    pub fn is_populated(&self) -> bool {
        !self.events_say("populated 0")
    }

    /// Whether `cgroup.events` has the line `line` (false when unreadable).
    fn events_say(&self, line: &str) -> bool {
        let mut buf = [0u8; 256];
        rustix::io::pread(&self.events, &mut buf, 0).is_ok_and(|n| {
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .any(|l| l.trim() == line)
        })
    }

    /// This cgroup and every cgroup below it, parents first, as (directory, cgroup
    /// id, path as /proc/PID/cgroup prints it). Tree cgroups are leaves when created,
    /// but a member may create a child cgroup and move into it: it is still a member.
    fn subtree(&self) -> Vec<(PathBuf, u64, String)> {
        /// Bounds the walk: a tree cannot make the guardian scan forever.
        const MAX_CGROUPS: usize = 10_000;
        let mut out = vec![(self.path.clone(), self.id, self.rel.clone())];
        // Link counts: a directory with none but 2 has no child cgroup (see
        // [`PidsReader::pids_at`]) and is not listed.
        let mut links = vec![rustix::fs::stat(&self.path).map_or(0, |st| st.st_nlink)];
        let mut next = 0;
        while next < out.len() && out.len() < MAX_CGROUPS {
            let (dir, _, rel) = out[next].clone();
            next += 1;
            if links[next - 1] == 2 {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let Ok(st) = rustix::fs::stat(entry.path()) else {
                    continue;
                };
                let name = entry.file_name().to_string_lossy().into_owned();
                let child_rel = format!("{}/{name}", rel.trim_end_matches('/'));
                out.push((entry.path(), st.st_ino, child_rel));
                links.push(st.st_nlink);
            }
        }
        out
    }

    /// Pids listed in `cgroup.procs` of `dir`.
    fn pids_of(dir: &Path) -> Vec<i32> {
        Self::pids_of_at(rustix::fs::CWD, dir)
    }

    /// Pids listed in `cgroup.procs` of `dir`, relative to the open directory `base`
    /// (none when it cannot be read).
    fn pids_of_at(base: BorrowedFd<'_>, dir: &Path) -> Vec<i32> {
        Self::try_pids_of_at(base, dir).unwrap_or_default()
    }

    /// Pids listed in `cgroup.procs` of `dir`, relative to `base`; an unreadable list
    /// is an error, never "empty".
    fn try_pids_of_at(base: BorrowedFd<'_>, dir: &Path) -> io::Result<Vec<i32>> {
        use std::io::Read;
        // Read to its end without std's size probe (cgroupfs reports size 0, and a
        // `ps` reads one of these per tree): open, read, read, close.
        let mut text = Vec::with_capacity(4096);
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let read = rustix::fs::openat(base, dir.join("cgroup.procs"), flags, Mode::empty())
            .map_err(io::Error::from)
            .and_then(|fd| {
                std::fs::File::from(fd)
                    .take(64 << 20)
                    .read_to_end(&mut text)
            });
        read?;
        Ok(String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    /// Pids in this cgroup and every cgroup below it.
    pub fn pids(&self) -> Vec<i32> {
        self.subtree()
            .iter()
            .flat_map(|(dir, _, _)| Self::pids_of(dir))
            .collect()
    }

    /// Every live member, here or in a cgroup below, each proven through a pidfd to be
    /// in the cgroup it was listed in.
    pub fn members(&self, signaller: &Signaller) -> Members {
        let mut members = Members::default();
        for (dir, id, rel) in self.subtree() {
            for pid in Self::pids_of(&dir) {
                members.add(pid, signaller.prove_in_cgroup(pid, &dir, id, &rel));
            }
        }
        members
    }

    /// Moves the process `pid` names into this cgroup. Only sound for a number that is
    /// pinned: the caller checks its pidfd is still alive afterwards.
    pub fn move_in(&self, pid: i32) -> io::Result<()> {
        move_to(&self.path, pid)
    }

    /// Writes "1" to cgroup.kill (Linux ≥ 5.14): the kernel SIGKILLs every member,
    /// including ones forked while it runs. `false` when unsupported or refused.
    pub fn kill(&self) -> bool {
        std::fs::write(self.path.join("cgroup.kill"), b"1").is_ok()
    }

    /// Blocks until cgroup.events changes, a watched pidfd exits, or `deadline`.
    pub fn wait(&self, deadline: Instant, watch: &[&ProvenProcess]) {
        // Reading re-arms the POLLPRI notification.
        let _ = self.is_populated();
        let events = self.events.as_fd();
        let pidfds: Vec<_> = watch.iter().map(|p| p.pidfd()).collect();
        let mut fds = vec![PollFd::new(&events, PollFlags::PRI)];
        fds.extend(pidfds.iter().map(|fd| PollFd::new(fd, PollFlags::IN)));
        poll_until(&mut fds, Some(deadline));
    }

    /// Removes the (empty) cgroup. `populated 0` is reported before the kernel has
    /// finished releasing exited members, so EBUSY is retried for up to `patience`.
    pub fn remove(&self, patience: Duration) -> io::Result<()> {
        let end = Instant::now() + patience;
        // Children first: a cgroup with child cgroups cannot be removed.
        let mut dirs: Vec<PathBuf> = self.subtree().into_iter().map(|(d, _, _)| d).collect();
        dirs.reverse();
        for dir in dirs {
            remove_dir(&dir, end)?;
        }
        Ok(())
    }
}

/// Reads the processes of many tree cgroups (`ps` reads one per tree): each is reached
/// from its parent directory, opened once, instead of walked from `/` through sysfs,
/// the cgroup mounts and every directory down (most of the cost of the read).
#[derive(Default)]
pub struct PidsReader {
    parents: std::collections::HashMap<PathBuf, Option<OwnedFd>>,
}

impl PidsReader {
    /// Pids in the cgroup at `path` (under `mount`) and every cgroup below it, for
    /// counting only: the cgroup is not opened as a tree, so listing many cgroups reads
    /// mountinfo once (the caller's `mount`) instead of once per cgroup.
    pub fn pids_at(&mut self, mount: &CgroupMount, path: &Path) -> Vec<i32> {
        /// Bounds the walk, as [`CgroupTree::subtree`] does.
        const MAX_CGROUPS: usize = 10_000;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Vec::new();
        };
        if mount.rel_of(path).is_none() {
            return Vec::new();
        }
        let opened = self.parents.entry(parent.to_path_buf()).or_insert_with(|| {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            rustix::fs::open(parent, flags, Mode::empty()).ok()
        });
        let (base, rel) = match opened.as_ref() {
            Some(fd) => (fd.as_fd(), Path::new(name)),
            None => (rustix::fs::CWD, path),
        };
        // A cgroup directory's link count is 2 plus its child cgroups (kernfs): a leaf,
        // the usual tree cgroup, is known without listing it (one statx, not four calls).
        match rustix::fs::statat(base, rel, rustix::fs::AtFlags::empty()) {
            Ok(st) if st.st_nlink == 2 => return CgroupTree::pids_of_at(base, rel),
            Ok(_) => {}
            Err(_) => return Vec::new(),
        }
        let mut dirs = vec![path.to_path_buf()];
        let mut next = 0;
        while next < dirs.len() && dirs.len() < MAX_CGROUPS {
            let Ok(entries) = std::fs::read_dir(&dirs[next]) else {
                next += 1;
                continue;
            };
            next += 1;
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(entry.path());
                }
            }
        }
        dirs.iter().flat_map(|d| CgroupTree::pids_of(d)).collect()
    }
}

/// rmdir of an empty cgroup, retrying EBUSY until `end`.
fn remove_dir(dir: &Path, end: Instant) -> io::Result<()> {
    // The release usually completes within microseconds: start the back-off small
    // (a flat 5 ms was most of a short-lived guardian's p90).
    let mut pause = Duration::from_micros(50);
    loop {
        match rustix::fs::rmdir(dir) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(rustix::io::Errno::BUSY) if Instant::now() < end => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether a tree cgroup's guardian still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardianState {
    Alive,
    /// Its pid no longer has its start time in our namespace, or it ran in a PID
    /// namespace that provably has no process left ([`empty_pidns`]).
    Dead,
    /// The guardian ran in another PID namespace, which may still have processes: its
    /// pid means nothing here.
    Unknown,
}

/// A tree cgroup found on disk.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FoundTreeCgroup {
    pub path: PathBuf,
    pub tree: TreeId,
    /// The inode of the PID namespace the guardian ran in (0: it could not tell).
    pub guardian_pidns: u64,
    pub guardian_pid: i32,
    pub guardian_starttime: u64,
    pub guardian: GuardianState,
}

/// Every undertaker tree cgroup under the cgroup2 mount (a bounded walk), with whether
/// its guardian is alive. `sweep` tears the `Dead` ones down as trees of their own
/// (`Tree::left_behind`).
///
/// A guardian of another PID namespace is `Dead` only when a census of every process,
/// taken after the walk found its cgroup, finds no process in that namespace (possible
/// from the initial PID namespace only: [`empty_pidns`]); otherwise `Unknown`.
pub fn list_tree_cgroups(procfs: &Procfs) -> Vec<FoundTreeCgroup> {
    let Ok(mount) = current_mount() else {
        return Vec::new();
    };
    let ours = own_pidns();
    let mut named = Vec::new();
    let mut stack = vec![(mount.mount_point.clone(), 0usize)];
    let mut visited = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            visited += 1;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // The walk never enters a tree cgroup, so every parent it looks in may
            // hold trees; the rule is checked anyway, so that it lives in one place.
            let facts = parse_dir_name(&name).filter(|_| may_hold_trees(&mount, &dir));
            if let Some(facts) = facts {
                named.push((entry.path(), facts));
            } else if depth < 16 && visited < 100_000 {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    // After the walk, never before (see [`empty_pidns`]), and only when needed: it
    // reads every process.
    let foreign = named
        .iter()
        .map(|(_, f)| f.pidns)
        .filter(|&ns| ours != Some(ns))
        .collect();
    let empty = empty_pidns::provably_empty(&foreign);
    named
        .into_iter()
        .map(|(path, facts)| {
            let guardian = if ours == Some(facts.pidns) {
                match procfs.stat(facts.guardian_pid) {
                    Ok(st) if st.starttime == facts.guardian_starttime => GuardianState::Alive,
                    _ => GuardianState::Dead,
                }
            } else if empty.contains(&facts.pidns) {
                GuardianState::Dead
            } else {
                GuardianState::Unknown
            };
            FoundTreeCgroup {
                path,
                tree: facts.tree,
                guardian_pidns: facts.pidns,
                guardian_pid: facts.guardian_pid,
                guardian_starttime: facts.guardian_starttime,
                guardian,
            }
        })
        .collect()
}

#[cfg(test)]
mod pidns_tests {
    #[test]
    fn own_pidns_is_the_inode_a_stat_through_the_link_gives() {
        let st = rustix::fs::stat("/proc/self/ns/pid").unwrap();
        assert_eq!(super::own_pidns(), Some(st.st_ino));
        assert_eq!(
            super::parse_pidns_link(b"pid:[4026531836]"),
            Some(4026531836)
        );
        assert_eq!(super::parse_pidns_link(b"net:[4026531840]"), None);
        assert_eq!(super::parse_pidns_link(b"pid:[12"), None);
    }
}
