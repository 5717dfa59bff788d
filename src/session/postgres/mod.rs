//! Sessions in PostgreSQL, for a fleet of daemons sharing one database.
//!
//! The database holds lines, not interpretations: a session is its header line and its entry
//! lines in order, each stored as the exact bytes a session file would hold, so every reader
//! of the file format (the loader, export) works on them unchanged and an imported file
//! exports to the same bytes. The in-memory session (entries, tree, leaf, context) is the same
//! one the file backend builds; this module only moves lines. `store.rs` is its side of the
//! storage seam (`session/file/store.rs`): the session's `Store`, creating, opening and
//! importing stored sessions; `ops.rs` the queries, `schema.rs` the tables, `watch.rs` the
//! listener.
//!
//! # Tables (see `schema.rs`)
//! * `compactd_sessions`: one row a session: the header line and its fields for listing,
//!   `version` (bumped by every change), `generation` (bumped by every rewrite), `next_seq`
//!   (the position of the next line), the leaf, counts, `updated_at` (indexed for listing),
//!   and the digest of the leaf (`context_*`: what opening the session there must read; see
//!   `session::file::partial`).
//! * `compactd_lines`: `(session_id, seq)` → the line's bytes, with its entry id, parent id
//!   and type (null for a malformed line kept verbatim).
//!
//! # Writers
//! A write takes the session row `FOR UPDATE` in a transaction (the database serialises the
//! writers of one session, across processes and hosts), reads the lines other writers added
//! since this process last looked (or the whole session after another's rewrite), lets the
//! caller build its lines at the leaf as it now is, inserts them, bumps the version, and
//! commits with a `NOTIFY`. A compaction's entry and the version bump are one transaction: a
//! writer killed before the commit leaves nothing behind.
//!
//! # Readers
//! Opening reads the lines the context at the leaf needs (the digest's), or every line when
//! the row has no digest for its leaf; the rest is read on demand. Every daemon `LISTEN`s; a
//! notification says a session reached a version. A read that has seen that version costs no
//! query; otherwise it fetches the new lines. While the listener is down every read queries
//! (see [`watch`]).
//!
//! # Calls from synchronous code
//! The session API is synchronous (a file write is too), so the pool, its connections and
//! the listener run on a small runtime of their own, and each call waits for its result;
//! inside the daemon's multi-threaded runtime the wait is marked blocking
//! (`block_in_place`), so other tasks move to other threads meanwhile.

mod ops;
mod schema;
mod store;
mod watch;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use crate::settings::redact_url;
pub(crate) use ops::Finish;
pub(crate) use ops::Locked;
pub use ops::{Changes, Head, Loaded, StoredLine, WriteMeta};
pub use store::{import_file, postgres_path};

/// What a stored session's path starts with: `postgres:ID`.
pub(crate) const SCHEME: &str = "postgres";
pub(crate) use watch::Interest;

use watch::Watch;

/// What went wrong talking to the database, in words fit for a client: never the password.
#[derive(Debug, Clone, thiserror::Error)]
#[error("session database ({target}): {message}")]
pub struct StoreError {
    /// The redacted URL.
    pub target: String,
    pub message: String,
    /// The session did not exist.
    pub not_found: bool,
    /// The session to create or import is already stored.
    pub exists: bool,
}

/// How to reach the database.
#[derive(Clone)]
pub struct PgOptions {
    /// A `postgres://` URL or a `key=value` connection string (password included).
    pub url: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// How long one call may take before it fails (connecting included).
    pub timeout: Duration,
    /// Reads ask the database for other writers' changes every time, not only when a
    /// notification says there are some (`storage.postgres.freshReads`).
    pub fresh_reads: bool,
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("url", &redact_url(&self.url))
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .field("fresh_reads", &self.fresh_reads)
            .finish()
    }
}

/// A connection pool to one database with its listener, shared by every session stored there.
pub struct PgStore {
    runtime: OwnedRuntime,
    pool: deadpool_postgres::Pool,
    watch: Arc<Watch>,
    target: String,
    timeout: Duration,
    fresh_reads: bool,
    /// See [`PgStore::lines_read`].
    lines_read: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.target)
            .finish()
    }
}

