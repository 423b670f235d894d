//! The kernel layer: libproc, `sysctl`, kqueue and the token signal (`sys.rs`, the
//! only file with `unsafe`), the byte layouts they answer in (`parse.rs`), and the
//! state-file lock, which is Linux's `flock` file unchanged.
#[path = "../../linux/kernel/flock.rs"]
pub mod flock;
pub mod parse;
pub mod sys;
