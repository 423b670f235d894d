//! The Rust API for hosts: `undertaker::Supervisor` starts `undertaker supervise` with
//! this process as owner; `spawn` returns a guarded child with its pipes. Destructive
//! bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use undertaker::Supervisor;

const ROLE: &str = "UNDERTAKER_TEST_API_ROLE";

fn supervisor(state: &std::path::Path) -> Supervisor {
    Supervisor::builder()
        .program(UNDERTAKER)
        .state_dir(state)
        .grace(Duration::from_millis(500))
        .start()
        .expect("start the supervisor")
}

#[test]
fn spawn_gives_pipes_wait_gives_the_status_and_kill_takes_the_tree() {
    if !isolate("spawn_gives_pipes_wait_gives_the_status_and_kill_takes_the_tree") {
        return;
    }
    let scratch = Scratch::new("api-pipes");
    let sup = supervisor(&scratch.path().join("state"));
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "read x; echo \"got $x\"; echo \"$GREETING\" >&2; exit 7",
    ])
    .env("GREETING", "hi");
    let mut child = sup.spawn(&cmd).unwrap();
    assert!(child.pid() > 0 && child.tree().len() == 32);
    child.stdin.as_mut().unwrap().write_all(b"ping\n").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "got ping\n");
    let mut err = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut err)
        .unwrap();
    assert_eq!(err, "hi\n");
    assert_eq!(child.wait().unwrap(), 7);

    let mut tree = sup
        .spawn(Command::new("sh").args(["-c", "sleep 1000 & sleep 1000"]))
        .unwrap();
    let id = tree.tree().to_owned();
    assert!(wait_until(Duration::from_secs(60), || survivors(&id).len() >= 2));
    tree.kill().unwrap();
    assert!(survivors(&id).is_empty());
    drop(sup);
    assert_nothing_left();
}

/// The host side of the next test: a process using the API, killed with -9.
#[test]
fn api_host_role() {
    let Some(dir) = std::env::var_os(ROLE) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let sup = supervisor(&dir.join("state"));
    let mut trees = Vec::new();
    for _ in 0..3 {
        let c = sup
            .spawn(Command::new("sh").args(["-c", "sleep 1000 & sleep 1000"]))
            .unwrap();
        trees.push(c.tree().to_owned());
    }
    std::fs::write(dir.join("trees.tmp"), trees.join(" ")).unwrap();
    std::fs::rename(dir.join("trees.tmp"), dir.join("trees")).unwrap();
    std::thread::sleep(Duration::from_secs(1000));
}

#[test]
fn host_kill9_takes_every_spawned_tree() {
    if !isolate("host_kill9_takes_every_spawned_tree") {
        return;
    }
    let scratch = Scratch::new("api-host");
    let mut host = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "api_host_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, scratch.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let trees = scratch.path().join("trees");
    assert!(wait_for_file(&trees, Duration::from_secs(60)));
    let ids: Vec<String> = std::fs::read_to_string(&trees)
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(wait_until(Duration::from_secs(60), || ids
        .iter()
        .all(|t| survivors(t).len() >= 2)));
    kill9(&mut host);
    assert_nothing_left();
}

#[test]
fn adopt_takes_a_passed_pidfd_as_proof() {
    if !isolate("adopt_takes_a_passed_pidfd_as_proof") {
        return;
    }
    use rustix::fd::AsFd;
    let scratch = Scratch::new("api-pidfd");
    let sup = supervisor(&scratch.path().join("state"));
    let mut child = Command::new("sleep").arg("1000").spawn().unwrap();
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    // Our unreaped child: the pidfd names it.
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
    let err = sup
        .request(
            serde_json::json!({"op": "adopt", "pid": 1234567}),
            &[pidfd.as_fd()],
        )
        .unwrap_err();
    assert!(err.to_string().starts_with("bad_request"), "{err}");
    let (pipe_r, _pipe_w) = rustix::pipe::pipe().unwrap();
    let err = sup
        .request(serde_json::json!({"op": "adopt"}), &[pipe_r.as_fd()])
        .unwrap_err();
    assert!(err.to_string().starts_with("bad_fds"), "{err}");
    let reply = sup
        .request(serde_json::json!({"op": "adopt"}), &[pidfd.as_fd()])
        .unwrap();
    assert_eq!(reply["pid"], child.id(), "{reply}");
    assert_eq!(reply["members"], 1, "{reply}");
    // End of input: the adopted process is torn down with the rest.
    drop(sup);
    let status = wait_child(&mut child, Duration::from_secs(60)).expect("adopted child killed");
    assert!(!status.success());
    assert_nothing_left();
}
