//! The commands layer: `run` (`guardian.rs`, and its `sentinel.rs`), `ps`, `sweep`
//! and `kill` (`reconcile.rs`), `doctor`, `supervise` (`supervise.rs`, over the
//! neutral `crate::supervisor`).
pub mod doctor;
pub mod guardian;
pub mod reconcile;
pub mod sentinel;
pub mod supervise;
