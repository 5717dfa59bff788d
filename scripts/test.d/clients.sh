#!/usr/bin/env bash
# The daemon driven by real client libraries over `compactd serve`'s stdio: vscode-jsonrpc (npm,
# tests/clients/node), pygls's JSON-RPC client (PyPI, tests/clients/python), and compactd's own
# client packages: clients/typescript (npm ci; generated types checked for staleness, tsc, the
# npm tarball's contents, node --test) and clients/python (`pip install ./clients/python` into
# a venv; staleness check, mypy --strict, unittest). Everything pinned, installed under target/
# or the packages' node_modules; fails loudly, never skips.
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
export COMPACTD_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/compactd"
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
"$venv/bin/pip" install --quiet pygls==2.1.1 mypy==2.4.1 || die "pip install pygls mypy failed"

step "pygls client"
timeout 120 "$venv/bin/python" tests/clients/python/client.py || die "the pygls client failed"

# --- clients/typescript ------------------------------------------------------------------
ts="$root/clients/typescript"
stamp="$ts/node_modules/.compactd-lock-stamp"
lock_sum=$(sha256sum "$ts/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  step "npm ci (clients/typescript)"
  (cd "$ts" && npm ci --no-audit --no-fund >/dev/null) || die "npm ci failed in clients/typescript"
  echo "$lock_sum" >"$stamp"
fi
step "clients/typescript: generated types current, tsc, package contents"
(cd "$ts" && node scripts/generate.js --check) || die "clients/typescript/src/protocol.ts is stale"
(cd "$ts" && npx tsc -p . && npx tsc -p tsconfig.test.json) || die "tsc failed in clients/typescript"
packed=$(cd "$ts" && npm pack --dry-run --json 2>/dev/null | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s)[0].files.map(f=>f.path).join("\n")))')
for f in dist/index.js dist/index.d.ts dist/client.js dist/protocol.d.ts package.json README.md; do
  grep -qx "$f" <<<"$packed" || die "the npm package of clients/typescript lacks $f"
done
step "clients/typescript: node --test against the real daemon"
(cd "$ts" && timeout 300 node --test --test-timeout=120000 test/) || die "clients/typescript tests failed"

# --- clients/python ----------------------------------------------------------------------
step "pip install ./clients/python (into $venv)"
"$venv/bin/pip" install --quiet --force-reinstall --no-deps ./clients/python || die "pip install ./clients/python failed"
installed=$(cd /tmp && "$venv/bin/python" -c 'import compactd_client; print(compactd_client.__file__)')
[[ "$installed" == "$venv"/* ]] || die "compactd_client imports from $installed, not the venv"
step "clients/python: generated types current, mypy --strict"
python3 clients/python/scripts/generate.py --check || die "clients/python/compactd_client/protocol.py is stale"
(cd clients/python && "$venv/bin/mypy" --strict --cache-dir "$root/target/mypy-cache" compactd_client tests) || die "mypy failed"
step "clients/python: unittest against the real daemon (the installed package)"
(cd /tmp && timeout 300 "$venv/bin/python" -m unittest discover -s "$root/clients/python/tests" -v) || die "clients/python tests failed"

echo "clients.sh: every client passed" >&2
