//! `undertaker supervise` on Windows (docs/SUPERVISE.md; docs/PORTING.md, "Windows"):
//! the neutral serve loop (`crate::supervisor`) over Job Objects.
//!
//! One process, one kill-on-close job per tree, and only this process holds the job
//! handles: when it dies, however it dies, the kernel closes every job and
//! terminates every tree, so no sentinel is needed. [`run`] reads as its steps:
//! owner → channel → serve → tear everything down → exit 0.
//!
//! The channel is standard input and output, lines as on Linux. Windows has no
//! descriptor passing: a request that needs one (`adopt` without `pid`) is refused
//! saying so. A reader thread feeds lines to the serve loop, which also watches the
//! owner, the spawned roots and each tree's stop event (`undertaker kill`).

mod tree;

use crate::escalation::Escalation;
use crate::protocol::framing::{Frame, LineFramer};
use crate::protocol::wire::{HeldTier, HelloReply, OwnerPid, TreeKind};
use crate::protocol::{
    ErrorCode, ProtocolError, RefusalReason, Request, SpawnRequest, PROTOCOL_VERSION,
};
use crate::registry::refusal_log::RefusalLog;
use crate::registry::{OwnerKind, OwnerRecord};
use crate::supervisor::{Channel, Next, Supervisor, Trees};
use crate::windows::commands::record::BOOT_ID;
use crate::windows::contain::owner::{self, Owner};
use crate::windows::kernel::sys;
use crate::windows::proof::teardown::{self, Outcome};
use crate::{RunError, SuperviseOptions, Tier};
use std::io::Read;
use std::os::windows::io::{AsHandle, OwnedHandle};
use std::sync::mpsc;
use std::time::Duration;
use tree::{Held, Setup, Tree};

/// How often the serve loop looks at the owner, the roots and the stop events when
/// no line arrives.
const TICK: Duration = Duration::from_millis(50);

/// What the reader thread hands the serve loop.
enum Input {
    Frame(Frame),
    /// End of file (or a read error): the host is gone.
    End,
}

/// The owner as `register` proves parentage against: its pid and creation time.
#[derive(Debug, Clone, Copy)]
struct OwnerId {
    pid: u32,
    created: u64,
}

pub fn run(sup_opts: &SuperviseOptions) -> Result<i32, RunError> {
    let opts = &sup_opts.guard;
    if opts.tier != Tier::Auto {
        return Err(RunError::TierUnavailable {
            tier: opts.tier,
            why: "Linux only; Windows uses a Job Object (--tier auto)".into(),
        });
    }
    // 1. The owner, proven before anything is served.
    let (owner, owner_record) = owner::resolve(&opts.owner)?;
    let owner_id = owner_id(&owner_record);
    let console = sys::create_event(None).map_err(|e| RunError::Setup(format!("event: {e}")))?;
    if let Ok(c) = console.try_clone() {
        if let Err(e) = sys::install_console_handler(c) {
            tracing::debug!("console handler: {e}");
        }
    }
    // 2. The channel: a thread cuts standard input into bounded lines.
    let lines = read_lines_in_background()?;
    // 3. Serve until the host is gone, then every tree at once; exit 0.
    let jobs = Jobs {
        setup: Setup {
            state_dir: opts.state_dir.as_deref(),
            label: opts.label.as_deref(),
            owner: &owner_record,
        },
        owner_id,
        me: sys::current_pid(),
        esc: Escalation::with_grace(opts.grace),
    };
    let refusals = RefusalLog::new(opts.state_dir.clone(), 0, BOOT_ID.into());
    let mut channel = Lines {
        lines,
        owner: &owner,
        console,
    };
    Supervisor::new(jobs, std::io::stdout(), refusals).run(&mut channel);
    Ok(0)
}

/// `--owner`/the parent: the resolved owner; `--owner-fd`: our Windows parent, if any
/// (the host that holds the pipe's other end is normally it). `None`: no Windows
/// process to be the parent (started from outside Windows, as under Wine from a Linux
/// shell), so `register`/`adopt` are refused `not_owner_child`.
fn owner_id(record: &OwnerRecord) -> Option<OwnerId> {
    if let (Some(pid), Some(created)) = (record.pid, record.starttime) {
        return Some(OwnerId {
            pid: pid as u32,
            created,
        });
    }
    if record.kind != OwnerKind::Fd {
        return None;
    }
    let pid = sys::parent_pid().ok().filter(|&p| p != 0)?;
    let h = sys::open_process(pid, sys::Access::Watch).ok()?;
    let created = sys::creation_time(h.as_handle()).ok()?;
    (created <= sys::own_creation_time().ok()?).then_some(OwnerId { pid, created })
}

fn read_lines_in_background() -> Result<mpsc::Receiver<Input>, RunError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("supervise-input".into())
        .spawn(move || {
            let mut input = std::io::stdin().lock();
            let mut framer = LineFramer::new();
            let mut buf = vec![0u8; 16 * 1024];
            let mut frames = Vec::new();
            loop {
                match input.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        framer.push(&buf[..n], &mut frames);
                        for f in frames.drain(..) {
                            if tx.send(Input::Frame(f)).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            let _ = tx.send(Input::End);
        })
        .map_err(|e| RunError::Setup(format!("input thread: {e}")))?;
    Ok(rx)
}

/// Standard input's lines (from the reader thread), the owner and the console.
struct Lines<'a> {
    lines: mpsc::Receiver<Input>,
    owner: &'a Owner,
    console: OwnedHandle,
}

