#!/usr/bin/env bash
# Builds the static musl `undertaker` (target/<arch>-unknown-linux-musl/release; the
# machine's arch, x86_64 or aarch64, or $TARGET) that every Linux package ships: the npm
# linux-x64, linux-x64-musl and linux-arm64 packages, the release binaries and the
# wheels (scripts/build-wheel.sh). One static, non-PIE executable, with
# no dynamic loader, no libc shared with other processes and no relocations written
# into its data pages at start-up, so an idle guarded tree costs far less memory than
# with the default glibc build (the figures: docs/BENCHMARKS.md, "Memory per tree",
# measured by scripts/measure-pss.sh). Installs what it needs when missing:
# the Rust target (rustup) and musl-gcc (Debian's musl-tools: SQLite's C is built for
# musl). If either cannot be installed it prints `SKIP <target>: <reason>` and
# exits 3; a build that fails once both are there fails (non-zero, not 3).
set -uo pipefail
cd "$(dirname "$0")/.."
TARGET=${TARGET:-$(uname -m)-unknown-linux-musl}
skip() { echo "SKIP $TARGET: $*"; exit 3; }
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
  env "CC_${TARGET//-/_}=musl-gcc" cargo build --release --locked -p undertaker-cli --target "$TARGET"
