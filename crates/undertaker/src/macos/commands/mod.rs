//! The commands layer: what works on macOS today (`doctor`).
pub mod doctor;
