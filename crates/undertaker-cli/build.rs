//! The release `undertaker` for Linux (glibc) is linked position-dependent (`-no-pie`).
//!
//! Every guarded tree keeps a sentinel and a guardian resident for its whole life. In
//! a position-independent executable the dynamic loader writes the absolute addresses
//! of `.data.rel.ro` (vtables, string tables) into private copies of those pages at
//! start-up: about 70 KiB per tree. Linked at a fixed address, the linker resolves
//! them once and the pages stay shared with the file (docs/BENCHMARKS.md, "Memory per
//! tree"). The cost is that the executable's own image is not randomised (its heap,
//! stack and libraries still are). Debug builds stay PIE; so does every other crate.
use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("PROFILE") == "release"
    {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
