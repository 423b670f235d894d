//! `undertaker run`: start CMD, watch it and its owner, tear the whole tree down.
//!
//! [`run`] reads as its steps: owner → choose the containment → become the host
//! process ([`HostProcess::become_host`]) → record → spawn → wait → tear down → exit status. One thread, one poll loop over
//! a signalfd, CMD's pidfd and the owner's pidfd or pipe. What is global to the
//! process (child subreaper, signal mask and signalfd, reaping orphans, the owner
//! watch) lives here; everything about the tree itself lives in [`Tree`].

use crate::linux::commands::heal;
use crate::linux::commands::host::{self, Begun, HostProcess};
use crate::linux::commands::record::GuardianKind;
use crate::linux::commands::sentinel::{self, Split};
use crate::linux::commands::tree::{Cause, Tree, SETTLE_AFTER, TRACK_EVERY};
use crate::linux::commands::{replace, started_by};
use crate::linux::contain::containment::Containment;
use crate::linux::contain::owner::{Owner, StdioPeer};
use crate::linux::contain::spawn::{cmd_gets_own_session, CommandSpec, Launch};
use crate::linux::kernel::sys;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::{RunError, RunOptions, Tier};
use rustix::event::PollFlags;
use std::time::Instant;

/// Waits for the end of the tree's normal life: CMD exits, the owner goes, or a
/// teardown signal arrives. Forwards the other signals meanwhile. Once CMD has run
/// [`SETTLE_AFTER`], the guardian settles (a CMD that ends sooner spares it).
///
/// `heal`: once CMD has run [`heal::DELAY`], look (cheaply) for dead guardians' trees
/// in this state dir and, only if there are some, finish a few of them on a
/// background thread (see `heal`).
///
/// `sentinel`: the portable tier's watch on the sentinel (its death is the host's
/// stop, which PDEATHSIG tells the other tiers); that tier also looks for new
/// members every [`TRACK_EVERY`].
fn watch(
    host: &mut HostProcess,
    tree: &mut Tree,
    owner: &mut Owner,
    stdio: &mut Option<StdioPeer>,
    signaller: &Signaller,
    heal: Option<&std::path::Path>,
    sentinel: Option<&PidRef>,
) -> Cause {
    let mut heal_at = heal::enabled().then(|| Instant::now() + heal::DELAY);
    let mut settle_at = Some(Instant::now() + SETTLE_AFTER);
    let mut track_at = tree.track().then(|| Instant::now() + TRACK_EVERY);
    loop {
        let Some(root) = tree.root() else {
            return Cause::CommandExited;
        };
        let mut fds = vec![(root.fd(), PollFlags::IN)];
        fds.extend(owner.fd().map(|fd| (fd, PollFlags::IN)));
        fds.extend(stdio.iter().flat_map(StdioPeer::fds));
        fds.extend(sentinel.map(|s| (s.fd(), PollFlags::IN)));
        let wake = settle_at.into_iter().chain(heal_at).chain(track_at).min();
        let Some(got) = host.next_event(&fds, wake) else {
            return Cause::Terminated;
        };
        drop(fds);
        if settle_at.is_some_and(|at| Instant::now() >= at) {
            settle_at = None;
            // More than `Tree::settle` (the heap, which a supervisor holding many trees
            // returns after each spawn): this guardian holds one tree for its life, so
            // the stack and code start-up used go back too.
            crate::linux::kernel::sys::settle_idle();
        }
        if heal_at.is_some_and(|at| Instant::now() >= at) {
            heal_at = None;
            heal::start_if_needed(heal.map(std::path::Path::to_path_buf));
            // Starting the look and its thread's exit leave blocks freed after the
            // look's own settle: once it has had a moment, settle again.
            settle_at = Some(Instant::now() + heal::DELAY);
        }
        if track_at.is_some_and(|at| Instant::now() >= at) {
            tree.track();
            track_at = Some(Instant::now() + TRACK_EVERY);
        }
        for sig in got.forward {
            tree.forward(signaller, sig);
        }
        tree.reap(host);
        if got.terminate || sentinel.is_some_and(PidRef::exited) {
            return Cause::Terminated;
        }
        if tree.root_exited() {
            return Cause::CommandExited;
        }
        if owner.gone() {
            return Cause::OwnerDied;
        }
        if stdio.as_mut().is_some_and(StdioPeer::gone) {
            return Cause::StdioPeerGone;
        }
    }
}

