//! Readers for `/proc`.
//!
//! Everything here treats procfs contents as untrusted input: a process can
//! put almost anything in its `comm` or environment, and a process can exit
//! between any two reads. Parsers therefore return errors instead of
//! panicking, and I/O failures that mean "the process is gone" are reported
//! as [`ProcError::Gone`] so callers can treat them as a normal race.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Errors from reading or parsing procfs files.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ProcError {
    /// ENOENT/ESRCH while reading the process's files: it exited (or never existed).
    #[error("process {0} not found")]
    Gone(i32),
    #[error("permission denied reading /proc/{0}")]
    Denied(i32),
    #[error("malformed {file}: {why}")]
    Malformed { file: &'static str, why: String },
    #[error("i/o error reading {path}: {msg}")]
    Io { path: String, msg: String },
}

/// Fields of /proc/PID/stat we rely on. starttime is field 22 kept exact (clock ticks since boot, u64).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stat {
    pub pid: i32,
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    pub tty_nr: i32,
    /// Together with `pid` this identifies a process across pid reuse.
    pub starttime: u64,
}

/// `why` strings quote offending input; keep them short because the input
/// may be megabytes of attacker-chosen bytes.
fn snippet(s: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = s.chars().take(MAX).collect();
    if s.chars().nth(MAX).is_some() {
        out.push('…');
    }
    format!("{out:?}")
}

fn malformed(file: &'static str, why: impl Into<String>) -> ProcError {
    ProcError::Malformed {
        file,
        why: why.into(),
    }
}

/// Strict pid syntax: the kernel only ever prints plain decimal digits, so a
/// sign, whitespace or zero means we are not looking at a pid.
fn parse_pid(tok: &str) -> Option<i32> {
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tok.parse::<i32>().ok().filter(|&p| p > 0)
}

/// Paren-aware: comm is between the FIRST '(' and the LAST ')' (comm may contain spaces, '(' and ')', even newlines). Fields after the last ')' are space-separated: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime ...
///
/// The pid before the comm never contains '(' and no field after it
/// contains ')', which is why first/last is unambiguous.
pub fn parse_stat(text: &str) -> Result<Stat, ProcError> {
    const FILE: &str = "stat";
    let open = text
        .find('(')
        .ok_or_else(|| malformed(FILE, "no '(' before comm"))?;
    let close = text
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| malformed(FILE, "no ')' after comm"))?;

    let pid_tok = text[..open].trim();
    let pid = parse_pid(pid_tok)
        .ok_or_else(|| malformed(FILE, format!("bad pid {}", snippet(pid_tok))))?;
    let comm = text[open + 1..close].to_owned();

    // Indices relative to the first field after comm (field 3, `state`).
    const STATE: usize = 0;
    const PPID: usize = 1;
    const PGRP: usize = 2;
    const SESSION: usize = 3;
    const TTY_NR: usize = 4;
    const STARTTIME: usize = 19;

    let fields: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    if fields.len() <= STARTTIME {
        return Err(malformed(
            FILE,
            format!(
                "expected at least {} fields after comm, got {}",
                STARTTIME + 1,
                fields.len()
            ),
        ));
    }

    fn num<T: std::str::FromStr>(tok: &str, name: &str) -> Result<T, ProcError> {
        tok.parse()
            .map_err(|_| malformed("stat", format!("{name} is not a number: {}", snippet(tok))))
    }

    let mut state_chars = fields[STATE].chars();
    let state = match (state_chars.next(), state_chars.next()) {
        (Some(c), None) => c,
        _ => {
            return Err(malformed(
                FILE,
                format!("state is not one character: {}", snippet(fields[STATE])),
            ))
        }
    };

    Ok(Stat {
        pid,
        comm,
        state,
        ppid: num(fields[PPID], "ppid")?,
        pgrp: num(fields[PGRP], "pgrp")?,
        session: num(fields[SESSION], "session")?,
        tty_nr: num(fields[TTY_NR], "tty_nr")?,
        starttime: num(fields[STARTTIME], "starttime")?,
    })
}

/// Real uid = first number on the "Uid:" line of /proc/PID/status.
///
/// The real uid (not the effective one) is what says who launched the
/// process; setuid binaries keep it.
pub fn parse_status_real_uid(text: &str) -> Result<u32, ProcError> {
    const FILE: &str = "status";
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .ok_or_else(|| malformed(FILE, "no Uid: line"))?;
    let tok = line
        .split_ascii_whitespace()
        .next()
        .ok_or_else(|| malformed(FILE, "empty Uid: line"))?;
    tok.parse()
        .map_err(|_| malformed(FILE, format!("bad real uid {}", snippet(tok))))
}

/// /proc/PID/environ is NUL-separated KEY=VALUE entries (may be truncated/garbage/non-UTF8). Return the value bytes of the FIRST entry whose key is exactly `key`.
///
/// First match wins because that is what `getenv` does on the initial
/// environment. An unterminated final entry is still considered: the kernel
/// does not guarantee the trailing NUL if the process scribbled over its
/// environment block. An empty `key` never matches.
pub fn environ_value<'a>(environ: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let key = key.as_bytes();
    if key.is_empty() {
        return None;
    }
    environ.split(|&b| b == 0).find_map(|entry| {
        let eq = entry.iter().position(|&b| b == b'=')?;
        (&entry[..eq] == key).then(|| &entry[eq + 1..])
    })
}

