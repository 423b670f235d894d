//! Where tree cgroups go (docs/TIERS.md, "Placement"), and where they may be.
//!
//! A program writes only inside a cgroup subtree delegated to it: a tree placed at the
//! root of the hierarchy leaves its service's (or session's) cgroup, and with it the
//! service's limits, accounting and stop. So trees go beneath undertaker's own cgroup
//! when that is possible, and at the hierarchy root (`<mount>/undertaker/`) only when
//! asked (`--cgroup-root`, `$UNDERTAKER_CGROUP_ROOT`) or when nothing else works.
//!
//! [`locate`] gathers the facts about our own cgroup ([`OwnCgroup`]) and [`decide`]
//! turns them into a [`Location`] with its reason; [`may_hold_trees`] is the one rule
//! for where a tree cgroup may be found, which every sweep applies.

use crate::linux::contain::cgroup_name::parse_dir_name;
use crate::linux::kernel::procfs::parse_cgroup_v2;
use rustix::fs::Mode;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod mount;
pub use mount::current_mount;
#[cfg(test)]
use mount::parse_cgroup2_mount;

/// The environment variable that asks for a parent directory of tree cgroups (the
/// `--cgroup-root` flag wins over it).
pub const CGROUP_ROOT_ENV: &str = "UNDERTAKER_CGROUP_ROOT";

static ASKED_ROOT: OnceLock<PathBuf> = OnceLock::new();

/// `--cgroup-root PATH`: tree cgroups of this process go in `path`. Set once, before
/// any tree is placed; a later call changes nothing.
pub fn ask_for_root(path: PathBuf) {
    let _ = ASKED_ROOT.set(path);
}

/// The parent asked for: the flag, else the environment variable.
fn asked_root() -> Option<PathBuf> {
    ASKED_ROOT.get().cloned().or_else(|| {
        std::env::var_os(CGROUP_ROOT_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// A cgroup2 mount (which one: [`current_mount`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted (e.g. /sys/fs/cgroup or /sys/fs/cgroup/unified).
    pub mount_point: PathBuf,
    /// Which cgroup of the hierarchy the mount shows at its root (usually "/").
    pub root: String,
}

/// Decodes the octal escapes (`\040` for space) mountinfo uses in paths.
pub(crate) fn unescape(field: &str) -> String {
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

    /// The shared parent at the top of what this mount shows: `<mount>/undertaker`.
    fn top(&self) -> PathBuf {
        self.mount_point.join("undertaker")
    }
}

/// A small kernel-generated text file in one or two reads. `std::fs::read_to_string`
/// starts with a 32-byte probe and doubles from there: seven reads of a mountinfo the
/// kernel regenerates as it goes, on `run`'s path before CMD starts.
fn read_text(path: impl AsRef<Path>) -> std::io::Result<String> {
    crate::linux::kernel::procfs::read_text(path.as_ref())
}

/// [`read_text`] of a single-record file (`/proc/self/cgroup`, a cgroup's control
/// files): one read.
fn read_single_text(path: impl AsRef<Path>) -> std::io::Result<String> {
    crate::linux::kernel::procfs::read_single_text(path.as_ref())
}

/// Which rule chose a [`Location`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceKind {
    /// `--cgroup-root` or `$UNDERTAKER_CGROUP_ROOT`.
    Asked,
    /// Beneath our own cgroup, which is delegated to us (systemd's `Delegate=yes`
    /// mark, a cgroup owned by our non-root uid, or a container's cgroup).
    Delegated,
    /// Beneath our own cgroup: writable, and no controllers enabled for children.
    Own,
    /// `<mount>/undertaker`: we run in the hierarchy's root cgroup, or nothing else
    /// works (root only).
    HierarchyRoot,
}

impl PlaceKind {
    /// Stable names (docs/CLI-JSON-doctor.md).
    pub fn as_str(self) -> &'static str {
        match self {
            PlaceKind::Asked => "asked",
            PlaceKind::Delegated => "delegated",
            PlaceKind::Own => "own",
            PlaceKind::HierarchyRoot => "hierarchy_root",
        }
    }
}

/// Where tree cgroups are created, and why there.
#[derive(Debug, Clone)]
pub struct Location {
    pub mount: CgroupMount,
    /// The directory tree cgroups are created in.
    pub parent: PathBuf,
    pub kind: PlaceKind,
    /// One line: why this place.
    pub reason: String,
}

/// What placement needs to know about our own cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnCgroup {
    /// Its directory, when the mount shows it.
    pub dir: Option<PathBuf>,
    /// The root cgroup of the whole hierarchy (it has no `cgroup.type`).
    pub hierarchy_root: bool,
    /// The top of what the mount shows, yet not the hierarchy root: a container's
    /// cgroup (namespace root or bind mount), delegated to it.
    pub container_root: bool,
    pub threaded: bool,
    /// We may create cgroups in it and write its `cgroup.procs`.
    pub writable: bool,
    /// What its `cgroup.subtree_control` enables for children (empty: nothing).
    pub subtree_control: String,
    /// systemd's `trusted.delegate`/`user.delegate` mark, or owned by our non-root uid.
    pub delegated: bool,
}

