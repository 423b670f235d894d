//! `undertaker doctor`: which kernel mechanisms work here, and so which tiers.
//!
//! Every check is a real probe (a pidfd opened, a child signalled through it, a cgroup
//! created and removed, a namespace created in a short-lived child), never a guess
//! from the kernel version.

use crate::linux::commands::reconcile::Context;
use crate::linux::contain::cgroup;
use crate::linux::contain::containment::Containment;
use crate::linux::contain::pidns;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::kernel::sys;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::report::{CgroupPlacement, Check, DoctorReport, StateDirCheck, TierCheck};
use crate::Tier;
use rustix::fd::{AsFd, OwnedFd};
use rustix::process::Signal;
use std::os::unix::process::CommandExt;
use std::path::Path;

fn check(name: &'static str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check {
            name,
            ok: true,
            detail,
        },
        Err(detail) => Check {
            name,
            ok: false,
            detail,
        },
    }
}

fn own_pidfd() -> Result<OwnedFd, String> {
    PidRef::open(rustix::process::getpid().as_raw_nonzero().get())
        .map(PidRef::into_fd)
        .map_err(|e| format!("pidfd_open failed: {e}"))
}

/// Signal 0 through PIDFD_SIGNAL_PROCESS_GROUP to a short-lived child of ours that
/// leads its own group: nothing but our own child can be reached.
fn probe_group_signal() -> Result<String, String> {
    let signaller = Signaller::for_current_process(Procfs::new())
        .map_err(|e| format!("reading /proc/self: {e}"))?;
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("could not start a probe child (sleep): {e}"))?;
    // Unreaped child: the number is still its own.
    let result = match PidRef::open(child.id() as i32).map(PidRef::into_fd) {
        Err(e) => Err(format!("pidfd_open failed: {e}")),
        Ok(fd) => {
            let r = match sys::pidfd_send_signal_to_group(fd.as_fd(), 0) {
                Ok(()) => Ok("signals a group through its leader's pidfd".into()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    Err("not supported by this kernel (needs Linux 6.9)".into())
                }
                Err(e) => Err(format!("probe failed: {e}")),
            };
            signaller.signal_own_child(fd.as_fd(), Signal::KILL);
            r
        }
    };
    let _ = child.wait();
    result
}

/// Where trees would go, and a probe cgroup created (and removed) there.
fn probe_cgroup() -> (Result<String, String>, CgroupPlacement) {
    let loc = match cgroup::locate() {
        Ok(loc) => loc,
        Err(why) => {
            let placement = CgroupPlacement {
                path: None,
                kind: None,
                reason: why.clone(),
            };
            return (Err(why), placement);
        }
    };
    let placement = CgroupPlacement {
        path: Some(loc.parent.display().to_string()),
        kind: Some(loc.kind.as_str()),
        reason: loc.reason.clone(),
    };
    let probe = loc.parent.join(format!(
        "{}probe.{}",
        cgroup::NAME_PREFIX,
        std::process::id()
    ));
    if let Err(e) = rustix::fs::mkdir(&probe, rustix::fs::Mode::from_raw_mode(0o755)) {
        let why = format!("cannot create a cgroup in {}: {e}", loc.parent.display());
        return (Err(why), placement);
    }
    let has_kill = probe.join("cgroup.kill").exists();
    let _ = rustix::fs::rmdir(&probe);
    let detail = format!(
        "trees go in {} ({}){}",
        loc.parent.display(),
        loc.kind.as_str(),
        if has_kill {
            ""
        } else {
            "; no cgroup.kill (Linux < 5.14): members are killed one by one"
        }
    );
    (Ok(detail), placement)
}

/// The state directory's health. Opening the registry is the real test: it checks
/// ownership, mode, symlinks and the database itself.
fn state_dir_check(state_dir: Option<&Path>) -> StateDirCheck {
    let unfinished = Context::open(state_dir).and_then(|ctx| ctx.registry.trees(false));
    StateDirCheck::of(state_dir, unfinished)
}

