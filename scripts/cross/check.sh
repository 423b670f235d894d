#!/usr/bin/env bash
# Type-checks the library and the CLI for targets this machine cannot link for
# (docs/PORTING.md). Usage: scripts/cross/check.sh TARGET...
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
      cargo check --quiet -p undertaker -p undertaker-cli --target "$target"; then
    echo "PASS cargo check $target (undertaker, undertaker-cli) in $(($(date +%s) - start)) s"
  else
    echo "FAIL cargo check $target" >&2
    status=1
  fi
done
exit $status
