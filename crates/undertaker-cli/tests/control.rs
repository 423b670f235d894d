//! A supervisor's boundaries (docs/SUPERVISE.md, "Killing one tree"; issue 26):
//! `undertaker kill <tree>` never signals a supervisor, wherever it runs and whatever
//! became of its control socket; nothing outside the host's channel stalls it (silent
//! control connections, a terminal nobody reads). Destructive bodies run inside a
//! private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Spawns `sleep 1000 & exec sleep 1000` as a tree: (tree id, root pid).
fn spawn(sup: &mut Supervisor) -> (String, i32) {
    let r = sup.request(r#"{"op":"spawn","argv":["sh","-c","sleep 1000 & exec sleep 1000"]}"#);
    assert_eq!(r["ok"], true, "{r}");
    (
        r["tree"].as_str().unwrap().to_owned(),
        r["pid"].as_i64().unwrap() as i32,
    )
}

/// The trees `list` names.
fn listed(sup: &mut Supervisor) -> Vec<String> {
    let r = sup.request(r#"{"op":"list"}"#);
    (r["trees"].as_array().unwrap().iter())
        .map(|t| t["tree"].as_str().unwrap().to_owned())
        .collect()
}

/// The supervisor's control socket file in `state` (waits for it).
fn control_socket(state: &Path) -> PathBuf {
    let dir = state.join("control");
    let mut found = None;
    let there = wait_until(Duration::from_secs(30), || {
        found = std::fs::read_dir(&dir).ok().and_then(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "sock"))
        });
        found.is_some()
    });
    assert!(there, "no control socket in {}", dir.display());
    found.unwrap()
}

/// Connects to the socket at `path` through its directory's descriptor (the scratch
/// path may be longer than a socket address can be).
fn connect(path: &Path) -> std::io::Result<UnixStream> {
    let dir = std::fs::File::open(path.parent().unwrap())?;
    UnixStream::connect(format!(
        "/proc/self/fd/{}/{}",
        dir.as_raw_fd(),
        path.file_name().unwrap().to_str().unwrap()
    ))
}

