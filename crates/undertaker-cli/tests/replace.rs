//! Which tree belongs to which host (issue #27 items 3 and 4). `run --replace`: a host
//! that starts the same labelled server again ends up with one live tree, directly
//! and through a launcher; two hosts with the same label keep one each. `ps` names
//! the host behind the launcher, the pid it started and the command, groups trees by
//! host; `kill` and `log --tree` take a label. The launcher is a parameter (`sh -c`
//! here; `npx` and `uvx` once their packages are installed) so every launcher runs
//! the same checks.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

const REPLACE_HOST: &str = include_str!("hosts/replace_host.py");

/// A shell between the host and undertaker that does not exec it (it runs more than
/// one command), as some hosts wrap every server command.
const SH_LAUNCHER: &[&str] = &["sh", "-c", "\"$0\" \"$@\"; exit $?"];

/// A python host that started its server `count` times (see hosts/replace_host.py);
/// it ends what it started once its stdin closes.
struct Host {
    child: Child,
    input: Option<ChildStdin>,
    report: Value,
}

impl Host {
    fn start(
        scratch: &Scratch,
        state: &Path,
        launcher: &[&str],
        count: usize,
        run: &[&str],
    ) -> Self {
        Self::start_with(scratch, state, launcher, count, run, "pipes")
    }

    /// [`Host::start`] with the servers' stdio as `stdio`: `pipes`, or `socketpair`.
    fn start_with(
        scratch: &Scratch,
        state: &Path,
        launcher: &[&str],
        count: usize,
        run: &[&str],
        stdio: &str,
    ) -> Self {
        let script = scratch.file("replace_host.py", REPLACE_HOST);
        let mut child = Command::new("python3")
            .arg(script)
            .arg(scratch.path())
            .arg(count.to_string())
            .arg(if run.contains(&"--replace") { "1" } else { "0" })
            .arg("--")
            .args(launcher)
            .arg(UNDERTAKER)
            .arg("--state-dir")
            .arg(state)
            .args(["run", "--grace", "300ms"])
            .args(run)
            .env_remove("UNDERTAKER_TREE")
            .env_remove("UNDERTAKER_STATE_DIR")
            .env("STDIO", stdio)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the python host");
        let input = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let report: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("host report {line:?}: {e}"));
        Self {
            child,
            input,
            report,
        }
    }

    fn pid(&self) -> i64 {
        self.report["host"].as_i64().unwrap()
    }

    /// Closes the host's stdin: it terminates what it started and exits.
    fn finish(mut self) {
        drop(self.input.take());
        assert!(
            wait_child(&mut self.child, Duration::from_secs(60)).is_some_and(|s| s.success()),
            "the host did not end its servers"
        );
    }
}

/// The running trees with `label`.
fn running(state: &Path, label: &str) -> Vec<Value> {
    let ps = json(&ut(state, &["ps", "--json"]));
    (ps.as_array().unwrap().iter())
        .filter(|t| t["label"] == label && t["state"] == "running")
        .cloned()
        .collect()
}

fn replaced_twice_leaves_one(test: &str, launcher: &[&str], stdio: &str) {
    if !isolate(test) || !require_python() {
        return;
    }
    let scratch = Scratch::new("replace");
    let state = scratch.path().join("state");
    let run = &["--label", "srv", "--replace"];
    let host = Host::start_with(&scratch, &state, launcher, 2, run, stdio);
    // Ended by SIGTERM from its guardian, as `kill` ends a tree.
    assert_eq!(
        host.report["statuses"][0], 143,
        "the first server was not ended: {}",
        host.report
    );
    let trees = running(&state, "srv");
    assert_eq!(trees.len(), 1, "{trees:#?}");
    assert_eq!(
        trees[0]["host_pid"].as_i64(),
        Some(host.pid()),
        "{}",
        trees[0]
    );
    assert_eq!(trees[0]["host_found_by"], "stdio", "{}", trees[0]);
    assert_eq!(
        trees[0]["host_child_pid"], host.report["pids"][1],
        "the pid the host started: {}",
        trees[0]
    );
    host.finish();
    assert_nothing_left();
}

#[test]
fn replace_started_directly_leaves_one_tree() {
    replaced_twice_leaves_one("replace_started_directly_leaves_one_tree", &[], "pipes");
}

#[test]
fn replace_through_a_shell_leaves_one_tree() {
    replaced_twice_leaves_one(
        "replace_through_a_shell_leaves_one_tree",
        SH_LAUNCHER,
        "pipes",
    );
}

/// Node hosts give their children socket pairs, not pipes.
#[test]
fn replace_through_a_shell_on_a_socket_pair_leaves_one_tree() {
    replaced_twice_leaves_one(
        "replace_through_a_shell_on_a_socket_pair_leaves_one_tree",
        SH_LAUNCHER,
        "socketpair",
    );
}

