//! The proof layer: the delivery rule (`delivery.rs`, pure) and the one module that
//! signals (`signal.rs`).
pub mod delivery;
pub mod signal;
