#!/usr/bin/env bash
# compactd on PostgreSQL: installs Debian's postgresql package when its server binaries are
# missing, then runs the tests that start their own server (initdb in a temp dir, a loopback
# port and a socket in that dir, as the `postgres` user when run as root): the Postgres-only
# suite (tests/postgres: both backends, fleets of daemons, SIGKILL mid-compaction, a database
# restart, import/export), then the engine suite (the parts that store sessions: registry
# and auto-compaction, compaction, navigation) and the daemon suite again with every session
# stored in PostgreSQL (COMPACTD_TEST_BACKEND=postgres). Fails loudly, never skips for lack
# of a tool.
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

step "engine suite on PostgreSQL (COMPACTD_TEST_BACKEND=postgres)"
COMPACTD_TEST_BACKEND=postgres cargo test --test engine -- auto:: compact:: navigate::

# Not here, as they are about files themselves: which files the daemon touches and their
# fsync (file_access), processes sharing one file (two_writers; tests/postgres/fleet.rs is
# the database's counterpart), and FIFOs, symlinks and truncated session files
# (storage::a_daemon_survives_the_edges...), and an agent's own file that compactd only reads
# and follows turn by turn (the two observe_turn tests on one).
step "daemon suite on PostgreSQL (COMPACTD_TEST_BACKEND=postgres)"
COMPACTD_TEST_BACKEND=postgres cargo test --test daemon -- \
  --skip file_access:: --skip two_writers:: \
  --skip storage::a_daemon_survives_the_edges_at_once_and_loses_nothing \
  --skip observe_turn::a_turn_in_the_band_arms_a_draft_that_the_agents_compaction_gets_at_once \
  --skip observe_turn::use_armed_compacts_the_usual_way_when_the_draft_does_not_fit_the_leaf
