//! `undertaker run` on macOS, as named steps: signals → owner → record → sentinel →
//! CMD in its own process group with the tree's marker → the portable core's tracking
//! until CMD exits, the owner dies or a stop is asked → the core's teardown with its
//! freeze round → CMD's status (docs/PORTING.md, "macOS"; docs/TIERS.md, "portable").
//!
//! Its sentinel (`sentinel.rs`) takes the tree over after the guardian's `kill -9`;
//! after both, `undertaker sweep` (or `kill`) tears it down from its member record
//! (docs/GUARANTEES.md, "macOS").

use crate::exit_status::shell_status;
use crate::identity::{TreeId, TREE_MARKER};
use crate::macos::commands::reconcile::boot_id;
use crate::macos::commands::sentinel;
use crate::macos::contain::owner::{self, Owner};
use crate::macos::contain::portable::MacOs;
use crate::macos::kernel::sys;
use crate::macos::proof::signal;
use crate::portable::tracking::{self, Ended, Tracking, Watch};
use crate::portable::{Member, ProcessTable, Signal, Wake, Why};
use crate::registry::record_file::Line;
use crate::registry::recorder::{Recorder, Start};
use crate::registry::{now_ms, GuardianRecord, RecordedTier};
use crate::supervisor::portable::random;
use crate::{RunError, RunOptions, Tier};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};

/// The signals that ask the guardian to tear down, never end it.
const STOP_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

pub fn run(opts: &RunOptions) -> Result<i32, RunError> {
    if let Some(request) = sentinel::requested() {
        let state_dir = opts.guard.state_dir.as_deref();
        return sentinel::run(&request, state_dir, opts.guard.grace);
    }
    if opts.replace {
        return Err(RunError::Setup(
            "--replace is not available on macOS yet".into(),
        ));
    }
    if !matches!(opts.guard.tier, Tier::Auto | Tier::Portable) {
        return Err(RunError::TierUnavailable {
            tier: opts.guard.tier,
            why: "Linux only; macOS runs the portable tier (--tier auto or portable)".into(),
        });
    }
    let setup = |what: &str, e: std::io::Error| RunError::Setup(format!("{what}: {e}"));
    // 1. Our stop signals become a teardown, before anything can send one.
    let mut os = MacOs::new().map_err(|e| setup("kqueue", e))?;
    os.watch_signals(&STOP_SIGNALS)
        .map_err(|e| setup("signals", e))?;
    // The terminal is handed to CMD and taken back from the background.
    sys::block_signals(&[libc::SIGTTOU]).map_err(|e| setup("signals", e))?;
    let me = std::process::id() as i32;
    let uid = rustix::process::getuid().as_raw();
    let own = os
        .facts(me)
        .ok_or_else(|| RunError::Setup("proc_pidinfo of our own pid failed".into()))?;
    // 2. The owner, proven and watched before anything starts.
    let (mut owner, owner_record) = owner::resolve(&opts.guard.owner, &mut os, own.start)?;
    // 3. The tree's id and record file (holding the liveness lock), before CMD.
    let boot = boot_id();
    let tree = TreeId::generate(&boot, random().map_err(|e| setup("random", e))?);
    let state_dir = opts.guard.state_dir.as_deref();
    let mut record = Recorder::open(
        &tree,
        Start {
            state_dir,
            uid,
            boot_id: &boot,
            label: opts.guard.label.clone(),
            tier: RecordedTier::Portable,
            guardian: GuardianRecord {
                pid: me,
                starttime: own.start,
                pgid: own.pgid,
                pidfs_inode: None,
                supervisor: false,
            },
            owner: owner_record,
        },
    )?;
    let members = record
        .is_recording()
        .then(|| tracking::members_path(state_dir, &tree))
        .flatten();
    // The sentinel, once the record exists for it to take over (docs/TIERS.md).
    let grace = opts.guard.grace;
    let sentinel = match record
        .is_recording()
        .then(|| sentinel::spawn(&tree, me, own.start, grace, state_dir))
    {
        None => None,
        Some(Ok(child)) => Some(child.id() as i32),
        Some(Err(why)) => {
            tracing::warn!("no sentinel for tree {tree}: {why}");
            record.note(&format!("no sentinel: {why}"));
            None
        }
    };
    let protect: Vec<i32> = [Some(own.ppid), owner.pid(), sentinel]
        .into_iter()
        .flatten()
        .collect();
    let scope = tracking::scope(&mut os, &tree, uid, me, &protect, None);
    // 4. CMD, in its own process group, carrying the marker.
    let mut child = spawn(&opts.command, &tree)?;
    let pid = child.id() as i32;
    if let Some(f) = os.facts(pid) {
        record.root_record(f.root_record());
    }
    let terminal = hand_terminal(&mut os, own.pgid, pid);
    let mut tracking = Tracking::of_command(os, scope, pid, members);
    // 5. Watch CMD, the owner and our stop signals; track the members meanwhile.
    let ended = tracking.watch(pid, &mut Guard { owner: &mut owner });
    // 6. Tear down what is left of the tree.
    record.write(&[Line::Reaping { time_ms: now_ms() }]);
    match ended {
        Ended::CmdExited => {}
        Ended::OwnerGone => record.note("owner gone: tearing the tree down"),
        Ended::Stopped => record.note("asked to stop: tearing the tree down"),
    }
    let report = tracking.tear_down(opts.guard.grace);
    record.note(&report.summary());
    if terminal {
        let _ = sys::set_terminal_foreground(own.pgid);
    }
    // 7. CMD's status is ours.
    let status = child
        .wait()
        .ok()
        .and_then(|s| shell_status(s.code(), s.signal()))
        .unwrap_or(125);
    if !report.stuck.is_empty() {
        tracing::error!(
            "{} process(es) of tree {tree} still alive after the kill cap",
            report.stuck.len()
        );
        record.finish(Some(125));
        return Ok(125);
    }
    tracking.forget();
    record.finish(Some(status));
    Ok(status)
}

