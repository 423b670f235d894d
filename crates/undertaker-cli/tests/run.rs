//! `undertaker run` end to end, with real processes and real `kill -9`.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use rustix::process::Signal;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn status_of(args: &[&str]) -> i32 {
    undertaker()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .code()
        .expect("undertaker exited by signal")
}

/// A path that certainly names no file (some machines do have a /nonexistent).
fn missing_program() -> String {
    std::env::temp_dir()
        .join(format!("undertaker-missing-{}", std::process::id()))
        .join("cmd")
        .display()
        .to_string()
}

/// A pipe whose read end survives exec, for `--owner-fd`.
fn owner_pipe() -> (OwnedFd, OwnedFd) {
    let (read_end, write_end) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    rustix::io::fcntl_setfd(&read_end, rustix::io::FdFlags::empty()).unwrap();
    (read_end, write_end)
}

/// Writes the perl zoo into a fresh scratch dir; returns the dir, the script and the
/// file its members record their pids in.
fn zoo_files(tag: &str) -> (Scratch, PathBuf, PathBuf) {
    let scratch = Scratch::new(tag);
    let zoo = scratch.file("zoo.pl", ZOO);
    let pids = scratch.path().join("pids");
    (scratch, zoo, pids)
}

/// Waits until every zoo member has recorded its pid.
fn wait_for_zoo(pids: &std::path::Path) {
    assert!(
        wait_until(Duration::from_secs(60), || zoo_pids(pids).len() == ZOO_SIZE),
        "zoo did not start: {:?}",
        zoo_pids(pids)
    );
}

#[test]
fn every_exit_code_passes_through() {
    // One guardian per code would take a while; a shell loop inside one test keeps
    // it to 256 short runs.
    for code in 0..=255 {
        let got = status_of(&["run", "--", "sh", "-c", &format!("exit {code}")]);
        assert_eq!(got, code, "exit {code}");
    }
}

#[test]
fn death_by_signal_is_128_plus_n() {
    for (name, n) in [("KILL", 9), ("USR1", 10), ("SEGV", 11), ("TERM", 15)] {
        let got = status_of(&["run", "--", "sh", "-c", &format!("kill -{name} $$")]);
        assert_eq!(got, 128 + n, "SIG{name}");
    }
}

#[test]
fn not_found_not_executable_and_usage() {
    assert_eq!(status_of(&["run", "--", &missing_program()]), 127);
    let scratch = Scratch::new("noexec");
    let plain = scratch.file("plain.txt", "not a program\n");
    assert_eq!(status_of(&["run", "--", plain.to_str().unwrap()]), 126);
    assert_eq!(status_of(&["run"]), 2);
    assert_eq!(status_of(&["run", "--grace", "soon", "--", "true"]), 2);
    assert_eq!(status_of(&["run", "--owner", "-3", "--", "true"]), 2);
    assert_eq!(
        status_of(&["run", "--owner", "1", "--owner-fd", "0", "--", "true"]),
        2
    );
    assert_eq!(status_of(&["no-such-subcommand"]), 2);
    // Bad input never half-acts: a closed fd is a usage error, not a guard of nothing.
    assert_eq!(status_of(&["run", "--owner-fd", "987", "--", "true"]), 2);
}

