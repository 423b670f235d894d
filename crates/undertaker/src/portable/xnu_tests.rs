//! The portable core against the xnu model: the escapes the design catches, the
//! ones it cannot (asserted as misses; docs/GUARANTEES.md, "macOS"), and adversarial
//! schedules with forced pid wraps in which no signal may reach a stranger.

use super::lineage::{Lineage, Scope};
use super::owner::{OwnerGone, Watched};
use super::record;
use super::snapshot::Snapshot;
use super::teardown::tear_down;
use super::xnu_model::{Chaos, Kernel, State, World, UID};
use super::{Signal, Waker, Why};
use crate::escalation::Escalation;
use std::time::Duration;

const TREE: &str = "0123456789abcdef01234567deadbeef";
const NO_SURVIVOR: [i32; 0] = [];
const STILL: Chaos = Chaos {
    steps: 0,
    gap: 0,
    recycle_target: 0,
    max_tree: 10_000,
};

fn escalation() -> Escalation {
    Escalation {
        grace: Duration::from_millis(30),
        kill_cap: Duration::from_millis(200),
    }
}

/// launchd → host → {churner, sentinel → guardian → CMD}; CMD carries the marker.
struct Setup {
    world: World,
    host: i32,
    sentinel: i32,
    guardian: i32,
    cmd: i32,
}

impl Setup {
    fn new(pid_max: i32, orig_version_field: bool, seed: u64, chaos: Chaos) -> Self {
        let mut k = Kernel::boot(pid_max, orig_version_field);
        let host = k.fork(1).expect("host");
        k.procs.get_mut(&host).expect("host").uid = UID;
        let churner = k.fork(host).expect("churner");
        let sentinel = k.fork(host).expect("sentinel");
        let guardian = k.fork(sentinel).expect("guardian");
        k.setsid(guardian);
        let cmd = k.fork(guardian).expect("cmd");
        {
            let c = k.procs.get_mut(&cmd).expect("cmd");
            c.in_tree = true;
            c.marker = Some(TREE.into());
            let u = c.uniqueid;
            k.truth.insert(u, true);
        }
        k.setsid(cmd);
        Self {
            world: World::new(k, seed, chaos, churner),
            host,
            sentinel,
            guardian,
            cmd,
        }
    }

    fn serial(&self, pid: i32) -> u64 {
        self.world.k.get(pid).expect("alive").uniqueid
    }

    fn scope(&self) -> Scope {
        let g = self.world.k.get(self.guardian).expect("guardian");
        Scope {
            tree: TREE.into(),
            uid: UID,
            not_before: g.start,
            protected: [self.host, self.sentinel, self.guardian]
                .iter()
                .map(|&p| self.serial(p))
                .collect(),
        }
    }

    /// The guardian's lineage, seeded with CMD and watching it.
    fn lineage(&mut self) -> Lineage {
        let mut l = Lineage::new(self.scope());
        let facts = self.world.k.flavor18(self.cmd).expect("cmd");
        let m = l.seed(&facts).expect("cmd is ours");
        self.world.watch(&m);
        l
    }

    fn fork(&mut self, parent: i32) -> i32 {
        self.world.k.fork(parent).expect("fork")
    }

    /// The tree after teardown: survivors' pids; no stranger may have been signalled.
    fn tear_down(&mut self, lineage: &mut Lineage) -> Vec<i32> {
        self.world.tree_acts = false;
        tear_down(lineage, &mut self.world, escalation());
        assert_eq!(self.world.strangers_signalled(), []);
        for p in [self.host, self.sentinel, self.guardian] {
            assert!(self.world.k.alive(p), "protected process {p} died");
        }
        self.world.survivors().iter().map(|p| p.pid).collect()
    }
}

/// The guardian's life: wait, and scan on every fork/exec event and periodically.
fn guard(world: &mut World, lineage: &mut Lineage, rounds: usize) {
    for round in 0..rounds {
        let now = world.now();
        let wakes = world.wait(now + Duration::from_millis(5));
        if !wakes.is_empty() || round % 4 == 0 {
            for m in lineage.scan(&mut Snapshot::new(world)) {
                world.watch(&m);
            }
        }
    }
}

/// CMD → I → D, D in its own session: the daemon shape of the escape zoo.
fn double_fork(s: &mut Setup) -> (i32, i32) {
    let i = s.fork(s.cmd);
    let d = s.fork(i);
    s.world.k.setsid(d);
    (i, d)
}

// --- escapes the design catches -------------------------------------------------

