//! The daemon: the protocol of `src/protocol/` served over stdio by the transport of
//! `src/rpc/`, backed by the [`Engine`].
//!
//! This file holds the one method table ([`router`]), the connection state ([`Daemon`]) and
//! the typed server-to-client requests ([`request`]). Beside it: [`table`] gives every handler
//! its fixed shape (what the router does around it: flushing its notifications, bracketing an
//! operation with progress), [`hub`] turns engine events and operation reports into
//! notifications (`$/progress`, `session/*`), [`adapters`] implements the engine's hooks and
//! the client summarizer with server-to-client requests, and [`to_proto`] / [`from_proto`]
//! are the one place domain values become wire values and back. The handlers, one file per
//! method or small group, live in `src/server/handlers/`.

mod adapters;
pub(crate) mod from_proto;
mod handlers;
pub(crate) mod hub;
mod table;
pub(crate) mod to_proto;

use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::engine::Engine;
use crate::protocol::method::*;
use crate::protocol::{ClientCapabilities, ServerRequest};
use crate::rpc::{Client, ClientRequestError, ExitReason, Peer, Router};
use crate::settings::SettingsStack;

pub(crate) use adapters::{ClientHooks, client_summarizer};
pub(crate) use hub::{Hub, OpObserver, OperationKind};
pub(crate) use table::OperationRequest;
use table::Table;

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
    /// Set by `initialize`; a second `initialize` finds it set.
    capabilities: OnceLock<ClientCapabilities>,
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
        })
    }

    /// Records the capabilities; `false` if `initialize` already did.
    pub(crate) fn set_capabilities(&self, capabilities: ClientCapabilities) -> bool {
        self.hub.set_capabilities(capabilities.clone());
        self.capabilities.set(capabilities).is_ok()
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
        .on::<SessionObserveTurn>(session_observe::observe_turn)
        .on::<SessionSearch>(session_recall::search)
        .on_large::<SessionReadEntry>(session_recall::read_entry)
        .on::<SessionSetLabel>(session_label::set_label)
        .on::<SessionLedger>(session_ledger::ledger)
        .on::<SessionPin>(session_ledger::pin)
        .on::<SessionUnpin>(session_ledger::unpin)
        .on_operation::<SessionCompact>()
        .on_operation::<SessionCommitCompaction>()
        .on::<SessionAbortCompaction>(session_compact::abort)
        .on::<SessionPrune>(session_prune::prune)
        .on_operation::<SessionNavigateTree>()
        .on::<SessionAbortBranchSummary>(session_navigate::abort)
        .on::<SessionUndoCompaction>(session_undo::undo_compaction)
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
