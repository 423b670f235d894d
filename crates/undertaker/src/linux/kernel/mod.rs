//! Kernel access: the one module with `unsafe` and the `/proc` reader. Imports nothing
//! else from the crate's Linux layers.

pub(crate) mod flock;
pub(crate) mod poll;
pub mod procfs;
pub(crate) mod sys;
pub(crate) mod wait_status;
