//! Containment: where a tree lives (cgroup, PID namespace), how CMD is started into it,
//! and the owner watch. Builds on [`crate::linux::proof`] and [`crate::linux::kernel`].

pub mod cgroup;
pub(crate) mod cgroup_name;
pub mod cgroup_place;
pub mod containment;
pub(crate) mod dispositions;
pub(crate) mod owner;
pub mod pidns;
// `--tier portable`'s backend (docs/TIERS.md, "portable").
pub(crate) mod portable;
pub(crate) mod spawn;
