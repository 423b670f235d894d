//! Containment, chosen once: [`Containment::choose`] resolves a requested tier
//! (`auto|cgroup|pidns|subreaper|portable`) for `run` and `doctor` alike, and a [`Placement`] is
//! that choice set up for one tree: it starts CMD inside itself and reports who is in
//! it.

use crate::identity::TreeId;
use crate::linux::contain::cgroup::{self, CgroupTree};
use crate::linux::contain::pidns;
use crate::linux::contain::spawn::{spawn_directly_into, spawn_error, spawn_with_std, Launch};
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::{Members, Signaller};
use crate::{RunError, Tier};
use rustix::fd::OwnedFd;
use std::time::Duration;

/// The containment a tree gets.
#[derive(Debug, Clone)]
pub enum Containment {
    /// Its own cgroup, created under this location.
    Cgroup(cgroup::Location),
    /// Its own PID namespace, with a namespace init between the guardian and CMD.
    Pidns,
    /// The guardian as child subreaper: escaped descendants are reparented to it.
    Subreaper,
    /// The macOS shape (docs/TIERS.md, "portable"): no cgroup, no subreaper, no
    /// PDEATHSIG on CMD; the portable core proves the members.
    Portable,
}

impl Containment {
    /// Resolves `requested`: `auto` is cgroup where a writable cgroup v2 place exists,
    /// else subreaper; pidns is opt-in. An explicit tier that is unavailable is an error.
    pub fn choose(requested: Tier) -> Result<Self, RunError> {
        let unavailable = |tier| move |why| RunError::TierUnavailable { tier, why };
        match requested {
            Tier::Subreaper => Ok(Containment::Subreaper),
            Tier::Portable => Ok(Containment::Portable),
            Tier::Auto => match cgroup::locate() {
                Ok(loc) => Ok(Containment::Cgroup(loc)),
                Err(why) => {
                    tracing::debug!("cgroup tier unavailable ({why}); using subreaper");
                    Ok(Containment::Subreaper)
                }
            },
            Tier::Cgroup => cgroup::locate()
                .map(Containment::Cgroup)
                .map_err(unavailable(Tier::Cgroup)),
            // No trial namespace first (`pidns::probe`, which `doctor` runs): the real
            // start reports the same failures, a namespace the kernel refuses as this
            // tier's unavailability, a set-up the init cannot finish as its own exit
            // 125 with the reason, before CMD; the trial was a second fork and
            // namespace on every run (docs/BENCHMARKS.md, "Issue 30").
            Tier::Pidns => pidns::can_fork_init()
                .map(|()| Containment::Pidns)
                .map_err(unavailable(Tier::Pidns)),
        }
    }

    pub fn tier(&self) -> Tier {
        match self {
            Containment::Cgroup(_) => Tier::Cgroup,
            Containment::Pidns => Tier::Pidns,
            Containment::Subreaper => Tier::Subreaper,
            Containment::Portable => Tier::Portable,
        }
    }
}

/// A containment set up for one tree.
#[derive(Debug)]
pub(crate) enum Placement {
    Cgroup(CgroupTree),
    /// The end of the pipe the namespace init watches (held open while we live: end
    /// of file tells the init we died). `None` until the init is started.
    Pidns(Option<OwnedFd>),
    Subreaper,
    Portable,
}

impl Placement {
    /// Sets `containment` up for `tree`: the cgroup tier creates the tree's cgroup.
    pub fn set_up(
        containment: &Containment,
        tree: &TreeId,
        signaller: &Signaller,
    ) -> Result<Self, RunError> {
        match containment {
            Containment::Subreaper => Ok(Placement::Subreaper),
            Containment::Portable => Ok(Placement::Portable),
            Containment::Pidns => Ok(Placement::Pidns(None)),
            Containment::Cgroup(loc) => {
                let me = signaller.me().pid;
                let starttime = signaller
                    .own_stat()
                    .map_err(|e| RunError::Setup(format!("reading /proc/self/stat: {e}")))?
                    .starttime;
                let cg = CgroupTree::create(loc, tree, me, starttime).map_err(|why| {
                    RunError::TierUnavailable {
                        tier: Tier::Cgroup,
                        why,
                    }
                })?;
                tracing::debug!(path = %cg.path.display(), id = cg.id, "tree cgroup created");
                Ok(Placement::Cgroup(cg))
            }
        }
    }

    /// The tree's cgroup, in the cgroup tier.
    pub fn cgroup(&self) -> Option<&CgroupTree> {
        match self {
            Placement::Cgroup(cg) => Some(cg),
            _ => None,
        }
    }

    /// Starts CMD inside this placement; for pidns, starts the namespace init, which
    /// starts CMD. Returns the process the guardian watches (CMD or the init).
    pub fn spawn(&mut self, launch: &Launch<'_>) -> Result<PidRef, RunError> {
        let (program, _) = launch
            .command
            .argv
            .split_first()
            .ok_or_else(|| RunError::Usage("no command given".into()))?;
        match self {
            Placement::Subreaper => match spawn_directly_into(None, launch) {
                Ok(Some((pid, fd))) => Ok(PidRef::from_parts(pid, fd)),
                Ok(None) => spawn_with_std(launch, None, None, true),
                Err(e) => Err(spawn_error(program, e)),
            },
            // No PDEATHSIG: CMD outlives a killed guardian, as on macOS.
            Placement::Portable => spawn_with_std(launch, None, None, false),
            Placement::Cgroup(cg) => {
                let direct = spawn_directly_into(Some(cg), launch).map_err(|e| {
                    let _ = cg.remove(Duration::ZERO);
                    spawn_error(program, e)
                })?;
                if let Some((pid, fd)) = direct {
                    return Ok(PidRef::from_parts(pid, fd));
                }
                let join = cg.open_procs_for_join().map_err(|e| {
                    let _ = cg.remove(Duration::ZERO);
                    RunError::Setup(format!("opening {}/cgroup.procs: {e}", cg.path.display()))
                })?;
                spawn_with_std(launch, Some(cg), Some(join), true)
            }
            Placement::Pidns(alive) => {
                let spec = pidns::InitSpec {
                    command: &launch.command.argv,
                    tree: launch.tree,
                    grace: launch.grace,
                    nofile: launch.nofile,
                    own_session: launch.own_session,
                    host_pgrp: launch.signaller.host_pgrp(),
                };
                let init = pidns::start(&spec, launch.signals).map_err(|why| {
                    RunError::TierUnavailable {
                        tier: Tier::Pidns,
                        why,
                    }
                })?;
                *alive = Some(init.alive);
                Ok(PidRef::from_parts(init.pid, init.pidfd))
            }
        }
    }

    /// Members the containment itself vouches for (the cgroup's, proven through their
    /// pidfds); empty for the other tiers, whose members are found by descent.
    pub fn members(&self, signaller: &Signaller) -> Members {
        match self {
            Placement::Cgroup(cg) => cg.members(signaller),
            _ => Members::default(),
        }
    }

    /// False once the kernel reports the containment empty; true when it cannot tell
    /// (no kernel containment: emptiness comes from the host's children then).
    pub fn is_populated(&self) -> bool {
        self.cgroup().is_some_and(CgroupTree::is_populated)
    }
}
