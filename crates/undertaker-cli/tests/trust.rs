//! Trust nothing on disk or in a namespace (issue 17): what sweep, self-healing and the
//! registry read is checked before it decides anything, and the guardian never stalls
//! on it. Each test runs in a private PID namespace with its own scratch state dir.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Item 9: a connected datagram socket never reads end of file when its peer dies, so
/// CMD would outlive its owner: a usage error, as for a file or a write end.
#[test]
fn owner_fd_of_a_datagram_socket_is_a_usage_error() {
    if !isolate("owner_fd_of_a_datagram_socket_is_a_usage_error") {
        return;
    }
    let scratch = Scratch::new("ownerdgram");
    let state = scratch.path().join("state");
    let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
    rustix::io::fcntl_setfd(&a, rustix::io::FdFlags::empty()).unwrap();
    let fd = a.as_raw_fd().to_string();
    let out = ut_within(
        &state,
        &["run", "--owner-fd", &fd, "--", "echo", "ran"],
        Duration::from_secs(60),
    )
    .expect("undertaker hung");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!text(&out.stdout).contains("ran"), "CMD ran: {err}");
    assert!(err.contains("datagram"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    drop(b);
    assert_nothing_left();
}

/// Item 10: a sweep says `terminated` for a process its SIGTERM ended (it said `gone`,
/// as for one that had exited before anything reached it).
#[test]
fn sweep_reports_processes_its_sigterm_ended_as_terminated() {
    if !isolate("sweep_reports_processes_its_sigterm_ended_as_terminated") {
        return;
    }
    let scratch = Scratch::new("terminated");
    let state = scratch.path().join("state");
    orphan_a_subreaper_tree(&state, &scratch.path().join("ready"));
    let out = ut(&state, &["sweep", "--grace", "10s", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = json(&out);
    let outcomes: Vec<String> = report["trees"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["targets"].as_array().unwrap().clone())
        .map(|t| t["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(outcomes, ["terminated", "terminated"], "{report}");
    assert_nothing_left();
}

/// Item 10: a hard link to a live tree's record file, planted in `trees/` under
/// another tree's name, does not make `ps` list the tree twice.
#[test]
fn a_hard_linked_record_file_lists_its_tree_once() {
    if !isolate("a_hard_linked_record_file_lists_its_tree_once") {
        return;
    }
    let scratch = Scratch::new("hardlink");
    let state = scratch.path().join("state");
    let ready = scratch.path().join("ready");
    let script = format!("echo > {}; exec sleep 1000", ready.display());
    let (mut guardian, id) = spawn_guarded_ready(&state, "linked", &script, &ready, &[]);
    let trees = state.join("trees");
    let other = "cd".repeat(16);
    std::fs::hard_link(
        trees.join(format!("{id}.tree")),
        trees.join(format!("{other}.tree")),
    )
    .unwrap();
    let ps = json(&ut(&state, &["ps", "--all", "--json"]));
    let ids: Vec<&str> = ps
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    signal_child(&guardian, rustix::process::Signal::TERM);
    assert!(wait_child(&mut guardian, Duration::from_secs(60)).is_some());
    assert_eq!(ids, [id.as_str()], "{ps}");
    assert_nothing_left();
}

/// Item 4: a FIFO named like a record file in `trees/` blocks nobody: a guardian's
/// heal look runs off the thread that watches CMD and opens state files without
/// blocking, regular files only; `ps` and `sweep` skip it.
#[test]
fn a_fifo_in_trees_blocks_no_guardian_and_no_command() {
    if !isolate("a_fifo_in_trees_blocks_no_guardian_and_no_command") {
        return;
    }
    let scratch = Scratch::new("fifo");
    let state = scratch.path().join("state");
    let out = ut(&state, &["ps"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let fifo = state
        .join("trees")
        .join(format!("{}.tree", "ab".repeat(16)));
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // CMD runs past the heal delay (1 s), so the guardian looks into trees/.
    let start = std::time::Instant::now();
    // A guardian blocked on the FIFO never exits (the FIFO has no writer): the bound
    // only has to tell that from `sleep 3` on a loaded machine.
    let run = ut_within(
        &state,
        &["run", "--", "sleep", "3"],
        Duration::from_secs(60),
    );
    let took = start.elapsed();
    let run = run.expect("the guardian hung on the FIFO");
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(took >= Duration::from_secs(3), "took {took:?}");
    for cmd in [&["ps", "--all"][..], &["sweep"][..]] {
        let out = ut_within(&state, cmd, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{cmd:?} hung on the FIFO"));
        assert!(out.status.code().is_some(), "{cmd:?}");
    }
    assert!(fifo.exists(), "the FIFO is left for a human");
    assert_nothing_left();
}

/// Record files of `state` (`trees/*.tree`).
fn record_files(state: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(state.join("trees"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "tree"))
                .collect()
        })
        .unwrap_or_default()
}

/// Fills `state/trees/` with `n` more finished record files: copies of the one a
/// finished run left, each under a fresh tree id.
fn plant_finished_records(state: &Path, n: usize) {
    let out = undertaker()
        .arg("--state-dir")
        .arg(state)
        .args(["run", "--label", "seed", "--", "true"])
        .env("UNDERTAKER_NO_HEAL", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let seed = record_files(state).pop().expect("a finished record file");
    let id = seed.file_stem().unwrap().to_str().unwrap().to_owned();
    let body = std::fs::read_to_string(&seed).unwrap();
    for i in 0..n {
        let other = format!("{}{i:08x}", &id[..id.len() - 8]);
        let path = state.join("trees").join(format!("{other}.tree"));
        std::fs::write(path, body.replace(&id, &other)).unwrap();
    }
}

/// Item 5: finished record files are folded as part of normal operation: a guardian's
/// heal look that finds more than it reads starts a round, whose fold moves them into
/// the database, so `trees/` (and every later look) does not grow with finished runs.
#[test]
fn finished_record_files_are_folded_without_any_command() {
    if !isolate("finished_record_files_are_folded_without_any_command") {
        return;
    }
    let scratch = Scratch::new("manyfinished");
    let state = scratch.path().join("state");
    plant_finished_records(&state, 300);
    assert_eq!(record_files(&state).len(), 301);
    // A run past the heal delay, as any run on a laptop.
    let out = ut_within(
        &state,
        &["run", "--", "sleep", "4"],
        Duration::from_secs(60),
    )
    .expect("run hung");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let left = record_files(&state).len();
    assert!(left <= 64, "{left} record files left in trees/");
    // None lost: every tree is in the database, finished.
    let ps = json(&ut(&state, &["ps", "--all", "--json"]));
    let rows = ps.as_array().unwrap();
    assert_eq!(rows.len(), 302, "{} rows", rows.len());
    assert!(rows.iter().all(|r| r["state"] == "finished"));
    assert_nothing_left();
}

/// `undertaker ARGS…` started in a time namespace whose boot clock is a day ahead.
fn undertaker_a_day_ahead(args: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--time", "--boottime", "86400", UNDERTAKER])
        .args(args)
        .stdin(Stdio::null())
        .env_remove("UNDERTAKER_TREE")
        .env("UNDERTAKER_NO_HEAL", "1");
    with_test_state(&mut c);
    c
}

/// Item 1: a guardian in a time namespace and one outside read each other's start
/// times alike, so a sweep on either side never calls the other's live guardian dead
/// (the tree cgroup's name carries the guardian's start time).
#[test]
fn guardians_in_and_out_of_a_time_namespace_never_call_each_other_dead() {
    if !isolate("guardians_in_and_out_of_a_time_namespace_never_call_each_other_dead") {
        return;
    }
    if !require_cgroup() {
        return;
    }
    let probe = Command::new("unshare")
        .args(["--time", "--boottime", "86400", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        skip("no time namespaces (unshare --time failed)");
        return;
    }
    let scratch = Scratch::new("timens");
    let (ahead_state, plain_state) = (scratch.path().join("ahead"), scratch.path().join("plain"));
    let start = |state: &Path, label: &str, ahead: bool| {
        let ready = scratch.path().join(label);
        let script = format!("echo > {}; exec sleep 1000", ready.display());
        let s = state.to_str().unwrap();
        let args = [
            "--state-dir",
            s,
            "run",
            "--tier",
            "cgroup",
            "--label",
            label,
            "--",
            "sh",
            "-c",
            &script,
        ];
        let child = if ahead {
            undertaker_a_day_ahead(&args).spawn().unwrap()
        } else {
            undertaker()
                .args(args)
                .env("UNDERTAKER_NO_HEAL", "1")
                .spawn()
                .unwrap()
        };
        assert!(wait_for_file(&ready, Duration::from_secs(60)), "{label}");
        let id = find_tree(state, label, Duration::from_secs(60)).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        // Its sleep counted before the sweeps (not while `sh` execs it), so a count of
        // 0 after them means a sweep killed it.
        wait_for_members(&id, 1);
        (child, id)
    };
    let (mut ahead, ahead_id) = start(&ahead_state, "ahead", true);
    let (mut plain, plain_id) = start(&plain_state, "plain", false);
    // Each side sweeps a state dir of its own: only the tree cgroups' names lead it to
    // the other side's tree.
    let other = scratch.path().join("other");
    let swept_plain = ut(&other, &["sweep", "--json"]);
    let swept_ahead =
        undertaker_a_day_ahead(&["--state-dir", other.to_str().unwrap(), "sweep", "--json"])
            .output()
            .unwrap();
    let (ahead_left, plain_left) = (survivors(&ahead_id), survivors(&plain_id));
    for child in [&ahead, &plain] {
        signal_child(child, rustix::process::Signal::TERM);
    }
    for child in [&mut ahead, &mut plain] {
        assert!(wait_child(child, Duration::from_secs(60)).is_some());
    }
    assert_eq!(
        ahead_left.len(),
        1,
        "plain sweep: {}",
        text(&swept_plain.stdout)
    );
    assert_eq!(
        plain_left.len(),
        1,
        "sweep a day ahead: {}",
        text(&swept_ahead.stdout)
    );
    assert_nothing_left();
}

/// A live cgroup-tier tree (`sleep 1000`, self-healing off) in `state`: its guardian,
/// tree id and tree cgroup.
fn live_cgroup_tree(scratch: &Scratch, state: &Path, label: &str) -> (Child, String, PathBuf) {
    let ready = scratch.path().join(label);
    let script = format!("echo > {}; exec sleep 1000", ready.display());
    let guardian = undertaker()
        .arg("--state-dir")
        .arg(state)
        .args([
            "run", "--tier", "cgroup", "--label", label, "--", "sh", "-c",
        ])
        .arg(&script)
        .env("UNDERTAKER_NO_HEAL", "1")
        .spawn()
        .unwrap();
    assert!(wait_for_file(&ready, Duration::from_secs(60)), "{label}");
    let id = find_tree(state, label, Duration::from_secs(60)).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for_members(&id, 1);
    let cgroup = undertaker::testing::tree_cgroups_of_tree(&id).remove(0);
    (guardian, id, cgroup)
}

/// Item 2: the cgroup path in a record is never trusted: a dead guardian's record
/// edited to name another (live) tree's cgroup does not get that tree killed.
#[test]
fn a_record_naming_another_trees_cgroup_gets_nothing_of_it_killed() {
    if !isolate("a_record_naming_another_trees_cgroup_gets_nothing_of_it_killed") {
        return;
    }
    if !require_cgroup() {
        return;
    }
    let scratch = Scratch::new("recordcgroup");
    let state = scratch.path().join("state");
    let (mut live, live_id, live_cgroup) =
        live_cgroup_tree(&scratch, &scratch.path().join("live"), "live");
    // A dead guardian's tree whose record file now names the live tree's cgroup.
    let ready = scratch.path().join("ready");
    let (mut dead, dead_id) = spawn_guarded_ready(
        &state,
        "dead",
        &format!("sleep 1000 & echo > {}; wait", ready.display()),
        &ready,
        &[("UNDERTAKER_NO_HEAL", "1")],
    );
    kill9_all(&mut dead);
    let line = format!(
        "{{\"cgroup\":{{\"path\":{:?},\"id\":1}}}}\n",
        live_cgroup.to_str().unwrap()
    );
    let record = state.join("trees").join(format!("{dead_id}.tree"));
    std::fs::OpenOptions::new()
        .append(true)
        .open(&record)
        .unwrap()
        .write_all(line.as_bytes())
        .unwrap();
    let out = ut(&state, &["sweep", "--grace", "5s", "--json"]);
    let report = text(&out.stdout);
    let (live_left, dead_left) = (survivors(&live_id), survivors(&dead_id));
    signal_child(&live, rustix::process::Signal::TERM);
    assert!(wait_child(&mut live, Duration::from_secs(60)).is_some());
    assert_eq!(live_left.len(), 1, "the live tree was hit: {report}");
    assert!(
        dead_left.is_empty(),
        "the dead tree was not swept: {report}"
    );
    assert!(
        report.contains("not a tree cgroup of this tree"),
        "{report}"
    );
    assert_nothing_left();
}

/// Item 3: root's sweep never uses cgroup.kill on a tree cgroup holding a process the
/// ladder refused (another user's), and reports it refused and left.
#[test]
fn a_tree_cgroup_holding_a_refused_process_gets_no_cgroup_kill() {
    if !isolate("a_tree_cgroup_holding_a_refused_process_gets_no_cgroup_kill") {
        return;
    }
    if !require_cgroup() {
        return;
    }
    if !is_root() {
        skip("needs root (a process of uid 65534 in a tree cgroup)");
        return;
    }
    let scratch = Scratch::new("refusedcgroup");
    // Where tree cgroups go here: beside a live tree's cgroup.
    let (mut live, _, live_cgroup) =
        live_cgroup_tree(&scratch, &scratch.path().join("live"), "live");
    signal_child(&live, rustix::process::Signal::TERM);
    assert!(wait_child(&mut live, Duration::from_secs(60)).is_some());
    let parent = live_cgroup.parent().unwrap().to_path_buf();
    // A tree cgroup of a dead guardian of this namespace, holding uid 65534's sleep.
    let pidns = std::fs::metadata("/proc/self/ns/pid").unwrap();
    let name = format!(
        "undertaker.{}.{}.{}.{}",
        "ef".repeat(16),
        std::os::unix::fs::MetadataExt::ino(&pidns),
        4_000_000,
        1
    );
    let cg = parent.join(name);
    std::fs::create_dir(&cg).unwrap();
    let mut stranger = sleep_as_nobody(false);
    std::fs::write(cg.join("cgroup.procs"), stranger.id().to_string()).unwrap();
    let out = ut(
        &scratch.path().join("state"),
        &["sweep", "--grace", "1s", "--json"],
    );
    let report = text(&out.stdout);
    let survived = alive(stranger.id() as i32);
    kill9(&mut stranger);
    let _ = wait_until(Duration::from_secs(60), || std::fs::remove_dir(&cg).is_ok());
    assert!(survived, "the refused process was killed: {report}");
    let report = json(&out);
    let tree = report["trees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "ef".repeat(16))
        .unwrap_or_else(|| panic!("no report of the tree: {report}"))
        .clone();
    let outcomes: Vec<&str> = tree["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["refused"], "{tree}");
    assert!(tree["left_alive"].as_u64().unwrap() >= 1, "{tree}");
    assert_eq!(out.status.code(), Some(1));
    assert_nothing_left();
}

/// Item 8: a stopped guardian whose sentinel was killed keeps its lock and its tree;
/// `sweep` reports that tree (it said "0 tree(s) examined"), with its live count.
#[test]
fn sweep_reports_a_tree_held_by_a_stopped_guardian() {
    if !isolate("sweep_reports_a_tree_held_by_a_stopped_guardian") {
        return;
    }
    use rustix::process::Signal;
    let scratch = Scratch::new("stopped");
    let state = scratch.path().join("state");
    let ready = scratch.path().join("ready");
    let (mut sentinel, id) = spawn_guarded_ready(
        &state,
        "stopped",
        &format!("echo > {}; exec sleep 1000", ready.display()),
        &ready,
        &[("UNDERTAKER_NO_HEAL", "1")],
    );
    // CMD has exec'd its sleep (read while it execs, it shows no marker).
    wait_for_members(&id, 1);
    let guardian = guardian_of(&sentinel).expect("guardian");
    let sentinel_pid = sentinel.id() as i32;
    assert!(signal_child_of(sentinel_pid, guardian, Signal::STOP));
    assert!(wait_until(Duration::from_secs(60), || proc_state(guardian)
        == Some('T')));
    kill9(&mut sentinel);
    let out = ut(&state, &["sweep", "--json"]);
    let report = json(&out);
    // Let the guardian go: continued, it tears its tree down on SIGTERM.
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(guardian).unwrap(),
        rustix::process::PidfdFlags::empty(),
    );
    if let Ok(fd) = &pidfd {
        let _ = rustix::process::pidfd_send_signal(fd, Signal::TERM);
        let _ = rustix::process::pidfd_send_signal(fd, Signal::CONT);
    }
    let tree = report["trees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("the stopped guardian's tree is not reported: {report}"));
    assert_eq!(tree["action"], "left_alone", "{tree}");
    assert!(
        tree["reason"].as_str().unwrap().contains("stopped"),
        "{tree}"
    );
    assert_eq!(tree["left_alive"], 1, "{tree}");
    assert_eq!(out.status.code(), Some(1));
    assert_nothing_left();
}