#[test]
fn daemon_keeping_its_environment_is_caught_by_the_marker_however_late_the_scan() {
    for modern in [false, true] {
        let mut s = Setup::new(99_999, modern, 1, STILL);
        let mut lineage = s.lineage();
        let (i, d) = double_fork(&mut s);
        s.world.k.exit(i);
        s.world.k.reap(i);
        s.world.k.exec(d, false);
        // First look only now: I is gone and D's parent serial is launchd's.
        assert_eq!(s.world.k.get(d).expect("d").puniqueid, 1);
        let found = lineage.scan(&mut Snapshot::new(&mut s.world));
        assert!(found.iter().any(|m| m.pid == d && m.why == Why::Marker));
        assert_eq!(s.tear_down(&mut lineage), NO_SURVIVOR);
    }
}

#[test]
fn scrubbed_orphan_that_never_execs_again_keeps_its_link_to_a_seen_parent() {
    let mut s = Setup::new(99_999, false, 2, STILL);
    let mut lineage = s.lineage();
    let i = s.fork(s.cmd);
    s.world.k.exec(i, true); // env -i: no marker from here on
    lineage.scan(&mut Snapshot::new(&mut s.world)); // I seen (its serial is recorded)
    let d = s.fork(i);
    s.world.k.setsid(d);
    s.world.k.exit(i); // D reparented to launchd; p_puniqueid still names I
    let found = lineage.scan(&mut Snapshot::new(&mut s.world));
    assert!(found
        .iter()
        .any(|m| m.pid == d && matches!(m.why, Why::Lineage { .. })));
    assert_eq!(s.tear_down(&mut lineage), NO_SURVIVOR);
}

#[test]
fn scrubbed_child_seen_before_its_exec_stays_a_member_after_it() {
    let mut s = Setup::new(99_999, false, 3, STILL);
    let mut lineage = s.lineage();
    let (i, d) = double_fork(&mut s);
    lineage.scan(&mut Snapshot::new(&mut s.world)); // the NOTE_FORK scan wins the race
    s.world.k.exit(i);
    s.world.k.exec(d, true); // rewrites p_puniqueid to launchd: too late, D is known
    assert_eq!(s.world.k.get(d).expect("d").puniqueid, 1);
    assert_eq!(s.tear_down(&mut lineage), NO_SURVIVOR);
}

#[test]
fn exec_after_reparenting_is_caught_by_the_parent_version_on_15_4() {
    let mut s = Setup::new(99_999, true, 4, STILL);
    let mut lineage = s.lineage();
    let i = s.fork(s.cmd);
    s.world.k.exec(i, true);
    lineage.scan(&mut Snapshot::new(&mut s.world)); // I seen with its current version
    let d = s.fork(i); // after the scan
    s.world.k.setsid(d);
    s.world.k.exit(i);
    s.world.k.exec(d, true); // puniqueid → launchd, but p_orig_ppidversion = I's
    let found = lineage.scan(&mut Snapshot::new(&mut s.world));
    assert!(found
        .iter()
        .any(|m| m.pid == d && matches!(m.why, Why::Version { .. })));
    assert_eq!(s.tear_down(&mut lineage), NO_SURVIVOR);
}

/// The tracking loop's cheap look (`scan_children`) follows members' children only:
/// a scrubbed child of a member is found, a marked daemon reparented away from every
/// member waits for the next full scan, which finds it by its marker.
#[test]
fn children_look_finds_members_children_and_leaves_reparented_daemons_to_the_full_scan() {
    let mut s = Setup::new(99_999, false, 11, STILL);
    let mut lineage = s.lineage();
    let (i, d) = double_fork(&mut s);
    s.world.k.exit(i); // D, marked, now launchd's
    let e = s.fork(s.cmd);
    s.world.k.exec(e, true); // env -i child of CMD
    let cheap = lineage.scan_children(&mut Snapshot::new(&mut s.world));
    assert!(cheap.iter().any(|m| m.pid == e));
    assert!(!cheap.iter().any(|m| m.pid == d), "no look at every pid");
    let full = lineage.scan(&mut Snapshot::new(&mut s.world));
    assert!(full.iter().any(|m| m.pid == d && m.why == Why::Marker));
    assert_eq!(s.tear_down(&mut lineage), NO_SURVIVOR);
}

// --- escapes the design cannot catch: asserted misses ------------------------------

/// docs/GUARANTEES.md, macOS miss 1: before 15.4, a scrubbed daemon forked after the
/// last scan whose parent exits and which execs before the next scan has no link
/// left (its `p_puniqueid` names launchd) and no marker.
#[test]
fn miss_exec_after_reparenting_before_15_4() {
    let mut s = Setup::new(99_999, false, 5, STILL);
    let mut lineage = s.lineage();
    let i = s.fork(s.cmd);
    s.world.k.exec(i, true);
    lineage.scan(&mut Snapshot::new(&mut s.world));
    let d = s.fork(i);
    s.world.k.setsid(d);
    s.world.k.exit(i);
    s.world.k.exec(d, true);
    assert!(lineage.scan(&mut Snapshot::new(&mut s.world)).is_empty());
    assert_eq!(s.tear_down(&mut lineage), vec![d], "the stated miss");
    s.world.k.exit(d);
}

