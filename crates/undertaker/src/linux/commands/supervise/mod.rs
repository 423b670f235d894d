//! `undertaker supervise`: one process holding many trees (docs/SUPERVISE.md).
//!
//! [`run`] reads as its steps: signals → owner → containment → channel → serve →
//! tear everything down → exit 0. One thread, one poll loop over the signalfd, the
//! control channel, the owner, and each tree's root. Each tree is a [`Tree`], as in
//! `run`, found by its own anchors; what is global to the process (signals, reaping,
//! waiting) is the one [`HostProcess`] `run` uses too.

mod channel;
mod requests;
mod succession;
mod take;

use crate::linux::commands::control::Listener;
use crate::linux::commands::host::{self, Begun, HostProcess};
use crate::linux::commands::tree::portable::Looks;
use crate::linux::commands::tree::{tear_down_together, Cause, Host, Tree, TRACK_EVERY};
use crate::linux::contain::containment::Containment;
use crate::linux::contain::owner::Owner;
use crate::linux::kernel::poll::readable_now;
use crate::linux::proof::pidref::PidRef;
use crate::linux::proof::signal::Signaller;
use crate::protocol::reply;
use crate::protocol::{parse_line, Envelope, ErrorCode, ProtocolError, Request};
use crate::registry::refusal_log::RefusalLog;
use crate::registry::OwnerRecord;
use crate::{GuardOptions, OwnerSpec, RunError, SuperviseOptions, Tier};
use channel::{emit, Channel};
use rustix::event::PollFlags;
use rustix::fd::BorrowedFd;

/// Runs the supervisor until its input ends, its owner dies or SIGTERM; every tree
/// is then torn down. Returns 0.
pub fn run(sup_opts: &SuperviseOptions) -> Result<i32, RunError> {
    let opts = &sup_opts.guard;
    if opts.tier == Tier::Pidns {
        return Err(RunError::Usage(
            "supervise does not offer the pidns tier (one namespace init per tree is what `run` is for)"
                .into(),
        ));
    }
    // Our own session: a host that signals its own process group must not take us
    // down before the trees.
    let Begun {
        signals,
        mut owner,
        mut signaller,
    } = host::begin(&opts.owner, true)?;
    // The owner (protected by `begin`) and the process that started us, with its
    // ancestors, are never members: adopting or killing one would take every tree
    // down with it.
    let owner_process = owner_process(&opts.owner);
    if let Some(pid) = owner_process.as_ref().map(PidRef::pid) {
        signaller.protect_owner(pid);
    }
    if let Some(pgid) = sup_opts.parent_pgid {
        signaller.protect_group(pgid);
    }
    let containment = Containment::choose(opts.tier)?;
    let host = HostProcess::become_host(&containment, signals)?;
    let channel = Channel::from_stdin(signaller.me().uid)?;
    let owner_record = owner.record(&opts.owner, signaller.procfs(), signaller.launch_parent());
    if owner.gone() {
        return Err(RunError::OwnerGone(owner.describe()));
    }
    let (control, control_unreachable) = listen_for_control(opts, &signaller);
    let me = signaller.me();
    let refusals = RefusalLog::new(opts.state_dir.clone(), me.uid, me.boot_id.clone());
    let looks = (containment.tier() == Tier::Portable).then(|| Looks::of(&signaller));
    let mut sup = Supervisor {
        opts,
        signaller,
        containment,
        host,
        channel,
        owner_process,
        owner_record,
        trees: Vec::new(),
        looks,
        released_any: false,
        terminate: false,
        refusals,
        predecessors_checked: false,
        search: Default::default(),
        control,
        control_unreachable,
    };
    // Before serving: a dead predecessor's trees (same owner) are ours to carry on,
    // so a replayed `register` finds them and no self-healing takes them away.
    if sup.take_over_predecessors_if_any() {
        // The search folded the dead guardians' records: self-healing's own look
        // would no longer see them.
        crate::linux::commands::heal::start_round_in_background(opts.state_dir.clone());
    } else {
        // Serving: now, off the start-up path, finish a few dead guardians' trees.
        crate::linux::commands::heal::start_in_background(opts.state_dir.clone());
    }
    sup.serve(&mut owner);
    sup.take_over_if_pending();
    sup.tear_down_everything();
    Ok(0)
}

/// The control socket (see `control`), in the state dir, named after this
/// supervisor's identity as its trees' records give it; else why there is none.
/// Without one, `kill` of a tree we hold cannot reach us and says so (exit status 3);
/// it never falls back to signalling us. Each tree's log says it too (a supervisor's
/// stderr is often read by no one).
fn listen_for_control(
    opts: &GuardOptions,
    signaller: &Signaller,
) -> (Option<Listener>, Option<String>) {
    let me = signaller.me();
    let listener = (signaller.procfs().stat(me.pid))
        .map_err(|e| format!("reading /proc/self: {e}"))
        .and_then(|stat| {
            let state = crate::registry::state_dir::resolve(opts.state_dir.as_deref())
                .and_then(|(path, _)| crate::registry::StateDir::prepare(&path, me.uid))
                .map_err(|e| e.to_string())?;
            Listener::bind(&state, me.uid, me.pid, stat.starttime, signaller.procfs())
                .map_err(|e| format!("no control socket: {e}"))
        });
    match listener {
        Ok(listener) => (Some(listener), None),
        Err(why) => {
            tracing::warn!("`undertaker kill` cannot ask this supervisor: {why}");
            (None, Some(why))
        }
    }
}