fn signalled(h: std::os::windows::io::BorrowedHandle<'_>) -> bool {
    matches!(sys::wait_any(&[h], Some(Duration::ZERO)), Ok(Some(0)))
}

impl Channel for Lines<'_> {
    fn next(&mut self) -> Next {
        match self.lines.recv_timeout(TICK) {
            Ok(Input::Frame(f)) => Next::Frame(f),
            Ok(Input::End) | Err(mpsc::RecvTimeoutError::Disconnected) => Next::End,
            Err(mpsc::RecvTimeoutError::Timeout) => Next::Tick,
        }
    }

    fn owner_gone(&mut self) -> bool {
        self.owner.waitable().is_some_and(signalled)
    }

    fn stop_asked(&mut self) -> bool {
        signalled(self.console.as_handle())
    }
}

/// The trees as kill-on-close jobs.
struct Jobs<'a> {
    setup: Setup<'a>,
    owner_id: Option<OwnerId>,
    me: u32,
    esc: Escalation,
}

impl Trees for Jobs<'_> {
    type Held = Held;

    fn hello(&self) -> HelloReply {
        HelloReply {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").into(),
            tier: HeldTier::Job,
            pid: self.me as i32,
            owner: OwnerPid {
                pid: self.owner_id.map(|o| o.pid as i32),
            },
            socket: false,
        }
    }

    fn spawn(&mut self, req: &SpawnRequest) -> Result<Tree, ProtocolError> {
        self.setup.spawn(req)
    }

    /// Proves `pid` (the owner's child, created after the owner: Windows' parent
    /// pid is never updated, so an older process is a stranger on a reused number),
    /// then takes it and its descendants into a new job.
    fn take(&mut self, kind: TreeKind, pid: i32, held: &[Tree]) -> Result<Tree, ProtocolError> {
        let refused =
            |reason, why: String| Err(ProtocolError::refused(reason, format!("pid {pid}: {why}")));
        let number = pid as u32;
        let owner = self.owner_id;
        if number == self.me || owner.is_some_and(|o| o.pid == number) {
            return refused(
                RefusalReason::Protected,
                "the supervisor or its owner".into(),
            );
        }
        let Ok(process) = sys::open_process(number, sys::Access::Assign) else {
            return refused(RefusalReason::NoSuchProcess, "no such process".into());
        };
        if sys::exit_code(process.as_handle()).is_some() {
            return refused(RefusalReason::NoSuchProcess, "it has exited".into());
        }
        if held
            .iter()
            .any(|t| sys::is_in_job(process.as_handle(), t.held.job.handle()).unwrap_or(false))
        {
            return refused(
                RefusalReason::AlreadyGuarded,
                "held by a tree of this supervisor".into(),
            );
        }
        let Some(owner) = owner else {
            return refused(
                RefusalReason::NotOwnerChild,
                "the supervisor has no Windows owner to be its parent".into(),
            );
        };
        let parent = sys::processes()
            .ok()
            .and_then(|all| all.into_iter().find(|&(p, _)| p == number))
            .map(|(_, parent)| parent);
        let created = sys::creation_time(process.as_handle()).unwrap_or(0);
        if parent != Some(owner.pid) || created < owner.created {
            return refused(
                RefusalReason::NotOwnerChild,
                format!("its parent is not the owner (pid {})", owner.pid),
            );
        }
        let never = [self.me, owner.pid];
        let (tree, adopted) = self.setup.take(kind, number, process, &never)?;
        tracing::debug!(
            "{kind:?} {pid}: {} assigned in {} snapshot(s)",
            adopted.assigned,
            adopted.rounds
        );
        Ok(tree)
    }

    fn cannot(&self, request: &Request) -> ProtocolError {
        let why = match request {
            Request::AdoptGroup { .. } => {
                "adopt by snapshot names a process group, which Windows has not: adopt by `pid`"
            }
            _ => "adopt needs `pid` on Windows: a pidfd travels only on a Unix socket (Linux)",
        };
        ProtocolError::new(ErrorCode::BadRequest, why)
    }

    fn root_alive(&mut self, tree: &mut Tree) -> bool {
        tree.held.root_alive()
    }

    fn live(&mut self, tree: &mut Tree) -> u64 {
        tree.held.live()
    }

    fn stop_asked(&mut self, tree: &Tree) -> bool {
        tree.held.stop_asked()
    }

    fn root_status(&mut self, tree: &mut Tree) -> Option<i32> {
        tree.held.root_status()
    }

    /// A job needs no look: the kernel puts every descendant in it.
    fn look(&mut self, _tree: &mut Tree) {}

    fn release(&mut self, tree: Tree) -> Result<(), String> {
        tree::release(tree)
    }

    fn tear_down(&mut self, trees: &mut [Tree]) -> Vec<usize> {
        let mut entries: Vec<Vec<crate::registry::AuditEntry>> = vec![Vec::new(); trees.len()];
        let outcomes = match trees {
            [one] => vec![teardown::teardown(
                &one.held.job,
                one.root_pid as u32,
                self.esc,
                &mut |e| entries[0].push(e),
            )],
            _ => {
                let pairs: Vec<_> = trees
                    .iter()
                    .map(|t| (&t.held.job, t.root_pid as u32))
                    .collect();
                teardown::teardown_together(&pairs, self.esc, &mut |i, e| entries[i].push(e))
            }
        };
        trees
            .iter()
            .zip(outcomes)
            .zip(entries)
            .map(|((tree, outcome), entries)| {
                tree::audit(tree, entries);
                match outcome {
                    Outcome::Stuck(n) => n,
                    _ => 0,
                }
            })
            .collect()
    }
}
