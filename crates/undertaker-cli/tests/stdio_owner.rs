//! The stdio peer is an owner too (docs/GUARANTEES.md, "The stdio peer"): a host that
//! holds undertaker's stdin and stdout and starts it through a launcher that outlives
//! it (`sh -c '"$0" "$@"; exit $?'`, `npx`, `uvx`) is `kill -9`ed; the tree goes with
//! it. And the shapes where the rule must not fire keep their behaviour.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const STDIO_HOST: &str = include_str!("hosts/stdio_host.py");
/// The launcher that does not exec: a shell running its command and then `exit`.
const SHELL_LAUNCHER: [&str; 3] = ["sh", "-c", "\"$0\" \"$@\"; exit $?"];

/// A host process holding the server's stdin and stdout (see hosts/stdio_host.py).
struct Host {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Host {
    fn start(scratch: &Scratch, mode: &str, argv: &[&str]) -> Self {
        let script = scratch.file("stdio_host.py", STDIO_HOST);
        let mut child = Command::new("python3")
            .arg(script)
            .arg(mode)
            .args(argv)
            .env("UNDERTAKER_STATE_DIR", scratch.path().join("state"))
            .env_remove("UNDERTAKER_TREE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the stdio host");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut host = Self {
            child,
            input,
            output,
        };
        host.line();
        host
    }

    fn line(&mut self) -> String {
        let mut text = String::new();
        let n = self.output.read_line(&mut text).unwrap();
        assert!(n > 0, "the host died");
        text.trim().to_owned()
    }

    fn command(&mut self, line: &str) -> String {
        writeln!(self.input, "{line}").unwrap();
        self.input.flush().unwrap();
        self.line()
    }
}

/// `undertaker run` behind the shell launcher, guarding a server that never reads its
/// stdin and leaves a `setsid` daemon; `up` appears once both run.
fn launched_server(scratch: &Scratch, extra: &[&str]) -> Vec<String> {
    let up = scratch.path().join("up");
    let mut argv: Vec<String> = SHELL_LAUNCHER.iter().map(|s| s.to_string()).collect();
    argv.extend([UNDERTAKER, "run", "--grace", "300ms"].map(String::from));
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv.extend(["--", "sh", "-c"].map(String::from));
    argv.push(format!(
        "setsid sleep 1000 & echo up > {}; exec sleep 1001",
        up.display()
    ));
    argv
}

fn start_launched(scratch: &Scratch, mode: &str, extra: &[&str]) -> Host {
    let argv = launched_server(scratch, extra);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let host = Host::start(scratch, mode, &argv);
    assert!(
        wait_for_file(&scratch.path().join("up"), Duration::from_secs(30)),
        "the server never started"
    );
    host
}

/// Nothing but this test is left in its namespace within a generous bound: no host,
/// no launcher, no tree.
fn assert_no_survivor(what: &str) {
    let left = survivors_after(Duration::from_secs(30));
    assert!(left.is_empty(), "{what}: survivors: {left:?}");
}

fn stdio_peer_note_logged(state: &Path) -> bool {
    let out = ut(state, &["log", "--json"]);
    let log = json(&out);
    log.as_array().unwrap().iter().any(|e| {
        e["event"] == "note"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("stdio peer gone"))
    })
}

fn host_kill_9_through_shell_launcher(test: &str, mode: &str) {
    if !isolate(test) || !require_python() {
        return;
    }
    let scratch = Scratch::new(test);
    let mut host = start_launched(&scratch, mode, &[]);
    // The launcher, the sentinel, the guardian, the server and its daemon.
    assert!(live_processes_except_self().len() >= 6);
    kill9(&mut host.child);
    assert_no_survivor("host kill -9 behind `sh -c`");
    assert!(
        stdio_peer_note_logged(&scratch.path().join("state")),
        "no 'stdio peer gone' note in the log"
    );
}

#[test]
fn host_kill_9_behind_a_shell_launcher_leaves_no_survivor() {
    host_kill_9_through_shell_launcher(
        "host_kill_9_behind_a_shell_launcher_leaves_no_survivor",
        "pipes",
    );
}

/// Node's child_process gives a child socketpairs, not pipes.
#[test]
fn host_kill_9_behind_a_shell_launcher_over_socketpairs_leaves_no_survivor() {
    host_kill_9_through_shell_launcher(
        "host_kill_9_behind_a_shell_launcher_over_socketpairs_leaves_no_survivor",
        "sockets",
    );
}

