#!/usr/bin/env bash
# Makes a Wine prefix that runs this repository's windows-gnu binaries:
# `wineboot -i`, then the ProcessPrng shim (bcryptprimitives.c) built with mingw and
# copied into the prefix's system32, where Wine 8.0 has no bcryptprimitives.dll.
# Usage: WINEPREFIX=/abs/prefix scripts/wine/setup-prefix.sh   (bounded: 120 s)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
: "${WINEPREFIX:?set WINEPREFIX to an absolute path}"
export WINEPREFIX WINEDEBUG=-all
out="$WINEPREFIX/shim"
mkdir -p "$out"
x86_64-w64-mingw32-gcc -O2 -shared -o "$out/bcryptprimitives.dll" \
  "$here/bcryptprimitives.c" "$here/bcryptprimitives.def" -ladvapi32
if [ ! -d "$WINEPREFIX/drive_c/windows/system32" ]; then
  timeout 120 wineboot -i >/dev/null 2>&1
fi
cp "$out/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
echo "wine prefix ready: $WINEPREFIX ($(wine --version 2>/dev/null))"