/// docs/GUARANTEES.md, macOS miss 2 (every version): an intermediate that forks,
/// and exits before any scan saw it, leaves a scrubbed grandchild linked to a serial
/// (and a version) nobody recorded.
#[test]
fn miss_scrubbed_grandchild_of_an_intermediate_never_seen() {
    for modern in [false, true] {
        let mut s = Setup::new(99_999, modern, 6, STILL);
        let mut lineage = s.lineage();
        let i = s.fork(s.cmd);
        let d = s.fork(i);
        s.world.k.exec(d, true);
        s.world.k.exit(i);
        s.world.k.reap(i);
        assert!(lineage.scan(&mut Snapshot::new(&mut s.world)).is_empty());
        assert_eq!(s.tear_down(&mut lineage), vec![d], "the stated miss");
        s.world.k.exit(d);
    }
}

// --- no stranger -----------------------------------------------------------------

#[test]
fn a_stranger_on_a_members_recycled_number_is_never_signalled() {
    let mut s = Setup::new(400, false, 7, STILL);
    let mut lineage = s.lineage();
    let m = s.fork(s.cmd);
    lineage.scan(&mut Snapshot::new(&mut s.world));
    s.world.k.exit(m);
    s.world.k.reap(m);
    let decoy = s.world.recycle(m).expect("the counter wraps onto m");
    assert_eq!(s.tear_down(&mut lineage), NO_SURVIVOR);
    assert!(s.world.k.alive(decoy), "the decoy lives");
}

#[test]
fn recycling_between_the_identity_read_and_the_signal_is_refused_by_the_kernel() {
    let chaos = Chaos {
        recycle_target: 100,
        ..STILL
    };
    let mut s = Setup::new(400, false, 8, chaos);
    let mut lineage = s.lineage();
    for _ in 0..5 {
        s.fork(s.cmd);
    }
    lineage.scan(&mut Snapshot::new(&mut s.world));
    let before: Vec<i32> = s.world.k.procs.keys().copied().collect();
    assert_eq!(s.tear_down(&mut lineage), NO_SURVIVOR);
    // Every delivery found its number recycled: the kernel refused each one.
    assert!(s.world.k.delivered.is_empty());
    assert!(
        s.world.k.procs.len() >= before.len() - 6,
        "strangers were left alone"
    );
}

/// docs/GUARANTEES.md, macOS residual: before 14.4 there is no kernel-checked
/// signal; a full pid wrap between the identity re-read and `kill` hits a stranger.
#[test]
fn miss_recheck_then_kill_before_14_4_can_hit_a_stranger_on_a_wrap() {
    let chaos = Chaos {
        recycle_target: 100,
        ..STILL
    };
    let mut s = Setup::new(400, false, 12, chaos);
    s.world.recheck_then_kill = true;
    let mut lineage = s.lineage();
    lineage.scan(&mut Snapshot::new(&mut s.world));
    s.world.tree_acts = false;
    tear_down(&mut lineage, &mut s.world, escalation());
    assert!(
        !s.world.strangers_signalled().is_empty(),
        "the stated residual"
    );
}

#[test]
fn freeze_round_ends_a_fork_bomb_that_ignores_sigterm() {
    let chaos = Chaos {
        steps: 3,
        gap: 50,
        recycle_target: 0,
        max_tree: 150,
    };
    let mut s = Setup::new(99_999, false, 9, chaos);
    {
        let c = s.world.k.procs.get_mut(&s.cmd).expect("cmd");
        c.forker = true;
        c.ignores_term = true;
    }
    // The tree only forks (no exits, execs or setsid): a pure fork bomb.
    s.world.tree_acts = false;
    let mut lineage = s.lineage();
    guard(&mut s.world, &mut lineage, 20);
    assert!(s.world.survivors().len() > 20, "the bomb went off");
    let report = tear_down(&mut lineage, &mut s.world, escalation());
    assert_eq!(s.world.strangers_signalled(), []);
    assert!(report.freeze_rounds >= 1);
    assert!(report.delivered.iter().any(|(_, sig)| *sig == Signal::Stop));
    assert!(s.world.survivors().is_empty());
}

// --- owner watch and the sentinel pair ---------------------------------------------

