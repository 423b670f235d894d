//! Hostile conditions: each test reproduces one way undertaker broke when tried
//! adversarially (docs/RELIABILITY.md, "Hostile conditions"), each in a private PID
//! namespace with its own scratch state dir.

mod common;

use common::*;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Waits for `cmd` with a bound; a run that hangs is killed and reported as `None`.
fn output_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
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
    let status = match wait_child(&mut child, limit) {
        Some(s) => s,
        None => {
            kill9(&mut child);
            return None;
        }
    };
    Some(Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `undertaker --state-dir DIR ARGS…` with a bound on how long it may take.
fn ut_within(state: &Path, args: &[&str], limit: Duration) -> Option<Output> {
    output_within(
        undertaker()
            .arg("--state-dir")
            .arg(state)
            .args(args)
            .env_remove("UNDERTAKER_STATE_DIR"),
        limit,
    )
}

fn assert_nothing_left() {
    let left = survivors_after(Duration::from_secs(10));
    assert!(left.is_empty(), "survivors: {left:#?}");
}

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
    let status = wait_child(&mut child, Duration::from_secs(30));
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
        Duration::from_secs(20),
    )
    .expect("run hung");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("ran"), "CMD ran");
    assert_eq!(text(&out.stderr).trim().lines().count(), 1);

    // A row with such a label may still exist (older versions wrote them): ps copes.
    use undertaker::registry::*;
    let dir = StateDir::prepare(&state, rustix::process::getuid().as_raw()).unwrap();
    let reg = Registry::open(&dir, &boot_id()).unwrap();
    reg.insert_tree(&TreeRecord {
        id: "ab".repeat(16),
        boot_id: boot_id(),
        label: Some(long.clone()),
        tier: "subreaper".into(),
        state: StoredState::Finished,
        guardian: GuardianRecord {
            pid: 999_999,
            starttime: 1,
            pgid: 999_999,
            pidfs_inode: None,
        },
        root: None,
        owner: OwnerRecord {
            kind: "parent".into(),
            pid: None,
            starttime: None,
        },
        cgroup_path: None,
        cgroup_id: None,
        created_ms: now_ms(),
        updated_ms: now_ms(),
        finished_ms: Some(now_ms()),
        exit_status: Some(0),
    })
    .unwrap();
    drop(reg);
    let ps = ut_within(&state, &["ps", "--all"], Duration::from_secs(20)).expect("ps hung");
    assert_eq!(ps.status.code(), Some(0), "{}", text(&ps.stderr));
    assert_eq!(text(&ps.stdout).lines().count(), 2);
    let ps = ut_within(&state, &["ps", "--all", "--json"], Duration::from_secs(20)).unwrap();
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
        let out = ut_within(&state, &["run", "--", "true"], Duration::from_secs(20)).unwrap();
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
        let status = wait_child(&mut child, Duration::from_secs(20)).expect("hung");
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
        Duration::from_secs(20),
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
    let ps = ut_within(&state, &["ps", "--all"], Duration::from_secs(20)).unwrap();
    clean("ps", &ps, 2);
    // JSON keeps the label exactly.
    let ps = ut_within(&state, &["ps", "--all", "--json"], Duration::from_secs(20)).unwrap();
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
    let live = wait_until(Duration::from_secs(20), || {
        let out = ut(&state, &["ps", "--json"]);
        json(&out).as_array().is_some_and(|a| a.len() == 1)
    });
    assert!(live, "tree never showed up");
    let id = json(&ut(&state, &["ps", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let kill = ut_within(&state, &["kill", &id], Duration::from_secs(30)).unwrap();
    clean("kill", &kill, 1);
    assert!(wait_child(&mut guardian, Duration::from_secs(20)).is_some());
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
            Duration::from_secs(20),
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
        Duration::from_secs(20),
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
            Duration::from_secs(20),
        )
        .unwrap();
        assert!(out.status.success());
    }
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
    let out = ut_within(&state, &["ps"], Duration::from_secs(20)).unwrap();
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
        let out = ut_within(Path::new(&spelled), &["ps"], Duration::from_secs(20)).unwrap();
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
            Duration::from_secs(20),
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
    let out = ut_within(&state, &["run", "--", "true"], Duration::from_secs(20)).unwrap();
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
            Duration::from_secs(20),
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
