//! The cgroup v2 tier: one cgroup per tree, inherited by every fork, killed at once.
//!
//! Placement: as root, `<cgroup2 mount>/undertaker/`; otherwise our own cgroup when it
//! is delegated to us (we can create children in it and write its `cgroup.procs`).
//! Tree cgroups are leaves and undertaker never enables controllers, so the v2 "no
//! internal processes" rule cannot bite: processes only ever live in leaves or in the
//! cgroup we were already in, whose `subtree_control` we leave alone.
//!
//! A tree cgroup is named `undertaker.<tree id>.<pidns inode>.<guardian pid>.<guardian
//! starttime>` (cgroupfs holds no regular files, so the name is the record). A sweep
//! finds leftovers with [`list_tree_cgroups`] even without a registry row, and judges
//! the guardian alive only when it is in the sweeper's own PID namespace.

use crate::identity::TreeId;
use crate::linux::kernel::poll::poll_until;
use crate::linux::kernel::procfs::{parse_cgroup_v2, Procfs};
use crate::linux::proof::signal::{Members, ProvenProcess, Signaller};
use crate::linux::proof::teardown::{AuditEvent, Escalation, TeardownReport, TreeSource};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Name prefix of every cgroup undertaker creates.
pub const NAME_PREFIX: &str = "undertaker.";

/// A cgroup2 mount, from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted (e.g. /sys/fs/cgroup or /sys/fs/cgroup/unified).
    pub mount_point: PathBuf,
    /// Which cgroup of the hierarchy the mount shows at its root (usually "/").
    pub root: String,
}

/// Decodes the octal escapes (`\040` for space) mountinfo uses in paths.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first cgroup2 mount in a mountinfo text.
pub fn parse_cgroup2_mount(mountinfo: &str) -> Option<CgroupMount> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split(' ').next()? != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = left.split(' ').collect();
        Some(CgroupMount {
            root: unescape(fields.get(3)?),
            mount_point: PathBuf::from(unescape(fields.get(4)?)),
        })
    })
}

impl CgroupMount {
    /// The directory of cgroup `rel` (as /proc/PID/cgroup prints it), if this mount
    /// shows it.
    pub fn dir_of(&self, rel: &str) -> Option<PathBuf> {
        let root = self.root.trim_end_matches('/');
        let rest = rel.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        Some(self.mount_point.join(rest.trim_start_matches('/')))
    }

    /// The cgroup path (as /proc/PID/cgroup prints it) of directory `dir`.
    pub fn rel_of(&self, dir: &Path) -> Option<String> {
        let rest = dir.strip_prefix(&self.mount_point).ok()?;
        let root = self.root.trim_end_matches('/');
        let rest = rest.to_str()?;
        Some(if rest.is_empty() {
            if root.is_empty() {
                "/".into()
            } else {
                root.into()
            }
        } else {
            format!("{root}/{rest}")
        })
    }
}

/// Where tree cgroups are created.
#[derive(Debug, Clone)]
pub struct Location {
    pub mount: CgroupMount,
    /// The directory tree cgroups are created in.
    pub parent: PathBuf,
    /// "root" (`<mount>/undertaker`, as root) or "delegated" (our own cgroup).
    pub kind: &'static str,
}

pub fn current_mount() -> Result<CgroupMount, String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    parse_cgroup2_mount(&text).ok_or_else(|| "no cgroup2 filesystem is mounted".into())
}

/// The cgroup directory `pid` is in now.
pub fn dir_of_process(procfs: &Procfs, pid: i32) -> Option<PathBuf> {
    let rel = procfs.cgroup_v2_path(pid).ok()??;
    current_mount().ok()?.dir_of(&rel)
}

/// Writes `pid` to `dir`'s cgroup.procs.
pub fn move_to(dir: &Path, pid: i32) -> io::Result<()> {
    std::fs::write(dir.join("cgroup.procs"), pid.to_string())
}

fn writable(path: &Path) -> bool {
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok()
}

/// Finds a place where this process may create tree cgroups and move its children
/// into them, or says why there is none.
pub fn locate() -> Result<Location, String> {
    let mount = current_mount()?;
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| parse_cgroup_v2(&t))
        .ok_or("this process is in no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)")?;
    let mut why = Vec::new();
    if rustix::process::geteuid().is_root() {
        let dir = mount.mount_point.join("undertaker");
        match rustix::fs::mkdir(&dir, Mode::from_raw_mode(0o755)) {
            // Root of a user namespace is not root of the cgroupfs: the directory
            // may exist yet belong to an unmapped owner, so check we can write it.
            Ok(()) | Err(rustix::io::Errno::EXIST) if writable(&dir) => {
                return Ok(Location {
                    mount,
                    parent: dir,
                    kind: "root",
                })
            }
            Ok(()) | Err(rustix::io::Errno::EXIST) => {
                why.push(format!("{} is not writable by us", dir.display()))
            }
            Err(e) => why.push(format!("cannot create {}: {e}", dir.display())),
        }
    }
    match mount.dir_of(&own) {
        None => why.push(format!(
            "our cgroup {own} is outside the cgroup2 mount at {}",
            mount.mount_point.display()
        )),
        Some(dir) => {
            let kind = std::fs::read_to_string(dir.join("cgroup.type")).unwrap_or_default();
            if kind.trim().contains("threaded") {
                why.push(format!("our cgroup {own} is threaded"));
            } else if !writable(&dir) || !writable(&dir.join("cgroup.procs")) {
                why.push(format!(
                    "our cgroup {} is not delegated to us (not writable)",
                    dir.display()
                ));
            } else {
                return Ok(Location {
                    mount,
                    parent: dir,
                    kind: "delegated",
                });
            }
        }
    }
    Err(why.join("; "))
}

