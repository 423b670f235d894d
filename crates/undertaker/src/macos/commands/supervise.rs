//! `undertaker supervise` on macOS (docs/SUPERVISE.md; docs/PORTING.md, "macOS"):
//! the neutral serve loop (`crate::supervisor`) over the portable core's trees
//! (`supervisor/portable.rs`), each tree tracked over libproc and its own kqueue.
//! [`run`] reads as its steps: signals → owner → channel → serve → tear every
//! tree down → exit 0.
//!
//! The channel is standard input and output, lines as on Linux and Windows; standard
//! input's readiness (`EVFILT_READ`), the owner and the stop signals wake one kqueue,
//! as `run`'s guardian waits. No descriptor passing (no socket): `adopt` needs a
//! `pid`. Unlike a Job Object, nothing kernel-side outlives a `kill -9` of the
//! supervisor: its trees are then a dead guardian's, for `sweep` (docs/GUARANTEES.md).
//! Type-checked here, its logic tested on Linux; not yet run on a Mac.

use crate::macos::commands::reconcile::boot_id;
use crate::macos::contain::owner::{self, Owner};
use crate::macos::contain::portable::MacOs;
use crate::macos::kernel::sys;
use crate::portable::tracking::TRACK_EVERY;
use crate::portable::{ProcessTable, Wake, Waker};
use crate::protocol::framing::{Frame, LineFramer};
use crate::registry::refusal_log::RefusalLog;
use crate::supervisor::portable::{Identity, PortableTrees};
use crate::supervisor::{Channel, Next, Supervisor};
use crate::{RunError, SuperviseOptions, Tier};
use std::collections::VecDeque;
use std::os::fd::AsFd;

pub fn run(sup_opts: &SuperviseOptions) -> Result<i32, RunError> {
    let opts = &sup_opts.guard;
    if !matches!(opts.tier, Tier::Auto | Tier::Portable) {
        return Err(RunError::TierUnavailable {
            tier: opts.tier,
            why: "Linux only; macOS runs the portable tier (--tier auto or portable)".into(),
        });
    }
    let setup = |what: &str, e: std::io::Error| RunError::Setup(format!("{what}: {e}"));
    // 1. SIGTERM becomes the teardown of every tree, never our death; SIGINT and
    // SIGHUP are ignored: a dying terminal must not end the trees (docs/SUPERVISE.md,
    // "Lifetime").
    let mut os = MacOs::new().map_err(|e| setup("kqueue", e))?;
    os.watch_signals(&[libc::SIGTERM])
        .map_err(|e| setup("signals", e))?;
    sys::block_signals(&[libc::SIGINT, libc::SIGHUP]).map_err(|e| setup("signals", e))?;
    let me = std::process::id() as i32;
    let uid = rustix::process::getuid().as_raw();
    let own = os
        .facts(me)
        .ok_or_else(|| RunError::Setup("proc_pidinfo of our own pid failed".into()))?;
    // 2. The owner, proven and watched before anything is served.
    let (owner, owner_record) = owner::resolve(&opts.owner, &mut os, own.start)?;
    // 3. The channel: standard input's readiness on the same kqueue. A regular file
    // is read on every tick instead: kqueue never reports its end of file.
    let stdin = std::io::stdin();
    let file = rustix::fs::fstat(stdin.as_fd()).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
    });
    if !file {
        os.watch_readable(stdin.as_fd())
            .map_err(|e| setup("standard input", e))?;
    }
    // 4. Serve until the host is gone, then every tree at once; exit 0.
    let boot = boot_id();
    let owner_pid = owner.pid();
    let trees = PortableTrees {
        backend: MacOs::new,
        table: MacOs::new().map_err(|e| setup("kqueue", e))?,
        who: Identity {
            me,
            start: own.start,
            pgid: own.pgid,
            uid,
            owner: owner_pid.zip(owner_record.starttime),
            owner_record,
            protect: [Some(own.ppid), owner_pid].into_iter().flatten().collect(),
            parent_pgid: sup_opts.parent_pgid,
            boot_id: boot.clone(),
        },
        state_dir: opts.state_dir.clone(),
        label: opts.label.clone(),
        grace: opts.grace,
    };
    let refusals = RefusalLog::new(opts.state_dir.clone(), uid, boot);
    let mut channel = Lines {
        os,
        owner,
        framer: LineFramer::new(),
        frames: VecDeque::new(),
        wakes: Vec::new(),
        file,
        ended: false,
    };
    Supervisor::new(trees, std::io::stdout(), refusals).run(&mut channel);
    Ok(0)
}

/// Standard input cut into bounded lines, the owner and our stop signals, over one
/// kqueue.
struct Lines {
    os: MacOs,
    owner: Owner,
    framer: LineFramer,
    frames: VecDeque<Frame>,
    /// What the last wait reported (the owner's exit among them).
    wakes: Vec<Wake>,
    /// Standard input is a regular file: read without asking the kqueue.
    file: bool,
    /// Standard input reached its end (or failed): the host is gone.
    ended: bool,
}

impl Channel for Lines {
    fn next(&mut self) -> Next {
        if let Some(frame) = self.frames.pop_front() {
            return Next::Frame(frame);
        }
        if !self.ended {
            let now = self.os.now();
            self.wakes = self.os.wait(now + TRACK_EVERY);
            let stdin = std::io::stdin();
            if self.file || self.os.take_readable(stdin.as_fd()) {
                self.read(stdin.as_fd());
            }
        }
        match self.frames.pop_front() {
            Some(frame) => Next::Frame(frame),
            None if self.ended => Next::End,
            None => Next::Tick,
        }
    }

    fn owner_gone(&mut self) -> bool {
        self.owner.gone(&mut self.os, &self.wakes)
    }

    fn stop_asked(&mut self) -> bool {
        !self.os.take_signals().is_empty()
    }
}

impl Lines {
    /// One read of what standard input holds (it is readable, or a file: this does
    /// not block).
    /// Straight from the descriptor: a buffer in between would hold lines the
    /// kqueue no longer reports.
    fn read(&mut self, stdin: std::os::fd::BorrowedFd<'_>) {
        let mut buf = vec![0u8; 16 * 1024];
        match rustix::io::read(stdin, &mut buf) {
            Ok(0) => self.ended = true,
            Ok(n) => {
                let mut frames = Vec::new();
                self.framer.push(&buf[..n], &mut frames);
                self.frames.extend(frames);
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(_) => self.ended = true,
        }
    }
}
