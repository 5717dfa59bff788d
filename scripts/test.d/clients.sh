#!/usr/bin/env bash
# The daemon driven by real client libraries: vscode-jsonrpc (npm, tests/clients/node) and
# pygls's JSON-RPC client (PyPI, tests/clients/python), each over `compactd serve`'s stdio.
# Installs both (npm ci; a venv under target/clients-venv); fails loudly, never skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'clients.sh: %s\n' "$*" >&2; exit 1; }

command -v node >/dev/null || die "node is required (Node.js 18 or later)"
command -v npm >/dev/null || die "npm is required"
command -v python3 >/dev/null || die "python3 is required"

step "cargo build (the daemon the clients start)"
cargo build
export COMPACTD_BIN="$root/target/debug/compactd"
[ -x "$COMPACTD_BIN" ] || die "no daemon binary at $COMPACTD_BIN"

step "vscode-jsonrpc (npm ci in tests/clients/node)"
(cd tests/clients/node && npm ci --no-audit --no-fund) || die "npm ci failed"

step "vscode-jsonrpc client"
(cd tests/clients/node && timeout 120 node client.js) || die "the vscode-jsonrpc client failed"

venv="$root/target/clients-venv"
step "pygls in $venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || die "python3 -m venv failed"
fi
"$venv/bin/pip" install --quiet pygls || die "pip install pygls failed"

step "pygls client"
timeout 120 "$venv/bin/python" tests/clients/python/client.py || die "the pygls client failed"

echo "clients.sh: both clients passed" >&2