fn writable(path: &Path) -> bool {
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok()
}

/// systemd marks a delegated cgroup with the extended attribute `trusted.delegate`
/// (system manager) or `user.delegate` (user manager) set to "1".
fn delegate_mark(dir: &Path) -> bool {
    ["trusted.delegate", "user.delegate"].iter().any(|name| {
        let mut value = [0u8; 8];
        rustix::fs::getxattr(dir, *name, &mut value[..]).is_ok_and(|n| &value[..n] == b"1")
    })
}

impl OwnCgroup {
    /// Reads the facts about the cgroup `rel` (ours, from /proc/self/cgroup).
    fn probe(mount: &CgroupMount, rel: &str) -> Self {
        let Some(dir) = mount.dir_of(rel) else {
            return Self::default();
        };
        let kind = read_single_text(dir.join("cgroup.type"));
        let at_top = dir == mount.mount_point;
        let root = rustix::process::geteuid().is_root();
        let owned =
            rustix::fs::stat(&dir).is_ok_and(|st| st.st_uid == rustix::process::geteuid().as_raw());
        Self {
            hierarchy_root: at_top && kind.is_err(),
            container_root: at_top && kind.is_ok(),
            threaded: kind.as_deref().unwrap_or("").contains("threaded"),
            writable: writable(&dir) && writable(&dir.join("cgroup.procs")),
            subtree_control: read_single_text(dir.join("cgroup.subtree_control"))
                .unwrap_or_default()
                .trim()
                .to_string(),
            delegated: delegate_mark(&dir) || (owned && !root),
            dir: Some(dir),
        }
    }
}

/// Where trees go, from the facts alone (no file is touched): `None` when the cgroup
/// tier has no place here, with the reasons in `why`.
pub fn decide(
    mount: &CgroupMount,
    own: &OwnCgroup,
    root: bool,
    why: &mut Vec<String>,
) -> Option<(PathBuf, PlaceKind, String)> {
    let top = || (mount.top(), PlaceKind::HierarchyRoot);
    let Some(dir) = &own.dir else {
        why.push(format!(
            "our cgroup is outside the cgroup2 mount at {}",
            mount.mount_point.display()
        ));
        return root.then(|| {
            let (p, k) = top();
            (p, k, format!("nothing else works ({})", why.join("; ")))
        });
    };
    if own.hierarchy_root {
        if root {
            let (p, k) = top();
            return Some((
                p,
                k,
                "undertaker runs in the hierarchy's root cgroup".into(),
            ));
        }
        why.push("we run in the hierarchy's root cgroup and are not root".into());
        return None;
    }
    if own.threaded {
        why.push(format!("our cgroup {} is threaded", dir.display()));
    } else if !own.writable {
        why.push(format!(
            "our cgroup {} is not delegated to us (not writable)",
            dir.display()
        ));
    } else if own.container_root {
        return Some((
            mount.top(),
            PlaceKind::Delegated,
            format!("our cgroup {} is a container's cgroup", dir.display()),
        ));
    } else if own.delegated {
        return Some((
            dir.clone(),
            PlaceKind::Delegated,
            format!("our cgroup {} is delegated to us", dir.display()),
        ));
    } else if own.subtree_control.is_empty() {
        return Some((
            dir.clone(),
            PlaceKind::Own,
            format!(
                "our cgroup {} is writable and enables no controllers for children",
                dir.display()
            ),
        ));
    } else {
        why.push(format!(
            "our cgroup {} is not delegated and enables controllers for children ({})",
            dir.display(),
            own.subtree_control
        ));
    }
    root.then(|| {
        let (p, k) = top();
        (p, k, format!("nothing else works ({})", why.join("; ")))
    })
}

