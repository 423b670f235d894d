#!/usr/bin/env bash
# Builds the Python wheel (the release `undertaker` binary + python/undertaker) into
# target/wheels/. Uses $MATURIN, else `maturin` on PATH, else target/pytools/bin/maturin.
# Extra arguments go to `maturin build` (e.g. --target, --zig for other platforms).
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
"$MATURIN" build --release --locked --out target/wheels "$@"
ls -1 target/wheels/undertaker-*.whl
