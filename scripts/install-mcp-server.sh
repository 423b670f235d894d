#!/usr/bin/env bash
# Installs the pinned MCP reference server (server-everything) into target/mcp-server,
# where crates/undertaker-cli/tests/mcp.rs and scripts/check-rmcp-example.py look for it.
# Needs npm; does nothing when that version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=2026.8.31
DIR=target/mcp-server
PKG=$DIR/node_modules/@modelcontextprotocol/server-everything
if [ -f "$PKG/dist/index.js" ] && grep -q "\"version\": \"$VERSION\"" "$PKG/package.json"; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-mcp-server: npm not found; install node and npm to run the MCP test" >&2
  exit 1
fi
mkdir -p "$DIR"
npm install --silent --no-audit --no-fund --prefix "$DIR" \
  "@modelcontextprotocol/server-everything@$VERSION"