#[test]
fn errors_are_one_line() {
    let out = undertaker()
        .args(["run", "--", &missing_program()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("command not found"), "{err}");
}

#[test]
fn dead_owner_means_cmd_never_runs() {
    // Alone in a process of its own: a child another test's thread forks in between
    // holds a copy of the closed pipe's write end until it execs, and the owner would
    // look alive for that moment.
    if !isolate("dead_owner_means_cmd_never_runs") {
        return;
    }
    let scratch = Scratch::new("owner");
    let marker = scratch.path().join("ran");
    let touch = format!("touch {}", marker.display());

    let run_touch = |owner: &[&str]| {
        undertaker()
            .arg("run")
            .args(owner)
            .args(["--", "sh", "-c", &touch])
            .status()
            .unwrap()
            .code()
    };

    // --owner-fd: a pipe whose write end is already closed.
    let (read_end, write_end) = owner_pipe();
    drop(write_end);
    let fd = read_end.as_raw_fd().to_string();
    assert_eq!(run_touch(&["--owner-fd", &fd]), Some(125));

    // --owner PID: a process that has exited and been reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id().to_string();
    gone.wait().unwrap();
    assert_eq!(run_touch(&["--owner", &gone_pid]), Some(125));
    assert!(!marker.exists(), "CMD ran although its owner was gone");
}

#[test]
fn owner_fd_eof_tears_down() {
    let scratch = Scratch::new("ownerfd");
    let pids = scratch.path().join("pids");
    let (read_end, write_end) = owner_pipe();
    let fd = read_end.as_raw_fd().to_string();
    let mut guardian = undertaker()
        // A grace a loaded machine cannot outlast before CMD acts on its SIGTERM (the
        // status says which signal ended it); nothing here ignores SIGTERM.
        .args(["run", "--grace", "10s", "--owner-fd", &fd, "--"])
        .args([
            "sh",
            "-c",
            &format!(
                "sleep 1000 & echo $! >> {0}; echo $$ >> {0}; wait",
                pids.display()
            ),
        ])
        .spawn()
        .unwrap();
    drop(read_end);
    assert!(wait_until(Duration::from_secs(60), || read_lines(&pids)
        .len()
        == 2));
    let tree: Vec<i32> = read_lines(&pids)
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    // Data on the pipe is not EOF: the guardian must keep going.
    rustix::io::write(&write_end, b"still here\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(guardian.try_wait().unwrap().is_none());
    drop(write_end);
    let status = guardian.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "CMD should die of SIGTERM");
    for pid in tree {
        assert!(!alive(pid), "pid {pid} survived owner EOF");
    }
}

#[test]
fn stdio_is_byte_exact_for_100_mib() {
    const TOTAL: usize = 100 << 20;
    let mut child = undertaker()
        .args(["run", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut buf = vec![0u8; 1 << 16];
        let mut sent = 0;
        while sent < TOTAL {
            for b in buf.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            stdin.write_all(&buf).unwrap();
            sent += buf.len();
        }
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; 1 << 16];
    let mut received = 0usize;
    loop {
        let n = stdout.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            assert_eq!(b, state as u8, "byte {received} differs");
            received += 1;
        }
    }
    writer.join().unwrap();
    assert_eq!(received, TOTAL);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn marker_is_set_and_cmd_leads_its_own_group() {
    let out = undertaker()
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "echo $UNDERTAKER_TREE; cut -d' ' -f5 /proc/$$/stat; echo $$",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0].len(), 32, "tree id: {text}");
    assert!(lines[0].bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(lines[1], lines[2], "CMD must lead its own process group");
}

#[test]
fn signals_are_forwarded_to_cmd() {
    let scratch = Scratch::new("fwd");
    let log = scratch.path().join("signals");
    let script = scratch.file(
        "recorder.pl",
        r#"
my $out = shift;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
for my $s (qw(INT HUP QUIT USR1 USR2 WINCH)) { $SIG{$s} = sub { note($s); }; }
$SIG{TERM} = sub { note('TERM'); exit 0; };
note('ready');
sleep 1000 while 1;
"#,
    );
    let mut guardian = undertaker()
        .args(["run", "--grace", "5s", "--", "perl"])
        .arg(&script)
        .arg(&log)
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(60), || read_lines(&log)
        .contains(&"ready".into())));
    let sent = [
        (Signal::INT, "INT"),
        (Signal::HUP, "HUP"),
        (Signal::QUIT, "QUIT"),
        (Signal::USR1, "USR1"),
        (Signal::USR2, "USR2"),
        (Signal::WINCH, "WINCH"),
    ];
    for (sig, name) in sent {
        signal_child(&guardian, sig);
        assert!(
            wait_until(Duration::from_secs(60), || read_lines(&log)
                .contains(&name.into())),
            "SIG{name} not forwarded"
        );
    }
    assert!(
        guardian.try_wait().unwrap().is_none(),
        "guardian exited early"
    );
    signal_child(&guardian, Signal::TERM);
    let status = guardian.wait().unwrap();
    // Exactly one SIGTERM: a second one reads as "quit now" to many programs.
    let terms = read_lines(&log).iter().filter(|l| *l == "TERM").count();
    assert_eq!(terms, 1, "CMD got {terms} SIGTERMs");
    assert_eq!(status.code(), Some(0), "CMD exited 0 from its TERM handler");
}

