#!/usr/bin/env bash
# CI's Windows part (docs/PORTING.md, "Windows"): installs mingw and Wine (bounded),
# lints and builds x86_64-pc-windows-gnu, runs the library's unit tests and the
# Windows tests (scripts/wine/test-windows.py: run, and supervise driven by
# hostprog.exe) under Wine. When the target or the
# packages cannot be installed it prints `SKIP x86_64-pc-windows-gnu: <reason>` and
# succeeds; once they are installed, any failure fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=x86_64-pc-windows-gnu
skip() {
  echo "SKIP $target: $*"
  exit 0
}
if ! command -v x86_64-w64-mingw32-gcc >/dev/null || ! command -v wine >/dev/null; then
  [ "$(id -u)" = 0 ] || skip "mingw or wine missing and not root to install them"
  timeout 120 apt-get update -qq >/dev/null 2>&1 || skip "apt-get update failed or timed out"
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends \
    gcc-mingw-w64-x86-64 wine wine64 >/dev/null 2>&1 ||
    skip "apt-get install gcc-mingw-w64-x86-64 wine wine64 failed or timed out"
fi
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  out=$(timeout 180 rustup target add "$target" 2>&1) ||
    skip "rustup target add failed: $(printf '%s' "$out" | tail -n 1)"
fi
echo "== windows: $(wine --version 2>/dev/null), $(x86_64-w64-mingw32-gcc --version | head -n 1)"
export WINEPREFIX="$PWD/target/wine-prefix" WINEDEBUG=-all
trap 'wineserver -k >/dev/null 2>&1 || true' EXIT
cargo clippy -p undertaker -p undertaker-cli --target "$target" -- -D warnings
cargo clippy -p undertaker --target "$target" --all-targets -- -D warnings
cargo build -p undertaker-cli --target "$target"
mkdir -p target/wine
x86_64-w64-mingw32-gcc -O2 -Wall -Werror -o target/wine/treeprog.exe scripts/wine/treeprog.c
x86_64-w64-mingw32-gcc -O2 -Wall -Werror -o target/wine/hostprog.exe scripts/wine/hostprog.c
timeout 300 bash scripts/wine/setup-prefix.sh
# The library's unit tests, run by Wine (pass/fail and the counts come through).
CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine timeout 900 \
  cargo test -p undertaker --lib --target "$target"
timeout 900 python3 scripts/wine/test-windows.py \
  "target/$target/debug/undertaker.exe" target/wine/treeprog.exe target/wine/hostprog.exe
