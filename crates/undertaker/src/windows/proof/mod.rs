//! The Windows escalation: the job is the proof (docs/PORTING.md, "Windows").
pub mod teardown;
