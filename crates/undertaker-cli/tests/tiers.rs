//! The cgroup and pidns tiers against the escape zoo, with real kill -9 of the owner
//! and of the guardian. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A guarded zoo's own state dir (None when run as nobody, which records nothing) and
/// its tree id, read from the record file there once the zoo is ready. The id, not the
/// guardian's pid, names the tree's cgroup: pids repeat across the tests' namespaces, and
/// an earlier test's dead tree may have left an empty cgroup under the same pid.
struct ZooState {
    dir: Option<Scratch>,
}

impl ZooState {
    fn new(as_nobody: bool) -> Self {
        Self {
            dir: (!as_nobody).then(|| Scratch::new("zoo-state")),
        }
    }

    fn apply(&self, cmd: &mut Command) {
        if let Some(d) = &self.dir {
            cmd.env("UNDERTAKER_STATE_DIR", d.path());
        }
    }

    /// The id of the one tree recorded here.
    fn tree_id(&self) -> String {
        let dir = self
            .dir
            .as_ref()
            .expect("a recorded zoo")
            .path()
            .join("trees");
        let ids: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                Some(name.strip_suffix(".tree")?.to_owned())
            })
            .collect();
        assert_eq!(
            ids.len(),
            1,
            "one record file in {}: {ids:?}",
            dir.display()
        );
        ids.into_iter().next().unwrap()
    }

    /// The member record of the one tree recorded here (the portable tier).
    fn members_record(&self) -> PathBuf {
        let tree = self.tree_id();
        let dir = self.dir.as_ref().expect("a recorded zoo").path();
        dir.join(format!("trees/{tree}.members"))
    }

    /// `undertaker sweep` on this state dir.
    fn sweep(&self) -> std::process::Output {
        let mut cmd = undertaker();
        self.apply(&mut cmd);
        cmd.arg("sweep").output().unwrap()
    }
}

/// A sleeping owner, and `undertaker run --tier portable --grace 300ms` of
/// `sh -c SCRIPT` recorded in `state`, owned by it, in a group of its own.
fn run_portable(state: &ZooState, script: &str) -> (Child, Child) {
    let owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let mut cmd = undertaker();
    state.apply(&mut cmd);
    let wrapper = cmd
        .args(["run", "--tier", "portable", "--grace", "300ms", "--owner"])
        .arg(owner.id().to_string())
        .args(["--", "sh", "-c", script])
        .process_group(0)
        .spawn()
        .unwrap();
    (owner, wrapper)
}

/// Tree cgroups on disk of tree `tree`.
fn tree_cgroups_of(tree: &str) -> Vec<PathBuf> {
    undertaker::testing::tree_cgroups_of_tree(tree)
}

/// Starts `undertaker run --tier TIER` guarding the zoo, owned by `owner`; as uid 65534
/// when `as_nobody`.
fn spawn_guarded_zoo(
    tier: &str,
    owner: i32,
    dir: &Scratch,
    state: &ZooState,
    as_nobody: bool,
) -> Child {
    let mut cmd = if as_nobody {
        undertaker_as_nobody()
    } else {
        undertaker()
    };
    state.apply(&mut cmd);
    cmd.args(["run", "--tier", tier, "--grace", "300ms", "--owner"])
        .arg(owner.to_string())
        .args(["--", "sh", "-c"])
        .arg(zoo_with_escapees(dir.path()))
        .stdout(Stdio::null())
        // Its own group, as hosts start servers: a kill of that group is ours to send.
        .process_group(0)
        .spawn()
        .unwrap()
}

enum Victim {
    Owner,
    /// Every undertaker process at once (the sentinel and its guardian).
    Everything,
}