/// The pidfd probes: opening one, and what the kernel tells through it.
fn pidfd_checks() -> Vec<Check> {
    let pidfd = own_pidfd();
    let opened = pidfd.as_ref().map(|_| "works".to_string());
    let info =
        pidfd
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|fd| match sys::pidfd_get_info(fd.as_fd()) {
                Ok(Some(info)) => Ok(format!(
                    "works (cgroup id {})",
                    if info.cgroup_id.is_some() {
                        "reported"
                    } else {
                        "not reported"
                    }
                )),
                Ok(None) => Err("not supported by this kernel (needs Linux 6.13)".into()),
                Err(e) => Err(format!("ioctl failed: {e}")),
            });
    let pidfs = pidfd.as_ref().map_err(Clone::clone).and_then(|fd| {
        match rustix::fs::fstatfs(fd) {
            // f_type's width differs between architectures.
            #[allow(clippy::unnecessary_cast)]
            Ok(fs) if fs.f_type as i64 == 0x5049_4446 => {
                Ok("pidfds are pidfs inodes (unique per boot)".into())
            }
            Ok(_) => Err("pidfds are anonymous inodes (Linux < 6.9)".into()),
            Err(e) => Err(format!("fstatfs failed: {e}")),
        }
    });
    vec![
        check("pidfd_open", opened.map_err(Clone::clone)),
        check("pidfd_signal_process_group", probe_group_signal()),
        check("pidfd_get_info", info),
        check("pidfs", pidfs),
    ]
}

fn probe_namespaces() -> Result<String, String> {
    pidns::probe().map(|()| {
        if rustix::process::geteuid().is_root() {
            "pid+mount namespaces (as root, no user namespace needed)".to_string()
        } else {
            "user+pid+mount namespaces".to_string()
        }
    })
}

fn probe_subreaper() -> Result<String, String> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .and_then(|()| rustix::process::set_child_subreaper(None))
        .map(|()| "PR_SET_CHILD_SUBREAPER works".to_string())
        .map_err(|e| format!("PR_SET_CHILD_SUBREAPER failed: {e}"))
}

/// Runs every probe. Creates and removes a probe cgroup and briefly forks children.
pub fn run(state_dir: Option<&Path>) -> DoctorReport {
    let kernel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut checks = pidfd_checks();
    checks.push(check(
        "cgroup2_mount",
        cgroup::current_mount().map(|m| format!("{}", m.mount_point.display())),
    ));
    let (cgroup, cgroup_placement) = probe_cgroup();
    checks.push(check("cgroup2_writable", cgroup.clone()));
    let namespaces = probe_namespaces();
    checks.push(check("user_pid_namespaces", namespaces.clone()));
    let subreaper = probe_subreaper();
    checks.push(check("subreaper", subreaper.clone()));

    let tier = |tier, r: &Result<String, String>| TierCheck {
        tier,
        available: r.is_ok(),
        detail: match r {
            Ok(d) | Err(d) => d.clone(),
        },
    };
    let tiers = vec![
        tier(Tier::Cgroup, &cgroup),
        tier(Tier::Pidns, &namespaces),
        tier(Tier::Subreaper, &subreaper),
        // Opt-in, never `auto`'s choice; it needs nothing but pidfds.
        tier(
            Tier::Portable,
            &own_pidfd().map(|_| {
                "opt-in: no cgroup, subreaper or PDEATHSIG; members by lineage and marker (docs/TIERS.md)"
                    .to_string()
            }),
        ),
    ];
    // The very choice `run` makes.
    let auto = Containment::choose(Tier::Auto).map_or(Tier::Subreaper, |c| c.tier());
    DoctorReport {
        kernel,
        checks,
        tiers,
        auto,
        cgroup_placement,
        state_dir: state_dir_check(state_dir),
    }
}
