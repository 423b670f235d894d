//! A model of the xnu process rules the portable core depends on (test code; the
//! rules and their sources are in docs/PORTING.md, "macOS"):
//!
//! - pids are handed out sequentially from the last one, wrapping from `pid_max`
//!   (99 999 on xnu) back to 100, skipping every number in use as a pid (zombies
//!   included), a process-group id or a session id;
//! - every process gets a unique id (`p_uniqueid`) that is never reused;
//! - the pid version is bumped at fork and at every exec;
//! - at exec the parent's unique id (`p_puniqueid`) is rewritten to the *current*
//!   parent's (macOS 13+); `p_orig_ppidversion` (macOS 15.4+) keeps the parent's
//!   version at fork;
//! - an exiting process's children are reparented to launchd (pid 1), which reaps
//!   its zombies at once; other zombies stay until their parent reaps them;
//! - `proc_pidinfo`'s identity flavor refuses zombies;
//! - the audit-token signal refuses (ESRCH) a zombie or a stale pid version;
//! - `NOTE_FORK` says who forked, not the child's pid; a watch registered after an
//!   exit never fires.

use super::{Delivery, Facts, Member, ProcessTable, Signal, Wake, Waker};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Where the pid counter wraps to (xnu: 100).
pub const PID_WRAP_TO: i32 = 100;
/// Our uid; strangers may share it (the worst case: we could signal them).
pub const UID: u32 = 501;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    Stopped,
    Zombie,
}

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    pub uid: u32,
    pub uniqueid: u64,
    pub puniqueid: u64,
    pub version: u32,
    pub orig_ppidversion: u32,
    pub start: u64,
    pub marker: Option<String>,
    pub state: State,
    /// Ground truth: forked (transitively) from CMD.
    pub in_tree: bool,
    pub ignores_term: bool,
    /// Forks whenever the world lets it run.
    pub forker: bool,
}

/// The kernel's process table and counters.
#[derive(Debug)]
pub struct Kernel {
    pub procs: BTreeMap<i32, Proc>,
    pub pid_max: i32,
    last_pid: i32,
    next_uniqueid: u64,
    next_version: u32,
    /// Milliseconds of model time.
    pub clock: u64,
    /// macOS ≥ 15.4: `p_orig_ppidversion` is filled in.
    pub orig_version_field: bool,
    knotes: Vec<(i32, u64)>,
    pending: Vec<Wake>,
    /// Every signal the kernel delivered: (pid, uniqueid, signal).
    pub delivered: Vec<(i32, u64, Signal)>,
    /// in_tree of every uniqueid ever created.
    pub truth: HashMap<u64, bool>,
}

impl Kernel {
    /// launchd alone, the counter at `first_pid - 1`.
    pub fn boot(pid_max: i32, orig_version_field: bool) -> Self {
        let mut k = Self {
            procs: BTreeMap::new(),
            pid_max,
            last_pid: PID_WRAP_TO - 1,
            next_uniqueid: 1,
            next_version: 1,
            clock: 1,
            orig_version_field,
            knotes: Vec::new(),
            pending: Vec::new(),
            delivered: Vec::new(),
            truth: HashMap::new(),
        };
        k.procs.insert(
            1,
            Proc {
                pid: 1,
                ppid: 0,
                pgid: 1,
                sid: 1,
                uid: 0,
                uniqueid: 1,
                puniqueid: 0,
                version: 1,
                orig_ppidversion: 0,
                start: 0,
                marker: None,
                state: State::Running,
                in_tree: false,
                ignores_term: true,
                forker: false,
            },
        );
        k
    }

    fn in_use(&self, n: i32) -> bool {
        self.procs.contains_key(&n) || self.procs.values().any(|p| p.pgid == n || p.sid == n)
    }

    fn alloc_pid(&mut self) -> Option<i32> {
        let mut n = self.last_pid;
        for _ in 0..=(self.pid_max - PID_WRAP_TO) {
            n = if n >= self.pid_max {
                PID_WRAP_TO
            } else {
                n + 1
            };
            if !self.in_use(n) {
                self.last_pid = n;
                return Some(n);
            }
        }
        None
    }

    pub fn get(&self, pid: i32) -> Option<&Proc> {
        self.procs.get(&pid)
    }

