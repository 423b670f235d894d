//! The byte layouts of what the macOS kernel answers, parsed without `unsafe` or libc
//! types so that Linux tests them on byte fixtures (docs/PORTING.md, "macOS"):
//! `proc_pidinfo` flavor 18 (`struct proc_bsdinfo` followed by `struct
//! proc_uniqidentifierinfo`), the audit token `proc_signal_with_audittoken` takes, and
//! the `KERN_PROCARGS2` buffer. Offsets follow xnu's `bsd/sys/proc_info.h` and
//! `proc_info_private.h`; on macOS, `kernel/sys.rs` also checks them against libc's
//! `proc_bsdinfo` at compile time.

use crate::portable::Facts;

/// `PROC_PIDT_BSDINFOWITHUNIQID`: `proc_bsdinfo` and `proc_uniqidentifierinfo` in one
/// read, so the identity and the facts describe the same moment.
pub const PROC_PIDT_BSDINFOWITHUNIQID: i32 = 18;
/// `sizeof(struct proc_bsdinfo)`.
pub const BSDINFO_SIZE: usize = 136;
/// `sizeof(struct proc_uniqidentifierinfo)` (xnu `_Static_assert`s 56).
pub const UNIQID_SIZE: usize = 56;
/// What flavor 18 answers: both structs, back to back.
pub const BSDINFO_WITH_UNIQID_SIZE: usize = BSDINFO_SIZE + UNIQID_SIZE;

/// Field offsets in `struct proc_bsdinfo`.
pub mod bsdinfo {
    pub const STATUS: usize = 4;
    pub const PID: usize = 12;
    pub const PPID: usize = 16;
    pub const UID: usize = 20;
    pub const PGID: usize = 100;
    pub const START_TVSEC: usize = 120;
    pub const START_TVUSEC: usize = 128;
}

/// Field offsets in `struct proc_uniqidentifierinfo` (after the 16-byte `p_uuid`).
pub mod uniqid {
    pub const UNIQUEID: usize = 16;
    pub const PUNIQUEID: usize = 24;
    pub const IDVERSION: usize = 32;
    pub const ORIG_PPIDVERSION: usize = 36;
}

/// `pbi_status` values (`bsd/sys/proc.h`).
const SSTOP: u32 = 4;
const SZOMB: u32 = 5;

/// One flavor-18 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BsdInfo {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub uid: u32,
    pub status: u32,
    /// Start time in microseconds since the epoch.
    pub start_us: u64,
    /// `p_uniqueid`: never reused within a boot, kept across exec.
    pub uniqueid: u64,
    /// `p_puniqueid`: the parent's at fork, rewritten at exec to the current parent's.
    pub puniqueid: u64,
    /// `p_idversion`: bumped at fork and at every exec; the audit token's `val[7]`.
    pub version: u32,
    /// `p_orig_ppidversion` (macOS 15.4+; a reserved zero before).
    pub orig_ppidversion: u32,
}

impl BsdInfo {
    pub fn is_zombie(&self) -> bool {
        self.status == SZOMB
    }

    pub fn is_stopped(&self) -> bool {
        self.status == SSTOP
    }

