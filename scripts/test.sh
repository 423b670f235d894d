#!/usr/bin/env bash
# The README's test command. Installs what the tests need (the pinned MCP server into
# target/mcp-server), runs the whole workspace suite, and ends by listing every test
# that skipped itself and why (a skipped test passes, so its `ok` alone hides it).
# Arguments go to `cargo test` before its `--` (e.g. `-p undertaker-cli --test mcp`).
# The full output, passing tests' included, is kept in target/test-output.log.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-mcp-server.sh ||
  echo "test.sh: the MCP server is not installed; the MCP test will skip (listed below)" >&2

mkdir -p target
log=target/test-output.log
: >"$log"
# --show-output keeps what passing tests printed, where each skip says why; the
# terminal gets cargo's usual output (the passing tests' blocks are filtered out).
cargo test --workspace "$@" -- --show-output >"$log" 2>&1 &
cargo_pid=$!
# libtest prints "successes:", the outputs, "successes:" again and the names; what
# follows ("failures:" or "test result:") is shown again.
# A shell loop, not awk: Debian's mawk buffers its input, so the output came late and
# in bursts.
seen=0
tail -n +1 -f --pid="$cargo_pid" "$log" | while IFS= read -r line; do
  if [ "$line" = "successes:" ]; then
    seen=$((seen + 1))
    continue
  fi
  if [ "$seen" = 2 ] && { [ "$line" = "failures:" ] || [[ $line == "test result:"* ]]; }; then
    seen=0
  fi
  [ "$seen" = 0 ] && printf '%s\n' "$line"
done
wait "$cargo_pid"
status=$?

# "---- NAME stdout ----" opens each test's output; a skip prints "skipped: REASON".
skips=$(awk '
  /^---- .* stdout ----$/ { name = $2 }
  /skipped: / && name != "" { r = $0; sub(/^.*skipped: /, "", r); print "  " name ": " r }
' "$log" | sort -u)
echo
if [ -n "$skips" ]; then
  echo "skipped tests ($(printf '%s\n' "$skips" | wc -l)):"
  printf '%s\n' "$skips"
else
  echo "skipped tests: none"
fi
exit "$status"