/// Name of a tree's cgroup directory.
pub fn dir_name(tree: &TreeId, pidns: u64, guardian_pid: i32, guardian_starttime: u64) -> String {
    format!("{NAME_PREFIX}{tree}.{pidns}.{guardian_pid}.{guardian_starttime}")
}

/// What a tree cgroup's name says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFacts {
    pub tree: TreeId,
    pub pidns: u64,
    pub guardian_pid: i32,
    pub guardian_starttime: u64,
}

/// Parses a name made by [`dir_name`]; anything else is not ours.
pub fn parse_dir_name(name: &str) -> Option<NameFacts> {
    let mut parts = name.strip_prefix(NAME_PREFIX)?.split('.');
    let facts = NameFacts {
        tree: TreeId::parse(parts.next()?)?,
        pidns: parts.next()?.parse().ok()?,
        guardian_pid: parts.next()?.parse().ok().filter(|&p: &i32| p > 0)?,
        guardian_starttime: parts.next()?.parse().ok()?,
    };
    parts.next().is_none().then_some(facts)
}

/// Inode of our PID namespace (`/proc/self/ns/pid`).
pub fn own_pidns() -> Option<u64> {
    rustix::fs::stat("/proc/self/ns/pid").ok().map(|s| s.st_ino)
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

    /// Opens an existing tree cgroup (for a sweep).
    pub fn open(path: &Path) -> io::Result<Self> {
        let mount = current_mount().map_err(io::Error::other)?;
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
        let mut buf = [0u8; 256];
        match rustix::io::pread(&self.events, &mut buf, 0) {
            Ok(n) => !String::from_utf8_lossy(&buf[..n])
                .lines()
                .any(|l| l.trim() == "populated 0"),
            Err(_) => true,
        }
    }

    /// This cgroup and every cgroup below it, parents first, as (directory, cgroup
    /// id, path as /proc/PID/cgroup prints it). Tree cgroups are leaves when created,
    /// but a member may create a child cgroup and move into it: it is still a member.
    fn subtree(&self) -> Vec<(PathBuf, u64, String)> {
        /// Bounds the walk: a tree cannot make the guardian scan forever.
        const MAX_CGROUPS: usize = 10_000;
        let mut out = vec![(self.path.clone(), self.id, self.rel.clone())];
        let mut next = 0;
        while next < out.len() && out.len() < MAX_CGROUPS {
            let (dir, _, rel) = out[next].clone();
            next += 1;
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
            }
        }
        out
    }

    /// Pids listed in `cgroup.procs` of `dir`.
    fn pids_of(dir: &Path) -> Vec<i32> {
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Pids in the cgroup at `path` (under `mount`) and every cgroup below it, for
    /// counting only: the cgroup is not opened as a tree, so listing many cgroups reads
    /// mountinfo once (the caller's `mount`) instead of once per cgroup.
    pub fn pids_at(mount: &CgroupMount, path: &Path) -> Vec<i32> {
        /// Bounds the walk, as [`Self::subtree`] does.
        const MAX_CGROUPS: usize = 10_000;
        if mount.rel_of(path).is_none() {
            return Vec::new();
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
        dirs.iter().flat_map(|d| Self::pids_of(d)).collect()
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

/// A cgroup as a teardown source on its own (for the sweep: no guardian to reap).
pub struct CgroupSource<'a> {
    pub tree: &'a CgroupTree,
}

impl TreeSource for CgroupSource<'_> {
    fn members(&mut self, signaller: &Signaller) -> Members {
        self.tree.members(signaller)
    }
    fn wait(&mut self, deadline: Instant, watch: &[&ProvenProcess]) {
        self.tree.wait(deadline, watch);
    }
    fn is_empty(&mut self) -> bool {
        !self.tree.is_populated()
    }
    fn kill_all(&mut self) -> bool {
        self.tree.kill()
    }
}

/// Tears down the tree in the cgroup at `path` (whose guardian is dead) and removes the
/// cgroup: TERM round through proven pidfds, grace, then cgroup.kill, every signal and
/// refusal passed to `audit`. Everything in the cgroup dies, including a descendant
/// that scrubbed its environment and left its session: cgroup membership is
/// inherited, not declared.
pub fn sweep_orphaned_cgroup(
    signaller: &Signaller,
    path: &Path,
    escalation: &Escalation,
    audit: &mut dyn FnMut(AuditEvent),
) -> TeardownReport {
    let tree = match CgroupTree::open(path) {
        Ok(t) => t,
        // Already removed: nothing can be left in it.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return TeardownReport {
                targets: Vec::new(),
                empty: true,
            }
        }
        Err(e) => {
            tracing::warn!("cannot open cgroup {}: {e}", path.display());
            return TeardownReport::default();
        }
    };
    let report = escalation.run(signaller, &mut CgroupSource { tree: &tree }, audit);
    if report.empty {
        if let Err(e) = tree.remove(Duration::from_secs(2)) {
            tracing::warn!("cannot remove cgroup {}: {e}", path.display());
        }
    }
    report
}

