#!/usr/bin/env bash
# Hermes Agent as released, with and without `undertaker run` in front of its MCP stdio
# servers (docs/INTEGRATIONS.md, "Hermes Agent", (a)). Installs the pinned Hermes from
# PyPI into a scratch venv; its MCP server is a minimal stdio server whose tree holds a
# `setsid` grandchild. For each mode, `hermes mcp test` (no LLM, no API key) must list
# the server's tool; the clean exit's leftovers are counted; then Hermes is `kill -9`ed
# while it waits for tools/list and the tree's survivors are counted 5 s later.
#   as-released     mcp_tool.py unchanged: tools/mcp_stdio_watchdog.py wraps the server
#   undertaker-run  the one line that wraps it replaced by `undertaker run`
# Prints one line per mode; exits non-zero if a listing fails.
# Usage: scripts/check-hermes.sh UNDERTAKER
set -euo pipefail
UT=$(realpath "$1")
HERMES=0.19.0
W=$(mktemp -d /tmp/check-hermes.XXXXXX)
ARG=4242.$$ # the grandchild is `sleep $ARG`: only ours match
mine() { pgrep -f "^sleep $ARG\$|$W/server.py" || true; }
cleanup() {
  for p in $(mine); do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

timeout 120 python3 -m venv "$W/venv"
timeout 900 nice -n 19 "$W/venv/bin/pip" install -q "hermes-agent[mcp]==$HERMES" >/dev/null
TOOL=$("$W/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tools/mcp_tool.py
cp "$TOOL" "$W/mcp_tool.py.orig"

cat >"$W/server.py" <<'EOF'
# Minimal stdio MCP server: argv = sleep argument, tools/list delay (s), marker file.
import json, subprocess, sys, time
subprocess.Popen(["setsid", "sleep", sys.argv[1]], stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def send(i, result):
    print(json.dumps({"jsonrpc": "2.0", "id": i, "result": result}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if "id" not in req:
        continue
    if req["method"] == "initialize":
        send(req["id"], {"protocolVersion": req["params"]["protocolVersion"],
                         "capabilities": {"tools": {}},
                         "serverInfo": {"name": "escaper", "version": "1"}})
    elif req["method"] == "tools/list":
        open(sys.argv[3], "w").close()
        time.sleep(float(sys.argv[2]))
        send(req["id"], {"tools": [{"name": "ping", "description": "pong",
                                    "inputSchema": {"type": "object"}}]})
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": req["id"],
                          "error": {"code": -32601, "message": "unknown"}}), flush=True)
EOF

export HOME=$W/home HERMES_HOME=$W/hermes
mkdir -p "$HOME" "$HERMES_HOME"
config() {  # $1 = tools/list delay in seconds
  cat >"$HERMES_HOME/config.yaml" <<EOF
mcp_servers:
  escaper:
    command: python3
    args: ["$W/server.py", "$ARG", "$1", "$W/listing"]
    connect_timeout: 120
EOF
}
count() { mine | wc -l; }
killall_mine() { for p in $(mine); do kill -9 "$p" 2>/dev/null || true; done; sleep 0.5; }

check() {  # $1 = mode
  config 0
  out=$(timeout 120 "$W/venv/bin/hermes" mcp test escaper 2>&1 || true)
  if ! grep -q "Tools discovered: 1" <<<"$out"; then
    echo "hermes $HERMES $1: listing failed"; echo "$out"; exit 1
  fi
  sleep 5
  clean=$(count); killall_mine
  config 60; rm -f "$W/listing"
  timeout 120 "$W/venv/bin/hermes" mcp test escaper >/dev/null 2>&1 &
  t=$!
  for _ in $(seq 120); do [ -e "$W/listing" ] && break; sleep 0.5; done
  [ -e "$W/listing" ] || { echo "hermes $HERMES $1: server never asked for tools/list"; exit 1; }
  sleep 1
  kill -9 "$(pgrep -P "$t")"
  wait "$t" 2>/dev/null || true
  sleep 5
  echo "hermes $HERMES $1: $(count) survivor(s) (kill -9; clean exit: $clean)"
  killall_mine
}

check as-released
"$W/venv/bin/python" - "$TOOL" "$UT" "$W/state" <<'EOF'
import sys
path, ut, state = sys.argv[1:]
old = "        command, args = _wrap_command_with_watchdog(command, args)\n"
new = (f'        command, args = "{ut}", ["run", "--state-dir", "{state}", '
       '"--label", f"mcp:{self.name}", "--", command, *args]\n')
src = open(path).read()
assert src.count(old) == 1, "the watchdog wrap line is not in mcp_tool.py"
open(path, "w").write(src.replace(old, new))
EOF
check undertaker-run