#[test]
fn owner_gone_or_replaced_before_the_watch_is_refused() {
    let mut s = Setup::new(99_999, false, 10, STILL);
    let owner = s.host;
    assert!(Watched::arm(&mut s.world, owner).is_ok());
    assert_eq!(
        Watched::arm(&mut s.world, 1).unwrap_err(),
        OwnerGone::Missing,
        "orphaned before it looked"
    );
    let gone = s.fork(s.host);
    s.world.k.exit(gone);
    s.world.k.reap(gone);
    assert_eq!(
        Watched::arm(&mut s.world, gone).unwrap_err(),
        OwnerGone::Missing
    );
    // Armed, then the owner dies and its number is reused: still reported gone.
    let short = s.fork(s.host);
    let watched = Watched::arm(&mut s.world, short).expect("alive");
    s.world.k.exit(short);
    s.world.k.reap(short);
    let reused = s.world.recycle(short);
    let wakes = s.world.k.take_events();
    assert!(watched.gone(&mut s.world, &wakes));
    assert!(reused.is_none() || watched.gone(&mut s.world, &[]));
}

/// The guardian is `kill -9`ed: the sentinel seeds a lineage from the member stream
/// and the guardian's serial (CMD names it), and tears the tree down.
#[test]
fn sentinel_takes_over_from_the_member_stream_after_the_guardians_death() {
    for with_guardian_serial in [true, false] {
        let mut s = Setup::new(99_999, false, 11, STILL);
        let guardian_serial = s.serial(s.guardian);
        let guardian_start = s.world.k.get(s.guardian).expect("g").start;
        let mut lineage = s.lineage();
        let a = s.fork(s.cmd);
        s.world.k.exec(a, true);
        let mut stream = String::new();
        for m in lineage.scan(&mut Snapshot::new(&mut s.world)) {
            stream.push_str(&record::line(&m));
        }
        // After the last stream write: a scrubbed grandchild via a recorded member.
        let b = s.fork(a);
        s.world.k.exec(b, true);
        s.world.k.exit(s.guardian); // CMD → launchd; no PDEATHSIG, no subreaper
        let mut recorded = record::parse(&stream);
        if with_guardian_serial {
            recorded.push((s.guardian, guardian_serial, guardian_start));
        }
        let mut scope = s.scope_without_guardian();
        scope.protected.remove(&guardian_serial);
        let mut taken = record::seeded(scope, &recorded, &mut s.world);
        // Without the guardian's serial (a sweep after both died, from the stream
        // alone) CMD is found by its marker; b by its link to the recorded a.
        assert_eq!(s.tear_down_after_guardian(&mut taken), NO_SURVIVOR);
    }
}

impl Setup {
    fn scope_without_guardian(&self) -> Scope {
        let mut scope = Scope {
            tree: TREE.into(),
            uid: UID,
            not_before: 0,
            protected: [self.host, self.sentinel]
                .iter()
                .map(|&p| self.serial(p))
                .collect(),
        };
        scope.not_before = self.world.k.get(self.cmd).map_or(0, |c| c.start - 1);
        scope
    }

    fn tear_down_after_guardian(&mut self, lineage: &mut Lineage) -> Vec<i32> {
        self.world.tree_acts = false;
        tear_down(lineage, &mut self.world, escalation());
        assert_eq!(self.world.strangers_signalled(), []);
        self.world.survivors().iter().map(|p| p.pid).collect()
    }
}

// --- adversarial schedules ---------------------------------------------------------

/// A random tree life and teardown in a small pid space, strangers churning the
/// counter through wraps, the world acting in every gap between the core's calls.
/// Returns how many deliveries met a recycled number.
fn adversarial(seed: u64, modern: bool, recycle_target: u64) -> usize {
    let chaos = Chaos {
        steps: 2,
        gap: 5,
        recycle_target,
        max_tree: 40,
    };
    let mut s = Setup::new(230, modern, seed, chaos);
    let mut lineage = s.lineage();
    guard(&mut s.world, &mut lineage, 30);
    let survivors = s.tear_down(&mut lineage);
    // Every survivor is one the rules cannot name: no marker, and no link to any
    // serial or version the lineage knows. Anything else is a core bug.
    for pid in survivors {
        let p = s.world.k.get(pid).expect("survivor").clone();
        assert_ne!(p.state, State::Zombie);
        assert!(p.marker.is_none(), "seed {seed}: marked survivor {p:?}");
        assert!(
            !lineage.is_member(p.puniqueid),
            "seed {seed}: survivor linked to a member {p:?}"
        );
    }
    s.world.recycled_under_delivery
}

/// The schedules above do reach the case they guard: a stranger holding a member's
/// number when the signal goes out.
#[test]
fn forced_wraps_do_put_strangers_under_deliveries() {
    let hits: usize = (0..40)
        .map(|seed| adversarial(seed, seed % 2 == 0, 20))
        .sum();
    assert!(hits > 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    #[test]
    fn no_stranger_under_forced_pid_wraps(seed in proptest::prelude::any::<u64>(), modern in proptest::prelude::any::<bool>()) {
        adversarial(seed, modern, 20);
    }

    #[test]
    fn no_stranger_in_a_busy_table(seed in proptest::prelude::any::<u64>()) {
        adversarial(seed, false, 0);
    }
}
