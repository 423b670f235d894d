//! The commands: the guardian behind `undertaker run`, sweep and kill, doctor, and the
//! guardian's registry recorder. The top layer: nothing below imports from here.

pub mod doctor;
pub mod guardian;
pub(crate) mod heal;
pub mod reconcile;
pub mod record;
pub(crate) mod sentinel;
pub mod supervise;
pub mod tree;