    pub fn alive(&self, pid: i32) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|p| p.state != State::Zombie)
    }

    fn note(&mut self, pid: i32, uniqueid: u64, wake: Wake) {
        if self.knotes.contains(&(pid, uniqueid)) {
            self.pending.push(wake);
        }
    }

    /// `fork()` by a running `parent`; `None` when it cannot (stopped, zombie, table
    /// full).
    pub fn fork(&mut self, parent: i32) -> Option<i32> {
        let p = self.procs.get(&parent)?.clone();
        if p.state != State::Running {
            return None;
        }
        let pid = self.alloc_pid()?;
        self.next_uniqueid += 1;
        self.next_version += 1;
        self.clock += 1;
        let child = Proc {
            pid,
            ppid: parent,
            uniqueid: self.next_uniqueid,
            puniqueid: p.uniqueid,
            version: self.next_version,
            orig_ppidversion: p.version,
            start: self.clock,
            state: State::Running,
            ..p.clone()
        };
        self.truth.insert(child.uniqueid, child.in_tree);
        self.procs.insert(pid, child);
        self.note(parent, p.uniqueid, Wake::Forked(parent));
        Some(pid)
    }

    /// `execve()`: a new version, `p_puniqueid` rewritten to the current parent's,
    /// the environment kept or scrubbed (`env -i`).
    pub fn exec(&mut self, pid: i32, scrub_env: bool) {
        let Some(p) = self.procs.get(&pid).filter(|p| p.state == State::Running) else {
            return;
        };
        let parent_uid = self.procs.get(&p.ppid).map_or(0, |q| q.uniqueid);
        self.next_version += 1;
        let version = self.next_version;
        let p = self.procs.get_mut(&pid).expect("checked above");
        p.version = version;
        p.puniqueid = parent_uid;
        if scrub_env {
            p.marker = None;
        }
        let uniqueid = p.uniqueid;
        self.note(pid, uniqueid, Wake::Execed(pid));
    }

    /// `setsid()` (refused for a group leader, as on every Unix).
    pub fn setsid(&mut self, pid: i32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            if p.pgid != pid && p.state == State::Running {
                p.sid = pid;
                p.pgid = pid;
            }
        }
    }

    /// The process exits: a zombie until reaped; its children go to launchd, which
    /// reaps its zombies at once.
    pub fn exit(&mut self, pid: i32) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if p.state == State::Zombie {
            return;
        }
        p.state = State::Zombie;
        let (ppid, uniqueid) = (p.ppid, p.uniqueid);
        let orphans: Vec<i32> = self
            .procs
            .values()
            .filter(|c| c.ppid == pid)
            .map(|c| c.pid)
            .collect();
        for c in orphans {
            let zombie = {
                let c = self.procs.get_mut(&c).expect("listed above");
                c.ppid = 1;
                c.state == State::Zombie
            };
            if zombie {
                self.procs.remove(&c);
            }
        }
        self.note(pid, uniqueid, Wake::Exited(pid));
        self.knotes.retain(|&(_, u)| u != uniqueid);
        if ppid == 1 {
            self.procs.remove(&pid);
        }
    }

    /// The parent's `waitpid()` of a zombie child.
    pub fn reap(&mut self, pid: i32) {
        if self
            .procs
            .get(&pid)
            .is_some_and(|p| p.state == State::Zombie)
        {
            self.procs.remove(&pid);
        }
    }

    /// `proc_pidinfo` flavor 18 (bsdinfo + unique identifiers): refuses zombies.
    pub fn flavor18(&self, pid: i32) -> Option<Facts> {
        let p = self.procs.get(&pid).filter(|p| p.state != State::Zombie)?;
        Some(Facts {
            pid,
            ppid: p.ppid,
            pgid: p.pgid,
            uid: p.uid,
            start: p.start,
            serial: p.uniqueid,
            parent_serial: Some(p.puniqueid),
            version: Some(p.version),
            orig_parent_version: self.orig_version_field.then_some(p.orig_ppidversion),
            stopped: p.state == State::Stopped,
        })
    }

    /// `proc_signal_with_audittoken`: ESRCH unless the pid's version is `version`
    /// and the process is not a zombie.
    pub fn token_signal(&mut self, pid: i32, version: u32, signal: Signal) -> Result<(), ()> {
        let p = self
            .procs
            .get_mut(&pid)
            .filter(|p| p.state != State::Zombie && p.version == version)
            .ok_or(())?;
        self.delivered.push((pid, p.uniqueid, signal));
        match signal {
            Signal::Kill => self.exit(pid),
            // A stopped process acts on SIGTERM only once continued; the model drops
            // it (pessimistic: the kill round has to finish the job).
            Signal::Term if !p.ignores_term && p.state == State::Running => self.exit(pid),
            Signal::Term => {}
            Signal::Stop => p.state = State::Stopped,
            Signal::Cont => p.state = State::Running,
        }
        Ok(())
    }

    /// kqueue `EVFILT_PROC` registration: fails (no event ever) unless the
    /// process is there and not a zombie.
    pub fn watch(&mut self, pid: i32, uniqueid: u64) {
        if self
            .procs
            .get(&pid)
            .is_some_and(|p| p.uniqueid == uniqueid && p.state != State::Zombie)
        {
            self.knotes.push((pid, uniqueid));
        }
    }

    pub fn take_events(&mut self) -> Vec<Wake> {
        std::mem::take(&mut self.pending)
    }
}

