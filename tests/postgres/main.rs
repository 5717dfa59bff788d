//! compactd on PostgreSQL, against a real server from the system's packages (started by the
//! harness in a temp dir, `devtools::postgres`): the same behaviour on both backends, a fleet
//! of daemons on one database with nothing lost, crashes mid-compaction, the database
//! restarting under a running daemon, and `import`/`export`.
//!
//! Not part of a plain `cargo test` (it needs the server): `scripts/test.d/postgres.sh`
//! installs PostgreSQL and runs `cargo test --test postgres`. Without the server the tests
//! fail, they never skip.

mod backends;
mod crash;
mod fleet;
mod import_export;
mod listing;
mod partial;
mod restart;
mod support;
