//! Starting CMD: its own process group, the tree marker, an empty signal mask, the
//! caller's NOFILE limit, PDEATHSIG towards the guardian, and — for the cgroup tier —
//! born inside the tree's cgroup. Each path returns CMD's pid with a pidfd opened
//! before anything could reap it.

use crate::identity::{TreeId, TREE_MARKER};
use crate::linux::contain::cgroup::CgroupTree;
use crate::linux::kernel::sys::{self, BlockedSignals};
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::RunError;
use rustix::fd::{AsFd, OwnedFd};
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// The command a tree starts: `run`'s CMD, or what a `supervise` host asked for.
#[derive(Debug, Default)]
pub struct CommandSpec {
    pub argv: Vec<OsString>,
    /// Set on top of the inherited environment (an empty one with `env_clear`).
    pub env: Vec<(OsString, OsString)>,
    pub env_clear: bool,
    pub cwd: Option<PathBuf>,
    pub stdio: StdioSpec,
}

/// Where the command's standard streams go.
#[derive(Debug, Default)]
pub enum StdioSpec {
    /// Ours (`run`: CMD shares undertaker's terminal or pipes).
    #[default]
    Inherit,
    /// /dev/null (a supervisor's own stdio is its protocol channel).
    Null,
    /// stdin, stdout, stderr as given.
    Fds([OwnedFd; 3]),
}

impl CommandSpec {
    /// `argv` with nothing changed.
    pub fn plain(argv: Vec<OsString>) -> Self {
        Self {
            argv,
            ..Self::default()
        }
    }

    /// True when clone3 straight into the cgroup can start it: nothing to set up
    /// in the child but what that path does (stdio redirection and a working
    /// directory go through std's spawn).
    fn clone3_can_start(&self) -> bool {
        matches!(self.stdio, StdioSpec::Inherit) && self.cwd.is_none()
    }

    /// The environment the command gets, marker included.
    fn environment(&self, tree: &TreeId) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = match self.env_clear {
            true => Vec::new(),
            false => std::env::vars_os().collect(),
        };
        for (k, v) in &self.env {
            env.retain(|(key, _)| key != k);
            env.push((k.clone(), v.clone()));
        }
        env.retain(|(key, _)| key != TREE_MARKER);
        env.push((TREE_MARKER.into(), tree.as_str().into()));
        env
    }
}

/// What starting CMD needs besides the placement.
pub struct Launch<'a> {
    pub command: &'a CommandSpec,
    /// The namespace init's grace period (pidns tier).
    pub grace: Duration,
    pub tree: &'a TreeId,
    pub signaller: &'a Signaller,
    /// The soft RLIMIT_NOFILE CMD gets back.
    pub nofile: Option<u64>,
    /// The host's blocked signals (the namespace init restores the mask from them).
    pub signals: &'a BlockedSignals,
    /// CMD leads its own session (no terminal involved; see `sys::prepare_child`).
    pub own_session: bool,
}

