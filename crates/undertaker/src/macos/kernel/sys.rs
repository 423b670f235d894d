//! The only macOS module with `unsafe`: libproc, `sysctl`, `dlsym` and `kevent`.
//! Every function is a thin wrapper around one call; callers never see raw pointers,
//! and the bytes the kernel writes are parsed by `parse.rs` (tested on Linux).
//! Nothing here has run on a Mac yet (docs/PORTING.md, "macOS").
#![allow(unsafe_code)]

use super::parse::{self, BsdInfo};
use rustix::event::kqueue::{self, Event, EventFilter, EventFlags, ProcessEvents};
use std::ffi::{c_int, c_void, CStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::Duration;

// parse.rs's offsets against libc's own declaration of the struct, checked whenever
// this file compiles (scripts/cross/check.sh type-checks both Apple targets).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<libc::proc_bsdinfo>() == parse::BSDINFO_SIZE);
    assert!(offset_of!(libc::proc_bsdinfo, pbi_status) == parse::bsdinfo::STATUS);
    assert!(offset_of!(libc::proc_bsdinfo, pbi_pid) == parse::bsdinfo::PID);
    assert!(offset_of!(libc::proc_bsdinfo, pbi_ppid) == parse::bsdinfo::PPID);
    assert!(offset_of!(libc::proc_bsdinfo, pbi_uid) == parse::bsdinfo::UID);
    assert!(offset_of!(libc::proc_bsdinfo, pbi_pgid) == parse::bsdinfo::PGID);
    assert!(offset_of!(libc::proc_bsdinfo, pbi_start_tvsec) == parse::bsdinfo::START_TVSEC);
    assert!(offset_of!(libc::proc_bsdinfo, pbi_start_tvusec) == parse::bsdinfo::START_TVUSEC);
};

/// One flavor-18 read: facts, uniqueid and pid version of the same moment. Fails for
/// a pid with no process (and, per Bun's threads, for a zombie).
pub fn bsd_info(pid: i32) -> io::Result<BsdInfo> {
    let mut buf = [0u8; parse::BSDINFO_WITH_UNIQID_SIZE];
    let size = c_int::try_from(buf.len()).map_err(io::Error::other)?;
    // SAFETY: `buf` is `size` writable bytes; the kernel writes at most that many.
    let n = unsafe {
        libc::proc_pidinfo(
            pid,
            parse::PROC_PIDT_BSDINFOWITHUNIQID,
            0,
            buf.as_mut_ptr().cast::<c_void>(),
            size,
        )
    };
    let written = usize::try_from(n).unwrap_or(0);
    if written == 0 {
        return Err(io::Error::last_os_error());
    }
    parse::bsdinfo_with_uniqid(&buf[..written.min(buf.len())]).ok_or_else(|| {
        io::Error::other(format!(
            "proc_pidinfo flavor 18 wrote {written} bytes, not {}",
            parse::BSDINFO_WITH_UNIQID_SIZE
        ))
    })
}

/// A pid list from a libproc call that fills `buffer` and returns the pid count,
/// grown until the answer fits.
fn pid_list(fill: impl Fn(*mut c_void, c_int) -> c_int) -> io::Result<Vec<i32>> {
    let mut capacity = 1024usize;
    loop {
        let mut pids = vec![0i32; capacity];
        let bytes = c_int::try_from(capacity * size_of::<i32>()).map_err(io::Error::other)?;
        let n = fill(pids.as_mut_ptr().cast::<c_void>(), bytes);
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if n < capacity {
            pids.truncate(n);
            pids.retain(|&p| p > 0);
            return Ok(pids);
        }
        if capacity >= 1 << 20 {
            return Err(io::Error::other(
                "the process table has over a million pids",
            ));
        }
        capacity *= 4;
    }
}

/// Every pid (`proc_listallpids`).
pub fn all_pids() -> io::Result<Vec<i32>> {
    // SAFETY: `buffer` is `bytes` writable bytes (pid_list's vector).
    pid_list(|buffer, bytes| unsafe { libc::proc_listallpids(buffer, bytes) })
}

/// The pids of `pid`'s children (`proc_listchildpids`: the kernel walks its list).
pub fn child_pids(pid: i32) -> io::Result<Vec<i32>> {
    // SAFETY: as in all_pids.
    pid_list(|buffer, bytes| unsafe { libc::proc_listchildpids(pid, buffer, bytes) })
}

