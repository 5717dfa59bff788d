#!/usr/bin/env bash
# Runs every test of compactd on a fresh machine: installs what the tests need (Rust components,
# Python and npm packages), then runs the Rust checks and tests, and the editor / agent suites.
# Usage: scripts/test.sh [--quick]   (--quick: Rust only)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*" >&2; }

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

if [ "${1:-}" = "--quick" ]; then exit 0; fi

for suite in scripts/test.d/*.sh; do
  [ -e "$suite" ] || continue
  step "$suite"
  bash "$suite"
done