/// What the guardian watches besides CMD and the members.
struct Guard<'a> {
    owner: &'a mut Owner,
}

impl Watch<MacOs> for Guard<'_> {
    fn owner_gone(&mut self, os: &mut MacOs, wakes: &[Wake]) -> bool {
        self.owner.gone(os, wakes)
    }

    fn stop_asked(&mut self, os: &mut MacOs) -> bool {
        !os.take_signals().is_empty()
    }
}

/// When the guardian runs in the foreground of a terminal, CMD (in its own group)
/// gets the terminal, as in a shell's job: an interactive command can read it. A
/// read before the handover stopped it (SIGTTIN): it is continued. Returns whether
/// the terminal was handed over (the guardian takes it back at the end).
fn hand_terminal(os: &mut MacOs, own_pgid: i32, cmd: i32) -> bool {
    if !sys::terminal_foreground_is(own_pgid) || sys::set_terminal_foreground(cmd).is_err() {
        return false;
    }
    if let Some(f) = os.facts(cmd).filter(|f| f.stopped) {
        let member = Member {
            pid: cmd,
            serial: f.serial,
            start: f.start,
            why: Why::Seed,
        };
        signal::deliver(&member, Signal::Cont);
    }
    true
}

fn spawn(command: &[std::ffi::OsString], tree: &TreeId) -> Result<Child, RunError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| RunError::Usage("no command given".into()))?;
    let name = program.to_string_lossy().into_owned();
    Command::new(program)
        .args(args)
        .env(TREE_MARKER, tree.as_str())
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RunError::NotFound(name),
            std::io::ErrorKind::PermissionDenied => RunError::NotExecutable(name, e.to_string()),
            _ => RunError::Setup(format!("{name}: {e}")),
        })
}