/// Starts the zoo under `tier`, kill -9s the owner or the guardian, and returns its
/// state dir and tree id once the zoo is torn down (or left to a sweep).
fn zoo_then_kill(
    tier: &str,
    victim: Victim,
    as_nobody: bool,
    name: &str,
) -> (ZooState, Option<String>) {
    let dir = Scratch::world_writable(name);
    let state = ZooState::new(as_nobody);
    // A stand-in owner: a process we started and will kill -9.
    let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let mut guardian = spawn_guarded_zoo(tier, owner.id() as i32, &dir, &state, as_nobody);
    assert!(
        wait_for_file(&dir.path().join("ready"), Duration::from_secs(60)),
        "zoo never became ready"
    );
    let tree = (!as_nobody).then(|| state.tree_id());
    let started = live_processes_except_self();
    assert!(started.len() >= 8, "zoo did not start: {started:?}");
    assert!(guardian_of(&guardian).is_some(), "the guardian was forked");
    match victim {
        Victim::Owner => {
            kill9(&mut owner);
            let st = wait_child(&mut guardian, Duration::from_secs(60));
            assert!(st.is_some(), "guardian did not finish after owner death");
        }
        Victim::Everything => {
            kill9_all(&mut guardian);
            kill9(&mut owner);
        }
    }
    (state, tree)
}

/// The pidns tier run as uid 65534 (skipped unless root can switch to it and user
/// namespaces are open to it), with `victim` killed: nothing may be left.
fn pidns_as_nobody_leaves_no_survivor(test_name: &str, victim: Victim, name: &str) {
    if !is_root() {
        return skip("needs root to switch to uid 65534 with setpriv");
    }
    if !isolate(test_name) {
        return;
    }
    let probe = undertaker_as_nobody()
        .args(["run", "--tier", "pidns", "--", "true"])
        .status()
        .unwrap();
    if !probe.success() {
        return skip("user namespaces are not available to uid 65534 here");
    }
    zoo_then_kill("pidns", victim, true, name);
    assert_nothing_left();
}

#[test]
fn cgroup_owner_kill9_leaves_no_survivor_and_no_cgroup() {
    if !require_tier("cgroup") || !isolate("cgroup_owner_kill9_leaves_no_survivor_and_no_cgroup") {
        return;
    }
    let (_state, tree) = zoo_then_kill("cgroup", Victim::Owner, false, "cg-owner");
    assert_nothing_left();
    assert_eq!(tree_cgroups_of(&tree.unwrap()), Vec::<PathBuf>::new());
}

#[test]
fn cgroup_every_undertaker_process_kill9_then_one_sweep_leaves_no_survivor() {
    if !require_tier("cgroup")
        || !isolate("cgroup_every_undertaker_process_kill9_then_one_sweep_leaves_no_survivor")
    {
        return;
    }
    let (state, tree) = zoo_then_kill("cgroup", Victim::Everything, false, "cg-guardian");
    let tree = tree.unwrap();
    assert!(
        !live_processes_except_self().is_empty(),
        "nothing left for the sweep to do?"
    );
    assert_eq!(
        tree_cgroups_of(&tree).len(),
        1,
        "the orphaned cgroup is findable"
    );
    let out = state.sweep();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_nothing_left();
    assert_eq!(tree_cgroups_of(&tree), Vec::<PathBuf>::new());
}

#[test]
fn pidns_owner_kill9_leaves_no_survivor() {
    if !require_tier("pidns") || !isolate("pidns_owner_kill9_leaves_no_survivor") {
        return;
    }
    zoo_then_kill("pidns", Victim::Owner, false, "ns-owner");
    assert_nothing_left();
}

#[test]
fn pidns_every_undertaker_process_kill9_leaves_no_survivor_without_sweep() {
    if !require_tier("pidns")
        || !isolate("pidns_every_undertaker_process_kill9_leaves_no_survivor_without_sweep")
    {
        return;
    }
    zoo_then_kill("pidns", Victim::Everything, false, "ns-guardian");
    // No sweep: the kernel kills the namespace when its init dies.
    assert_nothing_left();
}

#[test]
fn pidns_as_normal_user_guardian_kill9_leaves_no_survivor() {
    pidns_as_nobody_leaves_no_survivor(
        "pidns_as_normal_user_guardian_kill9_leaves_no_survivor",
        Victim::Everything,
        "ns-user",
    );
}