/// /proc/PID/cgroup: the cgroup v2 path (the `0::` line), if the process has one.
pub fn parse_cgroup_v2(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|p| p.trim_end().to_owned())
}

/// /proc/PID/task/TID/children: space separated pids, possibly trailing space/newline. Ignore empty tokens; malformed token -> error.
pub fn parse_children(text: &str) -> Result<Vec<i32>, ProcError> {
    text.split_ascii_whitespace()
        .map(|tok| {
            parse_pid(tok).ok_or_else(|| malformed("children", format!("bad pid {}", snippet(tok))))
        })
        .collect()
}

/// /proc/sys/kernel/random/boot_id: a UUID line like "4f1c...-....\n". Return it trimmed, lowercase; validate it is 36 chars of hex and dashes in UUID layout.
///
/// The boot id scopes `(pid, starttime)` identities to one boot, so a
/// garbled one must be rejected rather than compared.
pub fn parse_boot_id(text: &str) -> Result<String, ProcError> {
    let id = text.trim();
    let well_formed = id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if !well_formed {
        return Err(malformed("boot_id", format!("not a UUID: {}", snippet(id))));
    }
    Ok(id.to_ascii_lowercase())
}

/// ESRCH: reading a file of a process that died after `open`.
const ESRCH: i32 = 3;

/// stat/status are a few KiB; anything this large is not a real procfs file.
const SMALL_FILE_CAP: usize = 1 << 20;
/// Environments larger than this are not worth scanning for our marker.
const ENVIRON_CAP: usize = 4 << 20;

/// pid_max (4M) pids of up to 8 bytes each fit comfortably.
const CHILDREN_CAP: usize = 64 << 20;

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(ESRCH)
}

fn map_io(pid: i32, path: &Path, e: &io::Error) -> ProcError {
    if is_gone(e) {
        ProcError::Gone(pid)
    } else if e.kind() == io::ErrorKind::PermissionDenied {
        ProcError::Denied(pid)
    } else {
        plain_io(path, e)
    }
}

fn plain_io(path: &Path, e: &io::Error) -> ProcError {
    ProcError::Io {
        path: path.display().to_string(),
        msg: e.to_string(),
    }
}

/// Reads at most `cap` bytes; the flag says whether the file was longer.
/// procfs reports size 0, so we cannot size the buffer up front. procfs fills a read
/// with as much as fits, so one 4 KiB read covers stat/status and most environments;
/// only a full read is followed by more (the generic growth strategy costs ~12 reads).
fn read_capped(path: &Path, cap: usize) -> io::Result<(Vec<u8>, bool)> {
    read_capped_with(path, cap, false)
}

/// [`read_capped`]; `short_is_eof`: the file is produced whole at open/first read
/// (single-record seq_files such as stat and status), so a short read is its end and
/// needs no second read to confirm.
fn read_capped_with(path: &Path, cap: usize, short_is_eof: bool) -> io::Result<(Vec<u8>, bool)> {
    const FIRST: usize = 4096;
    let mut file = File::open(path)?;
    let mut buf = vec![0u8; FIRST.min(cap + 1)];
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if short_is_eof && len < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if len == buf.len() {
            if len > cap {
                break;
            }
            let grown = (buf.len() * 2).min(cap + 1);
            buf.resize(grown, 0);
        }
    }
    buf.truncate(len);
    let truncated = buf.len() > cap;
    buf.truncate(cap);
    Ok((buf, truncated))
}

/// Handle on a proc mount root (default "/proc"); tests may point it elsewhere.
#[derive(Debug, Clone)]
pub struct Procfs {
    root: PathBuf,
}

impl Default for Procfs {
    fn default() -> Self {
        Self::new()
    }
}

impl Procfs {
    pub fn new() -> Self {
        Self::at("/proc")
    }

    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn pid_dir(&self, pid: i32) -> PathBuf {
        self.root.join(pid.to_string())
    }

