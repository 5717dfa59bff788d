//! The method table: every request and notification the server accepts, with its wire name,
//! typed params and result, and concurrency class, declared once.
//!
//! [`Router`] is a builder; the daemon's table should read as one chain listing every method.
//! Handlers are type-erased here into functions from raw JSON params to raw JSON results, so
//! the peer's dispatch never sees the domain types.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::handle::{NotificationCtx, RequestCtx};
use super::message::{RpcError, parse_params};

/// How a method's calls are ordered relative to other calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Runs as soon as it arrives, alongside anything else (reads).
    Parallel,
    /// One at a time across the whole server, in arrival order (e.g. settings writes).
    GlobalSerial,
    /// One at a time per `params.sessionId` (a string), in arrival order; different sessions
    /// run concurrently.
    SessionSerial,
    /// A read of `params.sessionId`: runs alongside other reads, once the session-serial calls
    /// that arrived before it have finished (or, like a compaction waiting on its model, let
    /// reads pass with [`RequestCtx::let_reads_pass`]). It never holds up later calls.
    SessionRead,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
pub(crate) type RequestFn<S> = Arc<
    dyn Fn(S, RequestCtx, Option<Box<RawValue>>) -> BoxFuture<Result<Box<RawValue>, RpcError>>
        + Send
        + Sync,
>;
pub(crate) type NotificationFn<S> =
    Arc<dyn Fn(S, NotificationCtx, Option<Box<RawValue>>) -> BoxFuture<()> + Send + Sync>;

pub(crate) struct Method<H> {
    pub(crate) concurrency: Concurrency,
    pub(crate) handler: H,
}

/// The method table plus the state every handler receives (a clone of `S` per call, so `S`
/// is typically an `Arc`).
pub struct Router<S> {
    pub(crate) state: S,
    pub(crate) requests: HashMap<&'static str, Method<RequestFn<S>>>,
    pub(crate) notifications: HashMap<&'static str, Method<NotificationFn<S>>>,
    pub(crate) lifecycle: bool,
}

impl<S: Clone + Send + Sync + 'static> Router<S> {
    /// An empty table; handlers get clones of `state`.
    pub fn new(state: S) -> Self {
        Self {
            state,
            requests: HashMap::new(),
            notifications: HashMap::new(),
            lifecycle: false,
        }
    }

    /// Registers a request handler: `async fn(S, RequestCtx, P) -> Result<R, RpcError>`.
    ///
    /// Params that do not deserialise as `P` are answered with -32602 before the handler runs.
    ///
    /// # Panics
    /// If `method` is registered twice (a programming error in the table).
    pub fn request<P, R, F, Fut>(
        self,
        method: &'static str,
        concurrency: Concurrency,
        handler: F,
    ) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        F: Fn(S, RequestCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    {
        self.register(method, concurrency, Serialise::InPlace, handler)
    }

    /// [`request`](Self::request) for a method whose result may be megabytes (a whole
    /// context, a tree with its entries): the result is turned into JSON on a blocking
    /// thread, so the runtime's workers keep serving other requests and the writer meanwhile.
    ///
    /// # Panics
    /// If `method` is registered twice (a programming error in the table).
    pub fn large_request<P, R, F, Fut>(
        self,
        method: &'static str,
        concurrency: Concurrency,
        handler: F,
    ) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        F: Fn(S, RequestCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    {
        self.register(method, concurrency, Serialise::OffRuntime, handler)
    }

    fn register<P, R, F, Fut>(
        mut self,
        method: &'static str,
        concurrency: Concurrency,
        serialise: Serialise,
        handler: F,
    ) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        F: Fn(S, RequestCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    {
        let handler: RequestFn<S> = Arc::new(
            move |state: S,
                  ctx: RequestCtx,
                  raw: Option<Box<RawValue>>|
                  -> BoxFuture<Result<Box<RawValue>, RpcError>> {
                let params = match parse_params::<P>(method, raw.as_deref()) {
                    Ok(params) => params,
                    Err(error) => return Box::pin(async move { Err(error) }),
                };
                let call = handler(state, ctx, params);
                Box::pin(async move {
                    let result = call.await?;
                    match serialise {
                        Serialise::InPlace => to_json(method, &result),
                        Serialise::OffRuntime => {
                            tokio::task::spawn_blocking(move || to_json(method, &result))
                                .await
                                .unwrap_or_else(|error| {
                                    Err(RpcError::internal(format!(
                                        "serialising the result of {method} failed: {error}"
                                    )))
                                })
                        }
                    }
                })
            },
        );
        let previous = self.requests.insert(
            method,
            Method {
                concurrency,
                handler,
            },
        );
        assert!(previous.is_none(), "request `{method}` is registered twice");
        self
    }

    /// Registers a notification handler: `async fn(S, NotificationCtx, P)`. Params that do not
    /// deserialise are logged and the notification dropped (there is nobody to answer).
    ///
    /// # Panics
    /// If `method` is registered twice (a programming error in the table).
    pub fn notification<P, F, Fut>(
        mut self,
        method: &'static str,
        concurrency: Concurrency,
        handler: F,
    ) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        F: Fn(S, NotificationCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handler: NotificationFn<S> = Arc::new(
            move |state: S, ctx: NotificationCtx, raw: Option<Box<RawValue>>| -> BoxFuture<()> {
                match parse_params::<P>(method, raw.as_deref()) {
                    Ok(params) => Box::pin(handler(state, ctx, params)),
                    Err(error) => {
                        tracing::warn!(%error, "dropping notification");
                        Box::pin(async {})
                    }
                }
            },
        );
        let previous = self.notifications.insert(
            method,
            Method {
                concurrency,
                handler,
            },
        );
        assert!(
            previous.is_none(),
            "notification `{method}` is registered twice"
        );
        self
    }

    /// Turns on the LSP lifecycle gate:
    /// * before `initialize` has succeeded, requests get -32002 and notifications other than
    ///   `exit` are dropped; a second `initialize` gets -32600;
    /// * after a `shutdown` request, requests get -32600 "server is shutting down";
    /// * the `exit` notification ends [`Peer::serve`](super::Peer::serve), after running its
    ///   handler if one is registered.
    ///
    /// The daemon registers `initialize`, `initialized`, `shutdown` and `exit` itself.
    pub fn with_lifecycle(mut self) -> Self {
        self.lifecycle = true;
        self
    }

    /// Every registered request with its class, sorted by name.
    pub fn requests(&self) -> Vec<(&'static str, Concurrency)> {
        sorted(&self.requests)
    }

    /// Every registered notification with its class, sorted by name. The transport's own
    /// ([`TRANSPORT_NOTIFICATIONS`](super::TRANSPORT_NOTIFICATIONS)) are handled whether or
    /// not they are registered.
    pub fn notifications(&self) -> Vec<(&'static str, Concurrency)> {
        sorted(&self.notifications)
    }
}

/// Where a request's result is turned into JSON.
#[derive(Debug, Clone, Copy)]
enum Serialise {
    /// On the runtime, right after the handler: small results.
    InPlace,
    /// On a blocking thread: results that may be megabytes.
    OffRuntime,
}

fn to_json<R: Serialize>(method: &str, result: &R) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(result).map_err(|e| {
        RpcError::internal(format!(
            "the result of {method} could not be serialised: {e}"
        ))
    })
}

fn sorted<H>(methods: &HashMap<&'static str, Method<H>>) -> Vec<(&'static str, Concurrency)> {
    let mut out: Vec<_> = methods
        .iter()
        .map(|(name, m)| (*name, m.concurrency))
        .collect();
    out.sort_by_key(|(name, _)| *name);
    out
}
