//! The daemon: the protocol of `src/protocol/` served over stdio by the transport of
//! `src/rpc/`, backed by the [`Engine`].
//!
//! This file holds the one method table ([`router`]), the connection state ([`Daemon`]) and
//! the mapping of engine errors to protocol errors. Beside it: [`progress`] turns engine
//! events and operation reports into notifications (`$/progress`, `session/*`), and
//! [`adapters`] implements the engine's hooks and the client summarizer with
//! server-to-client requests. The handlers, one file per method or small group, live in
//! `src/server/handlers/`.

mod adapters;
pub(crate) mod convert;
mod handlers;
pub(crate) mod progress;

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncRead, AsyncWrite};

use crate::engine::{Engine, EngineError};
use crate::protocol::method::*;
use crate::protocol::{
    ClientCapabilities, ClientMethod, ErrorKind, Method, ProgressToken, RequestMethod,
};
use crate::rpc::{ExitReason, Peer, RequestCtx, Router, RpcError};
use crate::settings::SettingsStack;

pub(crate) use adapters::{ClientHooks, client_summarizer};
pub(crate) use progress::{Hub, OpObserver, OperationKind};

/// Serves the protocol on stdin/stdout until the connection ends. The caller should exit the
/// process afterwards: tokio's stdin reader may still block a thread in `read`.
pub async fn serve_stdio(settings: SettingsStack) -> io::Result<ExitReason> {
    serve(tokio::io::stdin(), tokio::io::stdout(), settings).await
}

/// Serves the protocol on any byte stream (tests use in-memory pipes).
pub async fn serve<R, W>(reader: R, writer: W, settings: SettingsStack) -> io::Result<ExitReason>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    Peer::serve(reader, writer, router(Daemon::new(settings))).await
}

/// The state every handler gets: the engine and what `initialize` established.
pub struct Daemon {
    pub(crate) engine: Arc<Engine>,
    pub(crate) hub: Arc<Hub>,
    capabilities: OnceLock<ClientCapabilities>,
    next_token: AtomicU64,
}

impl Daemon {
    /// A daemon whose engine starts from `settings` (user file and defaults).
    pub fn new(settings: SettingsStack) -> Arc<Self> {
        let hub = Arc::new(Hub::new());
        let engine = Arc::new(Engine::new(settings, hub.clone()));
        Arc::new(Daemon {
            engine,
            hub,
            capabilities: OnceLock::new(),
            next_token: AtomicU64::new(1),
        })
    }

    /// The client's capabilities (all "no" before `initialize`).
    pub(crate) fn capabilities(&self) -> &ClientCapabilities {
        static NONE: OnceLock<ClientCapabilities> = OnceLock::new();
        self.capabilities
            .get()
            .unwrap_or_else(|| NONE.get_or_init(ClientCapabilities::default))
    }

    /// Records the capabilities; `false` if `initialize` already did.
    pub(crate) fn set_capabilities(&self, capabilities: ClientCapabilities) -> bool {
        self.hub.set_capabilities(capabilities.clone());
        self.capabilities.set(capabilities).is_ok()
    }

    /// A fresh server-chosen progress token.
    pub(crate) fn new_progress_token(&self) -> ProgressToken {
        let n = self.next_token.fetch_add(1, Ordering::Relaxed);
        ProgressToken::String(format!("compactd-progress-{n}"))
    }
}

/// A request handler: `async fn(Arc<Daemon>, RequestCtx, Params) -> Result<Result, RpcError>`.
pub(crate) trait Handler<P, R>: Send + Sync + 'static {
    type Fut: Future<Output = Result<R, RpcError>> + Send + 'static;
    fn call(&self, daemon: Arc<Daemon>, ctx: RequestCtx, params: P) -> Self::Fut;
}

