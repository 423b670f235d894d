//! Everything Linux-specific. Other platforms add a sibling module; the core types
//! (identity, ladder, options) do not change.

pub mod cgroup;
pub mod doctor;
pub mod guardian;
pub(crate) mod owner;
pub mod pidns;
pub mod procfs;
pub mod reconcile;
pub mod record;
pub mod signal;
pub(crate) mod spawn;
pub(crate) mod sys;
pub mod teardown;
