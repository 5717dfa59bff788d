#!/usr/bin/env bash
# Runs every test of compactd on a fresh machine: installs what the tests need (Rust components,
# Python and npm packages), then runs the Rust checks and tests, and the editor / agent suites.
# Usage: scripts/test.sh [--quick]   (--quick: Rust only)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*" >&2; }

# Nothing a passing run makes may stay in /tmp. What /tmp holds now is noted; at the end, what
# appeared and is still there is listed, and the run fails on any entry named as the tools of
# this run name theirs (tempfile's `.tmp*`, Python's `tmp*`, the suites' `compactd-*`,
# Neovim's `nvim.*`, Node's compile cache, ...). Other entries (another program's, on a shared
# machine) are listed only.
tmp_before=$(ls -A /tmp | sort)
check_tmp() {
  local new ours
  new=$(comm -13 <(printf '%s\n' "$tmp_before") <(ls -A /tmp | sort) | sed '/^$/d')
  [ -n "$new" ] || { echo "nothing new in /tmp" >&2; return 0; }
  printf 'new in /tmp since the run started:\n%s\n' "$new" >&2
  ours=$(grep -E '^(\.tmp|tmp|compactd|nvim\.|node-compile-cache|v8-compile-cache|jiti$|pytest-of-|npm-|vscode|code-server|\.org\.chromium|playwright|bun-|omp-)' <<<"$new" || true)
  if [ -n "$ours" ]; then
    printf 'scripts/test.sh: the run left these in /tmp:\n%s\n' "$ours" >&2
    exit 1
  fi
}
# Node 22+ writes a compile cache to $TMPDIR/node-compile-cache when a tool enables it.
export NODE_DISABLE_COMPILE_CACHE=1
# pi loads its extensions (ours among them) through jiti 2, which caches the compiled files in
# /tmp/jiti unless told not to.
export JITI_FS_CACHE=false

step "Rust toolchain components"
rustup component add rustfmt clippy >/dev/null 2>&1 || true

step "system packages: strace (tests/daemon/file_access.rs traces the daemon's file access)"
if ! command -v strace >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi

step "cargo fmt --check"
cargo fmt --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

step "cargo build (debug binary used by the integration tests)"
cargo build

step "cargo test"
cargo test

if [ "${1:-}" = "--quick" ]; then
  step "nothing left in /tmp"
  check_tmp
  exit 0
fi

for suite in scripts/test.d/*.sh; do
  [ -e "$suite" ] || continue
  step "$suite"
  bash "$suite"
done

step "nothing left in /tmp"
check_tmp