/// `sysctl` of a MIB into `buf`; returns the bytes written.
fn sysctl(mib: &mut [c_int], buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len();
    let depth = u32::try_from(mib.len()).map_err(io::Error::other)?;
    // SAFETY: `mib` has `depth` entries; `buf` has `len` writable bytes and the kernel
    // writes at most `len`, reporting how many in `len`; nothing is set (null, 0).
    let r = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            depth,
            buf.as_mut_ptr().cast::<c_void>(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(len.min(buf.len()))
}

/// The raw `KERN_PROCARGS2` buffer of `pid` (same uid only; `parse::procargs2` reads it).
pub fn procargs2(pid: i32) -> io::Result<Vec<u8>> {
    let mut argmax = [0u8; size_of::<c_int>()];
    sysctl(&mut [libc::CTL_KERN, libc::KERN_ARGMAX], &mut argmax)?;
    let argmax = usize::try_from(c_int::from_ne_bytes(argmax)).map_err(io::Error::other)?;
    let mut buf = vec![0u8; argmax.clamp(4096, 16 << 20)];
    let n = sysctl(&mut [libc::CTL_KERN, libc::KERN_PROCARGS2, pid], &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// A string `sysctlbyname` value (`kern.bootsessionuuid`, `kern.osrelease`).
pub fn sysctl_string(name: &CStr) -> io::Result<String> {
    let mut buf = [0u8; 256];
    let mut len = buf.len();
    // SAFETY: `name` is NUL-terminated; `buf` has `len` writable bytes; nothing is set.
    let r = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr().cast::<c_void>(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let text = &buf[..len.min(buf.len())];
    let text = text.split(|&c| c == 0).next().unwrap_or_default();
    Ok(String::from_utf8_lossy(text).into_owned())
}

/// `int proc_signal_with_audittoken(audit_token_t *, int)` (libproc, macOS 14.4+).
type SignalWithAuditToken = unsafe extern "C" fn(*mut [u32; 8], c_int) -> c_int;

/// Looked up once with `dlsym`, so the binary links against any SDK and runs on a
/// macOS without it.
fn signal_with_audittoken() -> Option<SignalWithAuditToken> {
    static CALL: OnceLock<Option<SignalWithAuditToken>> = OnceLock::new();
    *CALL.get_or_init(|| {
        // SAFETY: a NUL-terminated name looked up in the already loaded images.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"proc_signal_with_audittoken".as_ptr()) };
        // SAFETY: libproc declares the symbol with exactly this signature.
        (!f.is_null())
            .then(|| unsafe { std::mem::transmute::<*mut c_void, SignalWithAuditToken>(f) })
    })
}

/// Whether the kernel-checked signal exists here (macOS 14.4+).
pub fn has_signal_with_audittoken() -> bool {
    signal_with_audittoken().is_some()
}

/// Sends `signal` to the process at `pid` only if its pid version is still
/// `version`: the kernel checks (`ESRCH` otherwise). `None`: the call does not exist
/// here (macOS before 14.4).
pub fn signal_by_token(pid: i32, version: u32, signal: c_int) -> Option<io::Result<()>> {
    let call = signal_with_audittoken()?;
    let mut token = parse::audit_token(pid, version);
    // SAFETY: `token` is a valid 32-byte audit token for the call to read.
    let r = unsafe { call(&mut token, signal) };
    Some(if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    })
}

/// A kqueue for process events.
pub fn kqueue() -> io::Result<OwnedFd> {
    Ok(kqueue::kqueue()?)
}

/// Registers (`add`) or removes a process filter for exit, fork and exec on `pid`.
/// Fails with `ESRCH` if there is no such process (a zombie may be accepted: callers
/// re-read the identity afterwards, docs/PORTING.md).
pub fn watch_process(kq: &OwnedFd, pid: i32, add: bool) -> io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid).ok_or(io::ErrorKind::InvalidInput)?;
    let flags = if add {
        EventFlags::ADD | EventFlags::CLEAR
    } else {
        EventFlags::DELETE
    };
    let change = Event::new(
        EventFilter::Proc {
            pid,
            flags: ProcessEvents::EXIT | ProcessEvents::FORK | ProcessEvents::EXEC,
        },
        flags,
        std::ptr::null_mut(),
    );
    let mut none: Vec<Event> = Vec::new();
    // SAFETY: a process filter names no file descriptor, so nothing it refers to can
    // be closed before the kqueue. With no room for events, errors come back as errno.
    unsafe { kqueue::kevent(kq, &[change], &mut none, Some(Duration::ZERO)) }?;
    Ok(())
}

/// What one kqueue wait reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelEvent {
    /// A watched process exited, forked or exec'd.
    Process(i32, ProcessEvents),
    /// A watched signal was sent to us (it stays blocked: see [`block_signals`]).
    Signal(c_int),
    /// A watched descriptor is readable or at end of file.
    Readable(RawFd),
}

