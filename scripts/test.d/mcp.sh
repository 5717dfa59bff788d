#!/usr/bin/env bash
# `compactd mcp` driven by the official MCP Python SDK (PyPI `mcp`, pinned), started as a
# subprocess the way agents start MCP servers (tests/clients/mcp/client.py). The SDK is
# installed into a venv under target/; fails loudly, never skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'mcp.sh: %s\n' "$*" >&2; exit 1; }

command -v python3 >/dev/null || die "python3 is required (3.10 or later)"

step "cargo build (the server the SDK starts)"
cargo build
export COMPACTD_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/compactd"
[ -x "$COMPACTD_BIN" ] || die "no binary at $COMPACTD_BIN"

venv="$root/target/mcp-venv"
step "mcp (the official Python SDK) in $venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || die "python3 -m venv failed"
fi
"$venv/bin/pip" install --quiet mcp==2.3.0 || die "pip install mcp failed"

step "MCP SDK client against compactd mcp"
timeout 180 "$venv/bin/python" tests/clients/mcp/client.py || die "the MCP SDK client failed"
