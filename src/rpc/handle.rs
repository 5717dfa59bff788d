//! The running peer as handlers see it: [`PeerHandle`] (the client, cancellation, stopping),
//! the context each request and notification handler gets, and the state they share with
//! the dispatcher in `peer.rs`. Kept apart from the dispatcher so that the router, which
//! names these types in its handler signatures, and the peer, which runs the router, do not
//! import each other.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::budget::Reservation;
use super::client::Client;
use super::lock;
use super::message::{RequestId, RpcError};
use super::parent::wait_for_process_exit;

/// Why [`Peer::serve`](super::Peer::serve) returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// The input reached EOF (in-flight requests were allowed to finish first).
    InputClosed,
    /// The client sent `exit`; LSP wants exit code 0 only if `shutdown` came first.
    Exit { after_shutdown: bool },
    /// The watched parent process died.
    ParentExited,
    /// [`PeerHandle::stop`] was called, or the output failed.
    Stopped,
}

impl ExitReason {
    /// The process exit code LSP asks for: 1 for `exit` without `shutdown`, else 0.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Exit {
                after_shutdown: false,
            } => 1,
            _ => 0,
        }
    }
}

/// A handle on the running peer, for handlers and domain code: the client, request
/// cancellation, parent watching and stopping. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PeerHandle {
    pub(super) shared: Arc<PeerShared>,
}

impl PeerHandle {
    pub(super) fn new(shared: &Arc<PeerShared>) -> Self {
        Self {
            shared: Arc::clone(shared),
        }
    }

    /// Sends notifications and requests to the client.
    pub fn client(&self) -> &Client {
        &self.shared.client
    }

    /// Cancels the token of request `id` (as `$/cancelRequest` does). `false` if no such
    /// request is in flight.
    pub fn cancel_request(&self, id: &RequestId) -> bool {
        match lock(&self.shared.requests).get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The cancellation token of request `id`, while it is in flight.
    pub fn request_token(&self, id: &RequestId) -> Option<CancellationToken> {
        lock(&self.shared.requests).get(id).cloned()
    }

    /// Ends [`Peer::serve`](super::Peer::serve): in-flight requests are cancelled and given `drain_timeout`.
    pub fn stop(&self) {
        self.shared.finish(ExitReason::Stopped);
    }

    /// Ends [`Peer::serve`](super::Peer::serve) with [`ExitReason::ParentExited`] when process `pid` dies (LSP
    /// `initialize.processId`).
    pub fn watch_parent(&self, pid: u32) {
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            tokio::select! {
                () = shared.stop.cancelled() => {}
                () = wait_for_process_exit(pid, shared.parent_poll_interval) => {
                    tracing::info!(pid, "the parent process exited; stopping");
                    shared.finish(ExitReason::ParentExited);
                }
            }
        });
    }
}

/// What a request handler gets besides its params.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    pub(super) id: RequestId,
    pub(super) method: &'static str,
    pub(super) token: CancellationToken,
    pub(super) peer: PeerHandle,
    /// Output reserved by the handler; given back once its response is queued.
    pub(super) reserved: Arc<Mutex<Vec<Reservation>>>,
    /// For a session-serial request: cancelled to let later reads of the session run.
    pub(super) reads_may_pass: Option<CancellationToken>,
}

impl RequestCtx {
    /// The request's id, as the client sent it.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// The method's wire name.
    pub fn method(&self) -> &'static str {
        self.method
    }

    /// Cancelled by `$/cancelRequest`, [`PeerHandle::cancel_request`] or the end of the
    /// connection. A handler that stops because of it should return
    /// [`RpcError::request_cancelled`].
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// `Err(request_cancelled)` once the token is cancelled, for use with `?` between steps.
    pub fn check_cancelled(&self) -> Result<(), RpcError> {
        if self.token.is_cancelled() {
            Err(RpcError::request_cancelled())
        } else {
            Ok(())
        }
    }

    /// Sends notifications and requests to the client.
    pub fn client(&self) -> &Client {
        self.peer.client()
    }

    /// The running peer.
    pub fn peer(&self) -> &PeerHandle {
        &self.peer
    }

    /// For a long session-serial request (a compaction, a branch summary): the session's
    /// reads that arrived after it stop waiting for it to finish and run now, seeing the
    /// session as it is meanwhile. Calls queued after it still wait. Does nothing for other
    /// classes.
    pub fn let_reads_pass(&self) {
        if let Some(token) = &self.reads_may_pass {
            token.cancel();
        }
    }

    /// Before building a result of about `bytes` (a whole context): waits until the output
    /// budget ([`PeerConfig::max_output_bytes`](super::PeerConfig::max_output_bytes)) has room for it, then holds it until this
    /// request's response is queued, when the response's own size takes its place. So a
    /// client that pipelines large reads and reads no answers makes the next one wait instead
    /// of holding every answer in memory at once. A result larger than the whole budget
    /// waits until nothing else is held. `Err(request_cancelled)` when the request is
    /// cancelled while it waits.
    pub async fn reserve_output(&self, bytes: usize) -> Result<(), RpcError> {
        let reservation = tokio::select! {
            biased;
            () = self.token.cancelled() => return Err(RpcError::request_cancelled()),
            reservation = self.peer.client().budget().reserve(bytes) => reservation,
        };
        lock(&self.reserved).push(reservation);
        Ok(())
    }
}

/// What a notification handler gets besides its params.
#[derive(Debug, Clone)]
pub struct NotificationCtx {
    pub(super) method: &'static str,
    pub(super) peer: PeerHandle,
}

impl NotificationCtx {
    /// The notification's wire name.
    pub fn method(&self) -> &'static str {
        self.method
    }

    /// Sends notifications and requests to the client.
    pub fn client(&self) -> &Client {
        self.peer.client()
    }

    /// The running peer.
    pub fn peer(&self) -> &PeerHandle {
        &self.peer
    }
}

/// Where the connection is in the LSP lifecycle (only enforced with `with_lifecycle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Uninitialized,
    /// `initialize` is running; other requests must wait for its answer.
    Initializing,
    Initialized,
    ShuttingDown,
}

#[derive(Debug)]
pub(super) struct PeerShared {
    pub(super) client: Client,
    /// Cancellation tokens of requests in flight, by id.
    pub(super) requests: Mutex<HashMap<RequestId, CancellationToken>>,
    /// Requests and notifications accepted and not yet finished.
    pub(super) load: AtomicUsize,
    /// Parent of every request token: cancelled when the connection ends.
    pub(super) cancel_all: CancellationToken,
    /// Cancelled to make `serve` stop reading and wind down.
    pub(super) stop: CancellationToken,
    pub(super) exit_reason: Mutex<Option<ExitReason>>,
    pub(super) phase: Mutex<Phase>,
    pub(super) parent_poll_interval: Duration,
}

impl PeerShared {
    /// Records why serving ends (the first reason wins) and stops reading.
    pub(super) fn finish(&self, reason: ExitReason) {
        lock(&self.exit_reason).get_or_insert(reason);
        self.stop.cancel();
    }

    pub(super) fn exit_reason(&self) -> ExitReason {
        lock(&self.exit_reason).unwrap_or(ExitReason::Stopped)
    }
}
