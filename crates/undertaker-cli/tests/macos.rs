//! The macOS backend on a real Mac (docs/PORTING.md, "The macOS backend"): type-checked
//! on Linux by scripts/cross/check.sh, run by the ci workflow's macOS job, never run
//! yet. `doctor` probes libproc, `KERN_PROCARGS2`, kqueue and the boot session on the
//! test process itself; `run` guards a tree on the portable tier until CMD exits, the
//! owner dies or a SIGTERM comes; its sentinel covers the guardian's `kill -9`, and
//! `sweep` a `kill -9` of both;
//! `kill` ends a live tree; `log` reads a state directory; `supervise` spawns a tree
//! and tears it down at the end of its input.
#![cfg(target_os = "macos")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch state directory of this test's own, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("undertaker-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn undertaker(state: &Scratch, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_undertaker"))
        .arg("--state-dir")
        .arg(&state.0)
        .args(args)
        .output()
        .expect("undertaker starts")
}

#[test]
fn doctor_probes_answer_on_this_mac() {
    let state = Scratch::new("doctor");
    let out = undertaker(&state, &["doctor", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["kernel"].as_str().is_some_and(|k| k.starts_with("macos")));
    for probe in [
        "proc_pidinfo_uniqid",
        "kern_procargs2",
        "kqueue_evfilt_proc",
        "boot_session_uuid",
    ] {
        assert_eq!(
            v["checks"][probe]["ok"], true,
            "{probe}: {}",
            v["checks"][probe]
        );
    }
    // Which binding is in use is reported, not required (macOS 14.4+ has the token).
    let binding = &v["checks"]["kernel_checked_signal"];
    assert!(binding["ok"].is_boolean() && binding["detail"].is_string());
    println!("kernel_checked_signal: {binding}");
}

/// `undertaker run` in the background, its stdio not the test's.
fn run_in_background(state: &Scratch, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_undertaker"))
        .arg("--state-dir")
        .arg(&state.0)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("undertaker starts")
}

/// The pid a tree's script wrote to `file`, once it is there.
fn pid_in(file: &Path) -> i32 {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < until, "{} never written", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` is still the `sleep ARG` the test started (`ps` reads its command
/// line: a reused number shows another one).
fn sleeping(pid: i32, arg: &str) -> bool {
    let out = Command::new("ps")
        .args(["-o", "command=", "-p", &pid.to_string()])
        .output()
        .expect("ps");
    String::from_utf8_lossy(&out.stdout).contains(&format!("sleep {arg}"))
}

/// Waits up to 30 s (generous: timing never decides) for `done`.
fn within_30s(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The script of a tree with a grandchild (`sleep ARG`) whose pid goes to `file`.
fn tree_script(file: &Path, arg: &str) -> String {
    format!(
        "sleep {arg} & echo $! > '{}'; exec sleep 4399",
        file.display()
    )
}

/// `run FLAGS --grace 300ms -- sh -c` a tree whose grandchild `sleep TAG` lives on, in
/// the background: the scratch state dir, the `undertaker run` process and the
/// grandchild's pid.
fn tree_in_background(name: &str, flags: &[&str], tag: &str) -> (Scratch, Child, i32) {
    let state = Scratch::new(name);
    std::fs::create_dir_all(&state.0).unwrap();
    let file = state.0.join("grandchild");
    let script = tree_script(&file, tag);
    let mut args = flags.to_vec();
    args.extend(["--grace", "300ms", "--", "/bin/sh", "-c", &script]);
    let guardian = run_in_background(&state, &args);
    let grandchild = pid_in(&file);
    (state, guardian, grandchild)
}

#[test]
fn run_exits_with_cmds_status_and_leaves_no_member() {
    let state = Scratch::new("run");
    let file = state.0.join("grandchild");
    std::fs::create_dir_all(&state.0).unwrap();
    let script = format!("sleep 4301 & echo $! > '{}'; exit 7", file.display());
    let out = undertaker(
        &state,
        &["run", "--grace", "300ms", "--", "/bin/sh", "-c", &script],
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let grandchild = pid_in(&file);
    assert!(
        within_30s(|| !sleeping(grandchild, "4301")),
        "the grandchild survived"
    );
    let ps = undertaker(&state, &["ps", "--all", "--json"]);
    assert!(ps.status.success(), "{ps:?}");
    assert!(String::from_utf8_lossy(&ps.stdout).contains("portable"));
}

#[test]
fn owner_kill9_tears_the_tree_down() {
    let mut owner = Command::new("sleep").arg("4310").spawn().expect("owner");
    let owner_pid = owner.id().to_string();
    let (_state, mut guardian, grandchild) =
        tree_in_background("owner", &["--owner", &owner_pid], "4311");
    owner.kill().expect("the owner's kill -9");
    let _ = owner.wait();
    assert!(
        within_30s(|| guardian.try_wait().unwrap().is_some()),
        "the guardian never finished"
    );
    assert!(!sleeping(grandchild, "4311"), "the grandchild survived");
}

#[test]
fn sigterm_to_the_guardian_tears_down_and_exits_143() {
    let (_state, mut guardian, grandchild) = tree_in_background("sigterm", &[], "4321");
    // The test's own child.
    let sent = Command::new("kill")
        .args(["-TERM", &guardian.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    assert!(
        within_30s(|| guardian.try_wait().unwrap().is_some()),
        "the guardian never finished"
    );
    assert_eq!(guardian.wait().unwrap().code(), Some(143));
    assert!(!sleeping(grandchild, "4321"), "the grandchild survived");
}

/// The guardian's sentinel: the pid of its child that re-runs undertaker (its
/// command line ends with the placeholder command).
fn sentinel_of(guardian: u32) -> i32 {
    let mut found = None;
    assert!(within_30s(|| {
        let out = Command::new("ps")
            .args(["-A", "-o", "pid=,ppid=,command="])
            .output()
            .expect("ps");
        found = String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let pid: i32 = f.next()?.parse().ok()?;
            let ppid: u32 = f.next()?.parse().ok()?;
            (ppid == guardian && l.trim_end().ends_with("-- /usr/bin/true")).then_some(pid)
        });
        found.is_some()
    }));
    found.unwrap()
}

/// The guardian's `kill -9`: its sentinel tears the tree down, with no sweep.
#[test]
fn guardian_kill9_is_covered_by_its_sentinel_without_sweep() {
    let (_state, mut guardian, grandchild) = tree_in_background("sentinel", &[], "4331");
    let _ = sentinel_of(guardian.id());
    // Long enough for a look to record the grandchild.
    std::thread::sleep(Duration::from_millis(500));
    guardian.kill().expect("the guardian's kill -9");
    let _ = guardian.wait();
    assert!(
        within_30s(|| !sleeping(grandchild, "4331")),
        "the sentinel left the grandchild"
    );
}

/// Both undertaker processes `kill -9`ed: the tree lives until one `sweep`, which
/// ends it from the member record.
#[test]
fn sentinel_and_guardian_kill9_leave_the_tree_for_one_sweep() {
    let (state, mut guardian, grandchild) = tree_in_background("sweep", &[], "4351");
    let sentinel = sentinel_of(guardian.id());
    std::thread::sleep(Duration::from_millis(500));
    // The sentinel is the guardian's child, which the test started.
    let sent = Command::new("kill")
        .args(["-KILL", &sentinel.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    guardian.kill().expect("the guardian's kill -9");
    let _ = guardian.wait();
    assert!(
        sleeping(grandchild, "4351"),
        "the asserted residual: it lives until a sweep"
    );
    let out = undertaker(&state, &["sweep", "--grace", "300ms"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        within_30s(|| !sleeping(grandchild, "4351")),
        "the sweep left the grandchild"
    );
}

#[test]
fn kill_of_a_live_tree_by_label_ends_it() {
    let (state, mut guardian, grandchild) =
        tree_in_background("kill", &["--label", "mac-kill"], "4341");
    let out = undertaker(&state, &["kill", "mac-kill"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        within_30s(|| guardian.try_wait().unwrap().is_some()),
        "the guardian never finished"
    );
    assert!(!sleeping(grandchild, "4341"), "the grandchild survived");
}

/// `supervise` over its standard input: `hello` says the portable tier, `spawn`
/// starts a tree whose grandchild is tracked, `list` shows it; the input's end tears
/// it down and the supervisor exits 0.
#[test]
fn supervise_spawns_a_tree_and_tears_it_down_at_the_end_of_input() {
    use std::io::{BufRead, BufReader, Write};
    let state = Scratch::new("supervise");
    std::fs::create_dir_all(&state.0).unwrap();
    let file = state.0.join("grandchild");
    let mut sup = Command::new(env!("CARGO_BIN_EXE_undertaker"))
        .arg("--state-dir")
        .arg(&state.0)
        .args(["supervise", "--grace", "300ms"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("undertaker starts");
    let mut input = sup.stdin.take().unwrap();
    let mut replies = BufReader::new(sup.stdout.take().unwrap()).lines();
    let mut ask = |line: String| -> serde_json::Value {
        input.write_all(format!("{line}\n").as_bytes()).unwrap();
        serde_json::from_str(&replies.next().unwrap().unwrap()).unwrap()
    };
    let hello = ask(r#"{"op":"hello"}"#.into());
    assert_eq!(hello["tier"], "portable", "{hello}");
    let argv = serde_json::json!(["/bin/sh", "-c", tree_script(&file, "4351")]);
    let spawned = ask(format!(r#"{{"op":"spawn","argv":{argv}}}"#));
    assert_eq!(spawned["ok"], true, "{spawned}");
    let grandchild = pid_in(&file);
    let listed = ask(r#"{"op":"list"}"#.into());
    assert_eq!(listed["trees"][0]["tree"], spawned["tree"], "{listed}");
    drop(input);
    assert!(
        within_30s(|| sup.try_wait().unwrap().is_some()),
        "the supervisor never finished"
    );
    assert_eq!(sup.wait().unwrap().code(), Some(0));
    assert!(!sleeping(grandchild, "4351"), "the grandchild survived");
}

#[test]
fn log_reads_an_empty_state_directory() {
    let state = Scratch::new("log");
    let out = undertaker(&state, &["log"]);
    assert!(out.status.success(), "{out:?}");
}
