//! The one signal path against real children of this test: every outcome and every
//! refusal is a typed value, and what was refused or already gone was never signalled.
//! Only this test's own children (and their children) are ever targets.

use super::*;
use crate::identity::{TreeId, TREE_MARKER};
use crate::linux::kernel::procfs::Procfs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Generous bound for a signalled child to exit on a loaded machine (never a verdict
/// on speed: a signal that was not sent makes the child sleep its full 60 s).
const EXIT_BOUND: Duration = Duration::from_secs(20);

fn signaller() -> Signaller {
    Signaller::for_current_process(Procfs::new()).unwrap()
}

/// A child of this test, killed and reaped when dropped (by its handle: it is unreaped
/// until then, so the number is its own).
struct Kid(Child);

impl Kid {
    fn spawn(script: &str, own_group: bool) -> Kid {
        Kid::command(script, own_group, |_| {})
    }

    fn command(script: &str, own_group: bool, setup: impl FnOnce(&mut Command)) -> Kid {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .env_remove(TREE_MARKER);
        if own_group {
            cmd.process_group(0);
        }
        setup(&mut cmd);
        Kid(cmd.spawn().unwrap())
    }

    /// A child that starts one background `sleep` (same group, not our child) and
    /// says its pid; returns the child and that grandchild's pid.
    fn with_grandchild(own_group: bool) -> (Kid, i32) {
        let mut kid = Kid::spawn("sleep 60 & echo $!; wait", own_group);
        let mut line = String::new();
        BufReader::new(kid.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (kid, line.trim().parse().unwrap())
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Waits (bounded) for the child to exit and reaps it; the signal that ended it.
    fn exit_signal(&mut self) -> Option<i32> {
        let deadline = Instant::now() + EXIT_BOUND;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.signal();
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills it by its handle and waits until it is a zombie, leaving it unreaped.
    fn kill_leave_zombie(&mut self, proven: &ProvenProcess) {
        self.0.kill().unwrap();
        assert!(exited_within(proven.pidfd()), "the child never exited");
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exited_within(fd: BorrowedFd<'_>) -> bool {
    let deadline = Instant::now() + EXIT_BOUND;
    while !readable_now(fd) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// A pidfd for a process that is not our child, proven only by the parent the test
/// knows it has (used to watch a grandchild, never to signal it).
fn watch(pid: i32) -> OwnedFd {
    sys::pidfd_open(pid).unwrap()
}

#[test]
fn a_proven_child_gets_the_signal_and_the_outcome_is_delivered() {
    let s = signaller();
    let mut kid = Kid::spawn("exec sleep 60", true);
    let p = s.prove_child(None, kid.pid()).unwrap();
    assert_eq!(p.pid(), kid.pid());
    assert_eq!(p.proof, Proof::Descendant { parent: s.me().pid });
    assert_eq!(s.signal(&p, Signal::TERM), Ok(Delivery::Delivered));
    assert_eq!(kid.exit_signal(), Some(libc::SIGTERM));
}

#[test]
fn an_exited_member_is_never_proven_again_and_once_reaped_is_already_gone() {
    let s = signaller();
    let mut kid = Kid::spawn("exec sleep 60", true);
    let p = s.prove_child(None, kid.pid()).unwrap();
    kid.kill_leave_zombie(&p);
    // The unreaped zombie still holds its number, and the number still answers: only
    // the liveness check after the reads tells the prover it is gone.
    let by_number = Pid::from_raw(kid.pid()).unwrap();
    assert_eq!(rustix::process::test_kill_process(by_number), Ok(()));
    assert!(p.has_exited());
    assert_eq!(s.prove_child(None, kid.pid()).unwrap_err(), NotProven::Gone);
    // Reaped: the number is free (or someone else's); the pidfd reaches nobody.
    assert_eq!(kid.exit_signal(), Some(libc::SIGKILL));
    assert_eq!(s.signal(&p, Signal::TERM), Ok(Delivery::AlreadyGone));
    assert_eq!(
        s.signal_own_child(p.pidfd(), Signal::TERM),
        Delivery::AlreadyGone
    );
}

#[test]
fn signal_own_child_delivers_through_the_pidfd() {
    let s = signaller();
    let mut kid = Kid::spawn("exec sleep 60", true);
    let fd = watch(kid.pid());
    assert_eq!(
        s.signal_own_child(fd.as_fd(), Signal::TERM),
        Delivery::Delivered
    );
    assert_eq!(kid.exit_signal(), Some(libc::SIGTERM));
}

#[test]
fn a_process_that_is_not_our_child_is_refused_until_its_parent_is_proven() {
    let s = signaller();
    let (kid, grandchild) = Kid::with_grandchild(true);
    match s.prove_child(None, grandchild) {
        Err(NotProven::Refused(Refusal::NotOurs { pid, .. })) => assert_eq!(pid, grandchild),
        other => panic!("a grandchild proven as our child: {other:?}"),
    }
    let parent = s.prove_child(None, kid.pid()).unwrap();
    let p = s.prove_child(Some(&parent), grandchild).unwrap();
    assert_eq!(p.proof, Proof::Descendant { parent: kid.pid() });
    let gone = watch(grandchild);
    assert_eq!(s.signal(&p, Signal::KILL), Ok(Delivery::Delivered));
    assert!(exited_within(gone.as_fd()));
}

#[test]
fn group_membership_is_proven_against_a_live_leader_only() {
    let s = signaller();
    let (mut leader, member) = Kid::with_grandchild(true);
    let outsider = Kid::spawn("exec sleep 60", true);
    let lead = s.prove_child(None, leader.pid()).unwrap();
    let m = s.prove_in_group(member, &lead).unwrap();
    assert_eq!(
        m.proof,
        Proof::Group {
            leader: leader.pid()
        }
    );
    assert_eq!(
        s.prove_in_group(outsider.pid(), &lead).unwrap_err(),
        NotProven::Refused(Refusal::NotGroupMember {
            pid: outsider.pid(),
            expected: leader.pid(),
            found: outsider.pid(),
        })
    );
    // Once the leader is gone its number no longer pins the group: no proof.
    leader.kill_leave_zombie(&lead);
    assert_eq!(
        s.prove_in_group(member, &lead).unwrap_err(),
        NotProven::Gone
    );
    assert_eq!(s.signal(&m, Signal::KILL), Ok(Delivery::Delivered));
}

#[test]
fn a_group_signal_through_the_leader_pidfd_reaches_the_group_and_no_one_else() {
    let s = signaller();
    let (mut leader, member) = Kid::with_grandchild(true);
    let mut outsider = Kid::spawn("exec sleep 60", true);
    let lead = s.prove_child(None, leader.pid()).unwrap();
    let member_fd = watch(member);
    assert_eq!(s.signal_group(&lead, Signal::KILL), Ok(Delivery::Delivered));
    assert_eq!(leader.exit_signal(), Some(libc::SIGKILL));
    assert!(exited_within(member_fd.as_fd()), "the member survived");
    // Once whoever inherited the member has reaped it, the group is empty: the
    // leader's pidfd reaches nobody (even if its number has been reused since).
    let deadline = Instant::now() + EXIT_BOUND;
    while std::path::Path::new(&format!("/proc/{member}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if !std::path::Path::new(&format!("/proc/{member}")).exists() {
        assert_eq!(
            s.signal_group(&lead, Signal::KILL),
            Ok(Delivery::AlreadyGone)
        );
    }
    // The outsider (another group) got nothing: TERM is what ends it, not KILL.
    let out = s.prove_child(None, outsider.pid()).unwrap();
    assert_eq!(s.signal(&out, Signal::TERM), Ok(Delivery::Delivered));
    assert_eq!(outsider.exit_signal(), Some(libc::SIGTERM));
}

#[test]
fn a_group_signal_is_refused_for_our_own_group_and_through_a_non_leader() {
    let s = signaller();
    // Sharing our group: CONT, harmless to us should the refusal ever be missing.
    let mut sibling = Kid::spawn("exec sleep 60", false);
    let sib = s.prove_child(None, sibling.pid()).unwrap();
    assert_eq!(
        s.signal_group(&sib, Signal::CONT),
        Err(Refusal::OwnGroup { pgid: s.me().pgrp })
    );
    assert_eq!(s.signal(&sib, Signal::TERM), Ok(Delivery::Delivered));
    assert_eq!(sibling.exit_signal(), Some(libc::SIGTERM));

    // A member's pidfd does not name its group: refused, and the group lives on.
    let (mut leader, member) = Kid::with_grandchild(true);
    let lead = s.prove_child(None, leader.pid()).unwrap();
    let m = s.prove_in_group(member, &lead).unwrap();
    assert_eq!(
        s.signal_group(&m, Signal::KILL),
        Err(Refusal::NotGroupLeader {
            pid: member,
            pgid: leader.pid()
        })
    );
    assert_eq!(s.signal(&lead, Signal::TERM), Ok(Delivery::Delivered));
    assert_eq!(leader.exit_signal(), Some(libc::SIGTERM));
    assert!(
        !m.has_exited(),
        "the refused group signal reached the member"
    );
    assert_eq!(s.signal(&m, Signal::KILL), Ok(Delivery::Delivered));
}

#[test]
fn signal_checks_the_ladder_again_even_for_a_proven_process() {
    let s = signaller();
    let mut kid = Kid::spawn("exec sleep 60", true);
    let p = s.prove_child(None, kid.pid()).unwrap();
    // The same process as seen by a signaller that counts it among its ancestors.
    let mut other = s.clone();
    other.me.ancestors.push(kid.pid());
    assert_eq!(
        other.signal(&p, Signal::KILL),
        Err(Refusal::Ancestor { pid: kid.pid() })
    );
    // It got no KILL: TERM is what ends it.
    assert_eq!(s.signal(&p, Signal::TERM), Ok(Delivery::Delivered));
    assert_eq!(kid.exit_signal(), Some(libc::SIGTERM));
}

#[test]
fn protected_numbers_are_refused_before_any_pidfd_is_opened() {
    let s = signaller();
    for pid in [-5, 0, 1] {
        assert_eq!(
            s.prove_child(None, pid).unwrap_err(),
            NotProven::Refused(Refusal::InvalidPid { pid })
        );
    }
    let me = s.me().pid;
    assert_eq!(
        s.prove_child(None, me).unwrap_err(),
        NotProven::Refused(Refusal::OwnProcess { pid: me })
    );
    let parent = s.me().ancestors[0];
    if parent > 1 {
        let tree = TreeId::generate(&s.me().boot_id, [1; 12]);
        assert_eq!(
            s.prove_by_marker(parent, &tree, 0).unwrap_err(),
            NotProven::Refused(Refusal::Ancestor { pid: parent })
        );
    }
}

#[test]
fn marker_proof_needs_the_tree_marker_and_a_start_after_the_tree() {
    let s = signaller();
    let tree = TreeId::generate(&s.me().boot_id, [7; 12]);
    let other = TreeId::generate(&s.me().boot_id, [8; 12]);
    let marked = Kid::command("exec sleep 60", true, |c| {
        c.env(TREE_MARKER, tree.as_str());
    });
    let foreign = Kid::command("exec sleep 60", true, |c| {
        c.env(TREE_MARKER, other.as_str());
    });
    let unmarked = Kid::spawn("exec sleep 60", true);
    // While `sh` execs `sleep`, /proc/PID/environ can read empty: wait (setup, not a
    // verdict) until each has become `sleep`.
    for kid in [&marked, &foreign, &unmarked] {
        let comm = format!("/proc/{}/comm", kid.pid());
        let deadline = Instant::now() + EXIT_BOUND;
        while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != "sleep") {
            assert!(Instant::now() < deadline, "{comm} never became sleep");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let p = s.prove_by_marker(marked.pid(), &tree, 0).unwrap();
    assert_eq!(p.proof, Proof::Marker { tree: tree.clone() });
    for pid in [foreign.pid(), unmarked.pid()] {
        match s.prove_by_marker(pid, &tree, 0) {
            Err(NotProven::Refused(Refusal::NotOurs { pid: got, why })) => {
                assert_eq!((got, why.as_str()), (pid, "no tree marker"))
            }
            other => panic!("pid {pid} proven by another tree's marker: {other:?}"),
        }
    }
    match s.prove_by_marker(marked.pid(), &tree, u64::MAX) {
        Err(NotProven::Refused(Refusal::NotOurs { why, .. })) => {
            assert_eq!(why, "started before the tree")
        }
        other => panic!("a process older than its tree proven: {other:?}"),
    }
}

#[test]
fn snapshot_proof_refuses_another_start_time_another_boot_and_another_pidfs_inode() {
    let s = signaller();
    let mut kid = Kid::spawn("exec sleep 60", true);
    let recorded = s.prove_child(None, kid.pid()).unwrap().identity;
    let p = s.prove_by_snapshot(&recorded).unwrap();
    assert_eq!(p.proof, Proof::Snapshot);

    let mut later = recorded.clone();
    later.starttime += 1;
    assert_eq!(
        s.prove_by_snapshot(&later).unwrap_err(),
        NotProven::Refused(Refusal::StarttimeMismatch {
            pid: kid.pid(),
            expected: later.starttime,
            found: recorded.starttime,
        })
    );
    let mut elsewhere = recorded.clone();
    elsewhere.boot_id = "another-boot".into();
    assert_eq!(
        s.prove_by_snapshot(&elsewhere).unwrap_err(),
        NotProven::Refused(Refusal::OtherBoot {
            recorded: "another-boot".into(),
            current: s.me().boot_id.clone(),
        })
    );
    if let Some(inode) = recorded.pidfs_inode {
        let mut twin = recorded.clone();
        twin.pidfs_inode = Some(inode + 1);
        match s.prove_by_snapshot(&twin) {
            Err(NotProven::Refused(Refusal::NotOurs { why, .. })) => {
                assert_eq!(why, "pidfs inode differs")
            }
            other => panic!("another pidfs inode proven: {other:?}"),
        }
    }
    kid.kill_leave_zombie(&p);
    assert_eq!(s.prove_by_snapshot(&recorded).unwrap_err(), NotProven::Gone);
    assert_eq!(kid.exit_signal(), Some(libc::SIGKILL));
    assert_eq!(s.signal(&p, Signal::KILL), Ok(Delivery::AlreadyGone));
}

#[test]
fn a_snapshot_keeps_only_processes_seen_alive_after_their_start_tick() {
    let s = signaller();
    let live = Kid::spawn("exec sleep 60", true);
    let mut dead = Kid::spawn("exec sleep 60", true);
    let members = vec![
        s.prove_child(None, live.pid()).unwrap(),
        s.prove_child(None, dead.pid()).unwrap(),
    ];
    let start = members[0].identity.starttime;
    // The clock counts in the ticks /proc/PID/stat does: a child started within the
    // last minute (6 000 ticks at 100 Hz).
    let now = s.procfs().now_ticks();
    assert!(
        start <= now && now - start < 6_000,
        "start {start}, now {now}"
    );
    dead.kill_leave_zombie(&members[1]);
    let kept: Vec<i32> = s
        .past_their_start_tick(&members)
        .iter()
        .map(|m| m.pid())
        .collect();
    assert_eq!(kept, [live.pid()]);
    // Kept only once the clock has left the tick the child started in.
    assert!(s.procfs().now_ticks() > start);
    assert_eq!(dead.exit_signal(), Some(libc::SIGKILL));
}

#[test]
fn a_passed_pidfd_is_the_identity_and_anything_else_is_not_a_pidfd() {
    let s = signaller();
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    assert!(s.prove_passed_pidfd(null).is_none());

    let mut kid = Kid::spawn("exec sleep 60", true);
    let p = s.prove_passed_pidfd(watch(kid.pid())).unwrap().unwrap();
    assert_eq!((p.pid(), p.proof.clone()), (kid.pid(), Proof::PassedPidfd));
    let stale = watch(kid.pid());
    kid.kill_leave_zombie(&p);
    assert_eq!(kid.exit_signal(), Some(libc::SIGKILL));
    assert_eq!(
        s.prove_passed_pidfd(stale).unwrap().unwrap_err(),
        NotProven::Gone
    );
}

#[test]
fn an_owner_child_is_proven_only_against_its_real_parent() {
    let s = signaller();
    let (owner, child) = Kid::with_grandchild(true);
    let owner_fd = watch(owner.pid());
    let p = s
        .prove_owner_child(child, owner.pid(), owner_fd.as_fd())
        .unwrap();
    assert_eq!(p.proof, Proof::OwnerChild { owner: owner.pid() });
    let stranger = Kid::spawn("exec sleep 60", true);
    match s.prove_owner_child(stranger.pid(), owner.pid(), owner_fd.as_fd()) {
        Err(NotProven::Refused(Refusal::NotOurs { pid, .. })) => assert_eq!(pid, stranger.pid()),
        other => panic!("a process not the owner's child proven: {other:?}"),
    }
    assert_eq!(s.signal(&p, Signal::KILL), Ok(Delivery::Delivered));
}

#[test]
fn cgroup_proof_reads_membership_after_the_pidfd() {
    use std::os::unix::fs::MetadataExt;
    let s = signaller();
    let kid = Kid::spawn("exec sleep 60", true);
    let Some(rel) = s.procfs().cgroup_v2_path(kid.pid()).unwrap() else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("no cgroup v2 path for a child (CI=true: cannot skip)");
        }
        eprintln!("skipped: no cgroup v2 hierarchy");
        return;
    };
    let path = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let id = std::fs::metadata(&path).unwrap().ino();
    let p = s.prove_in_cgroup(kid.pid(), &path, id, &rel).unwrap();
    assert_eq!(p.proof, Proof::Cgroup { path: path.clone() });
    let elsewhere = path.join("not-this-one");
    match s.prove_in_cgroup(kid.pid(), &elsewhere, id + 1, "/not-this-one") {
        Err(NotProven::Refused(Refusal::NotOurs { why, .. })) => {
            assert_eq!(why, "not in the tree's cgroup")
        }
        other => panic!("a process outside the cgroup proven: {other:?}"),
    }
}

#[test]
fn members_sort_proven_refused_and_gone() {
    let s = signaller();
    let (kid, grandchild) = Kid::with_grandchild(true);
    let mut reaped = Kid::spawn("exit 0", true);
    assert_eq!(reaped.exit_signal(), None);
    let gone = reaped.pid();
    let members = Members::collect([kid.pid(), grandchild, gone], |pid| {
        s.prove_child(None, pid)
    });
    let proven: Vec<i32> = members.proven.iter().map(ProvenProcess::pid).collect();
    assert_eq!(proven, vec![kid.pid()]);
    assert_eq!(members.refused.len(), 1);
    assert_eq!(members.refused[0].0, grandchild);
    assert_eq!(members.refused[0].1.code(), "not_ours");

    let mut more = Members::collect([kid.pid()], |pid| s.prove_child(None, pid));
    more.merge(members);
    assert_eq!(more.proven.len(), 1, "a process proven twice is one member");
    assert_eq!(more.refused.len(), 1);
}

#[test]
fn the_whole_namespace_token_exists_only_for_pid_1() {
    // The test process is not PID 1 of a namespace: `kill(-1)` cannot be reached.
    assert!(NamespaceInit::after_fork_into_new_namespace().is_none());
}

/// The ancestor walk (through pidfds above our parent where the kernel tells the
/// parent) finds the chain `/proc/PID/stat` gives, up to init.
#[test]
fn the_ancestor_walk_is_the_stat_chain() {
    let procfs = Procfs::new();
    let me = signaller();
    let mut by_stat = Vec::new();
    let mut cursor = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    while cursor > 0 {
        by_stat.push(cursor);
        cursor = procfs.stat(cursor).map_or(0, |s| s.ppid);
    }
    assert_eq!(me.me().ancestors, by_stat);
}
