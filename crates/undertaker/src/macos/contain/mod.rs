//! The containment layer: no kernel container on macOS; the portable core's process
//! table and waker over libproc and kqueue (`portable.rs`).
pub mod portable;