/// Runs CMD under guard and returns the exit status undertaker should exit with.
pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    let guard = &opts.guard;
    let Begun {
        signals,
        mut owner,
        signaller,
    } = host::begin(&guard.owner, false)?;
    let mut stdio = guard.stdio_owner.then(StdioPeer::detect).flatten();
    let id = Tree::new_id(&signaller).map_err(|e| RunError::Setup(format!("getrandom: {e}")))?;
    // Read here, in the process the host's launch made: its parent is the launcher
    // or the host itself.
    let start = started_by::identify(&signaller, &opts.command);
    // The process the host started stays behind; from here on we are its guardian.
    let portable = guard.tier == Tier::Portable;
    let signaller = match sentinel::split(&signaller, portable)? {
        Split::Sentinel(sentinel) => return Ok(sentinel.watch(guard, &id, signaller, signals)),
        Split::Guardian(signaller) => signaller,
    };
    let sentinel_watch = match portable {
        true => Some(sentinel::watch_sentinel(&signaller)?),
        false => None,
    };
    let containment = Containment::choose(guard.tier)?;
    tracing::debug!(tier = %containment.tier(), "tier chosen");
    let mut host = HostProcess::become_host(&containment, signals)?;
    let owner_record = owner.record(&guard.owner, signaller.procfs(), signaller.launch_parent());
    let mut tree = Tree::create(
        guard,
        id.clone(),
        containment,
        &signaller,
        owner_record,
        GuardianKind::Run,
    )?;
    tree.record_start(&start);
    if opts.replace {
        replace::end_predecessors(guard, &id, &start, &signaller);
    }
    // Last check before starting anything: a dead owner means CMD must never run.
    if owner.gone() {
        return Err(RunError::OwnerGone(owner.describe()));
    }
    if stdio.as_mut().is_some_and(StdioPeer::gone) {
        return Err(RunError::OwnerGone(
            "the stdio peer (no writer left on stdin, no reader on stdout)".into(),
        ));
    }
    // The host stopped the process it started while we set up: start nothing.
    if sentinel::gone(&signaller) {
        return Err(RunError::OwnerGone(
            "the undertaker process the host started".into(),
        ));
    }
    let command = CommandSpec::plain(opts.command.clone());
    tree.spawn(&Launch {
        command: &command,
        grace: guard.grace,
        tree: &id,
        signaller: &signaller,
        nofile: host.nofile,
        signals: &host.signals,
        own_session: cmd_gets_own_session(&signaller),
    })?;
    drop(command);
    tracing::debug!(
        "guarding tree {} ({}): CMD is pid {}, owner {}",
        tree.id(),
        guard.label.as_deref().unwrap_or("no label"),
        tree.root().map_or(0, |r| r.pid()),
        owner.describe()
    );

    let cause = watch(
        &mut host,
        &mut tree,
        &mut owner,
        &mut stdio,
        &signaller,
        guard.state_dir.as_deref(),
        sentinel_watch.as_ref(),
    );
    tracing::debug!("tearing down tree {}: {}", tree.id(), cause.describe());
    // The terminal goes back to our group before the tree is signalled; a namespace
    // init hands it back itself, so there we take it once the init is gone.
    let in_namespace = tree.tier() == Tier::Pidns;
    if !in_namespace {
        sys::reclaim_foreground(signaller.host_pgrp());
    }
    host.sentinel = sentinel::alive(&signaller);
    tree.tear_down(cause, &signaller, &mut host);
    if in_namespace {
        sys::reclaim_foreground(signaller.host_pgrp());
    }
    Ok(tree.finish())
}