impl<P, R, F, Fut> Handler<P, R> for F
where
    F: Fn(Arc<Daemon>, RequestCtx, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
{
    type Fut = Fut;
    fn call(&self, daemon: Arc<Daemon>, ctx: RequestCtx, params: P) -> Fut {
        self(daemon, ctx, params)
    }
}

/// Registers methods by their protocol marker, so the wire name, the params and result types
/// and the concurrency class all come from `protocol.rs` and cannot drift.
trait Table {
    fn on<M: RequestMethod + ClientMethod>(
        self,
        handler: impl Handler<M::Params, M::Result>,
    ) -> Self;
}

impl Table for Router<Arc<Daemon>> {
    fn on<M: RequestMethod + ClientMethod>(
        self,
        handler: impl Handler<M::Params, M::Result>,
    ) -> Self {
        self.request(M::NAME, M::CONCURRENCY, move |d, ctx, p| {
            handler.call(d, ctx, p)
        })
    }
}

/// The whole protocol on one screen: every method the client may send, once each.
/// `$/cancelRequest` and the lifecycle gate are the transport's; `exit` ends the peer.
pub fn router(daemon: Arc<Daemon>) -> Router<Arc<Daemon>> {
    use handlers::*;
    Router::new(daemon)
        .with_lifecycle()
        .on::<Initialize>(lifecycle::initialize)
        .on::<Shutdown>(lifecycle::shutdown)
        .on::<SessionCreate>(session_open::create)
        .on::<SessionOpen>(session_open::open)
        .on::<SessionFork>(session_open::fork)
        .on::<SessionList>(session_open::list)
        .on::<SessionClose>(session_open::close)
        .on::<SessionAppend>(session_append::append)
        .on::<SessionContext>(session_read::context)
        .on::<SessionTree>(session_read::tree)
        .on::<SessionUsage>(session_read::usage)
        .on::<SessionSetLabel>(session_label::set_label)
        .on::<SessionCompact>(session_compact::compact)
        .on::<SessionAbortCompaction>(session_compact::abort)
        .on::<SessionPrune>(session_prune::prune)
        .on::<SessionNavigateTree>(session_navigate::navigate)
        .on::<SessionAbortBranchSummary>(session_navigate::abort)
        .on::<SettingsGet>(settings::get)
        .on::<SettingsUpdate>(settings::update)
        .notification(
            Initialized::NAME,
            Initialized::CONCURRENCY,
            lifecycle::initialized,
        )
        .notification(
            WorkDoneProgressCancel::NAME,
            WorkDoneProgressCancel::CONCURRENCY,
            lifecycle::work_done_progress_cancel,
        )
}

/// The protocol error of an engine failure: its code, `data.kind` and a message a person can
/// act on.
pub(crate) fn engine_error(error: EngineError) -> RpcError {
    match error {
        EngineError::SessionNotFound(id) => ErrorKind::session_not_found(&id),
        EngineError::EntryNotFound(id) => ErrorKind::entry_not_found(&id),
        EngineError::AlreadyCompacted => ErrorKind::AlreadyCompacted.error(),
        EngineError::NothingToCompact => ErrorKind::NothingToCompact.error(),
        EngineError::CompactionInProgress => ErrorKind::CompactionInProgress.error(),
        EngineError::Cancelled(message) => ErrorKind::Cancelled.with_message(message),
        EngineError::SummarizationFailed(message) => {
            ErrorKind::SummarizationFailed.with_message(message)
        }
        EngineError::LeafMoved { expected, actual } => {
            ErrorKind::leaf_moved(expected.as_deref().unwrap_or("none"), actual.as_deref())
        }
        EngineError::InvalidParams(message) => ErrorKind::InvalidParams.with_message(message),
        error @ EngineError::SessionFile(_) => {
            ErrorKind::SessionFileInvalid.with_message(error.to_string())
        }
        error @ EngineError::CannotGetUnderThreshold { tokens, threshold } => {
            ErrorKind::CannotGetUnderThreshold
                .with_message(error.to_string())
                .with_data_field("tokensAfter", tokens)
                .with_data_field("thresholdTokens", threshold)
        }
        error @ EngineError::Settings(_) => {
            ErrorKind::SettingsInvalid.with_message(error.to_string())
        }
        error @ EngineError::PathOutsideAllowed(_) => {
            ErrorKind::PathOutsideAllowed.with_message(error.to_string())
        }
        error @ EngineError::ReadOnly(_) => {
            ErrorKind::SessionReadOnly.with_message(error.to_string())
        }
    }
}