#[test]
fn two_hosts_with_one_label_keep_both_trees() {
    if !isolate("two_hosts_with_one_label_keep_both_trees") || !require_python() {
        return;
    }
    let scratch = Scratch::new("replace-two");
    let state = scratch.path().join("state");
    let run = &["--label", "srv", "--replace"];
    let first = Host::start(&scratch, &state, SH_LAUNCHER, 1, run);
    let second = Host::start(&scratch, &state, SH_LAUNCHER, 1, run);
    let trees = running(&state, "srv");
    assert_eq!(
        trees.len(),
        2,
        "a host replaced another host's server: {trees:#?}"
    );
    let mut hosts: Vec<i64> = trees
        .iter()
        .filter_map(|t| t["host_pid"].as_i64())
        .collect();
    hosts.sort_unstable();
    let mut want = vec![first.pid(), second.pid()];
    want.sort_unstable();
    assert_eq!(hosts, want);
    first.finish();
    second.finish();
    assert_nothing_left();
}

#[test]
fn without_replace_the_same_host_keeps_both() {
    if !isolate("without_replace_the_same_host_keeps_both") || !require_python() {
        return;
    }
    let scratch = Scratch::new("replace-off");
    let state = scratch.path().join("state");
    let host = Host::start(&scratch, &state, &[], 2, &["--label", "srv"]);
    assert_eq!(running(&state, "srv").len(), 2);
    host.finish();
    assert_nothing_left();
}