/// Both far ends must go: the reader gone alone, then the writer too.
#[test]
fn one_side_going_keeps_the_tree_both_end_it() {
    if !isolate("one_side_going_keeps_the_tree_both_end_it") || !require_python() {
        return;
    }
    for (first, second) in [
        ("close-stdout", "close-stdin"),
        ("close-stdin", "close-stdout"),
    ] {
        let scratch = Scratch::new("stdio-one-side");
        let mut host = start_launched(&scratch, "pipes", &[]);
        let before = live_processes_except_self().len();
        host.command(first);
        // Nothing is expected to happen: a wrong teardown would be over well within this.
        std::thread::sleep(Duration::from_secs(1));
        reap_zombies();
        assert_eq!(
            live_processes_except_self().len(),
            before,
            "torn down after {first} alone"
        );
        host.command(second);
        let alive_host = host.child.id() as i32;
        let done = wait_until(Duration::from_secs(30), || {
            reap_zombies();
            live_processes_except_self() == vec![alive_host]
        });
        assert!(
            done,
            "{first} then {second}: left {:?}",
            live_processes_except_self()
        );
        kill9(&mut host.child);
        assert_no_survivor("host gone after the tree");
    }
}

/// `--no-stdio-owner`: the launcher is the owner and lives, so the tree does too.
#[test]
fn no_stdio_owner_turns_the_rule_off() {
    if !isolate("no_stdio_owner_turns_the_rule_off") || !require_python() {
        return;
    }
    let scratch = Scratch::new("stdio-off");
    let mut host = start_launched(&scratch, "pipes", &["--no-stdio-owner"]);
    let before = live_processes_except_self().len();
    kill9(&mut host.child);
    std::thread::sleep(Duration::from_secs(1));
    reap_zombies();
    assert_eq!(
        live_processes_except_self().len(),
        before - 1,
        "the tree went with the host although the rule is off"
    );
    // Leaving the namespace kills the rest.
}

/// The rule reads no byte of CMD's input: a server that reads slowly, after its host
/// closed stdin behind the data, gets every byte (and its output reaches the host).
#[test]
fn a_slow_reader_gets_every_byte() {
    if !require_python() {
        return;
    }
    for mode in ["pipes", "sockets"] {
        let scratch = Scratch::new("stdio-slow");
        let mut host = Host::start(
            &scratch,
            mode,
            &[UNDERTAKER, "run", "--", "sh", "-c", "sleep 1; exec cat"],
        );
        let reply = host.command("feed 300000");
        assert_eq!(reply, "fed 300000 got 300000 same", "{mode}");
        assert_eq!(host.command("wait"), "exit 0", "{mode}");
        drop(host.input);
        wait_child(&mut host.child, Duration::from_secs(30));
    }
}

