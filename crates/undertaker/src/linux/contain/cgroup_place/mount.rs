//! Which cgroup2 mount undertaker uses: one rule for every command (`run`, `sweep`,
//! `ps`, `doctor`, self-healing; docs/TIERS.md, "Placement").
//!
//! The mount whose root is `/sys/fs/cgroup` (a unified hierarchy), else the one whose
//! root is `/sys/fs/cgroup/unified` (systemd's hybrid layout), else the first cgroup2
//! mount `/proc/self/mountinfo` lists. Reading mountinfo makes the kernel format a
//! line for every mount, on `run`'s start path (docs/BENCHMARKS.md, "Issue 30, fourth
//! round"); on Linux 6.8 and later the first two are asked of the kernel directly
//! (`statx`'s unique mount id, then `statmount`), and mountinfo answers the same
//! questions wherever that is not possible.

use super::{unescape, CgroupMount};
use crate::linux::kernel::sys;
use rustix::fs::{AtFlags, StatxAttributes, StatxFlags, CWD};
use std::path::PathBuf;

/// Where the cgroup2 mount is looked for first, in this order.
const WELL_KNOWN: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// `CGROUP2_SUPER_MAGIC` (linux/magic.h).
const CGROUP2_MAGIC: u64 = 0x6367_7270;
/// `STATX_MNT_ID_UNIQUE` (Linux 6.8), which rustix does not name.
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

/// What `statx` tells of the mount at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MountAt {
    /// The path is missing or is no mount's root.
    NoMount,
    /// The root of the mount with this unique id (Linux 6.8).
    Unique(u64),
    /// The root of the mount with this id (mountinfo's first field; Linux 5.8).
    Id(u64),
    /// The kernel tells neither (before Linux 5.8): mountinfo's mount points decide.
    Unknown,
}

fn mount_at(path: &str, unique: bool) -> MountAt {
    let want = if unique {
        StatxFlags::from_bits_retain(STATX_MNT_ID_UNIQUE)
    } else {
        StatxFlags::MNT_ID
    };
    let Ok(st) = rustix::fs::statx(CWD, path, AtFlags::NO_AUTOMOUNT, want) else {
        return MountAt::NoMount;
    };
    if !st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT) {
        return MountAt::Unknown;
    }
    if !st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT) {
        return MountAt::NoMount;
    }
    if st.stx_mask & STATX_MNT_ID_UNIQUE != 0 {
        MountAt::Unique(st.stx_mnt_id)
    } else if st.stx_mask & StatxFlags::MNT_ID.bits() != 0 {
        MountAt::Id(st.stx_mnt_id)
    } else {
        MountAt::Unknown
    }
}

/// The rule's mount without reading mountinfo, when the kernel can tell: `None` when
/// it cannot (before 6.8, statmount refused) or when neither well-known path is a
/// cgroup2 mount's root (the rule then reads mountinfo).
pub(super) fn without_mountinfo() -> Option<CgroupMount> {
    for path in WELL_KNOWN {
        match mount_at(path, true) {
            MountAt::NoMount => continue,
            MountAt::Unique(id) => {
                let found = sys::statmount_root(id).ok()?;
                if found.magic == CGROUP2_MAGIC {
                    return Some(CgroupMount {
                        mount_point: PathBuf::from(path),
                        root: found.root,
                    });
                }
            }
            MountAt::Id(_) | MountAt::Unknown => return None,
        }
    }
    None
}

/// The rule read from mountinfo's text, with `probe` telling what is mounted at each
/// well-known path.
pub(super) fn from_mountinfo_text(
    text: &str,
    probe: impl Fn(&str) -> MountAt,
) -> Option<CgroupMount> {
    let lines = || text.lines().filter_map(MountLine::parse);
    for path in WELL_KNOWN {
        let line = match probe(path) {
            MountAt::NoMount | MountAt::Unique(_) => None,
            MountAt::Id(id) => lines().find(|l| l.id == id),
            // Of mounts stacked on one mount point, the last listed is on top.
            MountAt::Unknown => lines().rfind(|l| l.mount_point == path),
        };
        if let Some(line) = line.filter(|l| l.cgroup2) {
            return Some(CgroupMount {
                mount_point: PathBuf::from(path),
                root: line.root,
            });
        }
    }
    parse_cgroup2_mount(text)
}

/// The rule read from /proc/self/mountinfo (mounts found by `statx`'s mount id).
pub(super) fn from_mountinfo() -> Result<CgroupMount, String> {
    let text = super::read_text("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    from_mountinfo_text(&text, |path| mount_at(path, false))
        .ok_or_else(|| "no cgroup2 filesystem is mounted".into())
}

/// The cgroup2 mount the rule chooses.
pub fn current_mount() -> Result<CgroupMount, String> {
    without_mountinfo().map_or_else(from_mountinfo, Ok)
}

/// The first cgroup2 mount in a mountinfo text.
pub(crate) fn parse_cgroup2_mount(text: &str) -> Option<CgroupMount> {
    let line = text
        .lines()
        .filter_map(MountLine::parse)
        .find(|l| l.cgroup2)?;
    Some(CgroupMount {
        mount_point: PathBuf::from(line.mount_point),
        root: line.root,
    })
}

/// The fields of one mountinfo line the rule reads.
struct MountLine {
    id: u64,
    root: String,
    mount_point: String,
    cgroup2: bool,
}

impl MountLine {
    fn parse(line: &str) -> Option<Self> {
        let (left, right) = line.split_once(" - ")?;
        let mut fields = left.split(' ');
        let id = fields.next()?.parse().ok()?;
        let root = unescape(fields.nth(2)?);
        let mount_point = unescape(fields.next()?);
        Some(Self {
            id,
            root,
            mount_point,
            cgroup2: right.split(' ').next() == Some("cgroup2"),
        })
    }
}
