//! Running the `undertaker` binary.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const UNDERTAKER: &str = env!("CARGO_BIN_EXE_undertaker");

/// `undertaker` with stdin closed and no tree marker inherited from whoever runs the
/// tests.
pub fn undertaker() -> Command {
    let mut c = Command::new(UNDERTAKER);
    c.stdin(Stdio::null()).env_remove("UNDERTAKER_TREE");
    c
}

/// `undertaker` run as uid/gid 65534 through setpriv (needs root).
pub fn undertaker_as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(UNDERTAKER)
        .stdin(Stdio::null())
        .env_remove("UNDERTAKER_TREE");
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
