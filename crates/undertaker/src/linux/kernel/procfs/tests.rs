use super::*;
use proptest::prelude::*;
use std::process::{Command, Stdio};

/// The 30 fields after starttime on a 6.x kernel, with realistic values.
const TAIL: [&str; 30] = [
    "23138304",
    "1024",
    "18446744073709551615",
    "94811880243200",
    "94811880575489",
    "140728870614880",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "17",
    "3",
    "0",
    "0",
    "0",
    "0",
    "0",
    "94811880610800",
    "94811880624160",
    "94811896975360",
    "140728870620043",
    "140728870620063",
    "140728870620063",
    "140728870621163",
    "0",
];

#[allow(clippy::too_many_arguments)]
fn kernel_stat_line(
    pid: i32,
    comm: &str,
    state: char,
    ppid: i32,
    pgrp: i32,
    session: i32,
    tty_nr: i32,
    starttime: u64,
) -> String {
    let head = format!(
        "{pid} ({comm}) {state} {ppid} {pgrp} {session} {tty_nr} -1 4194560 \
         1370 0 0 0 2 1 0 0 20 0 1 0 {starttime}"
    );
    let line = format!("{head} {}\n", TAIL.join(" "));
    let after_comm = line[line.rfind(')').unwrap() + 1..]
        .split_ascii_whitespace()
        .count();
    assert_eq!(after_comm + 2, 52, "test line must have 52 fields");
    line
}

fn sample(comm: &str) -> String {
    kernel_stat_line(1234, comm, 'S', 1, 1234, 1234, 34816, 5_000_000)
}

fn is_malformed(r: Result<impl std::fmt::Debug, ProcError>) -> bool {
    matches!(r, Err(ProcError::Malformed { .. }))
}

#[test]
fn stat_plain() {
    let s = parse_stat(&sample("bash")).unwrap();
    assert_eq!(
        s,
        Stat {
            pid: 1234,
            comm: "bash".into(),
            state: 'S',
            ppid: 1,
            pgrp: 1234,
            session: 1234,
            tty_nr: 34816,
            starttime: 5_000_000,
        }
    );
}

#[test]
fn stat_comm_with_parens_and_fake_fields() {
    let s = parse_stat(&sample("a) b) (c")).unwrap();
    assert_eq!(s.comm, "a) b) (c");
    assert_eq!(s.state, 'S');
    assert_eq!(s.ppid, 1);

    // Looks like a complete line inside the comm itself.
    let s = parse_stat(&sample("x) R 99 99 99 0 -1")).unwrap();
    assert_eq!(s.comm, "x) R 99 99 99 0 -1");
    assert_eq!((s.state, s.ppid), ('S', 1));
}

#[test]
fn stat_comm_with_open_paren_newline_and_empty() {
    for comm in ["(", "((", "a\nb", "\n", " ", "", ")", "🦀 )("] {
        let s = parse_stat(&sample(comm)).unwrap();
        assert_eq!(s.comm, comm);
        assert_eq!(s.starttime, 5_000_000);
    }
}

#[test]
fn stat_missing_fields() {
    assert!(is_malformed(parse_stat("")));
    assert!(is_malformed(parse_stat("1234")));
    assert!(is_malformed(parse_stat("1234 (bash")));
    assert!(is_malformed(parse_stat("1234 bash) S 1")));
    assert!(is_malformed(parse_stat("1234 )bash( S 1")));
    assert!(is_malformed(parse_stat("1234 (bash) S 1 1234 1234 0\n")));
    let line = sample("bash");
    let cut = line.split(' ').take(21).collect::<Vec<_>>().join(" ");
    assert!(is_malformed(parse_stat(&cut)), "{cut}");
    let cut = line.split(' ').take(22).collect::<Vec<_>>().join(" ");
    assert_eq!(parse_stat(&cut).unwrap().starttime, 5_000_000);
}

#[test]
fn stat_non_numeric_fields() {
    let good = sample("bash");
    for (idx, bad) in [
        (0, "x"),
        (0, "-5"),
        (0, "0"),
        (3, "one"),
        (4, "1.5"),
        (6, "0x10"),
    ] {
        let mut f: Vec<&str> = good.split(' ').collect();
        f[idx] = bad;
        assert!(
            is_malformed(parse_stat(&f.join(" "))),
            "field {idx} = {bad:?}"
        );
    }
    // state must be exactly one character
    assert!(is_malformed(parse_stat(&good.replacen(") S ", ") SS ", 1))));
    // starttime is the 22nd field
    let mut f: Vec<&str> = good.split(' ').collect();
    f[21] = "soon";
    assert!(is_malformed(parse_stat(&f.join(" "))));
}