    /// The portable core's facts; `None` for a zombie (no live process).
    pub fn facts(&self) -> Option<Facts> {
        if self.is_zombie() {
            return None;
        }
        Some(Facts {
            pid: self.pid,
            ppid: self.ppid,
            pgid: self.pgid,
            uid: self.uid,
            start: self.start_us,
            serial: self.uniqueid,
            // kernel_task's is 0: nothing links to it.
            parent_serial: (self.puniqueid != 0).then_some(self.puniqueid),
            version: Some(self.version),
            // A reserved zero before macOS 15.4.
            orig_parent_version: (self.orig_ppidversion != 0).then_some(self.orig_ppidversion),
            stopped: self.is_stopped(),
        })
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses a flavor-18 answer; `None` unless it is exactly the size xnu writes (an
/// answer of another size is another layout, never guessed at).
pub fn bsdinfo_with_uniqid(b: &[u8]) -> Option<BsdInfo> {
    if b.len() != BSDINFO_WITH_UNIQID_SIZE {
        return None;
    }
    let u = &b[BSDINFO_SIZE..];
    let pid = |at| i32::try_from(u32_at(b, at)).ok();
    Some(BsdInfo {
        pid: pid(bsdinfo::PID)?,
        ppid: pid(bsdinfo::PPID)?,
        pgid: pid(bsdinfo::PGID)?,
        uid: u32_at(b, bsdinfo::UID),
        status: u32_at(b, bsdinfo::STATUS),
        start_us: u64_at(b, bsdinfo::START_TVSEC)
            .saturating_mul(1_000_000)
            .saturating_add(u64_at(b, bsdinfo::START_TVUSEC)),
        uniqueid: u64_at(u, uniqid::UNIQUEID),
        puniqueid: u64_at(u, uniqid::PUNIQUEID),
        version: u32_at(u, uniqid::IDVERSION),
        orig_ppidversion: u32_at(u, uniqid::ORIG_PPIDVERSION),
    })
}

/// The `audit_token_t` (`val[8]`) that names one process version: the kernel looks up
/// `val[5]` (the pid) and refuses unless its pid version is `val[7]`. The other words
/// are not read by `proc_signal_with_audittoken`.
pub fn audit_token(pid: i32, version: u32) -> [u32; 8] {
    let mut val = [0u32; 8];
    val[5] = pid.unsigned_abs();
    val[7] = version;
    val
}

/// A `KERN_PROCARGS2` buffer: `argc` (a native `int`), the exec path, NUL padding,
/// `argc` argument strings, the environment strings up to an empty one, then the
/// "apple" strings (not environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcArgs<'a> {
    pub exec_path: &'a [u8],
    pub argv: Vec<&'a [u8]>,
    pub env: Vec<&'a [u8]>,
}

/// The NUL-terminated string at the start of `b` and what follows it; `None` if the
/// string is not terminated (a truncated buffer: its tail is never trusted).
fn take_cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = b.iter().position(|&c| c == 0)?;
    Some((&b[..end], &b[end + 1..]))
}

/// Parses a `KERN_PROCARGS2` buffer; `None` if it is too short for what its `argc`
/// promises. The environment ends at its empty terminator or at the first string the
/// buffer cuts off.
pub fn procargs2(b: &[u8]) -> Option<ProcArgs<'_>> {
    let argc = i32::from_ne_bytes(b.get(..4)?.try_into().ok()?);
    let argc = usize::try_from(argc).ok()?;
    let (exec_path, mut rest) = take_cstr(&b[4..])?;
    // The exec path is padded with NULs to a word boundary. (An empty argv[0] is
    // eaten by the skip, as by every reader of this format.)
    let skip = rest.iter().take_while(|&&c| c == 0).count();
    rest = &rest[skip..];
    let mut argv = Vec::with_capacity(argc.min(4096));
    for _ in 0..argc {
        let (arg, r) = take_cstr(rest)?;
        argv.push(arg);
        rest = r;
    }
    let mut env = Vec::new();
    while let Some((var, r)) = take_cstr(rest) {
        if var.is_empty() {
            break;
        }
        env.push(var);
        rest = r;
    }
    Some(ProcArgs {
        exec_path,
        argv,
        env,
    })
}

impl<'a> ProcArgs<'a> {
    /// The value of the first `name=` entry of the environment (as `getenv` finds it).
    pub fn env_value(&self, name: &str) -> Option<&'a [u8]> {
        self.env.iter().find_map(|var| {
            var.strip_prefix(name.as_bytes())
                .and_then(|v| v.strip_prefix(b"="))
        })
    }
}

#[cfg(test)]
mod tests;
