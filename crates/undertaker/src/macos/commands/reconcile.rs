//! `ps`, `sweep` and `kill` on macOS: the portable core's
//! [`crate::portable::reconcile`] over libproc and kqueue, on the registry every
//! platform reads (docs/REGISTRY.md; docs/PORTING.md, "macOS").

use crate::history::Context;
use crate::macos::contain::portable::MacOs;
use crate::macos::kernel::sys;
use crate::portable::reconcile::Reconcile;
use crate::registry::RegistryError;
use crate::report::{PsRow, SweepReport, TreeSweep};
use crate::Error;
use std::path::Path;
use std::time::Duration;

/// This boot's session uuid: the boot id of records and tree ids.
pub fn boot_id() -> String {
    sys::sysctl_string(c"kern.bootsessionuuid").unwrap_or_default()
}

/// The neutral state directory, keyed by our uid and this boot.
pub fn open(state_dir: Option<&Path>) -> Result<Context, RegistryError> {
    Context::open(state_dir, uid(), &boot_id(), usize::MAX)
}

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The reconciler as this process: never our parent, a backend per tree.
pub fn reconcile(ctx: &Context) -> Reconcile<'_, impl FnMut() -> std::io::Result<MacOs>> {
    let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    Reconcile {
        ctx,
        uid: uid(),
        me: std::process::id() as i32,
        protect: vec![parent],
        backend: MacOs::new,
    }
}

pub fn ps(state_dir: Option<&Path>, all: bool) -> Result<Vec<PsRow>, Error> {
    reconcile(&open(state_dir)?).ps(all)
}

pub fn sweep(
    state_dir: Option<&Path>,
    dry_run: bool,
    grace: Duration,
) -> Result<SweepReport, Error> {
    reconcile(&open(state_dir)?).sweep(dry_run, grace)
}

pub fn kill_named(
    state_dir: Option<&Path>,
    name: &str,
    all: bool,
    grace: Duration,
) -> Result<Vec<TreeSweep>, Error> {
    let ctx = open(state_dir)?;
    let trees = crate::history::trees_to_kill(&ctx.history(), name, all)?;
    let mut done = Vec::new();
    for (id, _) in trees {
        done.push(reconcile(&ctx).kill(&id, grace)?);
    }
    Ok(done)
}