    /// Reads a small per-process text file. Non-UTF-8 bytes (possible in
    /// comm) are replaced rather than rejected.
    fn read_small(&self, pid: i32, name: &str, file: &'static str) -> Result<String, ProcError> {
        let path = self.pid_dir(pid).join(name);
        let (bytes, truncated) =
            read_capped_with(&path, SMALL_FILE_CAP, true).map_err(|e| map_io(pid, &path, &e))?;
        if truncated {
            return Err(malformed(
                file,
                format!("larger than {SMALL_FILE_CAP} bytes"),
            ));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    pub fn stat(&self, pid: i32) -> Result<Stat, ProcError> {
        let text = self.read_small(pid, "stat", "stat")?;
        // A process reaped between open and read can yield an empty file.
        if text.is_empty() {
            return Err(ProcError::Gone(pid));
        }
        let stat = parse_stat(&text)?;
        if stat.pid != pid {
            return Err(malformed(
                "stat",
                format!("asked for pid {pid}, file says {}", stat.pid),
            ));
        }
        Ok(stat)
    }

    pub fn real_uid(&self, pid: i32) -> Result<u32, ProcError> {
        let text = self.read_small(pid, "status", "status")?;
        if text.is_empty() {
            return Err(ProcError::Gone(pid));
        }
        parse_status_real_uid(&text)
    }

    /// Looks `key` up in the environment the process was exec'd with
    /// (later `setenv` calls in the process are not visible here).
    pub fn environ_value(&self, pid: i32, key: &str) -> Result<Option<Vec<u8>>, ProcError> {
        let path = self.pid_dir(pid).join("environ");
        let (mut bytes, truncated) =
            read_capped(&path, ENVIRON_CAP).map_err(|e| map_io(pid, &path, &e))?;
        if truncated {
            // The cap cut an entry in half; a prefix of a value must not
            // pass for the value, so drop everything after the last NUL.
            let keep = bytes.iter().rposition(|&b| b == 0).map_or(0, |i| i + 1);
            bytes.truncate(keep);
        }
        Ok(environ_value(&bytes, key).map(<[u8]>::to_vec))
    }

    /// The cgroup v2 path of `pid`, relative to our cgroup namespace root.
    pub fn cgroup_v2_path(&self, pid: i32) -> Result<Option<String>, ProcError> {
        Ok(parse_cgroup_v2(&self.read_small(pid, "cgroup", "cgroup")?))
    }

    /// Children of every thread of `pid` (reads /proc/PID/task/*/children, union, deduplicated, sorted). If the children files do not exist (CONFIG_PROC_CHILDREN off), fall back to scanning all pids and selecting stat.ppid == pid.
    ///
    /// Each thread has its own children file because the parent of a child
    /// is the thread that forked it.
    pub fn children(&self, pid: i32) -> Result<Vec<i32>, ProcError> {
        let task_dir = self.pid_dir(pid).join("task");
        let entries = fs::read_dir(&task_dir).map_err(|e| map_io(pid, &task_dir, &e))?;
        let mut kids = Vec::new();
        let mut read_any = false;
        for entry in entries {
            let entry = entry.map_err(|e| map_io(pid, &task_dir, &e))?;
            let Some(tid) = entry.file_name().to_str().and_then(parse_pid) else {
                continue;
            };
            let thread_dir = task_dir.join(tid.to_string());
            let path = thread_dir.join("children");
            match read_capped(&path, CHILDREN_CAP) {
                Ok((_, true)) => {
                    return Err(malformed(
                        "children",
                        format!("larger than {CHILDREN_CAP} bytes"),
                    ))
                }
                Ok((bytes, false)) => {
                    read_any = true;
                    kids.extend(parse_children(&String::from_utf8_lossy(&bytes))?);
                }
                // The thread directory is there but the file is not: the
                // kernel was built without CONFIG_PROC_CHILDREN.
                Err(e) if e.kind() == io::ErrorKind::NotFound && thread_dir.exists() => {
                    tracing::debug!(pid, "no task children files; scanning all processes");
                    return self.children_by_scan(pid);
                }
                // That thread exited meanwhile; its children were handed to
                // a sibling thread or reparented, either way not lost to us.
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(map_io(pid, &path, &e)),
            }
        }
        if !read_any {
            if let Err(e) = fs::symlink_metadata(self.pid_dir(pid)) {
                return Err(map_io(pid, &self.pid_dir(pid), &e));
            }
        }
        kids.sort_unstable();
        kids.dedup();
        Ok(kids)
    }

    /// Slow path: one stat read per process on the system.
    fn children_by_scan(&self, pid: i32) -> Result<Vec<i32>, ProcError> {
        let mut kids = Vec::new();
        for candidate in self.pids()? {
            match self.stat(candidate) {
                Ok(stat) if stat.ppid == pid => kids.push(candidate),
                Ok(_) => {}
                // Exited during the scan, or hidden by hidepid: not ours to count.
                Err(ProcError::Gone(_) | ProcError::Denied(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(kids)
    }

    pub fn boot_id(&self) -> Result<String, ProcError> {
        let path = self.root.join("sys/kernel/random/boot_id");
        let (bytes, truncated) =
            read_capped(&path, SMALL_FILE_CAP).map_err(|e| plain_io(&path, &e))?;
        if truncated {
            return Err(malformed("boot_id", "file too large"));
        }
        parse_boot_id(&String::from_utf8_lossy(&bytes))
    }

    /// All numeric entries of the proc root (processes, not threads), sorted.
    pub fn pids(&self) -> Result<Vec<i32>, ProcError> {
        let entries = fs::read_dir(&self.root).map_err(|e| plain_io(&self.root, &e))?;
        let mut pids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| plain_io(&self.root, &e))?;
            if let Some(pid) = entry.file_name().to_str().and_then(parse_pid) {
                pids.push(pid);
            }
        }
        pids.sort_unstable();
        Ok(pids)
    }
}

#[cfg(test)]
mod tests {
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
            let dir = std::env::temp_dir()
                .join(format!("undertaker-procfs-{}-{name}", std::process::id()));
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
}