/// The supervisor is in another network namespace (a systemd unit with
/// `PrivateNetwork=yes`, `bwrap --unshare-net`): `kill` of one of its trees still asks
/// it, and it alone ends that tree; the supervisor and its other trees live on.
#[test]
fn kill_across_network_namespaces_ends_only_that_tree() {
    if !isolate("kill_across_network_namespaces_ends_only_that_tree") {
        return;
    }
    let netns = Command::new("unshare")
        .args(["--net", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !netns {
        skip("no private network namespace here (unshare --net)");
        return;
    }
    let scratch = Scratch::new("ctl-netns");
    let state = scratch.path().join("state");
    let mut base = Command::new("unshare");
    base.args(["--net", "--", UNDERTAKER])
        .env_remove("UNDERTAKER_TREE");
    with_test_state(&mut base);
    let mut sup = Supervisor::start_with(base, &state, "auto", &[]);
    let (a, a_pid) = spawn(&mut sup);
    let (b, b_pid) = spawn(&mut sup);
    let out = ut(&state, &["kill", &a, "--json"]);
    let report = json(&out);
    assert!(alive(sup.pid()), "the supervisor was signalled: {report}");
    assert!(alive(b_pid), "another tree of the supervisor was killed");
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["action"], "guardian_terminated", "{report}");
    assert!(wait_until(Duration::from_secs(60), || !alive(a_pid)));
    assert!(survivors(&a).is_empty());
    assert_eq!(listed(&mut sup), [b]);
    assert_eq!(sup.close(), 0);
    assert_nothing_left();
}

/// `kill` of a tree whose supervisor cannot be asked (its control socket removed, or
/// its name held by another process, or never made) signals nothing: exit status 3,
/// `supervisor_unreachable`, and the supervisor and all its trees live on. `ps` says
/// so, and a supervisor that could not listen says it in each tree's log.
#[test]
fn kill_signals_nothing_when_the_supervisor_cannot_be_asked() {
    if !isolate("kill_signals_nothing_when_the_supervisor_cannot_be_asked") {
        return;
    }
    let scratch = Scratch::new("ctl-unreachable");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let (a, a_pid) = spawn(&mut sup);
    let (b, b_pid) = spawn(&mut sup);
    let socket = control_socket(&state);
    let refused = |state: &Path, tree: &str, why: &str| {
        let out = ut(state, &["kill", tree, "--json"]);
        let report = json(&out);
        assert_eq!(out.status.code(), Some(3), "{why}: {report}");
        assert_eq!(
            report["action"], "supervisor_unreachable",
            "{why}: {report}"
        );
        assert!(report["left_alive"].as_u64() > Some(0), "{report}");
    };

    // Removed.
    std::fs::remove_file(&socket).unwrap();
    refused(&state, &a, "socket removed");
    let ps = json(&ut(&state, &["ps", "--json"]));
    for row in ps.as_array().unwrap() {
        assert_eq!(row["supervisor_reachable"], false, "{row}");
    }
    // Its name held by another process of ours.
    let dir = std::fs::File::open(socket.parent().unwrap()).unwrap();
    let stranger = std::os::unix::net::UnixListener::bind(format!(
        "/proc/self/fd/{}/{}",
        dir.as_raw_fd(),
        socket.file_name().unwrap().to_str().unwrap()
    ))
    .unwrap();
    refused(&state, &a, "socket held by another process");
    drop(stranger);
    std::fs::remove_file(&socket).unwrap();
    assert!(alive(sup.pid()), "the supervisor was signalled");
    assert!(alive(a_pid) && alive(b_pid), "a tree was killed");
    assert_eq!(listed(&mut sup), [a.clone(), b.clone()]);
    assert_eq!(sup.close(), 0);

    // Never made: `control` is taken by a file, so the supervisor cannot listen.
    let state = scratch.path().join("state2");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("control"), b"").unwrap();
    let mut sup = Supervisor::start(&state, "auto");
    let (c, c_pid) = spawn(&mut sup);
    refused(&state, &c, "no control socket");
    let ps = json(&ut(&state, &["ps", "--json"]));
    assert_eq!(ps[0]["supervisor_reachable"], false, "{ps}");
    let table = text(&ut(&state, &["ps"]).stdout);
    assert!(table.contains("cannot be asked"), "{table}");
    let log = json(&ut(&state, &["log", "--tree", &c, "--json"]));
    let noted = (log.as_array().unwrap().iter()).any(|e| {
        e["event"] == "note"
            && (e["message"].as_str()).is_some_and(|m| m.contains("cannot ask this supervisor"))
    });
    assert!(noted, "{log}");
    assert!(alive(sup.pid()) && alive(c_pid));
    assert_eq!(sup.close(), 0);
    assert_nothing_left();
}

/// Control connections that send nothing, or a byte at a time, never hold up the
/// host's channel, and a supervisor whose input ends with such connections open tears
/// its tree down at once.
#[test]
fn silent_control_connections_never_stall_the_channel() {
    if !isolate("silent_control_connections_never_stall_the_channel") {
        return;
    }
    let scratch = Scratch::new("ctl-silent");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let (tree, root) = spawn(&mut sup);
    let socket = control_socket(&state);
    let silent: Vec<UnixStream> = (0..12).map(|_| connect(&socket).unwrap()).collect();
    // A slow trickle: a new connection every 0.3 s, each sending one byte.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let (stop, socket) = (stop.clone(), socket.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                if let Ok(mut s) = connect(&socket) {
                    let _ = s.write_all(b"{");
                    held.push(s);
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        let asked = Instant::now();
        let r = sup.request(r#"{"op":"hello"}"#);
        assert_eq!(r["ok"], true, "{r}");
        // Read on the serve thread, 12 silent connections held it up 12 s.
        assert!(
            asked.elapsed() < Duration::from_secs(3),
            "hello took {:?}",
            asked.elapsed()
        );
    }
    // More silent ones, then the host goes: the tree must not wait for them.
    let more: Vec<UnixStream> = (0..12).filter_map(|_| connect(&socket).ok()).collect();
    let closed = Instant::now();
    drop(sup.input.take());
    let status = wait_child(&mut sup.child, Duration::from_secs(60));
    let took = closed.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
    drop((silent, more));
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(took < Duration::from_secs(5), "teardown took {took:?}");
    assert!(!alive(root));
    assert!(survivors(&tree).is_empty());
    assert!(!socket.exists(), "the control socket was left behind");
    assert_nothing_left();
}

