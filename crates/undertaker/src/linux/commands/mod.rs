//! The commands: the guardian behind `undertaker run`, sweep and kill, doctor, and the
//! guardian's registry recorder. The top layer: nothing below imports from here.

pub(crate) mod control;
pub mod doctor;
pub(crate) mod guarded;
pub mod guardian;
pub(crate) mod heal;
pub(crate) mod host;
pub mod reconcile;
pub mod record;
pub(crate) mod replace;
pub(crate) mod sentinel;
pub(crate) mod started_by;
pub mod supervise;
pub mod tree;
