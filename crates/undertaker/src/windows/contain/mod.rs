//! Where a Windows tree lives (a Job Object) and who owns it.
pub mod adopt;
pub mod job;
pub mod owner;
