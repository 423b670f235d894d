//! The registry end to end: orphaned trees are found and swept with proof, decoys are
//! never touched, and bad state (corrupt database, unsafe directory) is handled.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts a guarded shell (label `label`) with one `sleep` child; returns the guardian
/// and the tree id once the tree is running and recorded.
fn start_sleeper(tmp: &Scratch, state: &Path, label: &str) -> (Child, String) {
    let script = format!(
        "sleep 1000 & echo ready > {}/ready; wait",
        tmp.path().display()
    );
    spawn_guarded_ready(state, label, &script, &tmp.path().join("ready"), &[])
}

#[test]
fn killed_guardian_tree_is_orphaned_then_swept_and_decoys_survive() {
    if !isolate("killed_guardian_tree_is_orphaned_then_swept_and_decoys_survive") {
        return;
    }
    let tmp = Scratch::new("zoo");
    let state = tmp.path().join("state");
    let (decoy, decoy_log) = spawn_decoy(&tmp, "decoy-plain.log");

    let mut guardian = spawn_guarded(&state, "zoo", &zoo_with_exited_member(tmp.path()), &[]);
    assert!(
        wait_for_file(&tmp.path().join("ready"), Duration::from_secs(60)),
        "zoo never got ready"
    );
    let tree = find_tree(&state, "zoo", Duration::from_secs(60)).expect("tree recorded");
    let id = tree["id"].as_str().unwrap().to_owned();
    // The zoo once settled: CMD, its sleep, the setsid double fork's sleep, the
    // process in its own group and the SIGTERM ignorer (the exited member is gone).
    // Waited for, not counted once: the double fork's middle shell may not have
    // exited yet, and a member that is exec'ing shows no marker.
    let before = wait_for_members(&id, 5);

    // Every undertaker process at once (what the sentinel cannot cover); CMD itself
    // dies with its guardian (PDEATHSIG), the escaped members do not.
    kill9_all(&mut guardian);
    let members = wait_for_members(&id, before.len() - 1);
    let died: Vec<i64> = (before.iter())
        .filter(|p| !members.contains(p))
        .map(|&p| i64::from(p))
        .collect();
    assert_eq!(
        died,
        [tree["root_pid"].as_i64().unwrap()],
        "only CMD dies with the guardian: {before:?} -> {members:?}"
    );

    // A decoy that takes the number of an exited member (pid reuse).
    let exited: i32 = std::fs::read_to_string(tmp.path().join("exited.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    set_next_pid(exited).unwrap();
    let (reuser, reuse_log) = spawn_decoy(&tmp, "decoy-reuse.log");
    assert_eq!(reuser.id() as i32, exited, "decoy did not reuse the pid");

    let ps = json(&ut(&state, &["ps", "--json"]));
    let row = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .expect("tree in ps")
        .clone();
    assert_eq!(row["state"], "orphaned", "{row}");
    assert_eq!(row["guardian_alive"], false);
    assert!(row["live_processes"].as_u64().unwrap() >= 4, "{row}");

    // Dry run changes nothing.
    let dry = ut(&state, &["sweep", "--dry-run", "--json"]);
    assert_eq!(dry.status.code(), Some(1), "{}", stderr(&dry));
    let dry = json(&dry);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(survivors(&id).len(), members.len());
    let ps = json(&ut(&state, &["ps", "--json"]));
    assert_eq!(ps[0]["state"], "orphaned");
    let log = json(&ut(&state, &["log", "--json"]));
    assert_eq!(log.as_array().unwrap().len(), 0, "dry run wrote the log");
    // The human summary says what a sweep would do, not that anything stays alive.
    let human = stdout(&ut(&state, &["sweep", "--dry-run"]));
    let summary = human.lines().last().unwrap_or_default().to_owned();
    assert!(
        summary.contains(&format!("a sweep would signal {}", members.len()))
            && !summary.contains("left alive"),
        "{human}"
    );

    let swept = ut(&state, &["sweep", "--grace", "1s", "--json"]);
    println!("sweep: {}", stdout(&swept));
    assert_eq!(swept.status.code(), Some(0), "{}", stderr(&swept));
    let report = json(&swept);
    assert_eq!(report["left_alive"], 0);
    assert_eq!(survivors(&id), Vec::<i32>::new());

    // Decoys: alive and never signalled.
    assert_decoy_untouched(&decoy, &decoy_log);
    assert_decoy_untouched(&reuser, &reuse_log);

    // Every signal is in the log with its proof; none hit a decoy.
    let log = json(&ut(&state, &["log", "--json", "--tree", &id[..8]]));
    let entries = log.as_array().unwrap();
    let signalled: BTreeSet<i64> = entries
        .iter()
        .filter(|e| e["event"] == "signal")
        .map(|e| {
            assert_eq!(e["actor"], "sweep");
            assert_eq!(e["proof"], "pidfd+marker", "{e}");
            e["pid"].as_i64().unwrap()
        })
        .collect();
    let expected: BTreeSet<i64> = members.iter().map(|&p| i64::from(p)).collect();
    assert_eq!(signalled, expected);
    assert!(!signalled.contains(&i64::from(decoy.id() as i32)));
    assert!(!signalled.contains(&i64::from(exited)));

    let ps = json(&ut(&state, &["ps", "--json", "--all"]));
    assert_eq!(ps[0]["state"], "finished");
    assert!(json(&ut(&state, &["ps", "--json"]))
        .as_array()
        .unwrap()
        .is_empty());

    for mut c in [decoy, reuser] {
        kill9(&mut c);
    }
}

#[test]
fn corrupt_registry_is_moved_aside_and_sweep_by_marker_still_works() {
    if !isolate("corrupt_registry_is_moved_aside_and_sweep_by_marker_still_works") {
        return;
    }
    let tmp = Scratch::new("corrupt");
    let state = tmp.path().join("state");
    let (mut guardian, id) = start_sleeper(&tmp, &state, "doomed");
    kill9_all(&mut guardian);
    // CMD (the shell) dies with its guardian; its `sleep` is left for the sweep.
    wait_for_members(&id, 1);

    let db = state.join("registry.db");
    for side in ["registry.db-wal", "registry.db-shm"] {
        let _ = std::fs::remove_file(state.join(side));
    }
    std::fs::write(&db, b"this is not a database, just garbage ".repeat(200)).unwrap();

    let out = ut(&state, &["sweep", "--grace", "1s"]);
    let err = stderr(&out);
    println!("sweep stdout: {}\nstderr: {err}", stdout(&out));
    assert!(
        err.contains(&db.display().to_string()) && err.contains("corrupt"),
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("corrupt")).count(),
        1,
        "{err}"
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains(&id));
    assert_eq!(survivors(&id), Vec::<i32>::new());
    let moved: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("registry.db.corrupt-")
        })
        .collect();
    assert_eq!(moved.len(), 1);
    // The fresh registry works and now holds the swept tree.
    let ps = ut(&state, &["ps", "--json", "--all"]);
    assert!(ps.status.success(), "{}", stderr(&ps));
    assert_eq!(json(&ps)[0]["id"], id.as_str());
}

