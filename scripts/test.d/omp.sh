#!/usr/bin/env bash
# The oh-my-pi extension (integrations/oh-my-pi) inside the real agents, each installed with
# exact versions from a committed lockfile (npm ci --ignore-scripts) under target/, with the
# agent's model played by a fake OpenAI-compatible server on 127.0.0.1:
# - oh-my-pi 13.19.0 run by Bun 1.4.4 (test/agent/, target/omp-agent/);
# - oh-my-pi 18.2.3 run by Bun 1.3.14 (test/agent-18/, target/omp18-agent/): its session files
#   start with a title line;
# - pi 0.73.1 (oh-my-pi's upstream) run by Node in RPC mode (test/pi-agent/, target/pi-agent/).
# The extension talks to compactd through clients/typescript (compactd-client), built first.
# Typechecks the extension (tsc from the first lockfile). Every step must pass; nothing is
# skipped. The installs take a few minutes once; the tests about four minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
ext="$root/integrations/oh-my-pi"
cache="$root/target/omp-agent"

step() { printf '\n==> omp: %s\n' "$*" >&2; }
die() { printf 'omp.sh: %s\n' "$*" >&2; exit 1; }
t0=$(date +%s)

command -v npm >/dev/null || die "npm is required"

# --- installs (each cached by its lockfile's hash) -----------------------------------------
# install <lockfile dir> <target dir> <what> [ci|install]
# oh-my-pi 18 lists platform packages (`@oh-my-pi/pi-natives-*`) as optional dependencies that the
# registry does not serve for every platform, so npm cannot write them into a lockfile and `npm ci`
# refuses it as out of sync on a fresh machine; it is installed with `npm install`, which still takes
# every version the lockfile pins (expect_version checks the two that matter).
install() {
  local lock="$ext/test/$1" dir="$root/target/$2" how="${4:-ci}" sum
  mkdir -p "$dir"
  sum=$(sha256sum "$lock/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$dir/.lock-stamp" 2>/dev/null)" != "$sum" ] || [ ! -d "$dir/node_modules" ]; then
    step "npm $how --ignore-scripts: $3 (about a minute, once)"
    cp "$lock/package.json" "$lock/package-lock.json" "$dir/"
    (cd "$dir" && npm "$how" --ignore-scripts --no-audit --no-fund >/dev/null) || die "npm $how failed in $dir"
    echo "$sum" >"$dir/.lock-stamp"
  fi
}
# expect_version <package dir> <version>
expect_version() {
  [ "$(node -p "require('$1/package.json').version")" = "$2" ] || die "expected $2 at $1"
}
install agent omp-agent "oh-my-pi 13.19.0, Bun 1.4.4, TypeScript"
install agent-18 omp18-agent "oh-my-pi 18.2.3, Bun 1.3.14" install
install pi-agent pi-agent "pi 0.73.1"
bun="$cache/node_modules/@oven/bun-linux-x64/bin/bun"
agent_pkg="$cache/node_modules/@oh-my-pi/pi-coding-agent"
bun18="$root/target/omp18-agent/node_modules/@oven/bun-linux-x64/bin/bun"
agent18_pkg="$root/target/omp18-agent/node_modules/@oh-my-pi/pi-coding-agent"
pi_pkg="$root/target/pi-agent/node_modules/@mariozechner/pi-coding-agent"
[ "$("$bun" --version)" = "1.4.4" ] || die "expected Bun 1.4.4 at $bun"
[ "$("$bun18" --version)" = "1.3.14" ] || die "expected Bun 1.3.14 at $bun18"
expect_version "$agent_pkg" 13.19.0
expect_version "$agent18_pkg" 18.2.3
expect_version "$pi_pkg" 0.73.1

# --- build and typecheck -------------------------------------------------------------------
step "cargo build (the daemon the extension starts)"
cargo build --quiet
export COMPACTD_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/compactd"

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

# --- the real agents -----------------------------------------------------------------------
# Bun 1.4.4 runs the tests; each test starts its agent with that agent's own runtime.
cd "$ext"
step "bun test: the extension's abort paths, and the extension in oh-my-pi 13.19.0"
OMP_AGENT_PKG="$agent_pkg" OMP_BUN="$bun" timeout 900 "$bun" test --timeout 240000 test/abort.test.ts test/omp.test.ts ||
  die "the real-agent tests failed (oh-my-pi 13.19.0)"
step "bun test: the extension in oh-my-pi 18.2.3"
OMP_AGENT_PKG="$agent18_pkg" OMP_BUN="$bun18" timeout 900 "$bun" test --timeout 240000 test/omp.test.ts ||
  die "the real-agent tests failed (oh-my-pi 18.2.3)"
step "bun test: the extension in pi 0.73.1"
PI_AGENT_PKG="$pi_pkg" timeout 600 "$bun" test --timeout 240000 test/pi.test.ts ||
  die "the real-agent tests failed (pi 0.73.1)"

step "done in $(($(date +%s) - t0)) s"
