//! The torture crate's only `unsafe`: signal dispositions for its helper processes.
//!
//! rustix has no safe `sigaction`, so three small wrappers over libc live here:
//! - [`record_all_signals`]: the decoy counts every catchable signal it receives;
//! - [`ignore_sigterm`]: the escape zoo's SIGTERM ignorer;
//! - [`report_sigterm`]: a tree member that says "term" on stdout when SIGTERM arrives
//!   and keeps running, so the harness knows a teardown has started;
//! - [`unblock_all_signals`]: tree members start from an empty signal mask, whatever
//!   they inherited (the harness reports an inherited mask separately).
//!
//! The handlers only touch atomics and call `write(2)`, both async-signal-safe.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering};

/// Highest signal number Linux delivers (SIGRTMAX).
pub const MAX_SIGNAL: usize = 64;

static RECEIVED: [AtomicU32; MAX_SIGNAL + 1] = [const { AtomicU32::new(0) }; MAX_SIGNAL + 1];

extern "C" fn count_signal(sig: libc::c_int) {
    if let Some(slot) = usize::try_from(sig).ok().and_then(|s| RECEIVED.get(s)) {
        slot.fetch_add(1, Ordering::SeqCst);
    }
}

extern "C" fn say_term(_sig: libc::c_int) {
    const LINE: &[u8] = b"term\n";
    // SAFETY: write(2) is async-signal-safe; the buffer is a static byte string.
    unsafe {
        libc::write(1, LINE.as_ptr().cast(), LINE.len());
    }
}

fn install(sig: libc::c_int, handler: libc::sighandler_t) -> bool {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler
    // is either SIG_IGN or one of the extern "C" functions above, which are
    // async-signal-safe. SA_RESTART keeps the decoy's blocking read going.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut()) == 0
    }
}

/// Counts every catchable signal (all but SIGKILL and SIGSTOP; the C library's
/// reserved real-time signals refuse a handler, which is fine: nobody sends those).
pub fn record_all_signals() {
    for sig in 1..=MAX_SIGNAL as libc::c_int {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        install(sig, count_signal as *const () as libc::sighandler_t);
    }
}

/// (signal number, times received) for every signal received so far.
pub fn recorded_signals() -> Vec<(usize, u32)> {
    RECEIVED
        .iter()
        .enumerate()
        .filter_map(|(sig, n)| {
            let n = n.load(Ordering::SeqCst);
            (n > 0).then_some((sig, n))
        })
        .collect()
}

pub fn ignore_sigterm() {
    install(libc::SIGTERM, libc::SIG_IGN);
}

pub fn report_sigterm() {
    install(libc::SIGTERM, say_term as *const () as libc::sighandler_t);
}

/// Empties this thread's signal mask (the process is single-threaded).
pub fn unblock_all_signals() {
    // SAFETY: sigemptyset initialises the set before sigprocmask reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}