/// Whether a tree cgroup's guardian still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardianState {
    Alive,
    Dead,
    /// The guardian ran in another PID namespace: its pid means nothing here.
    Unknown,
}

/// A tree cgroup found on disk.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FoundTreeCgroup {
    pub path: PathBuf,
    pub tree: TreeId,
    pub guardian_pid: i32,
    pub guardian_starttime: u64,
    pub guardian: GuardianState,
}

/// Every undertaker tree cgroup under the cgroup2 mount (a bounded walk), with whether
/// its guardian is alive. Sweep the `Dead` ones with [`sweep_orphaned_cgroup`].
pub fn list_tree_cgroups(procfs: &Procfs) -> Vec<FoundTreeCgroup> {
    let Ok(mount) = current_mount() else {
        return Vec::new();
    };
    let ours = own_pidns();
    let mut found = Vec::new();
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
            if let Some(facts) = parse_dir_name(&name) {
                let guardian = if ours != Some(facts.pidns) {
                    GuardianState::Unknown
                } else {
                    match procfs.stat(facts.guardian_pid) {
                        Ok(st) if st.starttime == facts.guardian_starttime => GuardianState::Alive,
                        _ => GuardianState::Dead,
                    }
                };
                found.push(FoundTreeCgroup {
                    path: entry.path(),
                    tree: facts.tree,
                    guardian_pid: facts.guardian_pid,
                    guardian_starttime: facts.guardian_starttime,
                    guardian,
                });
            } else if depth < 16 && visited < 100_000 {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn finds_cgroup2_on_hybrid_and_unified() {
        let m = parse_cgroup2_mount(HYBRID).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m.root, "/");
        let unified =
            "30 24 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let m = parse_cgroup2_mount(unified).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(parse_cgroup2_mount("garbage\n\n - \n"), None);
    }

    #[test]
    fn unescapes_mount_points() {
        let line = "41 31 0:38 /a\\040b /mnt/c\\040g rw - cgroup2 cgroup2 rw\n";
        let m = parse_cgroup2_mount(line).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/mnt/c g"));
        assert_eq!(m.root, "/a b");
    }

    #[test]
    fn maps_between_cgroup_paths_and_dirs() {
        let m = CgroupMount {
            mount_point: "/sys/fs/cgroup".into(),
            root: "/".into(),
        };
        assert_eq!(m.dir_of("/"), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(
            m.dir_of("/user.slice/x.scope"),
            Some(PathBuf::from("/sys/fs/cgroup/user.slice/x.scope"))
        );
        assert_eq!(m.rel_of(Path::new("/sys/fs/cgroup/a/b")).unwrap(), "/a/b");
        assert_eq!(m.rel_of(Path::new("/sys/fs/cgroup")).unwrap(), "/");
        let sub = CgroupMount {
            mount_point: "/cg".into(),
            root: "/kube/pod".into(),
        };
        assert_eq!(sub.dir_of("/kube/pod/c"), Some(PathBuf::from("/cg/c")));
        assert_eq!(sub.dir_of("/kube/podx"), None);
        assert_eq!(sub.dir_of("/other"), None);
        assert_eq!(sub.rel_of(Path::new("/cg/c")).unwrap(), "/kube/pod/c");
    }

    #[test]
    fn dir_names_round_trip_and_reject_strangers() {
        let tree = TreeId::parse(&"ab".repeat(16)).unwrap();
        let name = dir_name(&tree, 4026531836, 1234, 99);
        let facts = parse_dir_name(&name).unwrap();
        assert_eq!(facts.tree, tree);
        assert_eq!(
            (facts.pidns, facts.guardian_pid, facts.guardian_starttime),
            (4026531836, 1234, 99)
        );
        for bad in [
            "undertaker",
            "user.slice",
            "undertaker.xyz.1.2.3",
            &format!("{NAME_PREFIX}{tree}.1.0.3"),
            &format!("{NAME_PREFIX}{tree}.1.2.3.4"),
            &format!("{NAME_PREFIX}{tree}.1.-2.3"),
        ] {
            assert_eq!(parse_dir_name(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC*") {
            let _ = parse_cgroup2_mount(&s);
            let _ = parse_dir_name(&s);
            let _ = unescape(&s);
        }
    }
}
