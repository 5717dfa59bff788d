#!/usr/bin/env bash
# compactd on PostgreSQL: installs Debian's postgresql package when its server binaries are
# missing, then runs the tests that start their own server (initdb in a temp dir, a loopback
# port and a socket in that dir, as the `postgres` user when run as root): the Postgres-only
# suite (tests/postgres: both backends, fleets of daemons, SIGKILL mid-compaction, a database
# restart, import/export), and the daemon's session and agent-flow suites again with every
# session stored in PostgreSQL (COMPACTD_TEST_BACKEND=postgres). Fails loudly, never skips.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'postgres.sh: %s\n' "$*" >&2; exit 1; }

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  step "apt-get install postgresql"
  [ "$(id -u)" = 0 ] || die "PostgreSQL is missing and installing it needs root (apt-get install postgresql)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null \
    || die "apt-get install postgresql failed"
fi
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || die "no PostgreSQL server binaries after the install"
command -v setpriv >/dev/null || die "setpriv (util-linux) is required to run the server as the postgres user"

step "cargo build (the daemon the tests start)"
cargo build

step "cargo test --test postgres"
cargo test --test postgres

# Skipped here only: four tests that read the session file itself (its bytes or path).
step "daemon suites on PostgreSQL (COMPACTD_TEST_BACKEND=postgres)"
COMPACTD_TEST_BACKEND=postgres cargo test --test daemon -- sessions:: agent_flow:: concurrency:: \
  --skip concurrency::raw_entries_keep_every_field \
  --skip sessions::a_prompt_override_that_cannot_be_read_fails_compactions_until_it_is_fixed \
  --skip sessions::fork_makes_a_branch_or_a_copy_and_opens_it \
  --skip sessions::manual_compaction_with_progress_preview_and_errors