/// The store's runtime; shut down without waiting, so dropping a store inside another
/// runtime (a test, the daemon's shutdown) cannot panic.
struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl OwnedRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        // Only `Drop` takes it.
        self.0.as_ref().expect("runtime present").handle()
    }
}

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl PgStore {
    /// Connects, applies the embedded migrations (versioned, each once, under an advisory
    /// lock so daemons starting together do not race) and starts listening.
    pub fn connect(options: &PgOptions) -> Result<Arc<PgStore>, StoreError> {
        let target = redact_url(&options.url);
        let fail = |message: String| StoreError {
            target: target.clone(),
            message,
            not_found: false,
            exists: false,
        };
        let config: tokio_postgres::Config = options
            .url
            .parse()
            .map_err(|e| fail(format!("invalid connection URL: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("compactd-postgres")
            .enable_all()
            .build()
            .map_err(|e| fail(format!("cannot start its runtime: {e}")))?;
        let runtime = OwnedRuntime(Some(runtime));
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = {
            let _enter = runtime.handle().enter();
            deadpool_postgres::Pool::builder(manager)
                .max_size(options.pool_size.max(1))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(options.timeout))
                .create_timeout(Some(options.timeout))
                .recycle_timeout(Some(options.timeout))
                .build()
                .map_err(|e| fail(format!("cannot build the pool: {e}")))?
        };
        let watch = Arc::new(Watch::default());
        let store = Arc::new(PgStore {
            runtime,
            pool,
            watch: Arc::clone(&watch),
            target: target.clone(),
            timeout: options.timeout,
            fresh_reads: options.fresh_reads,
            lines_read: Default::default(),
        });
        store.call(|pool| async move {
            let mut client = pool.get().await.map_err(ops::pool_error)?;
            schema::migrate(&mut client).await
        })?;
        store
            .runtime
            .handle()
            .spawn(watch::listen(config, watch, target));
        Ok(store)
    }

    /// Whether reads ask the database every time (see [`PgOptions::fresh_reads`]).
    pub(crate) fn fresh_reads(&self) -> bool {
        self.fresh_reads
    }

    /// The redacted URL, for messages.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Runs `job` with the pool on the store's runtime and waits for it, failing after the
    /// store's timeout.
    pub(crate) fn call<T, F, Fut>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(deadpool_postgres::Pool) -> Fut,
        Fut: Future<Output = Result<T, ops::DbError>> + Send + 'static,
    {
        let future = job(self.pool.clone());
        let timeout = self.timeout;
        let outcome = self.wait(async move {
            match tokio::time::timeout(timeout, future).await {
                Ok(result) => result,
                Err(_) => Err(ops::DbError::msg(format!(
                    "no answer within {} ms",
                    timeout.as_millis()
                ))),
            }
        });
        outcome.map_err(|e| self.error(e))
    }

    /// Runs `future` on the store's runtime and waits for its output.
    fn wait<T: Send + 'static>(
        &self,
        future: impl Future<Output = Result<T, ops::DbError>> + Send + 'static,
    ) -> Result<T, ops::DbError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime.handle().spawn(async move {
            let _ = tx.send(future.await);
        });
        let receive = move || {
            rx.recv()
                .unwrap_or_else(|_| Err(ops::DbError::msg("the database task stopped")))
        };
        blocking(receive)
    }

    pub(crate) fn error(&self, e: ops::DbError) -> StoreError {
        StoreError {
            target: self.target.clone(),
            message: e.message,
            not_found: e.not_found,
            exists: e.exists,
        }
    }

    /// Registers interest in `id`'s notifications (before loading it, so none is missed).
    pub(crate) fn interest(&self, id: &str) -> Interest {
        self.watch.interest(id)
    }
}

/// Runs `f`, which blocks, telling a multi-threaded tokio runtime around it (if any) so its
/// other tasks keep running elsewhere.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