#[test]
fn pidns_as_normal_user_owner_kill9_leaves_no_survivor() {
    pidns_as_nobody_leaves_no_survivor(
        "pidns_as_normal_user_owner_kill9_leaves_no_survivor",
        Victim::Owner,
        "ns-user-owner",
    );
}

#[test]
fn pidns_shows_its_own_proc_and_passes_the_exit_status() {
    if !require_tier("pidns") {
        return;
    }
    let out = undertaker()
        .args(["run", "--tier", "pidns", "--", "sh", "-c"])
        .arg("echo $$; ls /proc | grep -c '^[0-9]'; exit 7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // CMD is PID 2 (the init is 1); /proc shows only init, sh, ls, grep.
    assert_eq!(lines[0], "2", "{text}");
    assert!(lines[1].parse::<u32>().unwrap() <= 4, "{text}");
}

#[test]
fn finished_cgroup_tree_leaves_no_cgroup_and_reports_status() {
    if !require_tier("cgroup") {
        return;
    }
    let child = undertaker()
        .args(["run", "--tier", "cgroup", "--", "sh", "-c"])
        .arg("grep '^0::' /proc/self/cgroup; sleep 1000 & exit 5")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("/undertaker."),
        "CMD ran outside its cgroup: {text}"
    );
    let path = text.trim().trim_start_matches("0::").to_owned();
    let parsed = path.rsplit('/').next().unwrap();
    assert!(undertaker::testing::is_tree_cgroup_name(parsed), "{parsed}");
    assert_eq!(
        undertaker::testing::tree_cgroups_named(parsed),
        Vec::<PathBuf>::new()
    );
}

