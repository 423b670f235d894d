#!/bin/sh
# Stand-in C compiler and archiver for `cargo check` of targets with no C toolchain here
# (aarch64-apple-darwin, x86_64-unknown-freebsd): rusqlite's bundled SQLite is compiled
# by build scripts, but a check never links, so an empty object or archive is enough.
# Used only by scripts/cross/check.sh; never for a build that links.
out=""
prev=""
for arg in "$@"; do
  case "$prev" in -o) out="$arg" ;; esac
  case "$arg" in *.a) [ -z "$out" ] && out="$arg" ;; esac
  prev="$arg"
done
# A compiler probe (`-E`, `--version`) gets an empty answer and success.
[ -n "$out" ] && : > "$out"
exit 0
