#!/usr/bin/env bash
# The real Claude Code (npm @anthropic-ai/claude-code, pinned to the version the README names)
# run headless and offline against a scripted fake Anthropic API on 127.0.0.1
# (tests/clients/claude): it calls compactd's search_history over MCP, and it honours a
# compaction `compactd compact` appended to its transcript. Installed under target/claude-code;
# fails loudly, never skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'claude.sh: %s\n' "$*" >&2; exit 1; }

version=2.1.328
command -v python3 >/dev/null || die "python3 is required (3.10 or later)"
command -v npm >/dev/null || die "npm is required (Node.js 18 or later)"
grep -q "npm install -g @anthropic-ai/claude-code@$version" README.md \
  || die "the README's Claude Code section does not install $version"

step "cargo build (the compactd the tests run)"
cargo build
target=${CARGO_TARGET_DIR:-$root/target}
export COMPACTD_BIN="$target/debug/compactd"
[ -x "$COMPACTD_BIN" ] || die "no binary at $COMPACTD_BIN"

prefix="$root/target/claude-code"
export CLAUDE_BIN="$prefix/node_modules/.bin/claude"
step "Claude Code $version in $prefix"
if ! "$CLAUDE_BIN" --version 2>/dev/null | grep -q "^$version "; then
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$version" || die "npm install @anthropic-ai/claude-code@$version failed"
fi
got=$("$CLAUDE_BIN" --version) || die "$CLAUDE_BIN does not run"
case "$got" in "$version "*) ;; *) die "expected Claude Code $version, got: $got" ;; esac

step "Claude Code calls compactd's search_history over MCP"
timeout 300 python3 tests/clients/claude/test_mcp.py || die "the MCP test failed"

step "Claude Code resumes a transcript compactd compacted"
timeout 300 python3 tests/clients/claude/test_compact.py || die "the compaction test failed"
