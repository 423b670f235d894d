//! Readers for `/proc`.
//!
//! Everything here treats procfs contents as untrusted input: a process can
//! put almost anything in its `comm` or environment, and a process can exit
//! between any two reads. Parsers therefore return errors instead of
//! panicking, and I/O failures that mean "the process is gone" are reported
//! as [`ProcError::Gone`] so callers can treat them as a normal race.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

mod read;
use read::{read_capped, read_capped_with};
pub use read::{read_single_text, read_text};

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

    // The fields needed, in place: no heap (a `Vec` of all 50 grew through five
    // sizes per read, and the static musl build's allocator mapped and unmapped a page
    // for the larger ones every time: docs/BENCHMARKS.md, "Issue 30, third round").
    let mut fields = [""; STARTTIME + 1];
    let mut found = 0;
    for (slot, field) in fields
        .iter_mut()
        .zip(text[close + 1..].split_ascii_whitespace())
    {
        *slot = field;
        found += 1;
    }
    if found <= STARTTIME {
        return Err(malformed(
            FILE,
            format!(
                "expected at least {} fields after comm, got {found}",
                STARTTIME + 1,
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

/// How many times, and how far apart, an environ read that caught its process inside
/// exec is made again ([`Procfs::environ_value`]): exec's window is microseconds,
/// longer on a loaded machine; a process still there after 50 ms reads as unmarked.
const MID_EXEC_LOOKS: u32 = 50;
const ENV_COPY_LOOKS: u32 = 10;
const MID_EXEC_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

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

/// Handle on a proc mount root (default "/proc"); tests may point it elsewhere.
///
/// Start times are reported as the initial time namespace sees them: the kernel adds
/// the *reader's* boot-time offset to `/proc/PID/stat`'s starttime, so a guardian in
/// a time namespace (`unshare --time --boottime N`) and one outside would otherwise
/// read different start times for the same process, and each call the other's live
/// guardian dead (docs/GUARANTEES.md, "Identity across time namespaces").
#[derive(Debug, Clone)]
pub struct Procfs {
    root: PathBuf,
    /// Our time namespace's boot-time offset, in clock ticks (0 outside one).
    boot_offset: i128,
}

/// Our boot-time offset in clock ticks, from `timens_offsets` under `root` (`self/`):
/// 0 when the file is absent (no time namespaces, or a fake root) or unreadable.
fn boot_offset_ticks(root: &Path) -> i128 {
    // One record, produced whole at the first read.
    let Ok((bytes, _)) = read_capped_with(&root.join("self/timens_offsets"), SMALL_FILE_CAP, true)
    else {
        return 0;
    };
    parse_boot_offset(
        &String::from_utf8_lossy(&bytes),
        rustix::param::clock_ticks_per_second(),
    )
}

/// The `boottime` line of a `timens_offsets` text (`boottime <secs> <nsecs>`) in clock
/// ticks of `hz`; 0 without one.
pub fn parse_boot_offset(text: &str, hz: u64) -> i128 {
    text.lines()
        .find_map(|line| {
            let mut f = line.split_whitespace();
            if f.next()? != "boottime" {
                return None;
            }
            let secs: i128 = f.next()?.parse().ok()?;
            let nsecs: i128 = f.next()?.parse().ok()?;
            Some((secs * 1_000_000_000 + nsecs) * i128::from(hz) / 1_000_000_000)
        })
        .unwrap_or(0)
}

impl Default for Procfs {
    fn default() -> Self {
        Self::new()
    }
}

impl Procfs {
    pub fn new() -> Self {
        // Our time namespace is fixed once we run: read its offset once per process.
        static OFFSET: std::sync::OnceLock<i128> = std::sync::OnceLock::new();
        let root = PathBuf::from("/proc");
        let boot_offset = *OFFSET.get_or_init(|| boot_offset_ticks(&root));
        Self { root, boot_offset }
    }

    /// A proc root elsewhere (a fake /proc for tests).
    #[cfg(test)]
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let boot_offset = boot_offset_ticks(&root);
        Self { root, boot_offset }
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
        let mut stat = parse_stat(&text)?;
        // As the initial time namespace reads it (see [`Procfs`]).
        stat.starttime = u64::try_from(i128::from(stat.starttime) - self.boot_offset)
            .map_err(|_| malformed("stat", "start time before boot in this time namespace"))?;
        if stat.pid != pid {
            return Err(malformed(
                "stat",
                format!("asked for pid {pid}, file says {}", stat.pid),
            ));
        }
        Ok(stat)
    }

    /// Now, in clock ticks since boot as [`Procfs::stat`]'s start times count them
    /// (the initial time namespace's).
    pub fn now_ticks(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let hz = i128::from(rustix::param::clock_ticks_per_second());
        let ns = i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
        u64::try_from(ns * hz / 1_000_000_000 - self.boot_offset).unwrap_or(0)
    }

    pub fn real_uid(&self, pid: i32) -> Result<u32, ProcError> {
        let text = self.read_small(pid, "status", "status")?;
        if text.is_empty() {
            return Err(ProcError::Gone(pid));
        }
        parse_status_real_uid(&text)
    }

    /// How many looks an empty environ read of `pid` is worth: none for a zombie or a
    /// kernel thread (whose parent is 0 or kthreadd, 2); [`MID_EXEC_LOOKS`] while its
    /// command line is empty too (exec has not laid out its new stack yet); a few
    /// once the command line is there (exec copies the environment last, and a
    /// process started with an empty environment pays only these).
    fn mid_exec_looks(&self, pid: i32) -> u32 {
        let alive_user = self
            .stat(pid)
            .is_ok_and(|s| !matches!(s.state, 'Z' | 'X') && s.ppid != 0 && s.ppid != 2);
        if !alive_user {
            return 0;
        }
        let no_cmdline = read_capped_with(&self.pid_dir(pid).join("cmdline"), 1, true)
            .is_ok_and(|(bytes, _)| bytes.is_empty());
        if no_cmdline {
            MID_EXEC_LOOKS
        } else {
            ENV_COPY_LOOKS
        }
    }

    /// Looks `key` up in the environment the process was exec'd with
    /// (later `setenv` calls in the process are not visible here).
    pub fn environ_value(&self, pid: i32, key: &str) -> Result<Option<Vec<u8>>, ProcError> {
        let path = self.pid_dir(pid).join("environ");
        // The kernel fills a read of environ until the environment ends (or a page of
        // it cannot be read, which a second read would not read either): a short read
        // is its end. One read per process is what a scan of every process pays.
        let read =
            || read_capped_with(&path, ENVIRON_CAP, true).map_err(|e| map_io(pid, &path, &e));
        let (mut bytes, mut truncated) = read()?;
        // A process between exec's new memory map and the end of its new stack's
        // environment reads an empty environ: looked at in that window, a marked
        // member would pass for an unmarked one. It is looked at again, briefly.
        let mut looks = 0;
        while bytes.is_empty() && looks < self.mid_exec_looks(pid) {
            std::thread::sleep(MID_EXEC_PAUSE);
            (bytes, truncated) = read()?;
            looks += 1;
        }
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
            // A sysctl value, produced whole at the first read.
            read_capped_with(&path, SMALL_FILE_CAP, true).map_err(|e| plain_io(&path, &e))?;
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

    /// The access modes (`O_RDONLY`, `O_WRONLY` or `O_RDWR`, as fdinfo's `flags`
    /// give them) of every fd of `pid` open on the pipe with inode `inode`.
    pub fn pipe_ends(&self, pid: i32, inode: u64) -> Result<Vec<u32>, ProcError> {
        use rustix::fs::{Mode, OFlags};
        let dir = self.pid_dir(pid).join("fd");
        // One open of the directory, then each link read relative to it: the `run`
        // start-up path reads every fd of a few ancestors here (started_by.rs), and a
        // path per fd walked /proc from the top each time.
        let fds = rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| map_io(pid, &dir, &e.into()))?;
        let entries = rustix::fs::Dir::read_from(&fds).map_err(|e| map_io(pid, &dir, &e.into()))?;
        let wanted = format!("pipe:[{inode}]");
        let mut modes = Vec::new();
        let mut buf = Vec::with_capacity(64);
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_bytes().starts_with(b".") {
                continue;
            }
            let Ok(target) = rustix::fs::readlinkat(&fds, name, std::mem::take(&mut buf)) else {
                continue;
            };
            let matches = target.as_bytes() == wanted.as_bytes();
            buf = target.into_bytes();
            buf.clear();
            if !matches {
                continue;
            }
            let info = self
                .pid_dir(pid)
                .join("fdinfo")
                .join(&*String::from_utf8_lossy(name.to_bytes()));
            let Ok(text) = fs::read_to_string(&info) else {
                continue;
            };
            if let Some(flags) = parse_fdinfo_flags(&text) {
                modes.push(flags & 0o3);
            }
        }
        Ok(modes)
    }
}

/// The `flags:` field of a /proc/PID/fdinfo/N file (octal).
pub fn parse_fdinfo_flags(text: &str) -> Option<u32> {
    let line = text.lines().find_map(|l| l.strip_prefix("flags:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

#[cfg(test)]
mod tests;
