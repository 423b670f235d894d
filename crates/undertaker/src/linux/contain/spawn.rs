//! Starting CMD: its own process group, the tree marker, an empty signal mask, the
//! caller's NOFILE limit, PDEATHSIG towards the guardian, and — for the cgroup tier —
//! born inside the tree's cgroup. Each path returns CMD's pid with a pidfd opened
//! before anything could reap it.

use crate::identity::{TreeId, TREE_MARKER};
use crate::linux::contain::cgroup::CgroupTree;
use crate::linux::kernel::sys::{self, BlockedSignals};
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::{RunError, RunOptions};
use rustix::fd::{AsFd, OwnedFd};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// What starting CMD needs besides the placement.
pub struct Launch<'a> {
    pub opts: &'a RunOptions,
    pub tree: &'a TreeId,
    pub signaller: &'a Signaller,
    /// The soft RLIMIT_NOFILE CMD gets back.
    pub nofile: Option<u64>,
    /// The host's blocked signals (the namespace init restores the mask from them).
    pub signals: &'a BlockedSignals,
    /// CMD leads its own session (no terminal involved; see `sys::prepare_child`).
    pub own_session: bool,
}

/// Spawns CMD with std's `Command` (subreaper tier, or a kernel without
/// CLONE_INTO_CGROUP: then the child joins its cgroup through `join_fd` before exec).
pub(crate) fn spawn_with_std(
    launch: &Launch<'_>,
    cgroup_tree: Option<&CgroupTree>,
    join_fd: Option<OwnedFd>,
) -> Result<PidRef, RunError> {
    let Launch {
        opts,
        tree,
        signaller,
        nofile,
        own_session,
        ..
    } = *launch;
    let (program, args) = opts
        .command
        .split_first()
        .ok_or_else(|| RunError::Usage("no command given".into()))?;
    let mut cmd = std::process::Command::new(program);
    // Its own group (or session) comes from the child setup.
    cmd.args(args).env(TREE_MARKER, tree.as_str());
    sys::install_child_setup(
        &mut cmd,
        signaller.host_pgrp(),
        nofile,
        join_fd.as_ref().map(|fd| fd.as_raw_fd()),
        signaller.me().pid,
        own_session,
    );
    let child = cmd.spawn().map_err(|e| {
        if let Some(cg) = cgroup_tree {
            let _ = cg.remove(Duration::ZERO);
        }
        if e.raw_os_error() == Some(sys::CGROUP_JOIN_FAILED) {
            RunError::Setup("could not move the command into its cgroup; it was not started".into())
        } else {
            spawn_error(program, e)
        }
    })?;
    drop(join_fd);
    let root_pid = child.id() as i32;
    // Nothing has reaped yet, so this pidfd is CMD's and nobody else's.
    let root = PidRef::open(root_pid)
        .map_err(|e| RunError::Setup(format!("pidfd_open({root_pid}): {e}")))?;
    drop(child);
    Ok(root)
}

/// Cgroup tier: starts CMD inside the tree's cgroup with clone3 (see
/// `sys::spawn_into_cgroup`). `Ok(None)`: the kernel cannot; use [`spawn_with_std`].
pub(crate) fn spawn_directly_into(
    cg: &CgroupTree,
    opts: &RunOptions,
    tree: &TreeId,
    guardian_pgrp: i32,
    nofile: Option<u64>,
    own_session: bool,
) -> std::io::Result<Option<(i32, OwnedFd)>> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let cstr =
        |b: &[u8]| CString::new(b).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL));
    let argv = opts
        .command
        .iter()
        .map(|a| cstr(a.as_bytes()))
        .collect::<std::io::Result<Vec<_>>>()?;
    let Some(program) = argv.first().cloned() else {
        return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
    };
    let mut envp = Vec::new();
    for (k, v) in std::env::vars_os() {
        if k.as_bytes() == TREE_MARKER.as_bytes() {
            continue;
        }
        let mut entry = k.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(v.as_bytes());
        envp.push(cstr(&entry)?);
    }
    envp.push(cstr(format!("{TREE_MARKER}={tree}").as_bytes())?);
    let spec = sys::ExecSpec {
        program,
        argv,
        envp,
        guardian_pgrp,
        guardian_pid: rustix::process::getpid().as_raw_nonzero().get(),
        nofile_soft: nofile,
        own_session,
    };
    let dir = rustix::fs::open(
        &cg.path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    sys::spawn_into_cgroup(&spec, dir.as_fd())
}

/// True when CMD should lead its own session: this process has no controlling
/// terminal, so no job control needs CMD in our session (see `sys::prepare_child`).
/// Unknown counts as a terminal: the cautious choice (no group-wide signal).
pub(crate) fn cmd_gets_own_session(procfs: &crate::linux::kernel::procfs::Procfs) -> bool {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    procfs.stat(me).is_ok_and(|st| st.tty_nr == 0)
}

pub(crate) fn spawn_error(program: &std::ffi::OsStr, e: std::io::Error) -> RunError {
    let name = program.to_string_lossy().into_owned();
    match e.kind() {
        std::io::ErrorKind::NotFound => RunError::NotFound(name),
        std::io::ErrorKind::PermissionDenied => RunError::NotExecutable(name, e.to_string()),
        _ if e.raw_os_error() == Some(libc::ENOEXEC) => {
            RunError::NotExecutable(name, e.to_string())
        }
        _ => RunError::Setup(format!("could not start {name}: {e}")),
    }
}

/// Teardown holds one pidfd per member, so a tree of thousands must not hit the soft
/// RLIMIT_NOFILE of 1024. Returns the original soft limit, which CMD gets back.
pub(crate) fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    let original = lim.current;
    if let (Some(max), Some(cur)) = (lim.maximum, lim.current) {
        if cur < max {
            lim.current = Some(max.min(1 << 20));
            if setrlimit(Resource::Nofile, lim).is_ok() {
                return original;
            }
        }
    }
    None
}