/// Waits up to `timeout` for what the kqueue watches.
pub fn wait_events(kq: &OwnedFd, timeout: Duration) -> io::Result<Vec<KernelEvent>> {
    let mut events: Vec<Event> = Vec::with_capacity(64);
    // SAFETY: the kqueue's filters name processes, signals, and descriptors their
    // registrants keep open for as long as they watch them (see watch_readable).
    match unsafe {
        kqueue::kevent(
            kq,
            &[],
            rustix::buffer::spare_capacity(&mut events),
            Some(timeout),
        )
    } {
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    }
    Ok(events
        .iter()
        .filter_map(|e| match e.filter() {
            EventFilter::Proc { pid, flags } => {
                Some(KernelEvent::Process(pid.as_raw_nonzero().get(), flags))
            }
            EventFilter::Signal { signal, .. } => Some(KernelEvent::Signal(signal.as_raw())),
            EventFilter::Read(fd) => Some(KernelEvent::Readable(fd)),
            _ => None,
        })
        .collect())
}

/// Adds one filter to the kqueue (errors come back as errno: no room for events).
fn register(kq: &OwnedFd, filter: EventFilter) -> io::Result<()> {
    let change = Event::new(filter, EventFlags::ADD, std::ptr::null_mut());
    let mut none: Vec<Event> = Vec::new();
    // SAFETY: as in wait_events.
    unsafe { kqueue::kevent(kq, &[change], &mut none, Some(Duration::ZERO)) }?;
    Ok(())
}

/// Blocks `signals` for this process (its only thread: the guardian starts none),
/// so that their default action never runs and a kqueue signal filter reports them
/// instead. CMD does not inherit the mask: std's spawn empties it in the child.
pub fn block_signals(signals: &[c_int]) -> io::Result<()> {
    // SAFETY: `set` is initialized by sigemptyset before any other use; the old
    // mask is not asked for (null).
    let r = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    match r {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Watches `signal` being sent to us (xnu posts it to the kqueue whether or not it
/// is blocked; docs/PORTING.md, "macOS").
pub fn watch_signal(kq: &OwnedFd, signal: c_int) -> io::Result<()> {
    let signal =
        rustix::process::Signal::from_named_raw(signal).ok_or(io::ErrorKind::InvalidInput)?;
    register(kq, EventFilter::Signal { signal, times: 0 })
}

/// Watches `fd` becoming readable or reaching end of file. The caller keeps `fd`
/// open while the kqueue lives (closing it removes the filter anyway).
pub fn watch_readable(kq: &OwnedFd, fd: BorrowedFd<'_>) -> io::Result<()> {
    register(kq, EventFilter::Read(fd.as_raw_fd()))
}

/// Takes ownership of descriptor `n`, inherited from our parent (`--owner-fd`).
/// Fails if `n` is not an open descriptor or is one of stdin, stdout, stderr.
pub fn take_inherited_fd(n: c_int) -> io::Result<OwnedFd> {
    if n <= 2 {
        return Err(io::Error::other(
            "stdin, stdout and stderr are not owner pipes",
        ));
    }
    // SAFETY: `n` is only borrowed for the check; F_GETFD fails on a closed number.
    rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(n) })?;
    // SAFETY: `n` is open (just checked) and nothing else in this process owns it:
    // it was inherited, and `--owner-fd` names it once.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Whether stdin is a terminal whose foreground group is `pgid` (the guardian's,
/// started from an interactive shell).
pub fn terminal_foreground_is(pgid: i32) -> bool {
    let stdin = rustix::stdio::stdin();
    rustix::termios::isatty(stdin)
        && rustix::termios::tcgetpgrp(stdin).is_ok_and(|p| p.as_raw_nonzero().get() == pgid)
}

/// Makes `pgid` the foreground group of stdin's terminal (SIGTTOU must be blocked:
/// a background caller would be stopped by it).
pub fn set_terminal_foreground(pgid: i32) -> io::Result<()> {
    let pgid = rustix::process::Pid::from_raw(pgid).ok_or(io::ErrorKind::InvalidInput)?;
    Ok(rustix::termios::tcsetpgrp(rustix::stdio::stdin(), pgid)?)
}
