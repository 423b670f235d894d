//! Process-wide settings that can also come from the environment. Some hosts strip a
//! server's environment (Codex keeps only `HOME PATH TERM LANG SHELL PWD`), so each has
//! a flag, which calls one of these before `run` or `supervise`; a setting made here
//! wins over its variable.

use std::path::PathBuf;

/// `--cgroup-root PATH` (else `$UNDERTAKER_CGROUP_ROOT`): the cgroup tier creates tree
/// cgroups in PATH instead of beneath undertaker's own cgroup (docs/TIERS.md).
pub fn set_cgroup_root(path: PathBuf) {
    crate::os::set_cgroup_root(path);
}

/// `--no-heal` (else `$UNDERTAKER_NO_HEAL`): this process runs no self-healing round
/// (docs/REGISTRY.md, "Self-healing").
pub fn disable_self_healing() {
    crate::os::disable_self_healing();
}
