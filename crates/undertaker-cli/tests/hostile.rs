//! Hostile conditions: each test reproduces one way undertaker broke when tried
//! adversarially (docs/RELIABILITY.md, "Hostile conditions"), each in a private PID
//! namespace with its own scratch state dir.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A pipe whose ends survive exec (the read end is returned first).
fn inheritable_pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = rustix::pipe::pipe().unwrap();
    (r, w)
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_owned()
}

// ---------------------------------------------------------------------------------
// 1. A closed stderr must not kill the guardian.

#[test]
fn closed_stderr_pipe_never_kills_the_guardian() {
    if !isolate("closed_stderr_pipe_never_kills_the_guardian") {
        return;
    }
    let scratch = Scratch::new("stderr");
    // An unsafe default state dir (a symlink) makes the guardian warn at start-up.
    let home = scratch.path().join("home");
    std::fs::create_dir_all(home.join(".local/state")).unwrap();
    std::fs::create_dir_all(scratch.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(
        scratch.path().join("elsewhere"),
        home.join(".local/state/undertaker"),
    )
    .unwrap();
    let ran = scratch.path().join("ran");
    let (read_end, write_end) = inheritable_pipe();
    drop(read_end);
    let mut child = undertaker()
        .env("HOME", &home)
        .env_remove("UNDERTAKER_STATE_DIR")
        .args(["run", "--tier", "subreaper", "--grace", "300ms", "--"])
        .args(["sh", "-c"])
        .arg(format!(
            "setsid sleep 1000 & echo ran > {}; exit 3",
            ran.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::from(write_end))
        .spawn()
        .unwrap();
    let status = wait_child(&mut child, Duration::from_secs(60));
    assert!(ran.exists(), "CMD never ran (guardian status {status:?})");
    assert_eq!(status.and_then(|s| s.code()), Some(3), "{status:?}");
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// 7. One long label must not break `ps` for everyone; labels are bounded at `run`.

#[test]
fn long_label_is_refused_at_run_and_never_breaks_ps() {
    if !isolate("long_label_is_refused_at_run_and_never_breaks_ps") {
        return;
    }
    let scratch = Scratch::new("label");
    let state = scratch.path().join("state");
    let long = "L".repeat(65_536);
    let out = ut_within(
        &state,
        &["run", "--label", &long, "--", "echo", "ran"],
        Duration::from_secs(60),
    )
    .expect("run hung");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("ran"), "CMD ran");
    assert_eq!(text(&out.stderr).trim().lines().count(), 1);

    // A row with such a label may still exist (older versions wrote them): ps copes.
    undertaker::testing::insert_finished_tree(&state, &"ab".repeat(16), &boot_id(), &long);
    let ps = ut_within(&state, &["ps", "--all"], Duration::from_secs(60)).expect("ps hung");
    assert_eq!(ps.status.code(), Some(0), "{}", text(&ps.stderr));
    assert_eq!(text(&ps.stdout).lines().count(), 2);
    let ps = ut_within(&state, &["ps", "--all", "--json"], Duration::from_secs(60)).unwrap();
    assert_eq!(json(&ps)[0]["label"], long.as_str());
}

// ---------------------------------------------------------------------------------
// 8. A closed stdout (`ps | head -1`) ends every command quietly.

#[test]
fn closed_stdout_ends_every_command_quietly() {
    if !isolate("closed_stdout_ends_every_command_quietly") {
        return;
    }
    let scratch = Scratch::new("epipe");
    let state = scratch.path().join("state");
    for _ in 0..3 {
        let out = ut_within(&state, &["run", "--", "true"], Duration::from_secs(60)).unwrap();
        assert!(out.status.success());
    }
    for args in [
        &["ps", "--all"][..],
        &["ps", "--all", "--json"],
        &["log"],
        &["sweep", "--dry-run"],
        &["doctor"],
    ] {
        let (read_end, write_end) = inheritable_pipe();
        drop(read_end);
        let mut child = undertaker()
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .stdout(Stdio::from(write_end))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = wait_child(&mut child, Duration::from_secs(60)).expect("hung");
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            status.code().is_some_and(|c| c < 128),
            "{args:?}: {status:?} {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
    }
}

// ---------------------------------------------------------------------------------
// 9. Labels reach the terminal escaped.

#[test]
fn control_characters_in_labels_are_escaped_in_human_output() {
    if !isolate("control_characters_in_labels_are_escaped_in_human_output") {
        return;
    }
    let scratch = Scratch::new("ctl");
    let state = scratch.path().join("state");
    let evil = "evil\nffffffffffffffffffffffffffffffff FORGED\x1b[2J\rX\u{9b}";
    let out = ut_within(
        &state,
        &["run", "--label", evil, "--", "true"],
        Duration::from_secs(60),
    )
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let clean = |what: &str, out: &Output, lines: usize| {
        let s = text(&out.stdout);
        assert!(
            !s.contains('\x1b') && !s.contains('\r') && !s.contains('\u{9b}'),
            "{what}: raw control characters: {s:?}"
        );
        assert_eq!(s.lines().count(), lines, "{what}: forged rows: {s:?}");
    };
    let ps = ut_within(&state, &["ps", "--all"], Duration::from_secs(60)).unwrap();
    clean("ps", &ps, 2);
    // JSON keeps the label exactly.
    let ps = ut_within(&state, &["ps", "--all", "--json"], Duration::from_secs(60)).unwrap();
    assert_eq!(json(&ps)[0]["label"], evil);

    // `kill` of a running tree prints its label too.
    let mut guardian = undertaker()
        .arg("run")
        .arg("--state-dir")
        .arg(&state)
        .args(["--tier", "subreaper", "--label", evil, "--grace", "300ms"])
        .args(["--", "sleep", "1000"])
        .spawn()
        .unwrap();
    let live = wait_until(Duration::from_secs(60), || {
        let out = ut(&state, &["ps", "--json"]);
        json(&out).as_array().is_some_and(|a| a.len() == 1)
    });
    assert!(live, "tree never showed up");
    let id = json(&ut(&state, &["ps", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let kill = ut_within(&state, &["kill", &id], Duration::from_secs(60)).unwrap();
    clean("kill", &kill, 1);
    assert!(wait_child(&mut guardian, Duration::from_secs(60)).is_some());
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// 10. `--owner-fd` accepts only a pipe's read end or a connected socket.

#[test]
fn owner_fd_of_anything_but_a_pipe_read_end_or_connected_socket_is_a_usage_error() {
    if !isolate("owner_fd_of_anything_but_a_pipe_read_end_or_connected_socket_is_a_usage_error") {
        return;
    }
    let scratch = Scratch::new("ownerfd");
    let state = scratch.path().join("state");
    let file = scratch.file("plain", "x");
    let sock_path = scratch.path().join("listen.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    let (_pipe_r, pipe_w) = inheritable_pipe();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let plain = std::fs::File::open(&file).unwrap();
    use std::os::fd::AsFd;
    let cases = [
        ("/dev/zero", zero.as_fd()),
        ("pipe write end", pipe_w.as_fd()),
        ("regular file", plain.as_fd()),
        ("listening socket", listener.as_fd()),
    ];
    for (what, borrowed) in cases {
        rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::empty()).unwrap();
        let fd = borrowed.as_raw_fd();
        let out = ut_within(
            &state,
            &["run", "--owner-fd", &fd.to_string(), "--", "echo", "ran"],
            Duration::from_secs(60),
        );
        let out = out.unwrap_or_else(|| panic!("{what}: undertaker hung"));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(!text(&out.stdout).contains("ran"), "{what}: CMD ran");
        assert!(err.contains(&format!("fd {fd}")), "{what}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: {err}");
    }
    // A connected socket is a fine owner: CMD runs.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    rustix::io::fcntl_setfd(&a, rustix::io::FdFlags::empty()).unwrap();
    let out = ut_within(
        &state,
        &[
            "run",
            "--owner-fd",
            &a.as_raw_fd().to_string(),
            "--",
            "echo",
            "ran",
        ],
        Duration::from_secs(60),
    )
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ran\n");
    drop(b);
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// 12. A corrupt database is reported in one line.

#[test]
fn corrupt_registry_is_reported_in_one_line() {
    if !isolate("corrupt_registry_is_reported_in_one_line") {
        return;
    }
    let scratch = Scratch::new("corrupt");
    let state = scratch.path().join("state");
    let label = "x".repeat(250);
    for _ in 0..40 {
        let out = ut_within(
            &state,
            &["run", "--label", &label, "--", "true"],
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(out.status.success());
    }
    // Guardians write record files; the first command folds them into the database.
    let out = ut_within(&state, &["ps"], Duration::from_secs(60)).unwrap();
    assert!(out.status.success());
    let db = state.join("registry.db");
    let size = std::fs::metadata(&db).unwrap().len();
    assert!(size >= 10 * 4096, "registry too small to damage: {size}");
    let mut f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    for page in [3u64, 5, 7, 9] {
        use std::io::Seek;
        f.seek(std::io::SeekFrom::Start(page * 4096 + 8)).unwrap();
        f.write_all(&[0xff; 16]).unwrap();
    }
    drop(f);
    let out = ut_within(&state, &["ps"], Duration::from_secs(60)).unwrap();
    let err = text(&out.stderr);
    assert!(err.contains("corrupt"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

// ---------------------------------------------------------------------------------
// 13. A symlinked state dir is refused however it is written.

#[test]
fn symlinked_state_dir_is_refused_with_a_trailing_slash_too() {
    if !isolate("symlinked_state_dir_is_refused_with_a_trailing_slash_too") {
        return;
    }
    let scratch = Scratch::new("slash");
    let real = scratch.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let link = scratch.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for spelled in [
        link.display().to_string(),
        format!("{}/", link.display()),
        format!("{}//", link.display()),
        format!("{}/.", link.display()),
    ] {
        let out = ut_within(Path::new(&spelled), &["ps"], Duration::from_secs(60)).unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{spelled}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).contains("symlink"), "{spelled}");
        let out = ut_within(
            Path::new(&spelled),
            &["run", "--", "echo", "ran"],
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(2), "{spelled}");
        assert!(!text(&out.stdout).contains("ran"), "{spelled}");
    }
    assert!(
        std::fs::read_dir(&real).unwrap().next().is_none(),
        "something was written through the symlink"
    );
}

// ---------------------------------------------------------------------------------
// 15. A full disk leaves no temporary lock file behind.

/// A tiny tmpfs mounted on `dir` (our private mount namespace), unmounted on drop.
struct TinyFs(PathBuf);

impl TinyFs {
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let data = std::ffi::CString::new(format!("size={size},mode=0700")).unwrap();
        rustix::mount::mount(
            "tmpfs",
            dir,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            Some(data.as_c_str()),
        )
        .ok()?;
        Some(Self(dir.to_path_buf()))
    }

    /// Writes until the file system is full.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let small = [0u8; 512];
        while f.write_all(&small).is_ok() {}
        let _ = f.write_all(&[0u8]);
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

#[test]
fn full_disk_leaves_no_temporary_lock_file() {
    if !isolate("full_disk_leaves_no_temporary_lock_file") {
        return;
    }
    let scratch = Scratch::new("full");
    let state = scratch.path().join("state");
    let out = ut_within(&state, &["run", "--", "true"], Duration::from_secs(60)).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The registry still has room; the lock files' directory is full.
    let Some(fs) = TinyFs::mount(&state.join("trees"), "64k") else {
        return skip("cannot mount a tmpfs");
    };
    fs.fill();
    for _ in 0..3 {
        let out = ut_within(
            &state,
            &["run", "--", "sh", "-c", "exit 4"],
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    }
    let left: Vec<String> = std::fs::read_dir(&fs.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "filler")
        .collect();
    assert!(left.is_empty(), "files left: {left:?}");
    drop(fs);
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// Shared by the signal and start-up tests.

/// CMD for the signal tests: notes the first signal it gets to $1 and exits 3; a
/// `setsid` member keeps the tree non-trivial. "ready" once the handlers are in place.
const NOTE_SIGNAL: &str = r#"
use strict; use POSIX ();
my $out = shift @ARGV;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
my @names = qw(HUP INT QUIT ILL TRAP ABRT BUS FPE USR1 SEGV USR2 ALRM TERM STKFLT CONT
               TSTP TTIN TTOU URG XCPU VTALRM PROF WINCH IO PWR SYS);
for my $s (@names) { $SIG{$s} = sub { note($_[0]); POSIX::_exit(3); }; }
for my $n (35, 40, 50) { my $name = "NUM$n"; $SIG{$name} = sub { note("RT$n"); POSIX::_exit(3); }; }
if (fork() == 0) { POSIX::setsid(); exec('sleep', '1000'); }
note('ready');
sleep 1 while 1;
"#;

fn start_noting(scratch: &Scratch, tier: &str) -> (std::process::Child, PathBuf) {
    let script = scratch.file("note.pl", NOTE_SIGNAL);
    let log = scratch.path().join("got");
    let _ = std::fs::remove_file(&log);
    let child = undertaker()
        // CMD's handler exits 3 on the first signal: a grace a loaded machine cannot
        // outlast before it runs (a SIGKILL after it would read as 137). Nothing in
        // the tree ignores SIGTERM, so the grace costs nothing.
        .args(["run", "--tier", tier, "--grace", "10s", "--", "perl"])
        .arg(&script)
        .arg(&log)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || read_lines(&log)
            .contains(&"ready".to_string())),
        "CMD never became ready"
    );
    (child, log)
}

// ---------------------------------------------------------------------------------
// 2. Every catchable signal is forwarded to CMD or starts the teardown.

fn every_signal_is_forwarded_or_tears_down(tier: &str) {
    let scratch = Scratch::new("sig");
    // (name, number, what CMD must have got): forwarded signals arrive as themselves,
    // the rest start the teardown, whose first act is SIGTERM.
    let forwarded = [
        "HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "STKFLT", "CONT", "TSTP", "TTIN", "TTOU",
        "URG", "VTALRM", "PROF", "WINCH", "IO", "PWR", "35", "40", "50",
    ];
    let teardown = [
        "TERM", "XCPU", "SYS", "TRAP", "SEGV", "ABRT", "BUS", "FPE", "ILL",
    ];
    let cases = forwarded
        .iter()
        .map(|s| (*s, true))
        .chain(teardown.iter().map(|s| (*s, false)));
    for (name, forwards) in cases {
        let (mut guardian, log) = start_noting(&scratch, tier);
        send(&guardian, name);
        let status = wait_child(&mut guardian, Duration::from_secs(60));
        let got = read_lines(&log);
        if status.is_none() {
            kill9(&mut guardian);
        }
        let want = match (forwards, name.parse::<i32>()) {
            (false, _) => "TERM".to_owned(),
            (true, Ok(n)) => format!("RT{n}"),
            (true, Err(_)) => name.to_owned(),
        };
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(3),
            "SIG{name} ({tier}): guardian ended with {status:?}; CMD got {got:?}"
        );
        // The teardown sends SIGTERM with SIGCONT (in the pidns tier to the whole
        // namespace at once): CMD may act on either first. Either way it never gets
        // the signal itself.
        let got_it = if forwards {
            got.contains(&want)
        } else {
            (name == "TERM" || !got.iter().any(|l| l == name))
                && got.iter().any(|l| l == "TERM" || l == "CONT")
        };
        assert!(
            got_it,
            "SIG{name} ({tier}): CMD got {got:?}, expected {want}"
        );
        let left = survivors_after(Duration::from_secs(60));
        assert!(left.is_empty(), "SIG{name} ({tier}): survivors {left:#?}");
    }
    // PIPE and XFSZ report the guardian's own failed writes: ignored, never forwarded.
    let (mut guardian, log) = start_noting(&scratch, tier);
    send(&guardian, "PIPE");
    send(&guardian, "XFSZ");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        guardian.try_wait().unwrap().is_none(),
        "PIPE/XFSZ ended the guardian"
    );
    send(&guardian, "TERM");
    let status = wait_child(&mut guardian, Duration::from_secs(60));
    assert_eq!(status.and_then(|s| s.code()), Some(3));
    assert_eq!(read_lines(&log), ["ready", "TERM"]);
    assert_nothing_left();
}

/// `kill -NAME` to a child of ours (unreaped, so its pid is its own).
fn send(child: &std::process::Child, name: &str) {
    let ok = Command::new("perl")
        .args(["-e", "kill($ARGV[0], $ARGV[1]) == 1 or exit 1", name])
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name}");
}

#[test]
fn every_catchable_signal_is_forwarded_or_tears_down_subreaper() {
    if !isolate("every_catchable_signal_is_forwarded_or_tears_down_subreaper") {
        return;
    }
    every_signal_is_forwarded_or_tears_down("subreaper");
}

#[test]
fn every_catchable_signal_is_forwarded_or_tears_down_pidns() {
    if !isolate("every_catchable_signal_is_forwarded_or_tears_down_pidns") || !require_tier("pidns")
    {
        return;
    }
    every_signal_is_forwarded_or_tears_down("pidns");
}

// ---------------------------------------------------------------------------------
// 5. An ignored SIGCHLD (or any other inherited disposition) does not break exit codes.

#[test]
fn inherited_ignored_sigchld_keeps_exit_codes_in_every_tier() {
    if !isolate("inherited_ignored_sigchld_keeps_exit_codes_in_every_tier") {
        return;
    }
    for tier in ["subreaper", "cgroup", "pidns"] {
        if tier != "subreaper" && !require_tier(tier) {
            continue;
        }
        let out = output_within(
            Command::new("perl")
                .args(["-e", "$SIG{CHLD} = 'IGNORE'; exec @ARGV or die"])
                .arg(UNDERTAKER)
                .args(["run", "--tier", tier, "--", "sh", "-c", "exit 7"])
                .env_remove("UNDERTAKER_TREE")
                .stdin(Stdio::null()),
            Duration::from_secs(60),
        )
        .expect("undertaker hung");
        assert_eq!(out.status.code(), Some(7), "{tier}: {}", text(&out.stderr));
    }
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// 4. `kill` of a tree whose guardian is stopped tears it down, or says it did not.

#[test]
fn kill_with_a_stopped_guardian_never_claims_success_while_the_tree_lives() {
    if !isolate("kill_with_a_stopped_guardian_never_claims_success_while_the_tree_lives") {
        return;
    }
    let scratch = Scratch::new("stopped");
    let state = scratch.path().join("state");
    let ready = scratch.path().join("ready");
    let mut guardian = undertaker()
        .arg("run")
        .arg("--state-dir")
        .arg(&state)
        .args([
            "--tier",
            "subreaper",
            "--label",
            "stopped",
            "--grace",
            "300ms",
        ])
        .args(["--", "sh", "-c"])
        .arg(format!(
            "sleep 1000 & setsid sleep 1000 & sleep 1000 & echo > {}; wait",
            ready.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_file(&ready, Duration::from_secs(60)));
    let tree = find_tree(&state, "stopped", Duration::from_secs(60)).expect("no tree");
    let id = tree["id"].as_str().unwrap().to_owned();
    // The guardian (the child of the process we started) is the one `kill` signals.
    let wpid = guardian.id() as i32;
    let gpid = guardian_of(&guardian).expect("the guardian was forked");
    assert!(signal_child_of(wpid, gpid, rustix::process::Signal::STOP));
    assert!(wait_until(Duration::from_secs(60), || proc_state(gpid) == Some('T')));
    let out = ut_within(
        &state,
        &["kill", "--json", "--grace", "300ms", &id],
        Duration::from_secs(60),
    )
    .expect("kill hung");
    let alive = survivors(&id).len();
    let report = json(&out);
    // Let the guardian finish whatever it was doing before looking at the tree.
    let _ = signal_child_of(wpid, gpid, rustix::process::Signal::CONT);
    if out.status.success() {
        assert_eq!(alive, 0, "kill said success, {alive} alive: {report}");
    } else {
        assert_eq!(
            report["left_alive"].as_u64(),
            Some(alive as u64),
            "{report}"
        );
    }
    assert!(out.status.success(), "kill gave up: {report}");
    assert!(wait_child(&mut guardian, Duration::from_secs(60)).is_some());
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// 3. Every wait is bounded: a stuck member of a pidns tree is reported, not awaited.

/// A cgroup v1 freezer group: its members sleep uninterruptibly until thawed (even
/// SIGKILL waits). Thawed and removed on drop.
struct Freezer(PathBuf);

impl Freezer {
    fn new() -> Option<Self> {
        let root = Path::new("/sys/fs/cgroup/freezer");
        if !root.join("tasks").exists() {
            return None;
        }
        let mut bytes = [0u8; 6];
        rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).unwrap();
        let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let dir = root.join(format!("undertaker-test-{name}"));
        std::fs::create_dir(&dir).ok()?;
        Some(Self(dir))
    }

    fn freeze(&self, pid: i32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
        std::fs::write(self.0.join("freezer.state"), "FROZEN").unwrap();
        assert!(wait_until(Duration::from_secs(60), || {
            std::fs::read_to_string(self.0.join("freezer.state"))
                .is_ok_and(|s| s.trim() == "FROZEN")
        }));
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        wait_until(Duration::from_secs(60), || {
            reap_zombies();
            std::fs::read_to_string(self.0.join("cgroup.procs")).is_ok_and(|s| s.is_empty())
        });
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Pid (in our namespace) of the live process whose command line is exactly `argv`.
fn pid_by_cmdline(argv: &[&str]) -> Option<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    live_processes_except_self()
        .into_iter()
        .find(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == want))
}

/// A member frozen (cgroup v1 freezer) before the owner dies: the guardian reports it
/// stuck after grace + kill cap instead of waiting, then the member is thawed.
fn stuck_member_is_reported_not_awaited(tier: &str, state: &Path) {
    let Some(freezer) = Freezer::new() else {
        return skip("no cgroup v1 freezer to make a member unkillable for a while");
    };
    let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let mut guardian = undertaker()
        .arg("--state-dir")
        .arg(state)
        .args(["run", "--tier", tier, "--grace", "300ms", "--owner"])
        .arg(owner.id().to_string())
        .args(["--", "sh", "-c", "sleep 1001 & wait"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut member = None;
    assert!(wait_until(Duration::from_secs(60), || {
        member = pid_by_cmdline(&["sleep", "1001"]);
        member.is_some()
    }));
    freezer.freeze(member.unwrap());
    kill9(&mut owner);
    // grace 300 ms + (pidns: the init's margin) + the 5 s kill cap, with generous slack.
    let status = wait_child(&mut guardian, Duration::from_secs(60));
    let stuck_while_done = member.is_some_and(alive);
    if status.is_none() {
        kill9(&mut guardian);
    }
    drop(freezer);
    assert!(status.is_some(), "{tier}: still waiting for a stuck member");
    assert!(stuck_while_done, "{tier}: the member was not stuck");
    let mut err = String::new();
    std::io::Read::read_to_string(guardian.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("stuck"), "{tier}: not reported: {err}");
}

#[test]
fn pidns_stuck_member_is_reported_after_grace_and_cap_not_awaited() {
    if !isolate("pidns_stuck_member_is_reported_after_grace_and_cap_not_awaited")
        || !require_tier("pidns")
    {
        return;
    }
    let scratch = Scratch::new("stuck");
    stuck_member_is_reported_not_awaited("pidns", &scratch.path().join("state"));
    assert_nothing_left();
}

#[test]
fn stuck_member_is_reported_after_grace_and_cap_in_the_cgroup_and_subreaper_tiers() {
    if !isolate("stuck_member_is_reported_after_grace_and_cap_in_the_cgroup_and_subreaper_tiers") {
        return;
    }
    let scratch = Scratch::new("stuck");
    let state = scratch.path().join("state");
    stuck_member_is_reported_not_awaited("subreaper", &state);
    if require_tier("cgroup") {
        stuck_member_is_reported_not_awaited("cgroup", &state);
        // The tree cgroup stayed while the member was stuck: the sweep removes it.
        let out = ut(&state, &["sweep"]);
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// The hostile start: undertaker started under every odd inherited condition either
// passes CMD's status through with 0 survivors, or refuses up front (2 or 125, one
// line) without running CMD. Nothing in between.

/// How one hostile start is staged.
enum Stage {
    /// Run through `perl -MPOSIX -e 'CODE; exec @ARGV'`.
    Perl(&'static str),
    /// Run through `sh -c 'CODE; exec "$@"'`.
    Shell(&'static str),
    /// Run directly, with these environment changes (None = remove).
    Env(Vec<(&'static str, Option<PathBuf>)>),
    /// stderr is a pipe whose read end is already closed (and SIGPIPE at default).
    ClosedStderrPipe,
}

#[test]
fn hostile_start_passes_the_status_through_or_refuses_up_front() {
    if !isolate("hostile_start_passes_the_status_through_or_refuses_up_front") {
        return;
    }
    let scratch = Scratch::new("start");
    let link = scratch.path().join("link");
    std::fs::create_dir(scratch.path().join("target")).unwrap();
    std::os::unix::fs::symlink(scratch.path().join("target"), &link).unwrap();
    let home_with_link = scratch.path().join("home");
    std::fs::create_dir_all(home_with_link.join(".local/state")).unwrap();
    std::os::unix::fs::symlink(&link, home_with_link.join(".local/state/undertaker")).unwrap();
    let full = TinyFs::mount(&scratch.path().join("full"), "256k");
    let read_only = TinyFs::mount(&scratch.path().join("ro"), "256k");
    if let Some(fs) = &full {
        let out = output_within(
            undertaker()
                .env("UNDERTAKER_STATE_DIR", fs.0.join("state"))
                .args(["run", "--", "true"]),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(out.status.success());
        fs.fill();
    }
    if let Some(fs) = &read_only {
        std::fs::create_dir(fs.0.join("state")).unwrap();
        rustix::mount::mount_remount(&fs.0, rustix::mount::MountFlags::RDONLY, c"").unwrap();
    }
    let gone = scratch.path().join("gone");
    let mut rows: Vec<(&str, Stage)> = vec![
        ("SIGCHLD ignored", Stage::Perl("$SIG{CHLD} = 'IGNORE'")),
        (
            "every signal ignored",
            Stage::Perl(
                "$SIG{$_} = 'IGNORE' for grep { !/^(KILL|STOP|NUM3[23]|__.*)$/ } keys %SIG",
            ),
        ),
        (
            "every signal blocked",
            Stage::Perl("sigprocmask(SIG_BLOCK, POSIX::SigSet->new(1..31, 34..64)) or die"),
        ),
        (
            "SIGTERM ignored and blocked",
            Stage::Perl(
                "$SIG{TERM} = 'IGNORE'; sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGTERM))",
            ),
        ),
        (
            "stdin, stdout and stderr closed",
            Stage::Perl("close STDIN; close STDOUT; close STDERR"),
        ),
        ("stderr a pipe nobody reads", Stage::ClosedStderrPipe),
        ("RLIMIT_NOFILE 12", Stage::Shell("ulimit -n 12")),
        ("RLIMIT_NPROC 1", Stage::Shell("ulimit -u 1")),
        ("umask 0777", Stage::Shell("umask 0777")),
        (
            "working directory deleted",
            Stage::Shell("mkdir gone && cd gone && rmdir ../gone"),
        ),
        (
            "no HOME and no state dir",
            Stage::Env(vec![
                ("HOME", None),
                ("UNDERTAKER_STATE_DIR", None),
                ("XDG_STATE_HOME", None),
            ]),
        ),
        (
            "unsafe default state dir (symlink)",
            Stage::Env(vec![
                ("HOME", Some(home_with_link.clone())),
                ("UNDERTAKER_STATE_DIR", None),
            ]),
        ),
        (
            "unsafe explicit state dir (symlink)",
            Stage::Env(vec![("UNDERTAKER_STATE_DIR", Some(link.clone()))]),
        ),
    ];
    if let Some(fs) = &full {
        rows.push((
            "state dir on a full disk",
            Stage::Env(vec![("UNDERTAKER_STATE_DIR", Some(fs.0.join("state")))]),
        ));
    }
    if let Some(fs) = &read_only {
        rows.push((
            "read-only state dir",
            Stage::Env(vec![("UNDERTAKER_STATE_DIR", Some(fs.0.join("state")))]),
        ));
    }
    let _ = gone;
    let mut report = Vec::new();
    for (name, stage) in rows {
        let ran = scratch.path().join("ran");
        let _ = std::fs::remove_file(&ran);
        let script = format!("touch {}; setsid sleep 1000 & exit 7", ran.display());
        let args = ["run", "--grace", "300ms", "--", "sh", "-c", &script];
        let mut cmd;
        let mut stderr_readable = true;
        match &stage {
            Stage::Perl(code) => {
                cmd = Command::new("perl");
                cmd.args(["-MPOSIX", "-e", &format!("{code}; exec @ARGV or die")])
                    .arg(UNDERTAKER)
                    .args(args);
                stderr_readable = !code.contains("STDERR");
            }
            Stage::Shell(code) => {
                cmd = Command::new("sh");
                cmd.current_dir(scratch.path())
                    .args(["-c", &format!("{code}; exec \"$@\""), "sh"])
                    .arg(UNDERTAKER)
                    .args(args);
            }
            Stage::Env(changes) => {
                cmd = Command::new(UNDERTAKER);
                cmd.args(args);
                for (k, v) in changes {
                    match v {
                        Some(v) => cmd.env(k, v),
                        None => cmd.env_remove(k),
                    };
                }
            }
            Stage::ClosedStderrPipe => {
                cmd = Command::new("perl");
                cmd.args(["-e", "$SIG{PIPE} = 'DEFAULT'; exec @ARGV or die"])
                    .arg(UNDERTAKER)
                    .args(args);
                stderr_readable = false;
            }
        }
        cmd.env_remove("UNDERTAKER_TREE").stdin(Stdio::null());
        if !matches!(stage, Stage::Env(_)) {
            with_test_state(&mut cmd);
        } else {
            cmd.env("HOME", test_home());
            if let Stage::Env(changes) = &stage {
                for (k, v) in changes {
                    match v {
                        Some(v) => cmd.env(k, v),
                        None => cmd.env_remove(k),
                    };
                }
            }
        }
        let out = if matches!(stage, Stage::ClosedStderrPipe) {
            let (r, w) = inheritable_pipe();
            drop(r);
            let mut child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::from(w))
                .spawn()
                .unwrap();
            let status = wait_child(&mut child, Duration::from_secs(60));
            if status.is_none() {
                kill9(&mut child);
            }
            status.map(|status| Output {
                status,
                stdout: vec![],
                stderr: vec![],
            })
        } else {
            output_within(&mut cmd, Duration::from_secs(60))
        };
        let left = survivors_after(Duration::from_secs(60));
        let Some(out) = out else {
            panic!("{name}: undertaker hung");
        };
        let code = out.status.code();
        let err = text(&out.stderr);
        let ran = ran.exists();
        let verdict = match (ran, code) {
            (true, Some(7)) if left.is_empty() => Ok("status 7, 0 survivors".to_string()),
            (false, Some(c @ (2 | 125)))
                if left.is_empty() && (!stderr_readable || err.trim_end().lines().count() == 1) =>
            {
                Ok(format!("refused up front with {c}: {}", err.trim()))
            }
            _ => Err(format!(
                "ran={ran} status={:?} survivors={} stderr={err:?}",
                out.status,
                left.len()
            )),
        };
        eprintln!("hostile start | {name} | {verdict:?}");
        report.push((name, verdict));
        for (pid, _) in left {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
        reap_zombies();
    }
    drop(full);
    drop(read_only);
    let failed: Vec<_> = report.iter().filter(|(_, v)| v.is_err()).collect();
    assert!(failed.is_empty(), "hostile starts gone wrong: {failed:#?}");
}

// ---------------------------------------------------------------------------------
// 6. A stranger that joins CMD's process group is never signalled.

/// A stranger: reads a pgid from $1 (waiting for it), tries to join that group,
/// records any signal to $2. "ready" once it has tried.
const GROUP_JOINER: &str = r#"
use strict; use POSIX ();
my ($pgfile, $out) = @ARGV;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
for my $s (qw(TERM INT HUP QUIT USR1 USR2 CONT WINCH ALRM)) { $SIG{$s} = sub { note($_[0]); }; }
my $pg;
for (1..2000) { if (open(my $f, '<', $pgfile)) { $pg = <$f>; close $f; last if defined $pg && $pg =~ /^\d+\n/; } select(undef, undef, undef, 0.01); }
chomp $pg;
note(POSIX::setpgid(0, $pg) ? "joined" : "not joined");
note("pid $$");
note('ready');
sleep 1000 while 1;
"#;

fn stranger_in_cmd_group(tier: &str) {
    let scratch = Scratch::new("joiner");
    let script = scratch.file("joiner.pl", GROUP_JOINER);
    let pgfile = scratch.path().join("pgid");
    let log = scratch.path().join("joiner.log");
    let state = scratch.path().join("state");
    let mut guardian = undertaker()
        .arg("--state-dir")
        .arg(&state)
        .args(["run", "--tier", tier, "--grace", "500ms", "--", "sh", "-c"])
        .arg(format!(
            "sleep 1000 & echo $$ > {}.tmp && mv {0}.tmp {0}; wait",
            pgfile.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut joiner = Command::new("perl")
        .arg(&script)
        .arg(&pgfile)
        .arg(&log)
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || read_lines(&log)
            .contains(&"ready".to_string())),
        "stranger never got ready"
    );
    signal_child(&guardian, rustix::process::Signal::TERM);
    assert!(wait_child(&mut guardian, Duration::from_secs(60)).is_some());
    std::thread::sleep(Duration::from_millis(200));
    let got = read_lines(&log);
    assert!(alive(joiner.id() as i32), "{tier}: stranger killed");
    let signals: Vec<&String> = got
        .iter()
        .filter(|l| {
            !matches!(l.as_str(), "joined" | "not joined" | "ready") && !l.starts_with("pid ")
        })
        .collect();
    assert!(
        signals.is_empty(),
        "{tier}: stranger got {signals:?} ({got:?})"
    );
    // Every signal undertaker sent is in the audit log, and none went to the stranger.
    let log_rows = json(&ut(&state, &["log", "--json"]));
    let stranger = joiner.id() as i64;
    assert!(
        log_rows
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["pid"].as_i64() != Some(stranger)),
        "{log_rows}"
    );
    kill9(&mut joiner);
}

#[test]
fn stranger_joining_cmd_group_is_never_signalled() {
    if !isolate("stranger_joining_cmd_group_is_never_signalled") {
        return;
    }
    stranger_in_cmd_group("subreaper");
    if require_tier("cgroup") {
        stranger_in_cmd_group("cgroup");
    }
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// 11. `sweep` without a usable registry still sweeps the tree cgroups it can find.

/// Leaves a cgroup tree orphaned (every undertaker process killed) with a setsid and
/// an `env -i` member, then runs `sweep` on `state`, which must not be able to open its
/// registry (`break_registry` makes sure, after the run): both members must be gone.
fn sweep_without_registry(state: &Path, break_registry: impl FnOnce()) {
    let ready = state.with_extension("ready");
    let mut guardian = undertaker()
        .arg("--state-dir")
        .arg(state)
        .args(["run", "--tier", "cgroup", "--", "sh", "-c"])
        .arg(format!(
            "setsid sleep 1000 & env -i sleep 1000 & echo > {}; wait",
            ready.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_file(&ready, Duration::from_secs(60)));
    // Every undertaker process at once, so the tree is left for the sweep.
    kill9_all(&mut guardian);
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self().len() == 2
    }));
    break_registry();
    let out = ut_within(
        state,
        &["sweep", "--grace", "300ms"],
        Duration::from_secs(60),
    )
    .expect("sweep hung");
    let err = text(&out.stderr);
    assert!(err.contains("registry"), "the error is not reported: {err}");
    assert_ne!(
        out.status.code(),
        Some(0),
        "an error must not look like success"
    );
    let left = survivors_after(Duration::from_secs(60));
    assert!(
        left.is_empty(),
        "sweep left {left:#?}\n{}",
        text(&out.stdout)
    );
}

#[test]
fn sweep_without_a_registry_still_sweeps_tree_cgroups() {
    if !isolate("sweep_without_a_registry_still_sweeps_tree_cgroups") || !require_tier("cgroup") {
        return;
    }
    let scratch = Scratch::new("noreg");
    // A directory where the database should be.
    let state = scratch.path().join("state");
    std::fs::create_dir_all(state.join("registry.db")).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    sweep_without_registry(&state, || {});
    // A state dir that became read-only after the guardian recorded its tree.
    let Some(fs) = TinyFs::mount(&scratch.path().join("ro"), "1m") else {
        return skip("cannot mount a tmpfs");
    };
    let state = fs.0.join("state");
    sweep_without_registry(&state, || {
        rustix::mount::mount_remount(&fs.0, rustix::mount::MountFlags::RDONLY, c"").unwrap()
    });
}

// ---------------------------------------------------------------------------------
// 14. A member that moves into a child cgroup of the tree's cgroup (and out of CMD's
// session) still gets SIGTERM, and the tree's cgroup is removed, child included.

const CHILD_CGROUP_MEMBER: &str = r#"
use strict; use POSIX ();
POSIX::setsid();
my ($mount, $out) = @ARGV;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
open(my $c, '<', '/proc/self/cgroup') or die;
my ($rel) = map { /^0::(.*)$/ ? $1 : () } <$c>;
my $tree = "$mount$rel";
mkdir("$tree/sub") or die "mkdir: $!";
open(my $p, '>', "$tree/sub/cgroup.procs") or die; print $p "$$\n"; close $p or die "move: $!";
$SIG{TERM} = sub { note('TERM'); exit 0; };
note("tree $tree");
sleep 1000 while 1;
"#;

#[test]
fn member_in_a_child_cgroup_gets_sigterm_and_the_cgroup_is_removed() {
    if !isolate("member_in_a_child_cgroup_gets_sigterm_and_the_cgroup_is_removed")
        || !require_tier("cgroup")
    {
        return;
    }
    let mount = undertaker::testing::cgroup2_mount_point().unwrap();
    let scratch = Scratch::new("childcg");
    let script = scratch.file("member.pl", CHILD_CGROUP_MEMBER);
    let log = scratch.path().join("member.log");
    let mut guardian = undertaker()
        .args(["run", "--tier", "cgroup", "--grace", "2s", "--", "sh", "-c"])
        .arg(format!(
            "perl {} {} {} & wait",
            script.display(),
            mount.display(),
            log.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut tree = None;
    assert!(wait_until(Duration::from_secs(60), || {
        tree = read_lines(&log)
            .iter()
            .find_map(|l| l.strip_prefix("tree ").map(PathBuf::from));
        tree.is_some()
    }));
    let tree = tree.unwrap();
    assert!(tree.join("sub").exists());
    signal_child(&guardian, rustix::process::Signal::TERM);
    assert!(wait_child(&mut guardian, Duration::from_secs(60)).is_some());
    assert!(
        read_lines(&log).contains(&"TERM".to_string()),
        "the member never got SIGTERM: {:?}",
        read_lines(&log)
    );
    assert!(
        !tree.exists(),
        "tree cgroup left behind: {}",
        tree.display()
    );
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// 16. Environment-scrubbed members of an orphaned cgroup tree: counted by `ps`, listed
// once by `sweep --dry-run`.

#[test]
fn scrubbed_members_of_an_orphaned_cgroup_tree_are_counted_and_listed_once() {
    if !isolate("scrubbed_members_of_an_orphaned_cgroup_tree_are_counted_and_listed_once")
        || !require_tier("cgroup")
    {
        return;
    }
    let scratch = Scratch::new("scrubbed");
    let state = scratch.path().join("state");
    let ready = scratch.path().join("ready");
    let mut guardian = undertaker()
        .arg("--state-dir")
        .arg(&state)
        .args([
            "run", "--tier", "cgroup", "--label", "scrubbed", "--", "sh", "-c",
        ])
        .arg(format!(
            "env -i sleep 1000 & env -i sleep 1000 & echo > {}; wait",
            ready.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_file(&ready, Duration::from_secs(60)));
    // Every undertaker process at once, so the tree is left for the sweep.
    kill9_all(&mut guardian);
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self().len() == 2
    }));
    let tree = find_tree(&state, "scrubbed", Duration::from_secs(60)).unwrap();
    assert_eq!(tree["live_processes"], 2, "{tree}");
    let dry = json(&ut(&state, &["sweep", "--dry-run", "--json"]));
    let pids: Vec<i64> = dry["trees"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["targets"].as_array().unwrap().iter())
        .filter_map(|x| x["pid"].as_i64())
        .collect();
    let mut distinct = pids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(pids.len(), distinct.len(), "listed twice: {dry}");
    assert_eq!(distinct.len(), 2, "{dry}");
    assert_eq!(dry["left_alive"], 2, "{dry}");
    let out = ut(&state, &["sweep", "--grace", "300ms"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_nothing_left();
}

/// The terminal case: the guardian has a controlling terminal (under `script`), so CMD
/// stays in the guardian's session, where a stranger can join its group: its members
/// are then proven and signalled one by one, never through the group.
#[test]
fn stranger_joining_cmd_group_under_a_terminal_is_never_signalled() {
    if !isolate("stranger_joining_cmd_group_under_a_terminal_is_never_signalled") {
        return;
    }
    if Command::new("script").arg("--version").output().is_err() {
        return skip("no script(1) to give undertaker a terminal");
    }
    let scratch = Scratch::new("ttyjoin");
    let script = scratch.file("joiner.pl", GROUP_JOINER);
    let pgfile = scratch.path().join("pgid");
    let log = scratch.path().join("joiner.log");
    let state = scratch.path().join("state");
    let inner = format!(
        "{ut} --state-dir {state} run --tier subreaper --label tty --grace 500ms -- sh -c \
         'sleep 1000 & echo $$ > {pg}.tmp && mv {pg}.tmp {pg}; wait' & perl {joiner} {pg} {log} & wait",
        ut = UNDERTAKER,
        state = state.display(),
        pg = pgfile.display(),
        joiner = script.display(),
        log = log.display()
    );
    let mut host = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || read_lines(&log)
            .contains(&"ready".to_string())),
        "stranger never got ready: {:?}",
        read_lines(&log)
    );
    let lines = read_lines(&log);
    assert!(lines.contains(&"joined".to_string()), "{lines:?}");
    let joiner: i32 = lines
        .iter()
        .find_map(|l| l.strip_prefix("pid ")?.parse().ok())
        .unwrap();
    let tree = find_tree(&state, "tty", Duration::from_secs(60)).unwrap();
    let guardian = tree["guardian_pid"].as_i64().unwrap() as i32;
    let cmdline = std::fs::read(format!("/proc/{guardian}/cmdline")).unwrap();
    assert!(
        cmdline.starts_with(UNDERTAKER.as_bytes()),
        "not our guardian"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(guardian).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(60), || !alive(guardian)));
    std::thread::sleep(Duration::from_millis(200));
    let got = read_lines(&log);
    let stranger_alive = alive(joiner);
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(joiner).unwrap(),
        rustix::process::Signal::KILL,
    );
    let _ = wait_child(&mut host, Duration::from_secs(60));
    kill9(&mut host);
    assert!(stranger_alive, "stranger killed: {got:?}");
    assert!(
        !got.contains(&"TERM".to_string()),
        "stranger got SIGTERM: {got:?}"
    );
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// Tree ids: the part people see (a `kill` prefix, `log`'s 12 characters) is random.

#[test]
fn tree_ids_begin_with_their_random_part() {
    if !isolate("tree_ids_begin_with_their_random_part") {
        return;
    }
    let scratch = Scratch::new("ids");
    let state = scratch.path().join("state");
    for _ in 0..3 {
        let out = ut_within(
            &state,
            &["run", "--", "sh", "-c", "setsid sleep 1000 & exit 0"],
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(out.status.success());
    }
    let ps = json(&ut(&state, &["ps", "--all", "--json"]));
    let ids: Vec<String> = ps
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    let mut prefixes: Vec<&str> = ids.iter().map(|i| &i[..8]).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    assert_eq!(prefixes.len(), 3, "8-character prefixes collide: {ids:?}");
    // Any 8-character prefix names its tree.
    let out = ut(&state, &["log", "--tree", &ids[0][..8]]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // `log` shows 12 characters of each id: all different.
    let log = text(&ut(&state, &["log"]).stdout);
    let shown: std::collections::BTreeSet<&str> = log
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(shown.len(), 3, "{log}");
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// Subreaper tier, guardian `kill -9`: a member that scrubbed its environment is still
// swept while its (marked) parent lives: it is proven by parentage.

#[test]
fn sweep_follows_scrubbed_children_of_marked_members() {
    if !isolate("sweep_follows_scrubbed_children_of_marked_members") {
        return;
    }
    let scratch = Scratch::new("parentage");
    let state = scratch.path().join("state");
    let ready = scratch.path().join("ready");
    let mut guardian = undertaker()
        .arg("--state-dir")
        .arg(&state)
        .args(["run", "--tier", "subreaper", "--", "sh", "-c"])
        .arg(format!(
            "sh -c 'env -i sleep 1000 & env -i setsid sleep 1000 & wait' & sleep 0.2; echo > {}; wait",
            ready.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_file(&ready, Duration::from_secs(60)));
    // Every undertaker process at once, so the tree is left for the sweep.
    kill9_all(&mut guardian);
    // CMD dies with its guardian (PDEATHSIG); the inner shell and its two scrubbed
    // children stay.
    assert!(wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self().len() == 3
    }));
    let out = ut_within(
        &state,
        &["sweep", "--grace", "300ms"],
        Duration::from_secs(60),
    )
    .unwrap();
    let left = survivors_after(Duration::from_secs(60));
    assert!(
        left.is_empty(),
        "sweep left {left:#?}\n{}",
        text(&out.stdout)
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
}

// ---------------------------------------------------------------------------------
// Self-healing: a `run` whose CMD keeps running finishes a dead guardian's tree and
// removes the empty tree cgroup of another, with no `sweep` by hand.

#[test]
fn a_running_guardian_finishes_dead_guardians_trees_in_the_background() {
    if !isolate("a_running_guardian_finishes_dead_guardians_trees_in_the_background") {
        return;
    }
    let scratch = Scratch::new("heal");
    let state = scratch.path().join("state");
    orphan_a_subreaper_tree(&state, &scratch.path().join("ready"));
    // A cgroup tree whose guardian died with it: an empty cgroup left behind.
    let mut empty_cgroup = None;
    if undertaker::testing::cgroup_tier_available().is_ok() {
        let mut gone = undertaker()
            .args(["run", "--tier", "cgroup", "--", "sleep", "1000"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let guardian = {
            let mut g = None;
            assert!(wait_until(Duration::from_secs(60), || {
                g = guardian_of(&gone);
                g.is_some_and(|g| !undertaker::testing::tree_cgroups_of_live_guardian(g).is_empty())
            }));
            g.unwrap()
        };
        let cg = undertaker::testing::tree_cgroups_of_live_guardian(guardian).remove(0);
        kill9_all(&mut gone);
        assert!(wait_until(Duration::from_secs(60), || {
            reap_zombies();
            live_processes_except_self().len() == 2
        }));
        assert!(cg.exists());
        empty_cgroup = Some(cg);
    }
    // A healthy tree: once its CMD runs, its guardian heals in the background.
    let mut healer = undertaker()
        .arg("--state-dir")
        .arg(&state)
        .args(["run", "--label", "healer", "--", "sleep", "1000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let healed = wait_until(Duration::from_secs(60), || {
        reap_zombies();
        let others = live_processes_except_self().len();
        // Left: the healer's sentinel, guardian and CMD.
        others == 3 && empty_cgroup.as_ref().is_none_or(|c| !c.exists())
    });
    let ps = json(&ut(&state, &["ps", "--all", "--json"]));
    signal_child(&healer, rustix::process::Signal::TERM);
    assert!(wait_child(&mut healer, Duration::from_secs(60)).is_some());
    assert!(
        healed,
        "not healed: {:?} left, cgroup {:?}; {ps}",
        live_processes_except_self(),
        empty_cgroup
    );
    let dead_row = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["label"] == "dead")
        .cloned()
        .unwrap();
    assert_eq!(dead_row["state"], "finished", "{dead_row}");
    let log = text(&ut(&state, &["log"]).stdout);
    assert!(log.contains("heal"), "{log}");
    assert_nothing_left();
}

/// `supervise` heals too, once it serves.
#[test]
fn a_serving_supervisor_finishes_dead_guardians_trees_in_the_background() {
    if !isolate("a_serving_supervisor_finishes_dead_guardians_trees_in_the_background") {
        return;
    }
    let scratch = Scratch::new("healsup");
    let state = scratch.path().join("state");
    orphan_a_subreaper_tree(&state, &scratch.path().join("ready"));
    let mut supervisor = undertaker()
        .arg("supervise")
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let healed = wait_until(Duration::from_secs(60), || {
        reap_zombies();
        live_processes_except_self() == [supervisor.id() as i32]
    });
    let left = live_processes_except_self();
    drop(supervisor.stdin.take());
    assert!(wait_child(&mut supervisor, Duration::from_secs(60)).is_some());
    assert!(healed, "not healed: {left:?}");
    assert_nothing_left();
}

// ---------------------------------------------------------------------------------
// Every wait at start-up is bounded: a corrupt registry whose recovery lock is held by
// a process that never lets go (stopped, stuck) neither holds up CMD nor a sweep.

#[test]
fn a_held_recovery_lock_never_holds_up_cmd_or_sweep() {
    if !isolate("a_held_recovery_lock_never_holds_up_cmd_or_sweep") {
        return;
    }
    let scratch = Scratch::new("recovery");
    let state = scratch.path().join("state");
    let out = ut_within(&state, &["run", "--", "true"], Duration::from_secs(60)).unwrap();
    assert!(out.status.success());
    std::fs::write(
        state.join("registry.db"),
        "not a database, not at all\n".repeat(8),
    )
    .unwrap();
    let locked = scratch.path().join("locked");
    let mut holder = Command::new("perl")
        .args([
            "-e",
            "use Fcntl qw(:flock); open(my $f, '>>', $ARGV[0]) or die; flock($f, LOCK_EX) or die; \
             open(my $o, '>', $ARGV[1]) or die; close $o; sleep 1000",
        ])
        .arg(state.join("registry.lock"))
        .arg(&locked)
        .spawn()
        .unwrap();
    assert!(wait_for_file(&locked, Duration::from_secs(60)));
    let run = ut_within(
        &state,
        &["run", "--", "sh", "-c", "echo ran; exit 7"],
        Duration::from_secs(60),
    );
    let sweep = ut_within(&state, &["sweep"], Duration::from_secs(60));
    kill9(&mut holder);
    let run = run.expect("run waited for the recovery lock");
    assert_eq!(run.status.code(), Some(7), "{}", text(&run.stderr));
    assert_eq!(text(&run.stdout), "ran\n");
    let sweep = sweep.expect("sweep waited for the recovery lock");
    assert!(
        text(&sweep.stderr).contains("recovering"),
        "{}",
        text(&sweep.stderr)
    );
    assert_nothing_left();
}
