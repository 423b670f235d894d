#!/usr/bin/env bash
# Real agent hosts with `undertaker run` in front of their MCP server (docs/INTEGRATIONS.md,
# "Host recipes"). Installs pinned host CLIs from npm into target/hosts, then for each
# host, in a scratch HOME and project:
#   1. its MCP listing/health command connects to server-everything through undertaker;
#   2. it is `kill -9`ed while it waits for a server whose tree holds a `setsid` daemon:
#      0 survivors with undertaker; the same without undertaker (the control) leaves the
#      daemon behind, which shows the check can fail.
# Prints one line per host and exits non-zero if any check failed.
# Usage: scripts/check-hosts.sh [HOST...]   (claude codex gemini opencode inspector)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CLAUDE=@anthropic-ai/claude-code@2.1.332
CODEX=@openai/codex@0.171.0
GEMINI=@google/gemini-cli@0.61.0
OPENCODE=opencode-ai@1.18.33
INSPECTOR=@modelcontextprotocol/inspector@2.12.0
HOSTS=("$@")
[ ${#HOSTS[@]} -gt 0 ] || HOSTS=(claude codex gemini opencode inspector)

HOSTDIR=$ROOT/target/hosts
stamp="$CLAUDE $CODEX $GEMINI $OPENCODE $INSPECTOR"
if [ "$(cat "$HOSTDIR/.pins" 2>/dev/null)" != "$stamp" ]; then
  mkdir -p "$HOSTDIR"
  npm install --silent --no-audit --no-fund --prefix "$HOSTDIR" \
    "$CLAUDE" "$CODEX" "$GEMINI" "$OPENCODE" "$INSPECTOR" || exit 1
  echo "$stamp" >"$HOSTDIR/.pins"
fi
bash scripts/install-mcp-server.sh || exit 1
SRV=$ROOT/target/mcp-server/node_modules/@modelcontextprotocol/server-everything/dist/index.js
UT=${UNDERTAKER:-$ROOT/target/debug/undertaker}
[ -x "$UT" ] || cargo build -q -p undertaker-cli || exit 1

WORK=$(mktemp -d /tmp/check-hosts.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export PATH=$HOSTDIR/node_modules/.bin:$PATH
export HOME=$WORK/home
unset XDG_CONFIG_HOME XDG_DATA_HOME XDG_STATE_HOME XDG_CACHE_HOME UNDERTAKER_TREE
mkdir -p "$HOME" "$WORK/proj"
cd "$WORK/proj" || exit 1

# Configures HOST with one stdio server NAME running the command "$@".
configure() {
  local host=$1 name=$2
  shift 2
  rm -f "$HOME/.codex/config.toml" "$HOME/.gemini/settings.json" opencode.json
  case $host in
    claude)
      claude mcp remove --scope user "$name" >/dev/null 2>&1
      claude mcp add --scope user "$name" -- "$@" >/dev/null
      ;;
    codex) codex mcp add "$name" -- "$@" >/dev/null 2>&1 ;;
    gemini)
      mkdir -p "$HOME/.gemini"
      python3 - "$name" "$@" >"$HOME/.gemini/settings.json" <<'EOF'
import json, sys
print(json.dumps({"mcpServers": {sys.argv[1]: {"command": sys.argv[2], "args": sys.argv[3:]}}}))
EOF
      ;;
    opencode)
      python3 - "$name" "$@" >opencode.json <<'EOF'
import json, sys
print(json.dumps({"$schema": "https://opencode.ai/config.json",
                  "mcp": {sys.argv[1]: {"type": "local", "command": sys.argv[2:], "enabled": True}}}))
EOF
      ;;
    inspector) printf '%s\n' "$@" >"$WORK/inspector-server" ;;
  esac
}

# Codex has no listing command that connects: its app server's mcpServerStatus/list
# starts each server and lists its tools.
codex_status() {
  python3 - <<'EOF'
import json, subprocess
p = subprocess.Popen(["codex", "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
for msg in ({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "check-hosts", "version": "0"}}},
            {"method": "initialized"},
            {"id": 2, "method": "mcpServerStatus/list", "params": {}}):
    p.stdin.write(json.dumps(msg) + "\n")
    p.stdin.flush()
for line in p.stdout:
    msg = json.loads(line)
    if msg.get("id") == 2:
        for s in msg.get("result", {}).get("data", []):
            print(f"{s['name']}: {len(s.get('tools') or {})} tools")
        break
p.stdin.close()
p.wait(timeout=30)
EOF
}

