//! Proof of identity and the one path every signal takes ([`signal`]), and escalation
//! over a proven set ([`teardown`]). Builds only on [`crate::linux::kernel`].

pub mod descent;
pub mod empty_pidns;
pub mod marked;
pub mod pidref;
pub mod signal;
pub mod teardown;
