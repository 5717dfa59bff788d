//! How handlers are registered, and what the router does around each, so no handler has to
//! remember it. As ruff's server gives each request handler a fixed shape by the trait it
//! implements, every method here has one of three shapes, chosen where it is registered:
//!
//! * [`Table::on`]: a request. A call that may change the server's state (a session-serial or
//!   global-serial method) has the notifications it caused flushed before its answer, so a
//!   client sees `session/entriesAppended` before the append's result; a read (a parallel or
//!   session-read method) is answered at once.
//! * [`Table::on_large`]: the same, for a result that may be megabytes: serialised off the
//!   runtime.
//! * [`Table::on_operation`]: a long operation on one session ([`OperationRequest`]: a
//!   compaction, a navigation with its branch summary). The router claims the operation's
//!   slot on the session (an unknown session or a busy slot fails at once, before anything is
//!   reported), takes the request's progress token or asks the client for one, brackets the
//!   operation with `$/progress` begin and end, lets the session's later reads run while it
//!   waits for a model, and flushes its notifications before the answer.
//!
//! Handlers are `async fn(Arc<Daemon>, RequestCtx, Params) -> Result<Result, RpcError>`; an
//! operation's handler is its [`OperationRequest::run`].

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Daemon, OpObserver, OperationKind, to_proto};
use crate::engine::{Engine, EngineError};
use crate::protocol::{ClientNotification, ClientRequest, ProgressToken};
use crate::rpc::{Concurrency, NotificationCtx, RequestCtx, Router, RpcError};

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

/// A request that runs a long operation on one session; see the module doc. Implemented by
/// the method's marker type, beside its handler.
pub(crate) trait OperationRequest: ClientRequest + 'static {
    const KIND: OperationKind;
    /// The engine's claim on the session's slot for this operation.
    type Claim: Send + 'static;
    /// What the engine's operation returns.
    type Outcome: Send + 'static;

    fn session_id(params: &Self::Params) -> &str;

    /// The progress token the client chose (`workDoneToken`).
    fn work_done_token(params: &Self::Params) -> Option<ProgressToken>;

    /// Whether the call may wait for a model (a navigation without a summary does not): only
    /// then does it report progress and let the session's later reads pass.
    fn waits_for_a_model(_params: &Self::Params) -> bool {
        true
    }

    /// Takes the operation's slot on its session, before anything is reported.
    fn claim(
        engine: &Engine,
        params: &Self::Params,
        cancel: &CancellationToken,
    ) -> Result<Self::Claim, EngineError>;

    /// Runs the operation in the slot `claim` holds, reporting to `observer`.
    fn run(
        engine: &Engine,
        claim: Self::Claim,
        params: Self::Params,
        observer: &OpObserver,
    ) -> impl Future<Output = Result<Self::Outcome, EngineError>> + Send;

    /// The `$/progress` end message of `outcome`: `done`, `cancelled` or the error.
    fn end_message(outcome: &Result<Self::Outcome, EngineError>) -> String;

    /// The wire result of a successful run.
    fn result(outcome: Self::Outcome) -> Self::Result;
}

/// Registers methods by their protocol marker, so the wire name, the params and result types
/// and the concurrency class all come from `src/protocol/` and cannot drift.
pub(crate) trait Table {
    /// A request; see the module doc.
    fn on<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self;
    /// [`on`](Table::on) for a method whose result may be megabytes: serialised off the
    /// runtime ([`Router::large_request`]).
    fn on_large<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self;
    /// A long operation on one session; see [`OperationRequest`].
    fn on_operation<M: OperationRequest>(self) -> Self;
    fn on_notification<M, F, Fut>(self, handler: F) -> Self
    where
        M: ClientNotification,
        F: Fn(Arc<Daemon>, NotificationCtx, M::Params) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static;
}

impl Table for Router<Arc<Daemon>> {
    fn on<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self {
        self.request(M::NAME, M::CONCURRENCY, move |d, ctx, p| {
            answered(d.clone(), M::CONCURRENCY, handler.call(d, ctx, p))
        })
    }

    fn on_large<M: ClientRequest>(self, handler: impl Handler<M::Params, M::Result>) -> Self {
        self.large_request(M::NAME, M::CONCURRENCY, move |d, ctx, p| {
            answered(d.clone(), M::CONCURRENCY, handler.call(d, ctx, p))
        })
    }

    fn on_operation<M: OperationRequest>(self) -> Self {
        self.request(M::NAME, M::CONCURRENCY, |d, ctx, p| {
            answered(d.clone(), M::CONCURRENCY, operation::<M>(d, ctx, p))
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

/// `call`'s answer, after the notifications it caused when a call of `class` may change
/// state.
async fn answered<R>(
    daemon: Arc<Daemon>,
    class: Concurrency,
    call: impl Future<Output = Result<R, RpcError>>,
) -> Result<R, RpcError> {
    let answer = call.await;
    if changes_state(class) {
        daemon.hub.flush().await;
    }
    answer
}

/// Whether calls of `class` may change the server's state (and so cause notifications).
fn changes_state(class: Concurrency) -> bool {
    match class {
        Concurrency::SessionSerial | Concurrency::GlobalSerial => true,
        Concurrency::Parallel | Concurrency::SessionRead => false,
    }
}

/// Runs the operation `M` asked for by one request; see the module doc.
async fn operation<M: OperationRequest>(
    daemon: Arc<Daemon>,
    ctx: RequestCtx,
    params: M::Params,
) -> Result<M::Result, RpcError> {
    let session_id = M::session_id(&params).to_owned();
    let cancel = ctx.token().child_token();
    let claim = M::claim(&daemon.engine, &params, &cancel).map_err(to_proto::error)?;
    let waits = M::waits_for_a_model(&params);
    let progress = match waits {
        true => {
            let requested = M::work_done_token(&params);
            daemon.hub.progress_token(ctx.client(), requested).await
        }
        false => None,
    };
    daemon.hub.begin(&session_id, M::KIND, progress, cancel);
    if waits {
        // Reads of the session sent after this request run meanwhile (they see it running)
        // rather than wait for a model; requests that change the session still wait.
        ctx.let_reads_pass();
    }
    let observer = daemon.hub.observer(&session_id, M::KIND);
    let outcome = M::run(&daemon.engine, claim, params, &observer).await;
    daemon
        .hub
        .end(&session_id, M::KIND, M::end_message(&outcome));
    outcome.map(M::result).map_err(to_proto::error)
}
