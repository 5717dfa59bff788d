//! The wire: a generic JSON-RPC 2.0 peer over a byte stream (stdio in the daemon). It owns
//! transport and dispatch only; no business logic lives here.
//!
//! * [`framing`]: LSP `Content-Length` headers or newline-delimited JSON, auto-detected.
//! * [`message`]: request ids, [`RpcError`] and the standard error codes.
//! * [`Router`]: dispatch by method name (wire name, params, result, [`Concurrency`] class).
//! * [`Peer`]: the main loop: reader, writer, per-request tasks, cancellation, lifecycle.
//! * [`PeerHandle`](handle::PeerHandle), [`RequestCtx`], [`NotificationCtx`]: the running
//!   peer as handlers see it (`handle.rs`; the router names them and the peer builds them, so
//!   neither of those two imports the other).
//! * [`Client`]: notifications and server-to-client requests with timeouts.
//!
//! The protocol compactd speaks over it is in `src/protocol/`; the daemon that serves it in
//! `src/server/`.
//!
//! # Registering methods and serving stdio
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use compactd::rpc::{Concurrency::*, Peer, RequestCtx, Router, RpcError};
//! use serde::{Deserialize, Serialize};
//!
//! struct Daemon; // the engine, settings, open sessions...
//!
//! #[derive(Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct CompactParams {
//!     session_id: String,
//! }
//!
//! #[derive(Serialize)]
//! struct CompactResult {
//!     summary: String,
//! }
//!
//! async fn compact(
//!     _daemon: Arc<Daemon>,
//!     ctx: RequestCtx,
//!     params: CompactParams,
//! ) -> Result<CompactResult, RpcError> {
//!     ctx.check_cancelled()?; // -32800 once `$/cancelRequest` arrived
//!     ctx.client()
//!         .notify("session/compactionStarted", serde_json::json!({ "sessionId": params.session_id }))
//!         .await
//!         .map_err(RpcError::internal)?;
//!     let hook: Option<serde_json::Value> = ctx
//!         .client()
//!         .request("hooks/beforeCompact", (), Duration::from_secs(5))
//!         .await
//!         .ok(); // no answer means "continue the default way"
//!     Ok(CompactResult { summary: format!("{hook:?}") })
//! }
//!
//! async fn ping(_: Arc<Daemon>, _: RequestCtx, _: ()) -> Result<&'static str, RpcError> {
//!     Ok("pong")
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let router = Router::new(Arc::new(Daemon))
//!     .with_lifecycle() // the daemon also registers initialize, initialized, shutdown, exit
//!     .request("session/compact", SessionSerial, compact)
//!     .request("ping", Parallel, ping);
//! let reason = Peer::serve(tokio::io::stdin(), tokio::io::stdout(), router).await?;
//! // tokio's stdin blocks a thread in `read`; exit the process rather than waiting on it.
//! std::process::exit(reason.exit_code());
//! # }
//! ```

mod budget;
mod client;
pub(crate) mod framing;
mod handle;
mod message;
mod parent;
pub(crate) mod peer;
mod router;
mod serial;
#[cfg(test)]
mod tests;

pub use client::{Client, ClientRequestError};
pub use handle::{ExitReason, NotificationCtx, RequestCtx};
pub use message::{RequestId, RpcError, TransportErrorKind, error_code, notification_json};
pub use peer::{Peer, TRANSPORT_NOTIFICATIONS};
pub use router::{Concurrency, Router};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a mutex, ignoring poisoning: no critical section here can leave data half-updated,
/// so a panic elsewhere is no reason to panic again.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
