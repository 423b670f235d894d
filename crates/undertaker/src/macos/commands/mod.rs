//! The commands layer: `run` (`guardian.rs`), `ps`, `sweep` and `kill`
//! (`reconcile.rs`), `doctor`.
pub mod doctor;
pub mod guardian;
pub mod reconcile;