/// Creates `dir` if missing (its parent must exist) and checks we can use it.
fn usable(dir: &Path, mount: &CgroupMount) -> Result<(), String> {
    if !dir.is_absolute() || mount.rel_of(dir).is_none() {
        return Err(format!(
            "{} is not a directory under the cgroup2 mount at {}",
            dir.display(),
            mount.mount_point.display()
        ));
    }
    // There and writable, as on every start but the first: one look.
    if writable(dir) {
        return Ok(());
    }
    match rustix::fs::mkdir(dir, Mode::from_raw_mode(0o755)) {
        // Root of a user namespace is not root of the cgroupfs: the directory may
        // exist yet belong to an unmapped owner, so check we can write it.
        Ok(()) | Err(rustix::io::Errno::EXIST) if writable(dir) => Ok(()),
        Ok(()) | Err(rustix::io::Errno::EXIST) => {
            Err(format!("{} is not writable by us", dir.display()))
        }
        Err(e) => Err(format!("cannot create {}: {e}", dir.display())),
    }
}

/// Finds a place where this process may create tree cgroups and move its children
/// into them, with the reason, or says why there is none.
pub fn locate() -> Result<Location, String> {
    let mount = current_mount()?;
    let found = |parent: PathBuf, kind, reason| Location {
        mount: mount.clone(),
        parent,
        kind,
        reason,
    };
    if let Some(asked) = asked_root() {
        if !may_hold_trees(&mount, &asked) {
            return Err(format!(
                "--cgroup-root: {} is not a place for tree cgroups (outside the cgroup2 mount at {}, or inside a tree cgroup)",
                asked.display(),
                mount.mount_point.display()
            ));
        }
        usable(&asked, &mount).map_err(|e| format!("--cgroup-root: {e}"))?;
        return Ok(found(
            asked,
            PlaceKind::Asked,
            "asked with --cgroup-root".into(),
        ));
    }
    let rel = read_single_text("/proc/self/cgroup")
        .ok()
        .and_then(|t| parse_cgroup_v2(&t))
        .ok_or("this process is in no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)")?;
    let own = OwnCgroup::probe(&mount, &rel);
    let root = rustix::process::geteuid().is_root();
    let mut why = Vec::new();
    let Some((parent, kind, reason)) = decide(&mount, &own, root, &mut why) else {
        return Err(with_advice(&why));
    };
    if parent != mount.top() {
        return Ok(found(parent, kind, reason));
    }
    match usable(&parent, &mount) {
        Ok(()) => Ok(found(parent, kind, reason)),
        Err(e) => {
            why.push(e);
            Err(with_advice(&why))
        }
    }
}

/// Why the cgroup tier has no place here, and how a user gets one (`doctor` and
/// `run --tier cgroup` print this line).
fn with_advice(why: &[String]) -> String {
    format!(
        "{}. To get the cgroup tier, start undertaker in a cgroup delegated to you \
         (`systemd-run --user --scope -p Delegate=yes undertaker run -- CMD`) or give \
         `--cgroup-root DIR`, a cgroup directory you own; without it `auto` uses the \
         subreaper tier, where a member that scrubs its environment and loses its parent \
         can outlive a `kill -9` of every undertaker process (docs/GUARANTEES.md)",
        why.join("; ")
    )
}

/// The one rule for where a tree cgroup may be: a directory under the cgroup2 mount
/// whose path below the mount passes through no tree cgroup (what lies inside a tree
/// cgroup belongs to that tree: a member may name a child cgroup like a tree). Every
/// parent [`locate`] can choose satisfies it, [`super::cgroup::list_tree_cgroups`]
/// finds exactly the tree cgroups in such parents, and a sweep acts on no other.
pub fn may_hold_trees(mount: &CgroupMount, dir: &Path) -> bool {
    let Ok(below) = dir.strip_prefix(&mount.mount_point) else {
        return false;
    };
    below.components().all(|c| match c {
        std::path::Component::Normal(name) => {
            name.to_str().is_some_and(|n| parse_dir_name(n).is_none())
        }
        _ => false,
    })
}

/// Whether `path` is a tree cgroup in a place [`may_hold_trees`] allows (a record's
/// cgroup path is checked with this before anything is done to it).
pub fn is_tree_cgroup_path(mount: &CgroupMount, path: &Path) -> bool {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    name.to_str().is_some_and(|n| parse_dir_name(n).is_some()) && may_hold_trees(mount, parent)
}

#[cfg(test)]
mod tests;
