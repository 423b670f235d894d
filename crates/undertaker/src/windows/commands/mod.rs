//! What the CLI runs on Windows.
pub mod doctor;
pub mod guardian;
pub mod reconcile;
pub mod record;
pub mod supervise;
