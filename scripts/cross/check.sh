#!/usr/bin/env bash
# Type-checks and lints the library and the CLI, tests included, for targets this
# machine cannot link for (docs/PORTING.md): `cargo clippy --all-targets -- -D
# warnings`, so the macOS backend's code and its const layout asserts are checked, and
# a Linux-only test suite that lost its `#![cfg(target_os = "linux")]` fails here.
# Usage: scripts/cross/check.sh TARGET...
# Installs each target's standard library first (bounded: 180 s); a target that
# cannot be installed is reported as `SKIP <target>: <reason>` and the script goes
# on. A target that installed and fails its check fails the script.
set -uo pipefail
cd "$(dirname "$0")/../.."
stand_in="$PWD/scripts/cross/stand-in-cc.sh"
status=0
for target in "$@"; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    if ! out=$(timeout 180 rustup target add "$target" 2>&1); then
      echo "SKIP $target: rustup target add failed: $(printf '%s' "$out" | tail -n 1)"
      continue
    fi
  fi
  triple=${target//-/_}
  linker_var="CARGO_TARGET_$(printf '%s' "$triple" | tr 'a-z' 'A-Z')_LINKER"
  start=$(date +%s)
  if env "CC_$triple=$stand_in" "AR_$triple=$stand_in" "$linker_var=$stand_in" \
      cargo clippy --quiet -p undertaker -p undertaker-cli --all-targets --target "$target" \
        -- -D warnings; then
    echo "PASS cargo clippy --all-targets $target (undertaker, undertaker-cli) in $(($(date +%s) - start)) s"
  else
    echo "FAIL cargo clippy --all-targets $target" >&2
    status=1
  fi
done
exit $status