/// Starts the zoo under a guardian owned by a throwaway host shell, then kills the
/// host with SIGKILL and checks nothing of the tree is left.
#[test]
fn owner_kill_9_leaves_no_survivor() {
    if !isolate("owner_kill_9_leaves_no_survivor") {
        return;
    }
    let (_scratch, zoo, pids) = zoo_files("zoo");
    let mut host = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} run --grace 300ms -- perl {} {} & wait",
            UNDERTAKER,
            zoo.display(),
            pids.display()
        ))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_zoo(&pids);
    let before = live_processes_except_self();
    assert!(before.len() >= ZOO_SIZE + 3, "{before:?}");
    kill9(&mut host);
    // Nothing else would ever end the tree: any bound that waits out a loaded
    // machine tells a teardown from none.
    let left = survivors_after(Duration::from_secs(60));
    assert!(
        left.is_empty(),
        "survivors 30 s after the owner's kill -9: {left:?}"
    );
}

#[test]
fn cmd_exit_tears_down_the_rest_before_returning() {
    if !isolate("cmd_exit_tears_down_the_rest_before_returning") {
        return;
    }
    let (_scratch, zoo, pids) = zoo_files("mainexit");
    let script = format!(
        "perl {} {} & while [ $(wc -l < {} 2>/dev/null || echo 0) -lt {} ]; do sleep 0.05; done; exit 3",
        zoo.display(),
        pids.display(),
        pids.display(),
        ZOO_SIZE
    );
    let status = undertaker()
        .args(["run", "--grace", "200ms", "--", "sh", "-c", &script])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    reap_zombies();
    // The guardian waits for the whole tree before exiting: nothing may be left now.
    let left = live_processes_except_self();
    assert!(left.is_empty(), "left after undertaker returned: {left:?}");
    assert_eq!(zoo_pids(&pids).len(), ZOO_SIZE);
}

#[test]
fn sigterm_to_undertaker_tears_down_within_grace() {
    if !isolate("sigterm_to_undertaker_tears_down_within_grace") {
        return;
    }
    let (_scratch, zoo, pids) = zoo_files("term");
    let mut guardian = undertaker()
        // Long enough that a loaded machine always lets CMD die of the SIGTERM (the
        // status below says which signal ended it); the zoo's SIGTERM ignorer makes
        // the teardown take all of it.
        .args(["run", "--grace", "3s", "--", "perl"])
        .arg(&zoo)
        .arg(&pids)
        .spawn()
        .unwrap();
    wait_for_zoo(&pids);
    let start = Instant::now();
    signal_child(&guardian, Signal::TERM);
    let status = guardian.wait().unwrap();
    let took = start.elapsed();
    // The zoo's root perl has no TERM handler, so CMD dies of SIGTERM.
    assert_eq!(status.code(), Some(128 + 15));
    reap_zombies();
    assert!(live_processes_except_self().is_empty());
    // The zoo has a SIGTERM ignorer and a member that forks on SIGTERM: a teardown
    // that does not end the grace with SIGKILL never returns. The bound tells that
    // apart from grace plus scheduling on a loaded machine, never a speed verdict.
    assert!(took < Duration::from_secs(30), "teardown took {took:?}");
}

/// After a tree member exits, a stranger takes its pid (and leads a group with that
/// number). Tearing the tree down must not signal the stranger.
#[test]
fn decoy_with_recycled_pid_is_never_signalled() {
    if !isolate("decoy_with_recycled_pid_is_never_signalled") {
        return;
    }
    let scratch = Scratch::new("decoy");
    let pids = scratch.path().join("pids");
    // CMD starts a short-lived member and records its pid, then idles.
    let script = format!(
        "sh -c 'echo $$ > {0}.short; exec setsid true'; sleep 1000 & echo $! > {0}; wait",
        pids.display()
    );
    let mut guardian = undertaker()
        .args(["run", "--grace", "300ms", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let short = scratch.path().join("pids.short");
    assert!(wait_until(Duration::from_secs(60), || pids.exists() && short.exists()));
    let recycled: i32 = read_lines(&short)[0].parse().unwrap();
    assert!(wait_until(Duration::from_secs(60), || !alive(recycled)));
    // Give the decoy the exited member's pid.
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
    signal_child(&guardian, Signal::TERM);
    guardian.wait().unwrap();
    assert_decoy_untouched(&decoy, &decoy_log);
    kill9(&mut decoy);
}