/// A small deterministic RNG (splitmix64) so a failing schedule replays by seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// How hostile the world is between any two calls the core makes.
#[derive(Debug, Clone, Copy)]
pub struct Chaos {
    /// Random actions run per millisecond of waiting (0 = a still world).
    pub steps: usize,
    /// Percent chance of one random action before each table call: the gaps
    /// between the core's reads and its signals.
    pub gap: u64,
    /// Before a token signal: percent chance to kill the target and churn the pid
    /// counter until a stranger holds its number.
    pub recycle_target: u64,
    /// Tree processes at most (forks beyond are refused).
    pub max_tree: usize,
}

/// The kernel plus an adversary that acts in every gap: the [`ProcessTable`] and
/// [`Waker`] the core runs against.
#[derive(Debug)]
pub struct World {
    pub k: Kernel,
    pub rng: Rng,
    pub chaos: Chaos,
    /// A stranger (same uid, not in the tree) whose children churn the pid counter.
    pub churner: i32,
    /// Stop acting as the tree (after teardown starts, the tree only reacts).
    pub tree_acts: bool,
    /// Deliveries whose target's number a stranger held by the time of the signal.
    pub recycled_under_delivery: usize,
    /// macOS before 14.4: no audit-token signal, so delivery is "re-read the
    /// identity, then `kill(pid)`" (docs/GUARANTEES.md states the residual).
    pub recheck_then_kill: bool,
}

impl World {
    pub fn new(k: Kernel, seed: u64, chaos: Chaos, churner: i32) -> Self {
        Self {
            k,
            rng: Rng::new(seed),
            chaos,
            churner,
            tree_acts: true,
            recycled_under_delivery: 0,
            recheck_then_kill: false,
        }
    }

    /// Forks and exits strangers until one holds `pid` (or the table is full).
    pub fn recycle(&mut self, pid: i32) -> Option<i32> {
        for _ in 0..=(self.k.pid_max - PID_WRAP_TO + 1) {
            let s = self.k.fork(self.churner)?;
            if s == pid {
                return Some(s);
            }
            self.k.exit(s);
            self.k.reap(s);
        }
        None
    }

    fn tree_size(&self) -> usize {
        self.k
            .procs
            .values()
            .filter(|p| p.in_tree && p.state != State::Zombie)
            .count()
    }

    /// One random action of some process.
    pub fn step(&mut self) {
        let running: Vec<i32> = self
            .k
            .procs
            .values()
            .filter(|p| p.state == State::Running && p.pid != 1)
            .map(|p| p.pid)
            .collect();
        if running.is_empty() {
            return;
        }
        let pid = running[self.rng.below(running.len())];
        let p = self.k.procs[&pid].clone();
        if !p.in_tree {
            // Strangers churn the counter (and sometimes leave a long-lived one).
            if pid == self.churner {
                if let Some(s) = self.k.fork(pid) {
                    if self.rng.chance(90) {
                        self.k.exit(s);
                        self.k.reap(s);
                    }
                }
            } else if p.ppid == self.churner && self.rng.chance(30) {
                self.k.exit(pid);
                self.k.reap(pid);
            }
            return;
        }
        // Reap a zombie child now and then, as shells do.
        let zombies: Vec<i32> = self
            .k
            .procs
            .values()
            .filter(|c| c.ppid == pid && c.state == State::Zombie)
            .map(|c| c.pid)
            .collect();
        for z in zombies {
            if self.rng.chance(50) {
                self.k.reap(z);
            }
        }
        if p.forker && self.tree_size() < self.chaos.max_tree {
            self.k.fork(pid);
            return;
        }
        if !self.tree_acts {
            return;
        }
        match self.rng.below(10) {
            0..=3 if self.tree_size() < self.chaos.max_tree => {
                if let Some(c) = self.k.fork(pid) {
                    let r = self.rng.next();
                    let c = self.k.procs.get_mut(&c).expect("just forked");
                    c.ignores_term = r % 4 == 0;
                    c.forker = r % 23 == 0;
                }
            }
            4 => self.k.exit(pid),
            5 => {
                let scrub = self.rng.chance(15);
                self.k.exec(pid, scrub);
            }
            6 => self.k.setsid(pid),
            _ => {}
        }
    }