#[test]
fn stat_negative_tty_and_extreme_starttime() {
    let s = parse_stat(&kernel_stat_line(7, "t", 'R', 0, 0, 0, -1, u64::MAX)).unwrap();
    assert_eq!((s.tty_nr, s.ppid, s.starttime), (-1, 0, u64::MAX));
    let s = parse_stat(&kernel_stat_line(
        7,
        "t",
        'R',
        0,
        0,
        0,
        i32::MIN,
        u64::MAX - 1,
    ))
    .unwrap();
    assert_eq!((s.tty_nr, s.starttime), (i32::MIN, u64::MAX - 1));
    let over = sample("t").replace(" 5000000 ", " 18446744073709551616 ");
    assert!(is_malformed(parse_stat(&over)));
}

/// The tid of the calling thread, via /proc/thread-self -> "PID/task/TID".
fn current_tid() -> i32 {
    let link = fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

#[test]
fn stat_of_current_process() {
    let proc = Procfs::new();
    let me = std::process::id() as i32;
    let s = proc.stat(me).unwrap();
    assert_eq!(s.pid, me);
    assert_eq!(s.ppid, std::os::unix::process::parent_id() as i32);
    assert!(s.starttime > 0);
    // The leader may be parked waiting for test threads; the thread
    // doing the read is necessarily running.
    let t = proc.stat(current_tid()).unwrap();
    assert_eq!(t.state, 'R');
    assert_eq!(t.ppid, s.ppid);
    assert_eq!((t.pgrp, t.session), (s.pgrp, s.session));
}

#[test]
fn status_real_uid() {
    let text = "Name:\tbash\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t1\n\
                Uid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n";
    assert_eq!(parse_status_real_uid(text), Ok(1000));
    assert_eq!(parse_status_real_uid("Uid: 4294967295 0 0 0"), Ok(u32::MAX));
    assert!(is_malformed(parse_status_real_uid("Name:\tx\nGid:\t1\n")));
    assert!(is_malformed(parse_status_real_uid("Uid:\n")));
    assert!(is_malformed(parse_status_real_uid("Uid:\t-1\t0\n")));
    assert!(is_malformed(parse_status_real_uid("Uid:\t4294967296\t0\n")));
    // "Uid:" must start the line.
    assert!(is_malformed(parse_status_real_uid("Name:\tUid: 5\n")));

    use std::os::unix::fs::MetadataExt;
    let me = std::process::id() as i32;
    let owner = fs::metadata(format!("/proc/{me}")).unwrap().uid();
    assert_eq!(Procfs::new().real_uid(me), Ok(owner));
}

#[test]
fn environ_lookup() {
    let env: &[u8] =
        b"UNDERTAKER_TREEX=1\0PATH=/bin\0\xff\xfe=bin\0UNDERTAKER_TREE=abc=d\0UNDERTAKER_TREE=second\0";
    assert_eq!(environ_value(env, "UNDERTAKER_TREE"), Some(&b"abc=d"[..]));
    assert_eq!(environ_value(env, "UNDERTAKER_TREEX"), Some(&b"1"[..]));
    assert_eq!(environ_value(env, "UNDERTAKER_TRE"), None);
    assert_eq!(environ_value(env, "PATH"), Some(&b"/bin"[..]));
    assert_eq!(environ_value(env, ""), None);
    assert_eq!(environ_value(b"=x\0", ""), None);

    // Non-UTF-8 values come back as raw bytes; a NUL always ends the value.
    assert_eq!(environ_value(b"K=\xff\x00rest\0", "K"), Some(&b"\xff"[..]));
    assert_eq!(environ_value(b"K=\xff\x80\0", "K"), Some(&b"\xff\x80"[..]));
    // Empty value vs. missing '='.
    assert_eq!(environ_value(b"K=\0", "K"), Some(&b""[..]));
    assert_eq!(environ_value(b"K\0K=v", "K"), Some(&b"v"[..]));
    // Truncated: unterminated last entry, or cut inside the key.
    assert_eq!(environ_value(b"A=1\0K=va", "K"), Some(&b"va"[..]));
    assert_eq!(
        environ_value(b"A=1\0UNDERTAKER_TR", "UNDERTAKER_TREE"),
        None
    );
    assert_eq!(environ_value(b"", "K"), None);
    assert_eq!(environ_value(b"\0\0\0", "K"), None);
}

#[test]
fn boot_id_parsing() {
    let id = "3888e4fa-e236-49e7-996b-07e525d70863";
    assert_eq!(parse_boot_id(&format!("{id}\n")).as_deref(), Ok(id));
    assert_eq!(
        parse_boot_id(&format!(" {}\n", id.to_uppercase())).as_deref(),
        Ok(id)
    );
    for bad in [
        "",
        "\n",
        "3888e4fa-e236-49e7-996b-07e525d7086",
        "3888e4fa-e236-49e7-996b-07e525d708633",
        "3888e4fae-236-49e7-996b-07e525d70863",
        "3888e4fa-e236-49e7-996b-07e525d7086g",
        "3888e4fa e236 49e7 996b 07e525d70863",
        "3888e4fa-e236-49e7-996b-07e525d7086é",
    ] {
        assert!(is_malformed(parse_boot_id(bad)), "{bad:?}");
    }
}

#[test]
fn boot_id_real() {
    let id = Procfs::new().boot_id().unwrap();
    let raw = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(id, raw.trim().to_ascii_lowercase());
    assert_eq!(id.len(), 36);
}

#[test]
fn pids_real_include_self() {
    let pids = Procfs::new().pids().unwrap();
    assert!(pids.contains(&(std::process::id() as i32)));
    assert!(pids.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn environment_and_parent_of_a_child() {
    let proc = Procfs::new();
    let me = std::process::id() as i32;
    let mut child = Command::new("sleep")
        .arg("5")
        .env("UNDERTAKER_TREEX", "1")
        .env("UNDERTAKER_TREE", "tok\u{e9}n")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let kid = child.id() as i32;
    // spawn() returns once exec has closed the close-on-exec fds, slightly before
    // the new image's environment is mapped: wait for it (setup, not a verdict).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while proc
        .environ_value(kid, "UNDERTAKER_TREE")
        .ok()
        .flatten()
        .is_none()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    let result = std::panic::catch_unwind(|| {
        assert_eq!(proc.stat(kid).unwrap().ppid, me);
        assert_eq!(
            proc.environ_value(kid, "UNDERTAKER_TREE")
                .unwrap()
                .as_deref(),
            Some("tok\u{e9}n".as_bytes())
        );
        assert_eq!(proc.environ_value(kid, "UNDERTAKER_TRE"), Ok(None));
    });

    child.kill().unwrap();
    child.wait().unwrap();
    result.unwrap();
    assert_eq!(proc.stat(kid), Err(ProcError::Gone(kid)));
}

#[test]
fn io_error_mapping() {
    let p = Path::new("/proc/5/stat");
    let e = io::Error::from(io::ErrorKind::NotFound);
    assert_eq!(map_io(5, p, &e), ProcError::Gone(5));
    assert_eq!(
        map_io(5, p, &io::Error::from_raw_os_error(ESRCH)),
        ProcError::Gone(5)
    );
    let e = io::Error::from(io::ErrorKind::PermissionDenied);
    assert_eq!(map_io(5, p, &e), ProcError::Denied(5));
    assert!(matches!(
        map_io(5, p, &io::Error::from_raw_os_error(5)),
        ProcError::Io { .. }
    ));
}

/// A throwaway directory laid out like a proc mount.
struct FakeProc(PathBuf);

impl FakeProc {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("undertaker-procfs-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        FakeProc(dir)
    }

    fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }

    fn process(&self, pid: i32, ppid: i32) {
        let line = kernel_stat_line(pid, "p", 'S', ppid, pid, pid, 0, 100);
        self.write(&format!("{pid}/stat"), line);
        fs::create_dir_all(self.0.join(format!("{pid}/task/{pid}"))).unwrap();
    }

    fn procfs(&self) -> Procfs {
        Procfs::at(&self.0)
    }
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn fake_root_basics() {
    let fake = FakeProc::new("basics");
    fake.process(10, 1);
    fake.write("11/stat", "");
    fake.write("12/stat", sample("x"));
    fake.write(
        "sys/kernel/random/boot_id",
        "AAAAAAAA-bbbb-cccc-dddd-eeeeeeeeeeee\n",
    );
    for junk in ["self", "1a", "0", "-3", "007x"] {
        fs::create_dir_all(fake.0.join(junk)).unwrap();
    }
    let proc = fake.procfs();
    assert_eq!(proc.pids(), Ok(vec![10, 11, 12]));
    assert_eq!(proc.stat(10).unwrap().ppid, 1);
    assert_eq!(proc.stat(11), Err(ProcError::Gone(11)));
    assert!(is_malformed(proc.stat(12))); // says pid 1234
    assert_eq!(proc.stat(99), Err(ProcError::Gone(99)));
    assert_eq!(proc.real_uid(99), Err(ProcError::Gone(99)));
    assert_eq!(proc.environ_value(99, "K"), Err(ProcError::Gone(99)));
    assert_eq!(
        proc.boot_id().as_deref(),
        Ok("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
    );
    assert!(matches!(
        Procfs::at(fake.0.join("nope")).pids(),
        Err(ProcError::Io { .. })
    ));
}

#[test]
fn fake_root_environ_cap_drops_partial_entry() {
    let fake = FakeProc::new("environ-cap");
    let mut env = b"A=1\0UNDERTAKER_TREE=first\0".to_vec();
    env.resize(ENVIRON_CAP - 4, b'x');
    env.extend_from_slice(b"\0B=123456\0");
    fake.write("10/environ", &env);
    let proc = fake.procfs();
    assert_eq!(
        proc.environ_value(10, "UNDERTAKER_TREE")
            .unwrap()
            .as_deref(),
        Some(&b"first"[..])
    );
    // "B=12" fits under the cap but is only a prefix of the real value.
    assert_eq!(proc.environ_value(10, "B"), Ok(None));
}

fn comm_strategy() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        3 => any::<char>(),
        1 => Just('('),
        1 => Just(')'),
        1 => Just(' '),
        1 => Just('\n'),
    ];
    proptest::collection::vec(ch, 0..=64).prop_map(|v| v.into_iter().collect())
}

proptest! {
    #[test]
    fn parsers_never_panic_on_strings(s in any::<String>()) {
        let _ = parse_stat(&s);
        let _ = parse_status_real_uid(&s);
        let _ = parse_boot_id(&s);
        let _ = environ_value(s.as_bytes(), &s);
    }

    #[test]
    fn parsers_never_panic_on_procish_strings(s in "[0-9 ()\\-:a-fA-FSRUid\n]{0,120}") {
        let _ = parse_stat(&s);
        let _ = parse_status_real_uid(&s);
        let _ = parse_boot_id(&s);
    }

    #[test]
    fn parsers_never_panic_on_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        key in ".{0,8}",
    ) {
        let lossy = String::from_utf8_lossy(&bytes);
        let _ = parse_stat(&lossy);
        let _ = parse_status_real_uid(&lossy);
        let _ = parse_boot_id(&lossy);
        let _ = environ_value(&bytes, &key);
    }

    #[test]
    fn stat_round_trip(
        pid in 1..=i32::MAX,
        comm in comm_strategy(),
        state in proptest::sample::select(vec!['R', 'S', 'D', 'Z', 'T', 't', 'X', 'I', 'P']),
        ppid in any::<i32>(),
        pgrp in any::<i32>(),
        session in any::<i32>(),
        tty_nr in any::<i32>(),
        starttime in any::<u64>(),
    ) {
        let line = kernel_stat_line(pid, &comm, state, ppid, pgrp, session, tty_nr, starttime);
        let parsed = parse_stat(&line).unwrap();
        prop_assert_eq!(
            parsed,
            Stat { pid, comm, state, ppid, pgrp, session, tty_nr, starttime }
        );
    }

    #[test]
    fn environ_matches_first_entry(
        entries in proptest::collection::vec(("[A-C_]{0,3}", "[^\0]{0,6}"), 0..8),
        key in "[A-C_]{1,3}",
    ) {
        let mut env = Vec::new();
        for (k, v) in &entries {
            env.extend_from_slice(format!("{k}={v}\0").as_bytes());
        }
        let expected = entries.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_bytes());
        prop_assert_eq!(environ_value(&env, &key), expected);
    }

    #[test]
    fn boot_id_round_trip(bytes in proptest::array::uniform16(any::<u8>()), upper in any::<bool>()) {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let id = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
        let input = if upper { id.to_uppercase() } else { id.clone() };
        prop_assert_eq!(parse_boot_id(&format!("{input}\n")), Ok(id));
    }
}