#[test]
fn hundred_concurrent_runs_all_recorded_and_finished() {
    let tmp = Scratch::new("hundred");
    let state = tmp.path().join("state");
    let children: Vec<_> = (0..100)
        .map(|_| {
            undertaker()
                .arg("run")
                .arg("--state-dir")
                .arg(&state)
                .args(["--", "true"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }
    let ps = json(&ut(&state, &["ps", "--json", "--all"]));
    let rows = ps.as_array().unwrap();
    assert_eq!(rows.len(), 100);
    assert!(rows
        .iter()
        .all(|r| r["state"] == "finished" && r["exit_status"] == 0));
}

#[test]
fn guardian_killed_before_spawn_is_found_and_finished() {
    let tmp = Scratch::new("prespawn");
    let state = tmp.path().join("state");
    let mut guardian = spawn_guarded(
        &state,
        "never-started",
        "exit 0",
        &[("UNDERTAKER_TEST_PAUSE_BEFORE_SPAWN", "30000")],
    );
    let row = find_tree(&state, "never-started", Duration::from_secs(60)).expect("row written");
    assert!(row["root_pid"].is_null(), "{row}");
    assert_eq!(row["state"], "running");
    kill9_all(&mut guardian);
    let ps = json(&ut(&state, &["ps", "--json"]));
    assert_eq!(ps[0]["state"], "orphaned");
    let out = ut(&state, &["sweep", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tree = reported(&json(&out), row["id"].as_str().unwrap());
    assert_eq!(tree["action"], "swept", "{tree}");
    assert_eq!(tree["targets"].as_array().unwrap().len(), 0, "{tree}");
    assert_eq!(
        json(&ut(&state, &["ps", "--json", "--all"]))[0]["state"],
        "finished"
    );
}

/// The sweep report's entry for tree `id`. Never `trees[0]`: a sweep in the initial
/// PID namespace also finishes tree cgroups that other tests' dead namespaces left.
fn reported(report: &serde_json::Value, id: &str) -> serde_json::Value {
    (report["trees"].as_array().unwrap().iter())
        .find(|t| t["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("tree {id} is not in the report: {report}"))
}

/// A dead guardian's record file waits in the state dir; one `sweep` folds and
/// finishes the tree and leaves no file behind.
#[test]
fn sweep_of_a_dead_guardians_tree_leaves_no_record_file() {
    let tmp = Scratch::new("sweep-files");
    let state = tmp.path().join("state");
    let mut guardian = spawn_guarded(
        &state,
        "swept",
        "exit 0",
        &[("UNDERTAKER_TEST_PAUSE_BEFORE_SPAWN", "30000")],
    );
    assert!(
        wait_until(Duration::from_secs(60), || record_files(&state) == 1),
        "record file written"
    );
    kill9_all(&mut guardian);
    assert_eq!(record_files(&state), 1, "nothing folded it yet");
    let record = std::fs::read_dir(state.join("trees"))
        .unwrap()
        .flatten()
        .next();
    let id = record
        .unwrap()
        .path()
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let out = ut(&state, &["sweep", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tree = reported(&json(&out), &id);
    assert_eq!(tree["action"], "swept", "{tree}");
    assert_eq!(tree["left_alive"], 0, "{tree}");
    let left: Vec<_> = std::fs::read_dir(state.join("trees"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in trees/: {left:?}");
}

#[test]
fn kill_tears_down_a_live_tree_through_its_guardian() {
    let tmp = Scratch::new("kill");
    let state = tmp.path().join("state");
    let (mut guardian, id) = start_sleeper(&tmp, &state, "victim");
    let out = ut(&state, &["kill", &id[..10]]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    guardian.wait().unwrap();
    assert_eq!(survivors(&id), Vec::<i32>::new());
    assert_eq!(
        json(&ut(&state, &["ps", "--json", "--all"]))[0]["state"],
        "finished"
    );
    let log = json(&ut(&state, &["log", "--json", "--tree", &id]));
    assert!(log.as_array().unwrap().iter().any(|e| e["actor"] == "kill"
        && e["signal"] == "SIGTERM"
        && e["proof"] == "pidfd+snapshot"));
}

#[test]
fn unknown_or_malformed_tree_ids_are_usage_errors() {
    let tmp = Scratch::new("unknown");
    let state = tmp.path().join("state");
    for id in [
        "deadbeef",
        "abc",
        "not-hex!",
        "0123456789abcdef0123456789abcdef0",
    ] {
        let out = ut(&state, &["kill", id]);
        assert_eq!(out.status.code(), Some(2), "{id}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    let out = ut(&state, &["log", "--tree", "deadbeef"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unsafe_state_dirs_are_refused() {
    let tmp = Scratch::new("unsafe");
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for args in [&["run", "--", "true"][..], &["ps"][..], &["sweep"][..]] {
        let out = ut(&link, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("symlink"), "{}", stderr(&out));
    }
    if !is_root() {
        skip("foreign-owned state dir needs root to chown");
        return;
    }
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    let out = ut(&foreign, &["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("owned by uid 65534"),
        "{}",
        stderr(&out)
    );
}

/// Runs `n` short trees whose CMD leaves a `sleep` behind: each teardown logs at least
/// one signal. Returns the number of audit entries the log then shows.
fn short_trees_with_audit(state: &Path, n: usize) -> usize {
    for i in 0..n {
        let mut g = spawn_guarded(state, &format!("short{i}"), "sleep 1000 & exit 0", &[]);
        assert!(wait_child(&mut g, Duration::from_secs(60)).is_some());
    }
    let entries = json(&ut(state, &["log", "--json"]));
    entries.as_array().unwrap().len()
}

/// Audit entries as comparable lines (no ids: those are the database's).
fn audit_lines(state: &Path) -> Vec<String> {
    let out = ut(state, &["log", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut lines: Vec<String> = json(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {} {}",
                e["time_ms"], e["tree"], e["event"], e["pid"], e["signal"]
            )
        })
        .collect();
    lines.sort();
    lines
}

fn record_files(state: &Path) -> usize {
    std::fs::read_dir(state.join("trees"))
        .map(|d| d.flatten().count())
        .unwrap_or(0)
}

/// A command folding record files is killed inside its transaction, then after its
/// commit but before it removed the files: nothing is lost, nothing doubled.
#[test]
fn a_folder_killed_mid_fold_loses_and_duplicates_nothing() {
    if !isolate("a_folder_killed_mid_fold_loses_and_duplicates_nothing") {
        return;
    }
    let tmp = Scratch::new("fold-kill");
    let state = tmp.path().join("state");
    // The reference: the same kind of trees, folded by a command nobody killed.
    let expected_per_tree = short_trees_with_audit(&state, 1);
    assert!(
        expected_per_tree >= 1,
        "a teardown with a leftover logs a signal"
    );
    for pause in [
        "UNDERTAKER_TEST_PAUSE_IN_FOLD",
        "UNDERTAKER_TEST_PAUSE_AFTER_FOLD",
    ] {
        let before = audit_lines(&state);
        for i in 0..3 {
            let mut g = spawn_guarded(&state, &format!("{pause}{i}"), "sleep 1000 & exit 0", &[]);
            assert!(wait_child(&mut g, Duration::from_secs(60)).is_some());
        }
        assert_eq!(record_files(&state), 3, "{pause}: three unfolded records");
        let mut folder = undertaker()
            .arg("--state-dir")
            .arg(&state)
            .args(["ps", "--json"])
            .env(pause, "30000")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Inside the pause by then: the first file's fold has begun.
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            folder.try_wait().unwrap().is_none(),
            "{pause}: folder finished early"
        );
        kill9(&mut folder);
        let after = audit_lines(&state);
        assert_eq!(
            record_files(&state),
            0,
            "{pause}: the next command folded all"
        );
        let new: Vec<&String> = after.iter().filter(|l| !before.contains(l)).collect();
        assert_eq!(
            after.len(),
            before.len() + 3 * expected_per_tree,
            "{pause}: lost or doubled: {new:#?}"
        );
        let unique: BTreeSet<&String> = after.iter().collect();
        assert_eq!(unique.len(), after.len(), "{pause}: duplicates");
    }
    assert_nothing_left();
}

/// Every undertaker process of a tree is killed after its teardown logged, before the
/// finished mark: the entries are kept, and `sweep` finishes the tree.
#[test]
fn guardian_killed_before_its_finished_mark_loses_no_entry() {
    if !isolate("guardian_killed_before_its_finished_mark_loses_no_entry") {
        return;
    }
    let tmp = Scratch::new("finish-kill");
    let state = tmp.path().join("state");
    let mut g = spawn_guarded(
        &state,
        "unfinished",
        "sleep 1000 & exit 0",
        &[("UNDERTAKER_TEST_PAUSE_BEFORE_FINISH", "30000")],
    );
    let tree = find_tree(&state, "unfinished", Duration::from_secs(60)).expect("recorded");
    let id = tree["id"].as_str().unwrap().to_owned();
    // The teardown logs its signal, then the guardian pauses before the last line.
    assert!(wait_until(Duration::from_secs(60), || {
        let out = ut(&state, &["log", "--json"]);
        json(&out).as_array().is_some_and(|a| !a.is_empty())
    }));
    let logged = audit_lines(&state);
    kill9_all(&mut g);
    let ps = json(&ut(&state, &["ps", "--json", "--all"]));
    let row = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .cloned()
        .expect("tree still listed");
    assert_ne!(row["state"], "running", "{row}");
    let out = ut(&state, &["sweep", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let after = audit_lines(&state);
    for line in &logged {
        assert!(after.contains(line), "lost {line}");
    }
    let ps = json(&ut(&state, &["ps", "--json", "--all"]));
    let row = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .cloned()
        .unwrap();
    assert_eq!(row["state"], "finished", "{row}");
    assert_nothing_left();
}

/// `log --last N` is the newest page of the full log; `--before ID` the one before it.
#[test]
fn log_pages_match_the_full_log() {
    let tmp = Scratch::new("pages");
    let state = tmp.path().join("state");
    let total = short_trees_with_audit(&state, 2);
    assert!(total >= 2, "{total}");
    let full = json(&ut(&state, &["log", "--json"]));
    let full = full.as_array().unwrap();
    let last = json(&ut(&state, &["log", "--json", "--last", "1"]));
    assert_eq!(last.as_array().unwrap()[..], full[full.len() - 1..]);
    let first_id = last[0]["id"].as_i64().unwrap().to_string();
    let prev = json(&ut(
        &state,
        &["log", "--json", "--last", "100", "--before", &first_id],
    ));
    assert_eq!(prev.as_array().unwrap()[..], full[..full.len() - 1]);
}

/// An `undertaker run --tier cgroup` (CMD `sleep 1000`, self-healing off) as the
/// guardian of a private PID namespace of its own (`unshare --pid --fork`), in state
/// dir `label` of `tmp`. Dropping it kills the namespace and removes what is left of
/// its tree cgroup: a failing test leaves nothing behind either.
struct NamespacedTree {
    /// The `unshare` we started: the namespace's init is its one child.
    wrapper: Child,
    id: String,
    cgroup: std::path::PathBuf,
}

impl NamespacedTree {
    fn start(tmp: &Scratch, label: &str) -> Self {
        let ready = tmp.path().join(format!("{label}.ready"));
        let script = format!("echo > {}; exec sleep 1000", ready.display());
        let state = tmp.path().join(label);
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount-proc", UNDERTAKER, "--state-dir"])
            .arg(&state)
            .args(["run", "--tier", "cgroup", "--label", label, "--"])
            .args(["sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .env_remove("UNDERTAKER_TREE")
            .env("UNDERTAKER_NO_HEAL", "1");
        with_test_state(&mut cmd);
        let mut tree = Self {
            wrapper: cmd.spawn().expect("spawn unshare"),
            id: String::new(),
            cgroup: Default::default(),
        };
        assert!(wait_for_file(&ready, Duration::from_secs(60)), "{label}");
        tree.id = find_tree(&state, label, Duration::from_secs(60)).expect("recorded")["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let cgroups = undertaker::testing::tree_cgroups_of_tree(&tree.id);
        assert_eq!(cgroups.len(), 1, "{cgroups:?}");
        tree.cgroup = cgroups[0].clone();
        // Its sleep counted once it has exec'd (read while `sh` execs, no marker).
        wait_for_members(&tree.id, 1);
        tree
    }

    /// `kill -9` of the whole namespace: of its init, after which the kernel kills
    /// every other process of it. Once our `unshare` has reaped the init, the
    /// namespace has no process left (its init waits for all of them before it dies).
    fn kill_namespace(&mut self) {
        self.kill_init();
        assert!(
            wait_child(&mut self.wrapper, Duration::from_secs(60)).is_some(),
            "the namespace's init did not die"
        );
    }

    /// SIGKILL to the namespace's init (our `unshare`'s one child), through a pidfd
    /// checked to be our child's.
    fn kill_init(&self) {
        if let Some(init) = guardian_of(&self.wrapper) {
            signal_child_of(
                self.wrapper.id() as i32,
                init,
                rustix::process::Signal::KILL,
            );
        }
    }
}

impl Drop for NamespacedTree {
    fn drop(&mut self) {
        if matches!(self.wrapper.try_wait(), Ok(None)) {
            self.kill_init();
            let _ = wait_child(&mut self.wrapper, Duration::from_secs(60));
        }
        // Empty now (everything of the namespace is dead): an rmdir is all it needs.
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

/// Issue 17 ("Also"): a guardian whose whole PID namespace was `kill -9`ed leaves its
/// tree cgroup. A sweep of another state dir finishes that tree and removes the cgroup
/// when it runs in the initial PID namespace, which can prove that namespace empty; run
/// anywhere else it leaves it alone. A live guardian's tree in another namespace is
/// left alone either way. Not isolated on purpose: the sweep runs in the namespace the
/// test runs in (the initial one here and, maybe, in CI); it signals only what is in
/// the namespaces and cgroups this test made, or trees of dead namespaces.
#[test]
fn a_tree_cgroup_of_a_dead_pid_namespace_is_finished_and_a_live_ones_left_alone() {
    if !is_root() {
        skip("needs root: the cgroup tier in PID namespaces made without a user namespace");
        return;
    }
    if !require_cgroup() {
        return;
    }
    let probe = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        skip("no private PID namespace (unshare --pid --fork --mount-proc failed)");
        return;
    }
    let tmp = Scratch::new("deadns");
    let mut dead = NamespacedTree::start(&tmp, "dead");
    let mut live = NamespacedTree::start(&tmp, "live");
    dead.kill_namespace();
    assert_eq!(survivors(&dead.id), Vec::<i32>::new());
    // Its cgroup stays (the kernel removes none) until a sweep or heal round in the
    // initial namespace finishes it: not asserted here, since one running beside this
    // test (another test's, or any undertaker's self-healing) may already have.
    let other = tmp.path().join("other");
    let report = ut(&other, &["sweep", "--json"]);
    let report = json(&report);
    let entry = |id: &str| {
        report["trees"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .cloned()
    };
    let initial = rustix::fs::stat("/proc/self/ns/pid").is_ok_and(|s| s.st_ino == 0xEFFF_FFFC);
    if initial {
        // Someone else's self-healing may have got there first: either way it is gone.
        assert!(!dead.cgroup.exists(), "left: {report:#}");
        if let Some(t) = entry(&dead.id) {
            assert_eq!(t["action"], "swept", "{t:#}");
        }
    } else {
        eprintln!("not in the initial PID namespace: the dead namespace's tree is left alone");
        assert_eq!(entry(&dead.id), None, "{report:#}");
    }
    assert_eq!(entry(&live.id), None, "{report:#}");
    assert!(live.cgroup.exists(), "{report:#}");
    assert_eq!(survivors(&live.id).len(), 1, "{report:#}");
    // Now the live one's namespace dies too: the same sweep (from the initial
    // namespace) removes its cgroup; elsewhere the drop does.
    live.kill_namespace();
    if initial {
        let report = json(&ut(&other, &["sweep", "--json"]));
        assert!(!live.cgroup.exists(), "left: {report:#}");
    }
}