/// A Python host that gives the supervisor a terminal nobody reads as its standard
/// output (a pty host that stopped reading, or ^S): `sh` (the supervisor's parent, its
/// owner) runs it; the host writes a spawn and thousands of requests, prints the
/// owner's pid, and never reads the terminal.
const UNREAD_TERMINAL_HOST: &str = r#"
import os, pty, subprocess, sys, threading, time
ut, state = sys.argv[1:3]
master, slave = pty.openpty()
r, w = os.pipe()
owner = subprocess.Popen(["sh", "-c", '"$0" --state-dir "$1" supervise --grace 500ms; exit 0', ut, state],
                         stdin=r, stdout=slave, stderr=subprocess.DEVNULL)
os.close(r)
os.close(slave)
lines = b'{"op":"spawn","argv":["sleep","1000"]}\n' + b'{"op":"hello"}\n' * 5000
threading.Thread(target=lambda: os.write(w, lines), daemon=True).start()
print(owner.pid, flush=True)
while True:
    time.sleep(1000)
"#;

/// The supervisor's standard output is a terminal nobody reads: it still watches its
/// owner, and tears its tree down when the owner is killed.
#[test]
fn a_supervisor_on_an_unread_terminal_still_sees_its_owner_die() {
    if !isolate("a_supervisor_on_an_unread_terminal_still_sees_its_owner_die") {
        return;
    }
    if !require_python() {
        return;
    }
    let scratch = Scratch::new("ctl-unread-tty");
    let state = scratch.path().join("state");
    let host_script = scratch.file("host.py", UNREAD_TERMINAL_HOST);
    let mut host = Command::new("python3")
        .arg(&host_script)
        .arg(UNDERTAKER)
        .arg(&state)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(host.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let owner: i32 = line.trim().parse().unwrap();
    let mut root = None;
    assert!(wait_until(Duration::from_secs(30), || {
        let ps = json(&ut(&state, &["ps", "--json"]));
        root = ps[0]["root_pid"].as_i64().map(|p| p as i32);
        root.is_some()
    }));
    let root = root.unwrap();
    // Time for thousands of replies to fill the terminal.
    std::thread::sleep(Duration::from_secs(2));
    assert!(alive(root));
    // The owner is the sh this test's child started.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(owner).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let gone = wait_until(Duration::from_secs(15), || !alive(root));
    kill9(&mut host);
    assert!(gone, "the tree outlived its owner by 15 s");
    assert_nothing_left();
}

/// Another uid cannot reach a supervisor's control socket (`control/` is ours, 0700,
/// and the socket 0600), so it can neither ask for a kill nor hold a connection open.
#[test]
fn another_uid_cannot_reach_the_control_socket() {
    if !is_root() {
        skip("needs root to try the control socket as another uid");
        return;
    }
    if !isolate("another_uid_cannot_reach_the_control_socket") {
        return;
    }
    let scratch = Scratch::new("ctl-other-uid");
    let state = scratch.path().join("state");
    let mut sup = Supervisor::start(&state, "auto");
    let (tree, root) = spawn(&mut sup);
    let socket = control_socket(&state);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    // Where a connect would start: the socket's directory (`sh` is everywhere; a
    // client program run as nobody may not be readable by nobody).
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(r#"cd "$1" && echo reached"#)
        .arg("sh")
        .arg(socket.parent().unwrap())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("ermission denied") || text(&out.stderr).contains("can't cd"),
        "{}",
        text(&out.stderr)
    );
    assert!(alive(root) && alive(sup.pid()));
    assert_eq!(listed(&mut sup), [tree]);
    assert_eq!(sup.close(), 0);
    assert_nothing_left();
}
