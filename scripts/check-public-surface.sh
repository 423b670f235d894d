#!/usr/bin/env bash
# The library's public surface (docs/ARCHITECTURE.md, "Public API"): the items on
# rustdoc's all-items page of `undertaker`, at most 80 — the façade (run, supervise,
# the commands, Supervisor, options, errors and reports) and the protocol's types.
# Internals (registry, snapshot, framing) are crate-private; fuzzing and testing
# entry points are hidden. Prints the count; fails above the bound.
set -euo pipefail
cd "$(dirname "$0")/.."
bound=80
RUSTDOCFLAGS="-D warnings" cargo doc -q -p undertaker --no-deps
items=$(grep -o '<li><a href="[^"#]*"' target/doc/undertaker/all.html | wc -l)
echo "public surface: $items item(s) on rustdoc's all-items page (bound $bound)"
[ "$items" -le "$bound" ]
