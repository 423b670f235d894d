//! The commands layer: `run` (`guardian.rs`, and its `sentinel.rs`), `ps`, `sweep`
//! and `kill` (`reconcile.rs`), `doctor`.
pub mod doctor;
pub mod guardian;
pub mod reconcile;
pub mod sentinel;
