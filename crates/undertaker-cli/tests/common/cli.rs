//! Running the `undertaker` binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const UNDERTAKER: &str = env!("CARGO_BIN_EXE_undertaker");

/// A HOME for every undertaker the tests start, so none of them ever writes into the
/// real `~/.local/state/undertaker` of whoever runs the tests.
pub fn test_home() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("undertaker-test-home")
}

/// The state dir of tests that name none of their own (shared by them, never the
/// user's).
pub fn test_state_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("undertaker-test-state")
}

/// Points `cmd` at the test HOME and state dir, whatever the caller's environment says.
pub fn with_test_state(cmd: &mut Command) -> &mut Command {
    cmd.env("HOME", test_home())
        .env("UNDERTAKER_STATE_DIR", test_state_dir())
        .env_remove("XDG_STATE_HOME")
}

/// `undertaker` with stdin closed, no tree marker inherited from whoever runs the
/// tests, and the test HOME and state dir.
pub fn undertaker() -> Command {
    let mut c = Command::new(UNDERTAKER);
    c.stdin(Stdio::null()).env_remove("UNDERTAKER_TREE");
    with_test_state(&mut c);
    c
}

/// `undertaker` run as uid/gid 65534 through setpriv (needs root). Its HOME is the
/// test HOME, which it cannot write: it guards without recording (the shared test
/// state dir belongs to root and an explicit one would be refused).
pub fn undertaker_as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(UNDERTAKER)
        .stdin(Stdio::null())
        .env_remove("UNDERTAKER_TREE")
        .env("HOME", test_home())
        .env_remove("UNDERTAKER_STATE_DIR")
        .env_remove("XDG_STATE_HOME");
    c
}

/// `undertaker --state-dir DIR ARGS…`, captured.
pub fn ut(state: &Path, args: &[&str]) -> Output {
    undertaker()
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("UNDERTAKER_STATE_DIR")
        .output()
        .expect("run undertaker")
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad json ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Starts `undertaker run --state-dir DIR --label L -- sh -c SCRIPT` in the background.
pub fn spawn_guarded(state: &Path, label: &str, script: &str, env: &[(&str, &str)]) -> Child {
    undertaker()
        .arg("run")
        .arg("--state-dir")
        .arg(state)
        .args(["--tier", "subreaper", "--label", label, "--grace", "1s"])
        .args(["--", "sh", "-c", script])
        .envs(env.iter().copied())
        .spawn()
        .expect("spawn undertaker run")
}

/// `spawn_guarded`, then waits until CMD has created `ready` (the script's job) and the
/// tree is recorded; returns the sentinel and the tree id.
pub fn spawn_guarded_ready(
    state: &Path,
    label: &str,
    script: &str,
    ready: &Path,
    env: &[(&str, &str)],
) -> (Child, String) {
    let child = spawn_guarded(state, label, script, env);
    assert!(
        super::procs::wait_for_file(ready, Duration::from_secs(60)),
        "{label}: CMD never created {}",
        ready.display()
    );
    let tree = find_tree(state, label, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{label}: the tree was never recorded"));
    (child, tree["id"].as_str().unwrap().to_owned())
}

/// Polls `ps --json --all` until a tree labelled `label` appears.
pub fn find_tree(state: &Path, label: &str, limit: Duration) -> Option<serde_json::Value> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        let out = ut(state, &["ps", "--json", "--all"]);
        if out.status.success() {
            if let Some(t) = json(&out)
                .as_array()
                .and_then(|a| a.iter().find(|t| t["label"] == label).cloned())
            {
                return Some(t);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Waits for `cmd` with a bound; a run that hangs is killed and reported as `None`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn undertaker");
    // Drain both pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let status = match super::procs::wait_child(&mut child, limit) {
        Some(s) => s,
        None => {
            super::procs::kill9(&mut child);
            return None;
        }
    };
    Some(Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    })
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `undertaker --state-dir DIR ARGS…` with a bound on how long it may take.
pub fn ut_within(state: &Path, args: &[&str], limit: Duration) -> Option<Output> {
    output_within(
        undertaker()
            .arg("--state-dir")
            .arg(state)
            .args(args)
            .env_remove("UNDERTAKER_STATE_DIR"),
        limit,
    )
}

pub fn assert_nothing_left() {
    let left = super::procs::survivors_after(Duration::from_secs(60));
    assert!(left.is_empty(), "survivors: {left:#?}");
}