#[test]
fn replace_needs_a_label() {
    let scratch = Scratch::new("replace-usage");
    let out = ut(scratch.path(), &["run", "--replace", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn ps_names_the_host_behind_a_launcher_and_groups_by_it() {
    if !isolate("ps_names_the_host_behind_a_launcher_and_groups_by_it") || !require_python() {
        return;
    }
    let scratch = Scratch::new("which-host");
    let state = scratch.path().join("state");
    let launched = Host::start(&scratch, &state, SH_LAUNCHER, 2, &["--label", "srv"]);
    let direct = Host::start(&scratch, &state, &[], 1, &["--label", "other"]);
    let ps = json(&ut(&state, &["ps", "--json"]));
    let rows = ps.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{ps:#}");
    for row in rows {
        let host = if row["label"] == "srv" {
            &launched
        } else {
            &direct
        };
        assert_eq!(row["host_pid"].as_i64(), Some(host.pid()), "{row}");
        assert_eq!(row["host_name"], "python3", "{row}");
        assert_eq!(row["host_found_by"], "stdio", "{row}");
        assert_eq!(row["command"][0], "sh", "{row}");
        assert_eq!(row["command"][2], "touch \"$0\"; exec sleep 1000", "{row}");
        assert_ne!(row["pid"], row["guardian_pid"], "{row}");
    }
    let other = rows.iter().find(|r| r["label"] == "other").unwrap();
    // Started directly: the pid the host started is undertaker's (`$!`).
    assert_eq!(other["pid"], direct.report["pids"][0], "{other}");
    assert_eq!(other["host_child_pid"], other["pid"], "{other}");
    // Through the shell: the host started the shell, undertaker is its child.
    for row in rows.iter().filter(|r| r["label"] == "srv") {
        let started = row["host_child_pid"].as_i64().unwrap() as i32;
        assert!(launched.report["pids"]
            .as_array()
            .unwrap()
            .contains(&started.into()));
        assert_eq!(
            parent_of(row["pid"].as_i64().unwrap() as i32),
            Some(started),
            "{row}"
        );
    }

    let groups = json(&ut(&state, &["ps", "--json", "--by-owner"]));
    let mut sizes: Vec<(i64, usize)> = (groups.as_array().unwrap().iter())
        .map(|g| {
            (
                g["host_pid"].as_i64().unwrap(),
                g["trees"].as_array().unwrap().len(),
            )
        })
        .collect();
    sizes.sort_unstable();
    let mut want = vec![(launched.pid(), 2), (direct.pid(), 1)];
    want.sort_unstable();
    assert_eq!(sizes, want, "{groups:#}");
    let table = ut(&state, &["ps", "--by-owner"]);
    let table = text(&table.stdout);
    assert!(
        table.contains(&format!("host python3[{}]: 2 tree(s)", launched.pid())),
        "{table}"
    );
    assert!(table.contains("COMMAND"), "{table}");

    launched.finish();
    direct.finish();
    assert_nothing_left();
}

#[test]
fn kill_and_log_take_a_label() {
    if !isolate("kill_and_log_take_a_label") || !require_python() {
        return;
    }
    let scratch = Scratch::new("kill-label");
    let state = scratch.path().join("state");
    let host = Host::start(&scratch, &state, &[], 2, &["--label", "srv"]);
    let ids: Vec<String> = (running(&state, "srv").iter())
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2);

    // Two live trees: a usage error naming both, nothing ended.
    let out = ut(&state, &["kill", "srv"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    for id in &ids {
        assert!(
            text(&out.stderr).contains(id.as_str()),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(running(&state, "srv").len(), 2);
    // A label no tree has: a usage error too.
    let out = ut(&state, &["kill", "nosuchlabel"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    let out = ut(&state, &["kill", "--all", "--json", "srv"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ended = json(&out);
    let mut killed: Vec<&str> = (ended.as_array().unwrap().iter())
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    killed.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(killed, want);
    assert!(running(&state, "srv").is_empty());

    // The log of a label is every tree's with it.
    let log = json(&ut(&state, &["log", "--json", "--tree", "srv"]));
    let mut logged: Vec<&str> = (log.as_array().unwrap().iter())
        .filter_map(|e| e["tree"].as_str())
        .collect();
    logged.sort_unstable();
    logged.dedup();
    assert_eq!(logged, want, "{log:#}");
    // An id prefix still names its tree alone.
    let one = json(&ut(&state, &["log", "--json", "--tree", &ids[0][..8]]));
    assert!((one.as_array().unwrap().iter()).all(|e| e["tree"] == ids[0].as_str()));
    // Only finished trees have the label now: kill has nothing live to end.
    let out = ut(&state, &["kill", "srv"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    host.finish();
    assert_nothing_left();
}

/// The `ps` row of the tree labelled `label` once its CMD is spawned (who started it
/// is recorded before that).
fn started_tree(state: &Path, label: &str) -> Value {
    let mut row = Value::Null;
    let started = wait_until(Duration::from_secs(60), || {
        row = find_tree(state, label, Duration::from_secs(60)).unwrap_or_default();
        !row["root_pid"].is_null()
    });
    assert!(started, "{label}: CMD never started: {row}");
    row
}

#[test]
fn without_stdio_pipes_or_with_a_sibling_writer_the_host_is_the_parent() {
    if !isolate("without_stdio_pipes_or_with_a_sibling_writer_the_host_is_the_parent") {
        return;
    }
    let scratch = Scratch::new("host-parent");
    let state = scratch.path().join("state");
    let s = state.display();
    // `yes` writes undertaker's stdin pipe, but it is a sibling, not an ancestor; the
    // shell, the parent, holds neither end. `; true` keeps the shell from exec'ing.
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "yes | {UNDERTAKER} --state-dir {s} run --label piped -- sleep 1000; true"
        ))
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let piped = started_tree(&state, "piped");
    assert_eq!(piped["host_found_by"], "parent", "{piped}");
    assert_eq!(
        piped["host_pid"].as_i64(),
        Some(i64::from(sh.id())),
        "{piped}"
    );
    assert_eq!(piped["host_name"], "sh", "{piped}");
    kill9(&mut sh);
    // Stdio from /dev/null: the parent, this test.
    let mut plain = spawn_guarded(&state, "plain", "exec sleep 1000", &[]);
    let row = started_tree(&state, "plain");
    assert_eq!(row["host_found_by"], "parent", "{row}");
    assert_eq!(
        row["host_pid"].as_i64(),
        Some(i64::from(std::process::id())),
        "{row}"
    );
    // The host's and the owner's start times are this process's (recorded from the
    // start-up read of the parent, signal.rs's `launch_parent`).
    let own_starttime = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')?
                .1
                .split(' ')
                .nth(20)?
                .parse::<u64>()
                .ok()
        })
        .unwrap();
    assert_eq!(row["host_starttime"].as_u64(), Some(own_starttime), "{row}");
    let record = std::fs::read_dir(state.join("trees"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .find(|text| text.contains(&format!("\"{}\"", row["id"].as_str().unwrap())))
        .unwrap();
    let first: Value = serde_json::from_str(record.lines().next().unwrap()).unwrap();
    assert_eq!(
        first["tree"]["owner"]["starttime"].as_u64(),
        Some(own_starttime),
        "{first}"
    );
    // CMD's real uid (through its pidfd where the kernel tells it, record.rs).
    let root = record
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| !l["root"].is_null())
        .unwrap();
    assert_eq!(
        root["root"]["uid"].as_u64(),
        Some(u64::from(rustix::process::getuid().as_raw())),
        "{root}"
    );
    signal_child(&plain, rustix::process::Signal::TERM);
    assert!(wait_child(&mut plain, Duration::from_secs(60)).is_some());
    assert_nothing_left();
}