/// The process whose children `register`/`adopt` accept: `--owner PID`, else our
/// parent (also with `--owner-fd`: the pipe says when, the parent says who).
fn owner_process(spec: &OwnerSpec) -> Option<PidRef> {
    let pid = match spec {
        OwnerSpec::Pid(pid) => *pid,
        OwnerSpec::Parent | OwnerSpec::Fd(_) => rustix::process::getppid()?.as_raw_nonzero().get(),
    };
    let owner = PidRef::open(pid).ok()?;
    // Re-check after opening: a parent that died first left us watching a stranger.
    let still = match spec {
        OwnerSpec::Pid(_) => true,
        _ => rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) == Some(pid),
    };
    (still && !owner.exited()).then_some(owner)
}

pub(crate) struct Supervisor<'a> {
    opts: &'a GuardOptions,
    signaller: Signaller,
    containment: Containment,
    host: HostProcess,
    channel: Channel,
    owner_process: Option<PidRef>,
    owner_record: OwnerRecord,
    trees: Vec<Tree>,
    /// The portable tier: every tree's look for new members, one /proc snapshot per
    /// tick for all of them, and their end together.
    looks: Option<Looks>,
    /// A tree was released: its processes are still our descendants, so the final
    /// teardown may no longer take every descendant of ours.
    released_any: bool,
    /// A teardown signal (SIGTERM, ...) arrived: every tree goes.
    terminate: bool,
    /// Where refusals go besides the reply (a host may never read replies).
    refusals: RefusalLog,
    /// The registry was searched for a dead predecessor's trees (once is enough: a
    /// predecessor is dead before we start).
    predecessors_checked: bool,
    /// A search for a dead predecessor's trees the registry has not answered yet.
    search: succession::PendingSearch,
    /// Where `undertaker kill <tree>` asks us to end one tree (see `control`).
    control: Option<Listener>,
    /// Why there is no control socket, for each tree's record.
    control_unreachable: Option<String>,
}

