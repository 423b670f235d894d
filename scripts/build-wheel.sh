#!/usr/bin/env bash
# Builds the Python wheel (the release `undertaker` binary + python/undertaker) into
# target/wheels/. Uses $MATURIN, else `maturin` on PATH, else target/pytools/bin/maturin.
# Extra arguments go to `maturin build` (e.g. --target, --zig for other platforms).
#
# On Linux (x86_64, aarch64) without extra arguments the wheel carries the static,
# non-PIE musl build of scripts/build-musl.sh, tagged both manylinux_2_17 and
# musllinux_1_2: it has no libc to match, so one wheel serves glibc and musl systems,
# and it is the build that costs least per guarded tree (docs/BENCHMARKS.md, "Issue
# 30"). Where the musl toolchain cannot be installed (build-musl.sh's SKIP line) the
# wheel is the default glibc build, tagged with this machine's glibc.
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN="${MATURIN:-$(command -v maturin || echo target/pytools/bin/maturin)}"
if [ ! -x "$MATURIN" ]; then
  echo "maturin not found: pip install maturin==1.16.0 (or set MATURIN)" >&2
  exit 1
fi
mkdir -p target/wheels
# Only this version's wheel stays, so `pip install target/wheels/undertaker-*.whl` names one file.
rm -f target/wheels/undertaker-*.whl
if [ $# -eq 0 ] && [ "$(uname -s)" = Linux ]; then
  target=$(uname -m)-unknown-linux-musl
  status=0
  # Builds the binary (and installs its toolchain); maturin's cargo run below finds it
  # fresh: the same target, RUSTFLAGS and C compiler.
  TARGET=$target bash scripts/build-musl.sh || status=$?
  if [ "$status" = 0 ]; then
    set -- --target "$target" --compatibility manylinux_2_17 musllinux_1_2
    export RUSTFLAGS="${RUSTFLAGS:-} -C relocation-model=static" "CC_${target//-/_}=musl-gcc"
  elif [ "$status" = 3 ]; then
    echo "the wheel carries the glibc build (no musl toolchain here)" >&2
  else
    exit "$status"
  fi
fi
"$MATURIN" build --release --locked --out target/wheels "$@"
ls -1 target/wheels/undertaker-*.whl