/// `producer | head` behaves as before: head exits after one line, the producer dies
/// of SIGPIPE at its next write (141), with stdin the null device or a pipe whose
/// writer lives (only one side gone: the rule does not fire).
#[test]
fn producer_into_head_ends_as_before() {
    let scratch = Scratch::new("stdio-head");
    let status = scratch.path().join("status");
    let script = format!(
        "{{ {UNDERTAKER} run -- sh -c yes; echo $? > {}; }} | head -1",
        status.display()
    );
    for stdin in ["null", "live pipe"] {
        let mut sh = Command::new("sh");
        sh.args(["-c", &script]).stdout(Stdio::piped());
        with_test_state(&mut sh);
        sh.stdin(if stdin == "null" {
            Stdio::null()
        } else {
            Stdio::piped()
        });
        let mut child = sh.spawn().unwrap();
        // Held until the pipeline ended: a writer left on its stdin.
        let _writer = child.stdin.take();
        let out = output_within_child(child, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("stdin {stdin}: `run -- yes | head -1` never ended"));
        assert_eq!(text(&out.stdout), "y\n", "stdin {stdin}");
        let code = std::fs::read_to_string(&status).unwrap();
        assert_eq!(code.trim(), "141", "stdin {stdin}");
    }
    // stdin a pipe whose writer is gone as well: both far ends are, once head exits;
    // yes dies of its SIGPIPE (141) or of the teardown's SIGTERM (143), whichever is
    // first, and the pipeline ends.
    let mut sh = Command::new("sh");
    sh.args(["-c", &format!(": | {script}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    with_test_state(&mut sh);
    let out = output_within_child(sh.spawn().unwrap(), Duration::from_secs(60))
        .expect("`: | run -- yes | head -1` never ended");
    assert_eq!(text(&out.stdout), "y\n");
    let code = std::fs::read_to_string(&status).unwrap();
    assert!(["141", "143"].contains(&code.trim()), "exit {code}");
}

fn output_within_child(child: Child, limit: Duration) -> Option<std::process::Output> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(limit).ok().map(|r| r.unwrap())
}

/// `printf x | undertaker run -- cat > file`: stdin's writer is gone at once and
/// stdout is a file, so the rule is not armed: cat copies its input and exits 0.
#[test]
fn printf_into_cat_into_a_file() {
    let scratch = Scratch::new("stdio-file");
    let file = scratch.path().join("out");
    let mut sh = Command::new("sh");
    sh.args([
        "-c",
        &format!("printf x | {UNDERTAKER} run -- cat > {}", file.display()),
    ])
    .stdin(Stdio::null());
    with_test_state(&mut sh);
    let status = sh.status().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

/// A terminal session: stdin and stdout a pty, the rule not armed, the command sees
/// its terminal and exits with its status.
#[test]
fn a_terminal_session_behaves_as_before() {
    if !require_python() {
        return;
    }
    let script = format!(
        "import os, pty, sys\n\
         pid, fd = pty.fork()\n\
         if pid == 0:\n    \
             os.execv({UNDERTAKER:?}, [{UNDERTAKER:?}, 'run', '--', 'sh', '-c', 'test -t 0 && test -t 1 && echo tty-ok; read line; echo got-$line; exit 7'])\n\
         os.write(fd, b'hello\\n')\n\
         out = b''\n\
         while True:\n    \
             try:\n        \
                 chunk = os.read(fd, 1024)\n    \
             except OSError:\n        \
                 break\n    \
             if not chunk:\n        \
                 break\n    \
             out += chunk\n\
         _, status = os.waitpid(pid, 0)\n\
         sys.stdout.write(out.decode(errors='replace'))\n\
         print('exit', os.waitstatus_to_exitcode(status))\n"
    );
    let mut py = Command::new("python3");
    py.args(["-c", &script]).stdin(Stdio::null());
    with_test_state(&mut py);
    let out = output_within(&mut py, Duration::from_secs(60)).expect("the pty session hung");
    let shown = text(&out.stdout);
    assert!(shown.contains("tty-ok"), "{shown}");
    assert!(shown.contains("got-hello"), "{shown}");
    assert!(shown.trim_end().ends_with("exit 7"), "{shown}");
}

/// `supervise` behind the same launcher: its channel's end (no writer left on stdin)
/// tears every tree down, so the host's kill -9 leaves nothing there either.
#[test]
fn supervise_behind_a_shell_launcher_dies_with_the_host() {
    if !isolate("supervise_behind_a_shell_launcher_dies_with_the_host") || !require_python() {
        return;
    }
    let scratch = Scratch::new("stdio-supervise");
    let up = scratch.path().join("up");
    let mut argv: Vec<&str> = SHELL_LAUNCHER.to_vec();
    argv.extend([UNDERTAKER, "supervise", "--grace", "300ms"]);
    let mut host = Host::start(&scratch, "pipes", &argv);
    let request = format!(
        "{{\"op\":\"spawn\",\"id\":1,\"argv\":[\"sh\",\"-c\",\"setsid sleep 1000 & echo up > {}; exec sleep 1001\"]}}",
        up.display()
    );
    assert_eq!(host.command(&format!("send {request}")), "sent");
    assert!(
        wait_for_file(&up, Duration::from_secs(30)),
        "the spawned server never started"
    );
    kill9(&mut host.child);
    assert_no_survivor("host kill -9 behind a launcher in front of supervise");
}

/// Both far ends already gone at start: the owner is dead, CMD never runs (125).
#[test]
fn stdio_peer_gone_at_start_means_cmd_never_runs() {
    let scratch = Scratch::new("stdio-gone-at-start");
    let ran = scratch.path().join("ran");
    let (stdin_read, stdin_write) = rustix::pipe::pipe().unwrap();
    let (stdout_read, stdout_write) = rustix::pipe::pipe().unwrap();
    drop((stdin_write, stdout_read));
    let status = undertaker()
        .args(["run", "--", "sh", "-c", &format!("touch {}", ran.display())])
        .stdin(Stdio::from(stdin_read))
        .stdout(Stdio::from(stdout_write))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(125));
    assert!(!ran.exists(), "CMD ran with its stdio peer gone");
}
