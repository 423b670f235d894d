//! Proof that a PID namespace has no process left, so that a guardian that lived there
//! is dead (docs/REGISTRY.md, "Tree cgroups of dead PID namespaces").
//!
//! A tree cgroup's name says which PID namespace its guardian lived in (the inode of
//! its `/proc/self/ns/pid`). A guardian's pid means nothing outside its namespace, but
//! the namespace itself can be looked for: a process never changes its PID namespace,
//! so while the guardian lives, some process has that namespace. Only a reader in the
//! initial PID namespace, reading a /proc of that namespace, sees every process of the
//! system; if it also reads every process's namespace (or proves from `NSpid` that the
//! process lives in the initial namespace itself), then "no process has namespace X"
//! proves X empty. Anything less (another namespace, `hidepid`, one unreadable entry)
//! proves nothing and the caller leaves such cgroups alone.
//!
//! Why a census is sound only when taken *after* the cgroup was found: the guardian
//! made its cgroup while alive, so it existed before the listing; if it still lived
//! during the whole scan, `/proc`'s readdir (in pid order, each process that exists
//! throughout it is listed) returned it. Namespace inodes are reused (they come from
//! a small allocator: a new namespace soon gets a dead one's number); reuse can only
//! make a dead namespace look alive (some other process has the number), never a
//! live guardian's namespace look empty.

use rustix::io::Errno;
use std::collections::BTreeSet;
use std::path::Path;

/// The inode of the initial PID namespace: fixed by the kernel (`PROC_PID_INIT_INO`);
/// every other namespace's inode is allocated above it.
pub const INITIAL_PIDNS: u64 = 0xEFFF_FFFC;

/// `PROC_SUPER_MAGIC`: what statfs says of a real procfs.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// Which of `namespaces` provably have no process left: none when this process cannot
/// see every process (it is not in the initial PID namespace, /proc is not a procfs of
/// it or hides processes with `hidepid`, or one process's namespace cannot be told).
/// Never the initial namespace, nor 0 (a guardian that could not read its own). The
/// scan stops once every namespace asked about was seen in use.
pub fn provably_empty(namespaces: &BTreeSet<u64>) -> BTreeSet<u64> {
    let mut unseen: BTreeSet<u64> = namespaces
        .iter()
        .copied()
        .filter(|&ns| ns != 0 && ns != INITIAL_PIDNS)
        .collect();
    if unseen.is_empty() {
        return unseen;
    }
    match scan(Path::new("/proc"), &mut unseen) {
        Some(()) => unseen,
        None => BTreeSet::new(),
    }
}

/// Removes from `unseen` every namespace a process of `proc_root` has; `None` when the
/// scan cannot be complete (see [`provably_empty`]).
fn scan(proc_root: &Path, unseen: &mut BTreeSet<u64>) -> Option<()> {
    let statfs = rustix::fs::statfs(proc_root).ok()?;
    if statfs.f_type as i64 != PROC_SUPER_MAGIC {
        return None;
    }
    // `self` resolves only in a procfs whose namespace holds us, so a procfs whose
    // `self` is in the initial namespace is the initial namespace's.
    if pidns_of(&proc_root.join("self")) != Ok(INITIAL_PIDNS) {
        return None;
    }
    let mountinfo = std::fs::read_to_string(proc_root.join("self/mountinfo")).ok()?;
    if !shows_every_process(&mountinfo, proc_root) {
        return None;
    }
    for entry in std::fs::read_dir(proc_root).ok()? {
        if unseen.is_empty() {
            break;
        }
        let entry = entry.ok()?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = proc_root.join(pid.to_string());
        match pidns_of(&dir) {
            Ok(ns) => {
                unseen.remove(&ns);
            }
            // Not ours to read (another user's, without CAP_SYS_PTRACE): its NSpid
            // line still tells whether it lives in the initial namespace.
            Err(_) if in_initial_namespace(&dir) => {}
            // Reaped since the readdir (a zombie still has its namespace; a process that
            // dies between the lookup and the read gives EACCES): no process any more.
            // Were the directory there again, the number would be a new process's,
            // which we know nothing of.
            Err(_) if !dir.exists() => {}
            Err(_) => return None,
        }
    }
    Some(())
}