/// Spawns CMD with std's `Command` when [`spawn_directly_into`] cannot: a command
/// with its own stdio or cwd (a supervisor's trees), or a kernel without clone3 or
/// CLONE_INTO_CGROUP (then, in the cgroup tier, the child joins its cgroup through
/// `join_fd` before exec). `pdeathsig`: CMD dies with the guardian (every tier but
/// portable).
pub(crate) fn spawn_with_std(
    launch: &Launch<'_>,
    cgroup_tree: Option<&CgroupTree>,
    join_fd: Option<OwnedFd>,
    pdeathsig: bool,
) -> Result<PidRef, RunError> {
    let Launch {
        command: spec,
        tree,
        signaller,
        nofile,
        own_session,
        ..
    } = *launch;
    let (program, args) = spec
        .argv
        .split_first()
        .ok_or_else(|| RunError::Usage("no command given".into()))?;
    let mut cmd = std::process::Command::new(program);
    // Its own group (or session) comes from the child setup.
    cmd.args(args);
    if spec.env_clear {
        cmd.env_clear();
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env(TREE_MARKER, tree.as_str());
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    match &spec.stdio {
        StdioSpec::Inherit => {}
        StdioSpec::Null => {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
        }
        StdioSpec::Fds([i, o, e]) => {
            let dup = |fd: &OwnedFd| {
                fd.try_clone()
                    .map(Stdio::from)
                    .map_err(|e| RunError::Setup(format!("duplicating a descriptor: {e}")))
            };
            cmd.stdin(dup(i)?).stdout(dup(o)?).stderr(dup(e)?);
        }
    }
    sys::install_child_setup(
        &mut cmd,
        signaller.host_pgrp(),
        nofile,
        join_fd.as_ref().map(|fd| fd.as_raw_fd()),
        pdeathsig.then_some(signaller.me().pid),
        own_session,
    );
    let child = cmd.spawn().map_err(|e| {
        if let Some(cg) = cgroup_tree {
            let _ = cg.remove(Duration::ZERO);
        }
        if e.raw_os_error() == Some(sys::CGROUP_JOIN_FAILED) {
            return RunError::Setup(
                "could not move the command into its cgroup; it was not started".into(),
            );
        }
        // The child's chdir and exec fail alike (std reports both as the spawn's
        // error): a cwd it cannot enter is the step that failed, so say so.
        if let Some(dir) = &spec.cwd {
            if let Some(why) = cwd_unusable(dir) {
                return RunError::Cwd {
                    dir: dir.to_string_lossy().into_owned(),
                    why,
                };
            }
        }
        spawn_error(program, e)
    })?;
    drop(join_fd);
    let root_pid = child.id() as i32;
    // Nothing has reaped yet, so this pidfd is CMD's and nobody else's.
    let root = PidRef::open(root_pid)
        .map_err(|e| RunError::Setup(format!("pidfd_open({root_pid}): {e}")))?;
    drop(child);
    Ok(root)
}

/// Why a command could not enter `dir`, if it could not: missing, not a directory,
/// or no search permission for us.
fn cwd_unusable(dir: &std::path::Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Err(e) => return Some(e.to_string()),
        Ok(m) if !m.is_dir() => return Some("not a directory".into()),
        Ok(_) => {}
    }
    rustix::fs::access(dir, rustix::fs::Access::EXEC_OK)
        .err()
        .map(|e| format!("cannot enter: {e}"))
}

/// Starts CMD with one clone3, inside the tree's cgroup when there is one (see
/// `sys::spawn_into_cgroup`). `Ok(None)`: the kernel cannot, or the command needs
/// stdio or a cwd of its own; use [`spawn_with_std`].
pub(crate) fn spawn_directly_into(
    cg: Option<&CgroupTree>,
    launch: &Launch<'_>,
) -> std::io::Result<Option<(i32, OwnedFd)>> {
    if !launch.command.clone3_can_start() {
        return Ok(None);
    }
    let spec = exec_spec(
        &launch.command.argv,
        launch.command.environment(launch.tree),
        launch.signaller.host_pgrp(),
        launch.nofile,
        launch.own_session,
    )?;
    let dir = match cg {
        Some(cg) => Some(rustix::fs::open(
            &cg.path,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?),
        None => None,
    };
    sys::spawn_into_cgroup(&spec, dir.as_ref().map(|d| d.as_fd()))
}

/// What `sys::spawn_into_cgroup` starts: `argv` with `env` (marker included), the
/// child's setup facts, all as C strings made before the clone (the child allocates
/// nothing). The caller is CMD's parent-to-be.
pub(crate) fn exec_spec(
    argv: &[OsString],
    env: Vec<(OsString, OsString)>,
    guardian_pgrp: i32,
    nofile_soft: Option<u64>,
    own_session: bool,
) -> std::io::Result<sys::ExecSpec> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let cstr =
        |b: &[u8]| CString::new(b).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL));
    let argv = (argv.iter())
        .map(|a| cstr(a.as_bytes()))
        .collect::<std::io::Result<Vec<_>>>()?;
    let Some(program) = argv.first().cloned() else {
        return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
    };
    let mut envp = Vec::with_capacity(env.len());
    for (k, v) in env {
        let mut entry = k.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(v.as_bytes());
        envp.push(cstr(&entry)?);
    }
    Ok(sys::ExecSpec {
        program,
        argv,
        envp,
        guardian_pgrp,
        guardian_pid: rustix::process::getpid().as_raw_nonzero().get(),
        nofile_soft,
        own_session,
    })
}

/// True when CMD should lead its own session: this process has no controlling
/// terminal, so no job control needs CMD in our session (see `sys::prepare_child`).
/// Unknown counts as a terminal: the cautious choice (no group-wide signal).
pub(crate) fn cmd_gets_own_session(signaller: &Signaller) -> bool {
    signaller.own_stat().is_ok_and(|st| st.tty_nr == 0)
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
