#!/usr/bin/env bash
# Runs every cargo-fuzz target briefly on nightly, starting from the committed seeds and the
# saved regressions (fuzz/seeds/<target>/, fuzz/regressions/<target>/).
# Usage: scripts/fuzz.sh [target...]   (default: every target)
# FUZZ_SECONDS (default 30) sets the time per target. A missing nightly toolchain is an error:
# this is a fuzz campaign, separate from the test command (scripts/test.sh replays the saved
# inputs on stable through tests/contract/fuzz_regressions.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-30}"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz.sh: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir fuzz)
fi
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz.sh: no fuzz targets found" >&2
  exit 1
fi

for target in "${targets[@]}"; do
  corpus="fuzz/corpus/$target"
  mkdir -p "$corpus"
  for saved in "fuzz/seeds/$target" "fuzz/regressions/$target"; do
    if [ -d "$saved" ]; then cp -n "$saved"/* "$corpus"/ 2>/dev/null || true; fi
  done
  echo "==> fuzz $target for ${seconds}s" >&2
  # -timeout: one input running longer than 10 s is a hang, reported as a crash.
  cargo +nightly fuzz run --fuzz-dir fuzz "$target" "$corpus" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
echo "fuzz: ${#targets[@]} passed, 0 failed"