/// The inode of `/proc/PID/ns/pid` under the process directory `dir`.
fn pidns_of(dir: &Path) -> Result<u64, Errno> {
    rustix::fs::stat(dir.join("ns/pid")).map(|st| st.st_ino)
}

/// Whether the process of `dir` has a pid in one namespace only: read in the initial
/// namespace's /proc, its `NSpid` line then has one field.
fn in_initial_namespace(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("status"))
        .ok()
        .as_deref()
        .and_then(nspid_depth)
        == Some(1)
}

/// How many pids the `NSpid:` line of a `/proc/PID/status` text lists.
pub(crate) fn nspid_depth(status: &str) -> Option<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let n = line.split_whitespace().count();
    (n > 0 && line.split_whitespace().all(|f| f.parse::<u32>().is_ok())).then_some(n)
}

/// Whether the proc mount at `proc_root` (the last one mounted there, in a mountinfo
/// text) lists every process: a procfs without `hidepid` (or with `hidepid=0`/`off`).
pub(crate) fn shows_every_process(mountinfo: &str, proc_root: &Path) -> bool {
    let Some(root) = proc_root.to_str() else {
        return false;
    };
    let Some(line) = mountinfo.lines().rev().find(|line| {
        let mut fields = line.split(' ');
        fields.nth(4) == Some(root)
    }) else {
        return false;
    };
    let Some((_, right)) = line.split_once(" - ") else {
        return false;
    };
    let mut right = right.split(' ');
    if right.next() != Some("proc") {
        return false;
    }
    let options = right.nth(1).unwrap_or("");
    options
        .split(',')
        .all(|opt| match opt.strip_prefix("hidepid=") {
            Some(value) => matches!(value, "0" | "off"),
            None => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_depth_counts_the_namespaces_a_process_has_a_pid_in() {
        assert_eq!(nspid_depth("Name:\tsh\nNSpid:\t4122\n"), Some(1));
        assert_eq!(nspid_depth("NSpid:\t4122\t1\nUid:\t0\n"), Some(2));
        assert_eq!(nspid_depth("Name:\tsh\n"), None);
        assert_eq!(nspid_depth("NSpid:\t\n"), None);
        assert_eq!(nspid_depth("NSpid:\tx\n"), None);
    }

    #[test]
    fn a_proc_mount_with_hidepid_does_not_show_every_process() {
        let line = |opts: &str| format!("22 27 0:21 / /proc rw,relatime - proc proc {opts}\n");
        let root = Path::new("/proc");
        assert!(shows_every_process(&line("rw"), root));
        assert!(shows_every_process(&line("rw,hidepid=off"), root));
        assert!(shows_every_process(&line("rw,hidepid=0,subset=pid"), root));
        for opts in ["rw,hidepid=2", "rw,hidepid=invisible", "rw,hidepid=4"] {
            assert!(!shows_every_process(&line(opts), root), "{opts}");
        }
        // The last mount on /proc is the one seen; a tmpfs there is no procfs.
        let stacked = format!("{}30 22 0:40 / /proc rw - tmpfs tmpfs rw\n", line("rw"));
        assert!(!shows_every_process(&stacked, root));
        assert!(!shows_every_process("", root));
    }

    #[test]
    fn the_initial_namespace_0_and_a_namespace_in_use_are_never_proven_empty() {
        let asked = |ns: &[u64]| provably_empty(&ns.iter().copied().collect());
        assert_eq!(asked(&[]), BTreeSet::new());
        assert_eq!(asked(&[0, INITIAL_PIDNS]), BTreeSet::new());
        // Ours is in use (we are in it), wherever this runs.
        if let Ok(st) = rustix::fs::stat("/proc/self/ns/pid") {
            assert_eq!(asked(&[st.st_ino]), BTreeSet::new());
        }
    }

    /// A fake /proc (a plain directory) proves nothing.
    #[test]
    fn a_proc_that_is_no_procfs_proves_nothing() {
        let dir = std::env::temp_dir().join(format!("empty-pidns-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("self/ns")).unwrap();
        let mut unseen = BTreeSet::from([4026532175]);
        assert_eq!(scan(&dir, &mut unseen), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