    fn gap(&mut self) {
        if self.rng.chance(self.chaos.gap) {
            self.step();
        }
    }

    fn steps(&mut self) {
        let n = self.chaos.steps;
        if n > 0 {
            for _ in 0..self.rng.below(n + 1) {
                self.step();
            }
        }
    }

    /// Every signal the kernel delivered to a process outside the tree.
    pub fn strangers_signalled(&self) -> Vec<(i32, u64, Signal)> {
        self.k
            .delivered
            .iter()
            .filter(|(_, u, _)| !self.k.truth.get(u).copied().unwrap_or(false))
            .copied()
            .collect()
    }

    /// Tree processes still alive (not zombies).
    pub fn survivors(&self) -> Vec<Proc> {
        self.k
            .procs
            .values()
            .filter(|p| p.in_tree && p.state != State::Zombie)
            .cloned()
            .collect()
    }
}

impl ProcessTable for World {
    fn pids(&mut self) -> Vec<i32> {
        self.gap();
        self.k.procs.keys().copied().collect()
    }

    fn facts(&mut self, pid: i32) -> Option<Facts> {
        self.gap();
        self.k.flavor18(pid)
    }

    fn children(&mut self, pid: i32) -> Vec<i32> {
        self.gap();
        self.k
            .procs
            .values()
            .filter(|p| p.ppid == pid)
            .map(|p| p.pid)
            .collect()
    }

    fn marker(&mut self, facts: &Facts) -> Option<Vec<u8>> {
        self.gap();
        // KERN_PROCARGS2 of the live process at that number: the caller's facts may
        // be stale, so the read is only trusted if the serial is still the same.
        let p = self.k.procs.get(&facts.pid)?;
        (p.uniqueid == facts.serial && p.state != State::Zombie)
            .then(|| p.marker.clone().map(String::into_bytes))
            .flatten()
    }

    /// docs/PORTING.md's macOS delivery: read flavor 18, compare the serial, signal
    /// with the audit token built from the version just read; on ESRCH read again
    /// (an exec bumped the version), at most three times.
    fn deliver(&mut self, member: &Member, signal: Signal) -> Delivery {
        for _ in 0..3 {
            self.gap();
            let Some(f) = self.k.flavor18(member.pid) else {
                return Delivery::AlreadyGone;
            };
            if f.serial != member.serial {
                return Delivery::AlreadyGone;
            }
            if self.rng.chance(self.chaos.recycle_target) {
                self.k.exit(member.pid);
                self.k.reap(member.pid);
                if self.recycle(member.pid).is_some() {
                    self.recycled_under_delivery += 1;
                }
            }
            let mut version = f.version.expect("xnu facts carry a version");
            if self.recheck_then_kill {
                // kill(pid) checks nothing: whoever holds the number now.
                match self.k.get(member.pid) {
                    Some(p) => version = p.version,
                    None => return Delivery::AlreadyGone,
                }
            }
            if self.k.token_signal(member.pid, version, signal).is_ok() {
                return Delivery::Delivered;
            }
        }
        Delivery::AlreadyGone
    }
}

impl Waker for World {
    fn watch(&mut self, member: &Member) {
        self.k.watch(member.pid, member.serial);
    }

    fn now(&mut self) -> Duration {
        Duration::from_millis(self.k.clock)
    }

    fn wait(&mut self, until: Duration) -> Vec<Wake> {
        loop {
            self.steps();
            let events = self.k.take_events();
            if !events.is_empty() || Duration::from_millis(self.k.clock) >= until {
                return events;
            }
            self.k.clock += 1;
        }
    }
}
