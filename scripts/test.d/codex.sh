#!/usr/bin/env bash
# compactd with the real Codex CLI 0.169.0 (npm `@openai/codex`, exact versions from
# tests/agents/codex/package-lock.json, installed under target/codex), offline: the model is a
# scripted fake Responses-API server on 127.0.0.1 (tests/agents/codex/fake_responses.py).
# - test_mcp.py: `compactd mcp` registered as the README says; the model calls search_history.
# - test_compact.py: `compactd compact` on a Codex rollout, then `codex exec resume`.
# Fails loudly, never skips. About a minute (the install once: ~15 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
target="${CARGO_TARGET_DIR:-$root/target}"
dir="$target/codex"

step() { printf '\n==> codex: %s\n' "$*" >&2; }
die() { printf 'codex.sh: %s\n' "$*" >&2; exit 1; }

command -v npm >/dev/null || die "npm is required"
command -v python3 >/dev/null || die "python3 is required (3.10 or later)"

lock="$root/tests/agents/codex"
sum=$(sha256sum "$lock/package-lock.json" | cut -d' ' -f1)
mkdir -p "$dir"
if [ "$(cat "$dir/.lock-stamp" 2>/dev/null)" != "$sum" ] || [ ! -d "$dir/node_modules" ]; then
  step "npm ci --ignore-scripts: @openai/codex 0.169.0 in $dir"
  cp "$lock/package.json" "$lock/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund >/dev/null) || die "npm ci failed in $dir"
  echo "$sum" >"$dir/.lock-stamp"
fi
export CODEX_BIN="$dir/node_modules/.bin/codex"
version=$("$CODEX_BIN" --version) || die "$CODEX_BIN does not run"
[ "$version" = "codex-cli 0.169.0" ] || die "expected codex-cli 0.169.0, got: $version"

step "cargo build (the compactd the tests run)"
cargo build
export COMPACTD_BIN="$target/debug/compactd"
[ -x "$COMPACTD_BIN" ] || die "no binary at $COMPACTD_BIN"

for test in "$lock"/test_*.py; do
  step "$(basename "$test")"
  timeout 300 python3 "$test" || die "$(basename "$test") failed"
done