#[test]
fn auto_picks_cgroup_where_writable() {
    if !require_tier("cgroup") {
        return;
    }
    let out = undertaker()
        .args(["run", "--", "grep", "^0::", "/proc/self/cgroup"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/undertaker."),
        "auto did not use the cgroup tier"
    );
}

#[test]
fn unavailable_cgroup_tier_exits_125_with_reason() {
    if !is_root() {
        return skip("needs root to switch to uid 65534 with setpriv");
    }
    let out = undertaker_as_nobody()
        .args(["run", "--tier", "cgroup", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return skip("uid 65534 has a delegated cgroup here");
    }
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("tier cgroup unavailable"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// How the host (or someone) kills undertaker itself.
#[derive(Debug, Clone, Copy)]
enum SelfKill {
    /// `kill -9` of the process the host started.
    Wrapper,
    /// `kill -9 -PGID` of the group the host started it in.
    WrapperGroup,
    /// `kill -9` of the guardian it forked.
    Guardian,
    /// `kill -9 -PGID` of the guardian's own group.
    GuardianGroup,
}

const SELF_KILLS: [SelfKill; 4] = [
    SelfKill::Wrapper,
    SelfKill::WrapperGroup,
    SelfKill::Guardian,
    SelfKill::GuardianGroup,
];

/// Guards the zoo under `tier` (grace 300 ms), kill -9s one of undertaker's own
/// processes as `how` says, and requires the tree gone with no sweep (within a bound
/// only a tree left for a sweep exceeds), then no process and no cgroup left at all.
fn self_kill_tears_down_at_once(tier: &str, how: SelfKill) {
    let dir = Scratch::world_writable(&format!("self-kill-{tier}"));
    let state = ZooState::new(false);
    let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let mut wrapper = spawn_guarded_zoo(tier, owner.id() as i32, &dir, &state, false);
    assert!(
        wait_for_file(&dir.path().join("ready"), Duration::from_secs(60)),
        "zoo never became ready"
    );
    let tree = state.tree_id();
    assert!(
        live_processes_except_self().len() >= 10,
        "zoo did not start"
    );
    let wpid = wrapper.id() as i32;
    let gpid = guardian_of(&wrapper).expect("the guardian was forked");
    let pid = |p: i32| rustix::process::Pid::from_raw(p).unwrap();
    let started = Instant::now();
    match how {
        SelfKill::Wrapper => kill9(&mut wrapper),
        SelfKill::WrapperGroup => {
            // The group we gave it at spawn: it holds the wrapper alone.
            rustix::process::kill_process_group(pid(wpid), rustix::process::Signal::KILL).unwrap();
            wrapper.wait().unwrap();
        }
        SelfKill::Guardian => {
            assert!(signal_child_of(wpid, gpid, rustix::process::Signal::KILL));
        }
        SelfKill::GuardianGroup => {
            let stat = std::fs::read_to_string(format!("/proc/{gpid}/stat")).unwrap();
            let pgrp: i32 = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .nth(2)
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(pgrp, gpid, "the guardian leads its own group");
            rustix::process::kill_process_group(pid(gpid), rustix::process::Signal::KILL).unwrap();
        }
    }
    // What this shows is that no sweep is needed: without the companion the tree
    // would stay until one ran, and none runs here. So the bound only has to outwait
    // a loaded machine (1.45 s was seen at load average 13 for a 300 ms grace).
    let bound = Duration::from_secs(30);
    let keep = [owner.id() as i32, wpid];
    // Zombies do not count as alive; nothing is reaped here, the wrapper is waited for.
    let tree_left = || {
        live_processes_except_self()
            .into_iter()
            .filter(|p| !keep.contains(p))
            .collect::<Vec<_>>()
    };
    let gone = wait_until(bound, || tree_left().is_empty());
    let took = started.elapsed();
    eprintln!("{tier} {how:?}: tree gone after {took:?}");
    assert!(
        gone,
        "{tier} {how:?}: left after {bound:?}: {:?}",
        tree_left()
    );
    if matches!(how, SelfKill::Guardian | SelfKill::GuardianGroup) {
        let st = wait_child(&mut wrapper, Duration::from_secs(60));
        assert_eq!(st.and_then(|s| s.code()), Some(128 + 9), "{tier} {how:?}");
    }
    kill9(&mut owner);
    assert_nothing_left();
    assert_eq!(tree_cgroups_of(&tree), Vec::<PathBuf>::new());
}

fn every_self_kill(tier: &str) {
    for how in SELF_KILLS {
        self_kill_tears_down_at_once(tier, how);
    }
}

#[test]
fn cgroup_self_kill9_tears_the_tree_down_without_sweep() {
    if !require_tier("cgroup") || !isolate("cgroup_self_kill9_tears_the_tree_down_without_sweep") {
        return;
    }
    every_self_kill("cgroup");
}

#[test]
fn subreaper_self_kill9_tears_the_tree_down_without_sweep() {
    if !isolate("subreaper_self_kill9_tears_the_tree_down_without_sweep") {
        return;
    }
    every_self_kill("subreaper");
}

#[test]
fn pidns_self_kill9_tears_the_tree_down_without_sweep() {
    if !require_tier("pidns") || !isolate("pidns_self_kill9_tears_the_tree_down_without_sweep") {
        return;
    }
    every_self_kill("pidns");
}

// The portable tier (docs/TIERS.md, "portable"): the macOS shape on Linux, with no
// cgroup, no subreaper and no PDEATHSIG on CMD; members proven by lineage and marker.

#[test]
fn portable_owner_kill9_leaves_no_survivor() {
    if !isolate("portable_owner_kill9_leaves_no_survivor") {
        return;
    }
    zoo_then_kill("portable", Victim::Owner, false, "portable-owner");
    assert_nothing_left();
}

#[test]
fn portable_self_kill9_tears_the_tree_down_without_sweep() {
    if !isolate("portable_self_kill9_tears_the_tree_down_without_sweep") {
        return;
    }
    every_self_kill("portable");
}

#[test]
fn portable_every_undertaker_process_kill9_then_one_sweep_leaves_no_survivor() {
    if !isolate("portable_every_undertaker_process_kill9_then_one_sweep_leaves_no_survivor") {
        return;
    }
    let (state, _tree) = zoo_then_kill("portable", Victim::Everything, false, "portable-both");
    // No PDEATHSIG: CMD and the whole zoo outlive both undertaker processes.
    assert!(
        live_processes_except_self().len() >= 8,
        "the zoo should wait for the sweep"
    );
    let out = state.sweep();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_nothing_left();
}

/// The member record lets `sweep` find what the marker cannot: a member that
/// scrubbed its environment, proven by lineage while its parent lived, whose parent
/// then died (it is init's child now, unmarked).
#[test]
fn portable_sweep_finds_a_recorded_scrubbed_orphan() {
    if !isolate("portable_sweep_finds_a_recorded_scrubbed_orphan") {
        return;
    }
    let dir = Scratch::world_writable("portable-recorded");
    let state = ZooState::new(false);
    let orphan = dir.path().join("orphan.pid");
    let parent = dir.path().join("parent.pid");
    let release = dir.path().join("release");
    // The scrubbed sleeper's parent lives until the test has seen the sleeper in the
    // member record, then exits: the sleeper is reparented to init, unmarked.
    let script = format!(
        "env -i sh -c 'sleep 1000 & echo $! > {orphan}; echo $$ > {parent}; while [ ! -e {release} ]; do sleep 0.05; done' & sleep 1000",
        orphan = orphan.display(),
        parent = parent.display(),
        release = release.display(),
    );
    let (mut owner, mut wrapper) = run_portable(&state, &script);
    assert!(wait_for_file(&parent, Duration::from_secs(60)));
    let orphan_pid: i32 = {
        assert!(wait_until(Duration::from_secs(60), || !read_lines(&orphan).is_empty()));
        read_lines(&orphan)[0].parse().unwrap()
    };
    let record = state.members_record();
    let recorded = || {
        read_lines(&record)
            .iter()
            .any(|l| l.split(' ').next() == Some(&orphan_pid.to_string()))
    };
    assert!(
        wait_until(Duration::from_secs(60), recorded),
        "the guardian's tracking never recorded the scrubbed sleeper"
    );
    let parent_pid: i32 = read_lines(&parent)[0].parse().unwrap();
    std::fs::write(&release, "").unwrap();
    assert!(wait_until(Duration::from_secs(60), || !alive(parent_pid)));
    assert_eq!(parent_of(orphan_pid), Some(1), "reparented to init");
    kill9_all(&mut wrapper);
    kill9(&mut owner);
    assert!(alive(orphan_pid), "only the sweep may end it");
    let out = state.sweep();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_nothing_left();
}

/// Where Linux without a subreaper must lose a member (docs/GUARANTEES.md,
/// "portable"): a member that scrubs its environment and whose parent dies before
/// any scan saw it is nobody's: no marker, no living link, no record. The test
/// asserts that miss (then ends the survivor itself); a scan that happened to land
/// in the microseconds the link existed would have recorded it, and then it must die.
#[test]
fn portable_misses_a_scrubbed_orphan_whose_parent_died_before_a_scan() {
    if !isolate("portable_misses_a_scrubbed_orphan_whose_parent_died_before_a_scan") {
        return;
    }
    let dir = Scratch::world_writable("portable-miss");
    let state = ZooState::new(false);
    let orphan = dir.path().join("orphan.pid");
    // The intermediate forks the scrubbed sleeper and exits at once.
    let script = format!(
        "perl -e '%ENV = (); my $p = fork(); if ($p == 0) {{ exec(\"sleep\", \"1000\") }} open(my $f, \">\", \"{}\"); print $f \"$p\\n\"; close $f; POSIX::_exit(0)' -MPOSIX; sleep 1000",
        orphan.display()
    );
    let (mut owner, mut wrapper) = run_portable(&state, &script);
    assert!(wait_until(Duration::from_secs(60), || !read_lines(&orphan).is_empty()));
    let orphan_pid: i32 = read_lines(&orphan)[0].parse().unwrap();
    let record = state.members_record();
    // Several tracking rounds pass: none can link it any more.
    std::thread::sleep(Duration::from_millis(500));
    let recorded = read_lines(&record)
        .iter()
        .any(|l| l.split(' ').next() == Some(&orphan_pid.to_string()));
    kill9(&mut owner);
    assert!(wait_child(&mut wrapper, Duration::from_secs(60)).is_some());
    reap_zombies();
    let left = live_processes_except_self();
    if recorded {
        eprintln!("the scan landed in the window: the sleeper was recorded, so it must be gone");
        assert!(left.is_empty(), "survivors: {left:?}");
        return;
    }
    assert_eq!(
        left,
        vec![orphan_pid],
        "exactly the unrecorded scrubbed orphan survives (the asserted miss)"
    );
    let fd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(orphan_pid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    assert_eq!(parent_of(orphan_pid), Some(1), "our own orphan");
    rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL).unwrap();
    assert_nothing_left();
}

/// A member exits and a stranger takes its pid (and leads a group with that
/// number): the portable teardown, which proves members by serial, never signals it.
#[test]
fn portable_decoy_with_recycled_pid_is_never_signalled() {
    if !isolate("portable_decoy_with_recycled_pid_is_never_signalled") {
        return;
    }
    let scratch = Scratch::new("portable-decoy");
    let pids = scratch.path().join("pids");
    let script = format!(
        "sh -c 'echo $$ > {0}.short; exec setsid true'; sleep 1000 & echo $! > {0}; wait",
        pids.display()
    );
    let mut guardian = undertaker()
        .args(["run", "--tier", "portable", "--grace", "300ms", "--"])
        .args(["sh", "-c", &script])
        .spawn()
        .unwrap();
    let short = scratch.path().join("pids.short");
    assert!(wait_until(Duration::from_secs(60), || pids.exists() && short.exists()));
    let recycled: i32 = read_lines(&short)[0].parse().unwrap();
    assert!(wait_until(Duration::from_secs(60), || !alive(recycled)));
    // Let the tracking record the short member first (it is in the lineage forever).
    std::thread::sleep(Duration::from_millis(300));
    if let Err(e) = set_next_pid(recycled) {
        skip(&format!("cannot write ns_last_pid: {e}"));
        kill9(&mut guardian);
        return;
    }
    let (mut decoy, decoy_log) = spawn_decoy(&scratch, "decoy.log");
    assert_eq!(
        decoy.id() as i32,
        recycled,
        "ns_last_pid did not hand out the pid"
    );
    signal_child(&guardian, rustix::process::Signal::TERM);
    guardian.wait().unwrap();
    assert_decoy_untouched(&decoy, &decoy_log);
    kill9(&mut decoy);
    assert_nothing_left();
}

/// The perl zoo (every escape kind, a stopped member and one that forks on
/// SIGTERM), CMD's exit or the owner's `kill -9`: nothing is left in either case.
#[test]
fn portable_perl_zoo_leaves_no_survivor_after_cmd_exit_or_owner_kill9() {
    if !isolate("portable_perl_zoo_leaves_no_survivor_after_cmd_exit_or_owner_kill9") {
        return;
    }
    for owner_dies in [false, true] {
        let scratch = Scratch::new("portable-perl-zoo");
        let zoo = scratch.file("zoo.pl", ZOO);
        let pids = scratch.path().join("pids");
        let script = format!(
            "perl {zoo} {pids} & while [ $(wc -l < {pids} 2>/dev/null || echo 0) -lt {ZOO_SIZE} ]; do sleep 0.05; done; {end}",
            zoo = zoo.display(),
            pids = pids.display(),
            end = if owner_dies { "wait" } else { "exit 3" },
        );
        let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
        let mut guardian = undertaker()
            .args(["run", "--tier", "portable", "--grace", "300ms", "--owner"])
            .arg(owner.id().to_string())
            .args(["--", "sh", "-c", &script])
            .process_group(0)
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(60), || zoo_pids(&pids).len()
                == ZOO_SIZE
                || !alive(guardian.id() as i32)),
            "zoo did not start"
        );
        if owner_dies {
            kill9(&mut owner);
        }
        let st = wait_child(&mut guardian, Duration::from_secs(60)).expect("guardian ended");
        if !owner_dies {
            assert_eq!(st.code(), Some(3), "CMD's status");
        }
        // Already gone when it was the victim (a kill of a reaped child is a no-op).
        kill9(&mut owner);
        assert_eq!(zoo_pids(&pids).len(), ZOO_SIZE);
        assert_nothing_left();
    }
}

/// The registry commands on a portable tree: `ps` names the tier, `kill LABEL`
/// ends a live guardian's tree (a `setsid` escapee included) and, after both
/// undertaker processes were killed, a dead one's, found by its member record and
/// marker; no member record is left either way.
#[test]
fn portable_ps_and_kill_by_label_for_live_and_dead_guardians() {
    if !isolate("portable_ps_and_kill_by_label_for_live_and_dead_guardians") {
        return;
    }
    let scratch = Scratch::new("portable-registry");
    let state = scratch.path().join("state");
    for (label, guardian_dead) in [("live", false), ("dead", true)] {
        let ready = scratch.path().join(format!("{label}.ready"));
        let mut wrapper = undertaker()
            .arg("run")
            .arg("--state-dir")
            .arg(&state)
            .args(["--tier", "portable", "--label", label, "--grace", "300ms"])
            .args(["--", "sh", "-c"])
            .arg(format!(
                "setsid sh -c 'sleep 1000 & exit 0'; sleep 1000 & echo > {}; wait",
                ready.display()
            ))
            .env_remove("UNDERTAKER_STATE_DIR")
            .spawn()
            .unwrap();
        assert!(wait_for_file(&ready, Duration::from_secs(60)));
        let tree = find_tree(&state, label, Duration::from_secs(60)).expect("recorded");
        assert_eq!(tree["tier"], "portable", "{tree}");
        if guardian_dead {
            kill9_all(&mut wrapper);
            assert!(live_processes_except_self().len() >= 3, "the tree waits");
        }
        let out = ut(&state, &["kill", label]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Ended by the kill (live), or reaped by kill9_all already (dead).
        assert!(wait_child(&mut wrapper, Duration::from_secs(60)).is_some());
        assert_nothing_left();
        let members: Vec<_> = std::fs::read_dir(state.join("trees"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".members"))
            .collect();
        assert!(
            members.is_empty(),
            "{label}: member records left: {members:?}"
        );
    }
}

/// A namespace the kernel grants but whose /proc cannot be mounted (uid 65534 in its
/// own user namespace, while a bind mount covers part of the host's /proc, so the
/// kernel refuses a fresh proc instance): exit 125 with the reason on one line, and
/// CMD never runs (docs/TIERS.md). `run` no longer tries a namespace first; the init
/// is the one that finds out.
#[test]
fn pidns_whose_proc_cannot_be_mounted_exits_125_before_cmd() {
    if !is_root() {
        return skip("needs root to make a mount namespace and switch to uid 65534");
    }
    if !std::path::Path::new("/proc/kmsg").exists() {
        return skip("no /proc/kmsg to cover with a bind mount");
    }
    let free = undertaker_as_nobody()
        .args(["run", "--tier", "pidns", "--", "true"])
        .status()
        .unwrap();
    if !free.success() {
        return skip("user namespaces are not available to uid 65534 here");
    }
    // `unshare -m` makes its mounts private: the bind mount stays in there.
    let out = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount --bind /dev/null /proc/kmsg && exec \"$@\"",
            "sh",
        ])
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(UNDERTAKER)
        .args(["run", "--tier", "pidns", "--", "sh", "-c", "echo CMD-ran"])
        .stdin(Stdio::null())
        .env_remove("UNDERTAKER_TREE")
        .env("HOME", test_home())
        .env_remove("UNDERTAKER_STATE_DIR")
        .env_remove("XDG_STATE_HOME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("CMD-ran"),
        "CMD ran"
    );
    // (uid 65534 cannot write the test home's state dir: a warning line says so.)
    let reasons: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("undertaker:"))
        .collect();
    assert_eq!(reasons.len(), 1, "one line of reason: {stderr}");
    assert!(
        reasons[0].contains("/proc"),
        "the reason names /proc: {stderr}"
    );
}