impl Supervisor<'_> {
    /// Serves requests until end of input, the owner's death, or a teardown signal.
    fn serve(&mut self, owner: &mut Owner) {
        // The portable tier: the trees look for new members every TRACK_EVERY while
        // they live (docs/TIERS.md, "portable"); the other tiers never need the wake.
        let mut track_at = (self.looks.is_some()).then(|| std::time::Instant::now() + TRACK_EVERY);
        loop {
            if self.terminate || owner.gone() {
                return;
            }
            let mut fds: Vec<(BorrowedFd<'_>, PollFlags)> =
                vec![(self.channel.fd(), PollFlags::IN)];
            fds.extend(owner.fd().map(|fd| (fd, PollFlags::IN)));
            // The control socket's connections are read here too, never waited
            // for: a silent one must not hold up the channel or the owner watch.
            fds.extend(
                (self.control.iter())
                    .flat_map(Listener::fds)
                    .map(|fd| (fd, PollFlags::IN)),
            );
            fds.extend(
                (self.trees.iter())
                    .filter_map(Tree::root_fd)
                    .map(|fd| (fd, PollFlags::IN)),
            );
            let search = (self.search.is_pending())
                .then(|| std::time::Instant::now() + succession::SEARCH_POLL);
            let until = [
                search,
                self.control.as_ref().and_then(Listener::deadline),
                track_at,
            ]
            .into_iter()
            .flatten()
            .min();
            let got = self.host.next_event(&fds, until);
            drop(fds);
            // The signals `run` would forward to its one CMD (SIGINT, SIGHUP, ...)
            // have no one command to go to here and are dropped: a dying terminal
            // must not end the trees.
            match got {
                Some(got) if !got.terminate => {}
                _ => return,
            }
            self.host.reap(&mut |_, _| {});
            if let Some(looks) = &mut self.looks {
                if track_at.is_some_and(|at| std::time::Instant::now() >= at) {
                    Tree::track_all(&mut self.trees, looks);
                    track_at = Some(std::time::Instant::now() + TRACK_EVERY);
                }
            }
            self.take_over_if_answered();
            self.roots_exited();
            if self.control.is_some() {
                if owner.gone() {
                    return;
                }
                self.serve_control();
            }
            if readable_now(self.channel.fd()) {
                let Some(lines) = self.channel.read() else {
                    return;
                };
                for incoming in lines {
                    // Each request is acted on only while the owner lives: requests
                    // queued before it died must not start anything after.
                    if owner.gone() {
                        return;
                    }
                    self.handle(incoming);
                    if self.terminate {
                        return;
                    }
                }
            }
        }
    }

    /// Requests on the control socket: `kill` of one tree, from `undertaker kill`.
    /// The host hears of it as of any tree that ends (`exited` for a spawned root).
    fn serve_control(&mut self) {
        let uid = self.signaller.me().uid;
        let Some(control) = &mut self.control else {
            return;
        };
        for conn in control.accept(uid) {
            let reply = match parse_line(&conn.line) {
                Ok(Some(Envelope {
                    id,
                    request: Request::Kill { tree },
                })) => match self.answer(Request::Kill { tree }, Vec::new()) {
                    Ok(answer) => reply::ok(id.as_ref(), &answer),
                    Err(e) => reply::error(&e.answering(crate::protocol::Op::Kill, id, None)),
                },
                Ok(_) => reply::error(&ProtocolError::new(
                    ErrorCode::UnknownOp,
                    "the control socket takes `kill` only",
                )),
                Err(e) => reply::error(&e),
            };
            conn.reply(&reply);
        }
    }

    /// A spawned root exited: `exited` event at once, then the rest of its tree torn
    /// down as `run` does when CMD exits, then `ended`. A taken leader exited: the
    /// tree stays while members remain, and goes quietly once it is empty.
    fn roots_exited(&mut self) {
        let mut i = 0;
        while i < self.trees.len() {
            let tree = &mut self.trees[i];
            if !tree.root_fd().is_some_and(readable_now) {
                i += 1;
                continue;
            }
            tree.root_handled();
            if !tree.is_taken() {
                let mut tree = self.trees.remove(i);
                self.announce_exit(&mut tree);
                self.end_tree(tree, Cause::CommandExited);
            } else if !tree.is_populated()
                && tree.members(&self.signaller, &mut None).proven.is_empty()
            {
                let tree = self.trees.remove(i);
                self.finish(tree, 0);
            } else {
                i += 1;
            }
        }
    }

    /// Closes taken trees with nothing left to guard: every process taken has exited
    /// and the tree's cgroup (if any) is empty. What they left outside a cgroup cannot
    /// be found again anyway (the subreaper tier's limit), and a number reused later
    /// must not look registered.
    fn prune(&mut self) {
        let (gone, kept): (Vec<Tree>, Vec<Tree>) = std::mem::take(&mut self.trees)
            .into_iter()
            .partition(|t| t.taken_all_exited() && !t.is_populated());
        self.trees = kept;
        for tree in gone {
            self.finish(tree, 0);
        }
    }

    /// Tears one tree down and closes it (see [`Supervisor::finish`]). Returns the
    /// members still alive afterwards.
    fn end_tree(&mut self, mut tree: Tree, cause: Cause) -> usize {
        let stuck = tree.tear_down(cause, &self.signaller, &mut self.host);
        self.terminate |= self.host.take_terminate();
        let live = match stuck {
            0 => 0,
            _ => tree.members(&self.signaller, &mut None).proven.len(),
        };
        self.finish(tree, live);
        live
    }

    /// A spawned root's status goes out as `exited` as soon as it is collected: a host
    /// wants it at once, not after the grace period of a member that ignores SIGTERM.
    fn announce_exit(&mut self, tree: &mut Tree) {
        tree.reap(&mut self.host);
        if let Some((root, status)) = tree.exit_to_announce() {
            emit(&reply::exited(tree.id(), root, status));
        }
    }

    /// Closes a tree's record. A spawned tree's end goes out as `exited` (unless it
    /// went out already) and then `ended`, with `live` its members still alive.
    fn finish(&mut self, mut tree: Tree, live: usize) {
        if !tree.is_taken() {
            self.announce_exit(&mut tree);
            if let Some(root) = tree.root().map(PidRef::pid) {
                self.host.forget_root(root);
            }
            emit(&reply::ended(tree.id(), live));
        }
        tree.finish();
    }

    /// End of input, owner death or SIGTERM: every tree at once (SIGTERM to all, one
    /// grace period, SIGKILL), then every record closed.
    fn tear_down_everything(&mut self) {
        self.channel.release_reserve();
        let mut trees = std::mem::take(&mut self.trees);
        let mut stuck = 0;
        // The portable tier: every tree through the core's teardown together first
        // (what its tracking knows includes members that left our descendants and
        // scrubbed their marker); one grace for all of them.
        if let Some(looks) = &mut self.looks {
            stuck += Tree::tear_down_portable_together(
                &mut trees,
                looks,
                self.opts.grace,
                Cause::Terminated,
                &mut self.host,
            );
        }
        // Then what the tiers' own rule finds (with `everything_ours`, any descendant
        // of ours): in the portable tier, usually nothing left, at no grace.
        if !trees.is_empty() || !self.released_any {
            let mut refs: Vec<&mut Tree> = trees.iter_mut().collect();
            stuck += tear_down_together(
                &mut refs,
                !self.released_any,
                self.opts.grace,
                &self.signaller,
                &mut self.host,
            )
            .left();
        }
        for mut tree in trees {
            let live = match stuck {
                0 => 0,
                _ => tree.members(&self.signaller, &mut None).proven.len(),
            };
            self.finish(tree, live);
        }
        self.host.reap(&mut |_, _| {});
    }
}
