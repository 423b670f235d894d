//! The proof layer: the one module that signals (`signal.rs`).
pub mod signal;