# Runs HOST's listing/health command.
list() {
  case $1 in
    claude) claude mcp list 2>&1 ;;
    codex) codex_status 2>&1 ;;
    gemini) GEMINI_CLI_TRUST_WORKSPACE=true gemini mcp list 2>&1 ;;
    opencode) opencode mcp list 2>&1 ;;
    inspector)
      local cmd
      mapfile -t cmd <"$WORK/inspector-server"
      mcp-inspector --cli "${cmd[@]}" --method tools/list 2>&1
      ;;
  esac
}

version() {
  case $1 in
    claude) claude --version ;;
    codex) codex --version 2>/dev/null ;;
    gemini) gemini --version ;;
    opencode) opencode --version ;;
    inspector) mcp-inspector --version ;;
  esac 2>&1 | tail -1
}

# What the listing prints when the server answered.
connected() {
  case $1 in
    claude) grep -q "everything: .*Connected" ;;
    codex) grep -Eq "^everything: [1-9][0-9]* tools" ;;
    gemini) grep -q "everything: .*Connected" ;;
    opencode) grep -q "everything.*connected" ;;
    inspector) grep -q '"tools"' ;;
  esac
}

# Pids of live processes whose environment holds CHECK_HOSTS_TOKEN=$1.
marked() {
  local f pid
  for f in $(grep -lzx "CHECK_HOSTS_TOKEN=$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] || echo "$pid"
  done
}

comm() { cat "/proc/$1/comm" 2>/dev/null; }
ppid() { awk '{print $4}' "/proc/$1/stat" 2>/dev/null; }

# The host: the nearest ancestor of `pid` above the undertaker processes (or, without
# undertaker, the server's parent: the ancestor above the marked processes).
host_of() {
  local pid=$1 token=$2 p
  p=$pid
  while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    if [ "$(comm "$p")" != undertaker ] &&
      ! grep -qzx "CHECK_HOSTS_TOKEN=$token" "/proc/$p/environ" 2>/dev/null; then
      echo "$p"
      return
    fi
    p=$(ppid "$p")
  done
}

# Starts HOST's listing against a server that never answers and whose tree holds a
# setsid daemon, kill -9s the host once the tree is up, and prints how many of the
# tree's processes are left 10 s later (then kills those itself, by pid).
survivors() {
  local host=$1 guarded=$2 token pids first h left
  token=$host.$guarded.$$.$RANDOM
  local server=(env "CHECK_HOSTS_TOKEN=$token" sh -c 'setsid sleep 1000 & sleep 1000')
  if [ "$guarded" = yes ]; then
    server=("$UT" --state-dir "$WORK/state" run --label "$host/stuck" -- "${server[@]}")
  fi
  configure "$host" everything "${server[@]}"
  (list "$host" >/dev/null 2>&1) &
  local lister=$!
  for _ in $(seq 300); do
    pids=$(marked "$token")
    [ "$(echo "$pids" | grep -c .)" -ge 2 ] && break
    sleep 0.1
  done
  first=$(echo "$pids" | head -1)
  h=$([ -n "$first" ] && host_of "$first" "$token")
  if [ -z "$h" ]; then
    echo "no-tree"
    kill -9 $pids 2>/dev/null
    wait "$lister" 2>/dev/null
    return
  fi
  kill -9 "$h"
  sleep 10
  left=$(marked "$token")
  echo "$(echo "$left" | grep -c .)"
  [ -n "$left" ] && kill -9 $left 2>/dev/null
  kill -9 "$lister" 2>/dev/null
  wait "$lister" 2>/dev/null
}

export WORK
export -f list codex_status
failed=0
printf '%-10s %-28s %-10s %-22s %s\n' host version listing "kill -9: survivors" "(without undertaker)"
for host in "${HOSTS[@]}"; do
  ver=$(version "$host")
  configure "$host" everything "$UT" --state-dir "$WORK/state" run --label "$host/everything" -- node "$SRV" stdio
  out=$(timeout 180 bash -c 'list "$0"' "$host")
  if echo "$out" | connected "$host"; then listing=connected; else listing=FAILED; failed=1; fi
  with=$(survivors "$host" yes)
  without=$(survivors "$host" no)
  [ "$with" = 0 ] || failed=1
  printf '%-10s %-28s %-10s %-22s %s\n' "$host" "$ver" "$listing" "$with" "$without"
  if [ "$listing" = FAILED ]; then echo "$out" | tail -5 | sed 's/^/    /'; fi
done
exit "$failed"
