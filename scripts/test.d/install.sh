#!/usr/bin/env bash
# The README's Rust install paths, for real: `cargo package` (the crate builds from what it
# ships), `cargo install --path .` and `cargo install --git` (a local clone URL, the committed
# HEAD), each binary then run outside the repository with its prompts embedded, `--version`
# naming the commit, and the completions and man pages it generates.
#
# The installs use the debug profile (`--debug`) and target/ (CARGO_TARGET_DIR), so they reuse
# the test command's debug build instead of a second, release build of every crate (the README's
# commands build release; the profile is the only difference). The installed binary stays in
# target/install/bin for the editor suites.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

step() { printf '\n==> install: %s\n' "$*" >&2; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }
t0=$(date +%s)
export CARGO_TARGET_DIR="$root/target"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head=$(git rev-parse --short=12 HEAD)

# Runs an installed binary as a new user would: from another directory, with an empty config.
check_binary() {
  local bin=$1 expect_commit=$2
  local version
  version=$("$bin" --version)
  echo "$version"
  [[ "$version" == "compactd $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1) (commit $expect_commit)" ]] \
    || die "unexpected --version: $version (want commit $expect_commit)"
  local demo="$work/demo-$RANDOM.jsonl"
  cp examples/demo-session.jsonl "$demo"
  local out
  out=$(cd "$work" && COMPACTD_CONFIG_DIR="$work/config" "$bin" compact "$demo" --summarizer extractive)
  grep -q "appended to $demo" <<<"$out" || die "compact did not say which file it wrote: $out"
  [ "$(tail -1 "$demo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["type"])')" = compaction ] \
    || die "no compaction entry appended to $demo"
  "$bin" completions bash | bash -n /dev/stdin || die "the bash completion script does not parse"
  "$bin" man --out "$work/man1" 2>/dev/null
  [ -s "$work/man1/compactd.1" ] || die "no man page written"
}

step "cargo package (metadata, license, included files; the packaged crate builds)"
list=$(cargo package -p compactd --allow-dirty --locked --list 2>/dev/null)
for f in LICENSE README.md build.rs Cargo.lock src/main.rs prompts/compaction-summary.md prompts/branch-summary.md; do
  grep -qx "$f" <<<"$list" || die "cargo package leaves out $f"
done
if grep -E '^(tests|editors|clients|fuzz|benches|target)/' <<<"$list"; then die "cargo package ships files it does not need"; fi
cargo package -p compactd --allow-dirty --locked 2>&1 | tail -3

step "cargo install --path . --locked --debug"
cargo install --path . --locked --debug --root "$root/target/install" --force 2>&1 | tail -2
check_binary "$root/target/install/bin/compactd" "$head"

step "cargo install --git file://$root --rev $head --locked --debug (the committed HEAD)"
cargo install --git "file://$root" --rev "$(git rev-parse HEAD)" --locked --debug --root "$work/git-install" compactd 2>&1 | tail -2
check_binary "$work/git-install/bin/compactd" "$head"

step "a build with nothing changed compiles nothing (build.rs watches only files that exist)"
cargo build --locked 2>&1 | tail -1
again=$(cargo build --locked 2>&1)
if grep -q 'Compiling' <<<"$again"; then die "a second cargo build recompiled: $again"; fi

echo "install: done in $(( $(date +%s) - t0 )) s" >&2
