//! The containment layer: no kernel container on macOS; the portable core's process
//! table and waker over libproc and kqueue (`portable.rs`), and the owner watch
//! (`owner.rs`).
pub mod owner;
pub mod portable;
