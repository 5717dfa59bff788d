//! The daemon: the protocol of `src/protocol/` served over stdio by the transport of
//! `src/rpc/`, backed by the [`Engine`].
//!
//! This file holds the one method table ([`router`]), the connection state ([`Daemon`]) and
//! the typed server-to-client requests ([`request`]). Beside it: [`progress`] turns engine
//! events and operation reports into notifications (`$/progress`, `session/*`), [`adapters`]
//! implements the engine's hooks and the client summarizer with server-to-client requests,
//! and [`to_proto`] / [`from_proto`] are the one place domain values become wire values and
//! back. The handlers, one file per method or small group, live in `src/server/handlers/`.

mod adapters;
pub(crate) mod from_proto;
mod handlers;
pub(crate) mod progress;
pub(crate) mod to_proto;

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::engine::Engine;
use crate::protocol::method::*;
use crate::protocol::{
    ClientCapabilities, ClientNotification, ClientRequest, ProgressToken, ServerRequest,
};
use crate::rpc::{
    Client, ClientRequestError, ExitReason, NotificationCtx, Peer, RequestCtx, Router, RpcError,
};
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
/// and the concurrency class all come from `src/protocol/` and cannot drift.
trait Table {
    fn on<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self;
    /// [`on`](Table::on) for a method whose result may be megabytes: serialised off the
    /// runtime ([`Router::large_request`]).
    fn on_large<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self;
    fn on_notification<M, F, Fut>(self, handler: F) -> Self
    where
        M: ClientNotification,
        F: Fn(Arc<Daemon>, NotificationCtx, M::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static;
}

impl Table for Router<Arc<Daemon>> {
    fn on<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self {
        self.request(M::NAME, M::CONCURRENCY, move |d, ctx, p| {
            handler.call(d, ctx, p)
        })
    }

    fn on_large<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self {
        self.large_request(M::NAME, M::CONCURRENCY, move |d, ctx, p| {
            handler.call(d, ctx, p)
        })
    }

    fn on_notification<M, F, Fut>(self, handler: F) -> Self
    where
        M: ClientNotification,
        F: Fn(Arc<Daemon>, NotificationCtx, M::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.notification(M::NAME, M::CONCURRENCY, handler)
    }
}

/// Sends the server-to-client request `M` and waits up to `timeout` for its answer, typed by
/// the protocol table.
pub(crate) async fn request<M: ServerRequest>(
    client: &Client,
    params: M::Params,
    timeout: Duration,
) -> Result<M::Result, ClientRequestError> {
    client.request(M::NAME, params, timeout).await
}

/// [`request`] for a method whose answer carries nothing (`window/workDoneProgress/create`):
/// only whether the client answered without an error counts, whatever the result's shape
/// (LSP clients answer `null`, some `{}`).
pub(crate) async fn request_ack<M: ServerRequest<Result = ()>>(
    client: &Client,
    params: M::Params,
    timeout: Duration,
) -> Result<(), ClientRequestError> {
    client
        .request::<_, serde::de::IgnoredAny>(M::NAME, params, timeout)
        .await
        .map(|_| ())
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
        .on_large::<SessionContext>(session_read::context)
        .on_large::<SessionTree>(session_read::tree)
        .on::<SessionUsage>(session_read::usage)
        .on::<SessionSetLabel>(session_label::set_label)
        .on::<SessionCompact>(session_compact::compact)
        .on::<SessionAbortCompaction>(session_compact::abort)
        .on::<SessionPrune>(session_prune::prune)
        .on::<SessionNavigateTree>(session_navigate::navigate)
        .on::<SessionAbortBranchSummary>(session_navigate::abort)
        .on::<SettingsGet>(settings::get)
        .on::<SettingsUpdate>(settings::update)
        .on_notification::<Initialized, _, _>(lifecycle::initialized)
        .on_notification::<WorkDoneProgressCancel, _, _>(lifecycle::work_done_progress_cancel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Direction, METHODS, MessageKind};
    use crate::rpc::TRANSPORT_NOTIFICATIONS;

    /// Every method the client may send has exactly one handler, registered as its kind and
    /// in the concurrency class the table declares; the transport's own notifications are
    /// the only ones the daemon leaves to the transport.
    #[test]
    fn every_client_method_of_the_table_has_a_handler_in_its_class() {
        let router = router(Daemon::new(SettingsStack::default()));
        let mut requests = router.requests();
        let mut notifications: Vec<_> = router.notifications();
        for row in METHODS
            .iter()
            .filter(|m| m.direction == Direction::ClientToServer)
        {
            let declared = row.concurrency.expect("a client method has a class");
            let registered = match row.kind {
                MessageKind::Request => &mut requests,
                MessageKind::Notification => &mut notifications,
            };
            match registered.iter().position(|(name, _)| *name == row.name) {
                Some(at) => {
                    let (_, class) = registered.remove(at);
                    assert_eq!(class, declared, "{} runs in the wrong class", row.name);
                }
                None => assert!(
                    row.kind == MessageKind::Notification
                        && TRANSPORT_NOTIFICATIONS.contains(&row.name),
                    "{} has no handler",
                    row.name
                ),
            }
        }
        assert!(requests.is_empty(), "not in the table: {requests:?}");
        assert!(
            notifications.is_empty(),
            "not in the table: {notifications:?}"
        );
    }
}