#[test]
fn start_times_are_read_as_the_initial_time_namespace_sees_them() {
    assert_eq!(
        parse_boot_offset("monotonic 0 0\nboottime 86400 0\n", 100),
        8_640_000
    );
    assert_eq!(parse_boot_offset("boottime -10 500000000\n", 100), -950);
    assert_eq!(parse_boot_offset("monotonic 5 0\n", 100), 0);
    assert_eq!(parse_boot_offset("garbage", 100), 0);
    // A reader in a time namespace 86 400 s ahead sees the kernel's start time plus
    // that offset; the start time it reports is the one every reader agrees on.
    let fake = FakeProc::new("timens");
    let line = kernel_stat_line(7, "p", 'S', 1, 7, 7, 0, 8_640_015);
    fake.write("7/stat", line);
    fake.write("self/timens_offsets", "monotonic 0 0\nboottime 86400 0\n");
    let hz = rustix::param::clock_ticks_per_second();
    let expected = 8_640_015 - 86_400 * hz;
    assert_eq!(fake.procfs().stat(7).unwrap().starttime, expected);
}

#[test]
fn fdinfo_flags_are_octal() {
    let text = "pos:\t0\nflags:\t02000001\nmnt_id:\t15\nino:\t1234\n";
    assert_eq!(parse_fdinfo_flags(text), Some(0o2000001));
    assert_eq!(parse_fdinfo_flags(text).map(|f| f & 3), Some(1));
    assert_eq!(parse_fdinfo_flags("pos:\t0\n"), None);
    assert_eq!(parse_fdinfo_flags("flags:\t9\n"), None);
}

