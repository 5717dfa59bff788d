#!/usr/bin/env bash
# The oh-my-pi extension (integrations/oh-my-pi) inside the real agent: npm
# @oh-my-pi/pi-coding-agent 13.19.0 run by Bun 1.4.4 (npm @oven/bun-linux-x64), both installed
# with exact versions from the committed lockfile (npm ci --ignore-scripts) under
# target/omp-agent/, with the agent's model played by a fake OpenAI-compatible server on
# 127.0.0.1. The extension talks to compactd through clients/typescript (compactd-client),
# built first. Typechecks the extension (tsc from the same lockfile). Every step must pass;
# nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
ext="$root/integrations/oh-my-pi"
cache="$root/target/omp-agent"

step() { printf '\n==> omp: %s\n' "$*" >&2; }
die() { printf 'omp.sh: %s\n' "$*" >&2; exit 1; }
t0=$(date +%s)

command -v npm >/dev/null || die "npm is required"

# --- installs (cached by the lockfile's hash) ----------------------------------------------
mkdir -p "$cache"
stamp="$cache/.lock-stamp"
lock_sum=$(sha256sum "$ext/test/agent/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ] || [ ! -d "$cache/node_modules" ]; then
  step "npm ci --ignore-scripts: oh-my-pi 13.19.0, Bun 1.4.4, TypeScript (about a minute, once)"
  cp "$ext/test/agent/package.json" "$ext/test/agent/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund >/dev/null) || die "npm ci failed"
  echo "$lock_sum" >"$stamp"
fi
bun="$cache/node_modules/@oven/bun-linux-x64/bin/bun"
agent_pkg="$cache/node_modules/@oh-my-pi/pi-coding-agent"
[ "$("$bun" --version)" = "1.4.4" ] || die "expected Bun 1.4.4 at $bun"
[ "$(node -p "require('$agent_pkg/package.json').version")" = "13.19.0" ] || die "expected oh-my-pi 13.19.0"

# --- build and typecheck -------------------------------------------------------------------
step "cargo build (the daemon the extension starts)"
cargo build --quiet
export COMPACTD_BIN="$root/target/debug/compactd"

# The extension speaks to compactd through clients/typescript (compactd-client, a file:
# dependency: the protocol's types generated from schema/, on vscode-jsonrpc), built here first.
client="$root/clients/typescript"
client_stamp="$client/node_modules/.compactd-lock-stamp"
client_sum=$(sha256sum "$client/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$client_stamp" 2>/dev/null)" != "$client_sum" ]; then
  step "npm ci (clients/typescript)"
  (cd "$client" && npm ci --no-audit --no-fund >/dev/null) || die "npm ci in clients/typescript failed"
  echo "$client_sum" >"$client_stamp"
fi
step "build clients/typescript (the extension's compactd-client dependency)"
(cd "$client" && node scripts/generate.js --check && npx tsc -p .) || die "clients/typescript does not build"
ext_stamp="$ext/node_modules/.compactd-lock-stamp"
ext_sum=$(sha256sum "$ext/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$ext_stamp" 2>/dev/null)" != "$ext_sum" ] || [ ! -e "$ext/node_modules/compactd-client" ]; then
  step "npm ci (integrations/oh-my-pi: links compactd-client)"
  (cd "$ext" && npm ci --no-audit --no-fund >/dev/null) || die "npm ci in integrations/oh-my-pi failed"
  echo "$ext_sum" >"$ext_stamp"
fi

step "tsc (the extension's own code)"
"$cache/node_modules/.bin/tsc" -p "$ext" || die "the extension does not typecheck"

# --- the real agent ------------------------------------------------------------------------
step "bun test: the extension in the real agent"
cd "$ext"
OMP_AGENT_PKG="$agent_pkg" OMP_BUN="$bun" timeout 900 "$bun" test --timeout 240000 test/ ||
  die "the real-agent tests failed"

step "done in $(($(date +%s) - t0)) s"
