#!/usr/bin/env bash
# Builds the static musl `undertaker` (target/x86_64-unknown-linux-musl/release) for the
# linux-x64-musl npm package (Alpine-based images): one static, non-PIE executable, with
# no dynamic loader, no libc shared with other processes and no relocations written
# into its data pages at start-up, so an idle guarded tree costs far less memory than
# with the default glibc build (the figures: docs/BENCHMARKS.md, "Memory per tree",
# measured by scripts/measure-pss.sh). Installs what it needs when missing:
# the Rust target (rustup) and musl-gcc (Debian's musl-tools: SQLite's C is built for
# musl). If either cannot be installed it prints `SKIP linux-x64-musl: <reason>` and
# exits 3; a build that fails once both are there fails (non-zero, not 3).
set -uo pipefail
cd "$(dirname "$0")/.."
TARGET=x86_64-unknown-linux-musl
skip() { echo "SKIP linux-x64-musl: $*"; exit 3; }
if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  rustup target add "$TARGET" >/dev/null 2>&1 || skip "rustup cannot install the $TARGET target here"
fi
if ! command -v musl-gcc >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools; } >/dev/null 2>&1 ||
      skip "apt-get cannot install musl-tools"
  else
    skip "musl-gcc is missing (apt-get install musl-tools, as root)"
  fi
fi
# RUSTFLAGS with an explicit --target reaches only the target's crates, never the
# build scripts and proc-macros that run on the host (which must stay PIC).
RUSTFLAGS="${RUSTFLAGS:-} -C relocation-model=static" \
  CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release --locked -p undertaker-cli --target "$TARGET"