#[test]
fn pipe_ends_tell_the_write_end_from_the_read_end() {
    use std::os::fd::AsRawFd;
    let (read, write) = rustix::pipe::pipe().unwrap();
    let inode = rustix::fs::fstat(&read).unwrap().st_ino;
    let procfs = Procfs::new();
    let mut modes = procfs.pipe_ends(std::process::id() as i32, inode).unwrap();
    modes.sort_unstable();
    assert_eq!(modes, [0, 1], "read end O_RDONLY, write end O_WRONLY");
    drop(write);
    assert_eq!(
        procfs.pipe_ends(std::process::id() as i32, inode).unwrap(),
        [0],
        "fd {} alone",
        read.as_raw_fd()
    );
}

#[test]
fn capped_reads_keep_every_byte_across_the_stack_buffer_and_cut_at_the_cap() {
    let dir = std::env::temp_dir().join(format!("undertaker-capped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f");
    for len in [0usize, 1, 4095, 4096, 4097, 8192, 10_000] {
        let content: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::write(&file, &content).unwrap();
        for cap in [0usize, 100, 4095, 4096, 4097, 9000, 1 << 20] {
            let (got, truncated) = read_capped_with(&file, cap, false).unwrap();
            assert_eq!(got, content[..len.min(cap)], "len {len} cap {cap}");
            assert_eq!(truncated, len > cap, "len {len} cap {cap}");
        }
    }
    let text = "22 27 0:21 / /proc rw - proc proc rw\n".repeat(200);
    std::fs::write(&file, &text).unwrap();
    assert_eq!(read_text(&file).unwrap(), text);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A child looked at the moment `spawn` returns is often inside exec (std's spawn
/// waits only until the child's new memory map is in, not its new stack), where its
/// environ reads empty: the read is made again, so the marker is still seen.
#[test]
fn a_process_read_inside_exec_still_shows_its_environment() {
    let procfs = Procfs::new();
    let mut misses = 0;
    for _ in 0..300 {
        let mut child = Command::new("sleep")
            .arg("30")
            .env("UNDERTAKER_TEST_EXEC_WINDOW", "seen")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).unwrap();
        let got = procfs.environ_value(pid, "UNDERTAKER_TEST_EXEC_WINDOW");
        if got.as_ref().ok().and_then(Option::as_deref) != Some(&b"seen"[..]) {
            misses += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    assert_eq!(
        misses, 0,
        "{misses} of 300 reads missed a live child's environment"
    );
}
