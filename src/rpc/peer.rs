//! The main loop: one reader task that parses and dispatches but never awaits a handler, one
//! writer task that alone owns the output, and a spawned task per request or notification.
//!
//! Policy lives here: ingress is bounded in count (beyond `max_in_flight`, requests get
//! -32001 at once) and in bytes (past `max_input_bytes` of params held by accepted requests and
//! notifications not yet finished, the reader stops reading: back-pressure); output is bounded
//! in bytes (past `max_output_bytes` of unwritten messages and
//! reserved results the reader stops reading: back-pressure, see [`super::budget`]); serial
//! classes take their place in line on the reader, in arrival order; each
//! request has a cancellation token reachable by `$/cancelRequest` and by domain code through
//! [`PeerHandle`]; the LSP lifecycle is enforced when the router asks for it; and the loop
//! ends on input EOF, on `exit`, when the parent process dies, or on [`PeerHandle::stop`].

use std::collections::HashMap;
use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{FutureExt, SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::budget::OutputBudget;
use super::client::Client;
use super::framing::{DEFAULT_MAX_MESSAGE_BYTES, DetectedFraming, Frame, FrameError, MessageCodec};
use super::handle::{ExitReason, NotificationCtx, PeerHandle, PeerShared, Phase, RequestCtx};
use super::lock;
use super::message::{Incoming, RequestId, RpcError, parse_incoming, parse_params, response_json};
use super::router::{Concurrency, NotificationFn, RequestFn, Router};
use super::serial::{QueueKey, ReadTicket, SerialQueues, Slot};

const INITIALIZE: &str = "initialize";
const SHUTDOWN: &str = "shutdown";
const EXIT: &str = "exit";
const CANCEL_REQUEST: &str = "$/cancelRequest";

/// The notifications the peer handles itself: `$/cancelRequest` cancels a request, `exit`
/// ends [`Peer::serve`] (after its handler, if one is registered).
pub const TRANSPORT_NOTIFICATIONS: [&str; 2] = [CANCEL_REQUEST, EXIT];

/// Limits and timings of a peer.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Larger messages are skipped and answered with an error. Default 64 MiB.
    pub max_message_bytes: usize,
    /// Requests and notifications accepted but not finished (running or queued). Beyond it,
    /// requests get -32001 and notifications are dropped. Default 1024.
    pub max_in_flight: usize,
    /// Messages waiting for the writer; senders wait when it is full. Default 1024.
    pub outgoing_queue: usize,
    /// Bytes of messages produced for the client and not yet written, plus what handlers
    /// reserved for large results ([`RequestCtx::reserve_output`]). At the limit the peer
    /// stops reading input until the client reads (back-pressure) and reservations wait.
    /// Default 64 MiB.
    pub max_output_bytes: usize,
    /// Bytes of params held by requests and notifications accepted and not yet finished
    /// (queued behind a session's writer or running). At the limit the peer stops reading
    /// input until some finish (back-pressure), so a client pipelining large appends behind a
    /// slow one holds the daemon to about this plus one message. Default 64 MiB.
    pub max_input_bytes: usize,
    /// After cancelling everything at the end, how long handlers get to finish (and have
    /// their answers written) before `serve` returns anyway. Default 5 s.
    pub drain_timeout: Duration,
    /// A process to watch from the start; `serve` ends when it dies.
    pub parent_pid: Option<u32>,
    /// How often a watched parent is checked. Default 1 s.
    pub parent_poll_interval: Duration,
}

impl Default for PeerConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_in_flight: 1024,
            outgoing_queue: 1024,
            max_output_bytes: 64 << 20,
            max_input_bytes: 64 << 20,
            drain_timeout: Duration::from_secs(5),
            parent_pid: None,
            parent_poll_interval: Duration::from_secs(1),
        }
    }
}

/// Entry point: serve one JSON-RPC connection.
pub struct Peer;

impl Peer {
    /// Serves `router` on `reader`/`writer` with the default [`PeerConfig`] until the
    /// connection ends; see [`Peer::serve_with`].
    pub async fn serve<S, R, W>(reader: R, writer: W, router: Router<S>) -> io::Result<ExitReason>
    where
        S: Clone + Send + Sync + 'static,
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::serve_with(PeerConfig::default(), reader, writer, router).await
    }

    /// Serves `router` until the input ends, `exit` arrives (with the lifecycle gate), the
    /// parent dies or [`PeerHandle::stop`] is called. Returns after every queued message was
    /// written and flushed. `Err` only for I/O errors on the input or the output.
    ///
    /// At EOF, requests in flight run to completion so a script that writes a request and
    /// closes its end still gets the answer; in every other case they are cancelled and get
    /// `drain_timeout` to finish.
    pub async fn serve_with<S, R, W>(
        config: PeerConfig,
        reader: R,
        writer: W,
        router: Router<S>,
    ) -> io::Result<ExitReason>
    where
        S: Clone + Send + Sync + 'static,
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let detected = DetectedFraming::default();
        let (outgoing_tx, outgoing_rx) = mpsc::channel(config.outgoing_queue.max(1));
        let stop = CancellationToken::new();
        let writer_done = CancellationToken::new();
        let sink = FramedWrite::new(
            writer,
            MessageCodec::new(config.max_message_bytes, detected.clone()),
        );
        let budget = OutputBudget::new(config.max_output_bytes);
        let writer_task = tokio::spawn(write_loop(
            outgoing_rx,
            sink,
            Arc::clone(&budget),
            writer_done.clone(),
            stop.clone(),
        ));

        let shared = Arc::new(PeerShared {
            client: Client::new(outgoing_tx, budget),
            requests: Mutex::new(HashMap::new()),
            load: AtomicUsize::new(0),
            cancel_all: CancellationToken::new(),
            stop: stop.clone(),
            exit_reason: Mutex::new(None),
            phase: Mutex::new(Phase::Uninitialized),
            parent_poll_interval: config.parent_poll_interval,
        });
        if let Some(pid) = config.parent_pid {
            PeerHandle::new(&shared).watch_parent(pid);
        }
        let dispatcher = Dispatcher {
            router,
            shared: Arc::clone(&shared),
            queues: Arc::new(SerialQueues::default()),
            tasks: TaskTracker::new(),
            max_in_flight: config.max_in_flight,
            input: OutputBudget::new(config.max_input_bytes),
        };

        let mut frames = FramedRead::new(
            reader,
            MessageCodec::new(config.max_message_bytes, detected),
        );
        let read_result = read_loop(&mut frames, &dispatcher, &stop).await;
        drop(frames);
        if read_result.is_err() {
            stop.cancel();
        }
        wind_down(&dispatcher, config.drain_timeout).await;
        // Ends background helpers such as the parent watcher.
        stop.cancel();
        writer_done.cancel();
        let write_result = writer_task
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
        read_result?;
        write_result?;
        Ok(shared.exit_reason())
    }
}

/// Releases a request's or notification's share of the ingress budget (its count and its
/// params' bytes, and its token).
struct InFlight {
    shared: Arc<PeerShared>,
    id: Option<RequestId>,
    /// The input budget and the bytes charged to it.
    input: (Arc<OutputBudget>, usize),
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.input.0.release(self.input.1);
        if let Some(id) = &self.id {
            lock(&self.shared.requests).remove(id);
        }
        self.shared.load.fetch_sub(1, Ordering::AcqRel);
    }
}

/// After the read loop: fail server-to-client requests, let in-flight work finish (at EOF) or
/// cancel it (otherwise, or when a stop comes meanwhile) and give it `drain_timeout`.
async fn wind_down<S>(dispatcher: &Dispatcher<S>, drain_timeout: Duration) {
    let shared = &dispatcher.shared;
    // Nobody can answer server-to-client requests any more.
    shared.client.close();
    dispatcher.tasks.close();
    if !shared.stop.is_cancelled() {
        tokio::select! {
            () = dispatcher.tasks.wait() => {}
            () = shared.stop.cancelled() => {}
        }
    }
    shared.cancel_all.cancel();
    if tokio::time::timeout(drain_timeout, dispatcher.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            still_running = dispatcher.tasks.len(),
            "handlers ignored cancellation; not waiting for them"
        );
    }
}

/// The reader's side of dispatch: decides, for each message, what to answer or spawn.
struct Dispatcher<S> {
    router: Router<S>,
    shared: Arc<PeerShared>,
    queues: Arc<SerialQueues>,
    tasks: TaskTracker,
    max_in_flight: usize,
    /// Bytes of params held by accepted messages (the same counter type as the output's).
    input: Arc<OutputBudget>,
}

async fn read_loop<R, S>(
    frames: &mut FramedRead<R, MessageCodec>,
    dispatcher: &Dispatcher<S>,
    stop: &CancellationToken,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    S: Clone + Send + Sync + 'static,
{
    let budget = dispatcher.shared.client.budget();
    loop {
        // Back-pressure: while the client leaves our output unread, leave its input unread.
        tokio::select! {
            biased;
            () = stop.cancelled() => return Ok(()),
            () = budget.wait_for_room() => {}
        }
        // And while accepted messages hold more than the input budget, read no more of them.
        tokio::select! {
            biased;
            () = stop.cancelled() => return Ok(()),
            () = dispatcher.input.wait_for_room() => {}
        }
        let frame = tokio::select! {
            biased;
            () = stop.cancelled() => return Ok(()),
            frame = frames.next() => frame,
        };
        match frame {
            None => {
                lock(&dispatcher.shared.exit_reason).get_or_insert(ExitReason::InputClosed);
                return Ok(());
            }
            Some(Err(error)) => {
                tracing::error!(%error, "reading from the client failed");
                return Err(error);
            }
            // Dispatch only waits for room on the output queue; give up on that when stopping.
            Some(Ok(frame)) => tokio::select! {
                biased;
                () = stop.cancelled() => return Ok(()),
                () = dispatcher.on_frame(frame) => {}
            },
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Dispatcher<S> {
    async fn on_frame(&self, frame: Frame) {
        let bytes = match frame {
            Frame::Message(bytes) => bytes,
            Frame::Error(error) => {
                tracing::warn!(%error, "framing error");
                let answer = match error {
                    FrameError::TooLarge { .. } => RpcError::message_too_large(&error),
                    FrameError::BadHeader(_) | FrameError::Truncated => {
                        RpcError::parse_error(&error)
                    }
                };
                return self.answer(None, Err(answer)).await;
            }
        };
        match parse_incoming(&bytes) {
            Err(invalid) if invalid.answer => {
                self.answer(invalid.id.as_ref(), Err(invalid.error)).await
            }
            Err(invalid) => tracing::warn!(error = %invalid.error, "ignoring a malformed response"),
            Ok(Incoming::Response { id, result }) => self.shared.client.complete(id, result),
            Ok(Incoming::Notification { method, params }) => self.on_notification(&method, params),
            Ok(Incoming::Request { id, method, params }) => {
                if let Err(error) = self.on_request(id.clone(), &method, params) {
                    tracing::debug!(%id, method, %error, "request refused");
                    self.answer(Some(&id), Err(error)).await;
                }
            }
        }
    }

    async fn answer(&self, id: Option<&RequestId>, result: Result<Box<RawValue>, RpcError>) {
        let json = match &result {
            Ok(value) => response_json(id, Ok(value)),
            Err(error) => response_json(id, Err(error)),
        };
        // An error means the writer is gone; the loop is about to end anyway.
        let _ = self.shared.client.send(json).await;
    }

    /// Accepts a request (spawning its task) or says why not.
    fn on_request(
        &self,
        id: RequestId,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<(), RpcError> {
        let next_phase = self.lifecycle_check(method)?;
        let Some((&name, entry)) = self.router.requests.get_key_value(method) else {
            return Err(RpcError::method_not_found(method));
        };
        let order = order_of(entry.concurrency, name, params.as_deref())?;
        let token = self.shared.cancel_all.child_token();
        {
            let mut requests = lock(&self.shared.requests);
            if requests.contains_key(&id) {
                return Err(RpcError::invalid_request(format!(
                    "request id {id} is already used by a request in flight"
                )));
            }
            if !self.try_admit() {
                return Err(RpcError::overloaded());
            }
            requests.insert(id.clone(), token.clone());
        }
        let in_flight = InFlight {
            shared: Arc::clone(&self.shared),
            id: Some(id.clone()),
            input: self.charge_input(params.as_deref()),
        };
        if let Some(phase) = next_phase {
            *lock(&self.shared.phase) = phase;
        }
        let place = Place::take(&self.queues, order);
        let job = RequestJob {
            handler: Arc::clone(&entry.handler),
            state: self.router.state.clone(),
            ctx: RequestCtx {
                id,
                method: name,
                token,
                peer: PeerHandle::new(&self.shared),
                reserved: Arc::default(),
                reads_may_pass: place.reads_may_pass(),
            },
            params,
            place,
            in_flight,
            is_initialize: self.router.lifecycle && name == INITIALIZE,
        };
        self.tasks.spawn(job.run());
        Ok(())
    }

    /// With the lifecycle gate on: whether `method` may run now, and the phase it moves to.
    fn lifecycle_check(&self, method: &str) -> Result<Option<Phase>, RpcError> {
        if !self.router.lifecycle {
            return Ok(None);
        }
        match (*lock(&self.shared.phase), method) {
            (Phase::ShuttingDown, _) => Err(RpcError::shutting_down()),
            (Phase::Uninitialized, INITIALIZE) => Ok(Some(Phase::Initializing)),
            (_, INITIALIZE) => Err(RpcError::already_initialized()),
            (Phase::Uninitialized | Phase::Initializing, _) => Err(RpcError::not_initialized()),
            (Phase::Initialized, SHUTDOWN) => Ok(Some(Phase::ShuttingDown)),
            (Phase::Initialized, _) => Ok(None),
        }
    }

    /// Charges an accepted message's params to the input budget until it finishes.
    fn charge_input(&self, params: Option<&RawValue>) -> (Arc<OutputBudget>, usize) {
        let bytes = params.map_or(0, |p| p.get().len());
        self.input.charge(bytes);
        (Arc::clone(&self.input), bytes)
    }

    fn try_admit(&self) -> bool {
        self.shared
            .load
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |load| {
                (load < self.max_in_flight).then_some(load + 1)
            })
            .is_ok()
    }

    fn on_notification(&self, method: &str, params: Option<Box<RawValue>>) {
        if method == CANCEL_REQUEST {
            return self.cancel_request(params);
        }
        if self.router.lifecycle {
            let phase = *lock(&self.shared.phase);
            if method == EXIT {
                self.spawn_notification(method, params);
                let after_shutdown = phase == Phase::ShuttingDown;
                return self.shared.finish(ExitReason::Exit { after_shutdown });
            }
            if phase != Phase::Initialized {
                tracing::debug!(
                    method,
                    ?phase,
                    "dropping a notification outside the initialized phase"
                );
                return;
            }
        }
        if !self.router.notifications.contains_key(method) {
            if method.starts_with("$/") {
                // LSP: protocol-dependent notifications may be ignored.
                tracing::debug!(method, "ignoring an optional notification");
            } else {
                tracing::warn!(method, "ignoring an unknown notification");
            }
            return;
        }
        self.spawn_notification(method, params);
    }

    fn spawn_notification(&self, method: &str, params: Option<Box<RawValue>>) {
        let Some((&name, entry)) = self.router.notifications.get_key_value(method) else {
            return;
        };
        let order = match order_of(entry.concurrency, name, params.as_deref()) {
            Ok(order) => order,
            Err(error) => {
                tracing::warn!(%error, "dropping a notification");
                return;
            }
        };
        if !self.try_admit() {
            tracing::warn!(method, "server overloaded; dropping a notification");
            return;
        }
        let input = self.charge_input(params.as_deref());
        let job = NotificationJob {
            handler: Arc::clone(&entry.handler),
            state: self.router.state.clone(),
            ctx: NotificationCtx {
                method: name,
                peer: PeerHandle::new(&self.shared),
            },
            params,
            place: Place::take(&self.queues, order),
            in_flight: InFlight {
                shared: Arc::clone(&self.shared),
                id: None,
                input,
            },
        };
        self.tasks.spawn(job.run());
    }

    fn cancel_request(&self, params: Option<Box<RawValue>>) {
        #[derive(Deserialize)]
        struct CancelParams {
            id: RequestId,
        }
        match parse_params::<CancelParams>(CANCEL_REQUEST, params.as_deref()) {
            Ok(CancelParams { id }) => {
                if !PeerHandle::new(&self.shared).cancel_request(&id) {
                    // Normal when the request finished while the cancel was on its way.
                    tracing::debug!(%id, "cancel for a request not in flight");
                }
            }
            Err(error) => tracing::warn!(%error, "ignoring a malformed cancel"),
        }
    }
}

/// How a call is ordered, from its class (and `params.sessionId` for session ones).
enum Order {
    Free,
    Queue(QueueKey),
    ReadOf(QueueKey),
}

fn order_of(
    concurrency: Concurrency,
    method: &str,
    params: Option<&RawValue>,
) -> Result<Order, RpcError> {
    #[derive(Deserialize)]
    struct SessionKey {
        #[serde(rename = "sessionId")]
        session_id: String,
    }
    let session = || -> Result<QueueKey, RpcError> {
        let key: SessionKey = parse_params(method, params)?;
        Ok(QueueKey::Session(key.session_id))
    };
    Ok(match concurrency {
        Concurrency::Parallel => Order::Free,
        Concurrency::GlobalSerial => Order::Queue(QueueKey::Global),
        Concurrency::SessionSerial => Order::Queue(session()?),
        Concurrency::SessionRead => Order::ReadOf(session()?),
    })
}

/// Where an accepted call stands in the order, taken on the reader task in arrival order.
enum Place {
    Free,
    /// A serial call's slot, held until its answer is queued.
    Queued(Slot),
    /// A read's place between the serial calls before and after it.
    Reading(ReadTicket),
}

impl Place {
    fn take(queues: &Arc<SerialQueues>, order: Order) -> Self {
        match order {
            Order::Free => Self::Free,
            Order::Queue(key) => Self::Queued(queues.enter(key)),
            Order::ReadOf(key) => Self::Reading(queues.read(key)),
        }
    }

    /// Resolves when the call may run. Cancel-safe.
    async fn wait(&mut self) {
        match self {
            Self::Free => {}
            Self::Queued(slot) => slot.wait_turn().await,
            Self::Reading(ticket) => ticket.wait_turn().await,
        }
    }

    fn reads_may_pass(&self) -> Option<CancellationToken> {
        match self {
            Self::Queued(slot) => Some(slot.reads_may_pass()),
            Self::Free | Self::Reading(_) => None,
        }
    }
}

/// One accepted request, run on its own task.
struct RequestJob<S> {
    handler: RequestFn<S>,
    state: S,
    ctx: RequestCtx,
    params: Option<Box<RawValue>>,
    place: Place,
    in_flight: InFlight,
    is_initialize: bool,
}

impl<S: Send + 'static> RequestJob<S> {
    async fn run(self) {
        let Self {
            handler,
            state,
            ctx,
            params,
            mut place,
            in_flight,
            is_initialize,
        } = self;
        let started = Instant::now();
        let mut cancelled_in_queue = false;
        tokio::select! {
            biased;
            () = place.wait() => {}
            () = ctx.token.cancelled() => cancelled_in_queue = true,
        }
        let result = if cancelled_in_queue || ctx.token.is_cancelled() {
            Err(RpcError::request_cancelled())
        } else {
            let call = handler(state, ctx.clone(), params);
            AssertUnwindSafe(call)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!(method = ctx.method, id = %ctx.id, "handler panicked");
                    Err(RpcError::internal(format!(
                        "the handler of {} panicked",
                        ctx.method
                    )))
                })
        };
        if is_initialize {
            let mut phase = lock(&ctx.peer.shared.phase);
            if *phase == Phase::Initializing {
                // A failed initialize may be retried.
                *phase = if result.is_ok() {
                    Phase::Initialized
                } else {
                    Phase::Uninitialized
                };
            }
        }
        tracing::debug!(method = ctx.method, id = %ctx.id, elapsed = ?started.elapsed(), ok = result.is_ok(), "request done");
        // Free the budget before answering, so a client reacting to the answer is admitted.
        drop(in_flight);
        let json = match &result {
            Ok(value) => response_json(Some(&ctx.id), Ok(value)),
            Err(error) => response_json(Some(&ctx.id), Err(error)),
        };
        // Not held while the message waits for room: a result may be megabytes.
        drop(result);
        // An error means the writer is gone and nobody can be told.
        let _ = ctx.peer.shared.client.send(json).await;
        // The response is counted now: what the handler reserved for it is given back.
        lock(&ctx.reserved).clear();
        // A request cancelled while queued keeps its place until the jobs before it end, so
        // the ones after it still run one at a time.
        if let Place::Queued(mut slot) = place {
            slot.wait_turn().await;
        }
    }
}

/// One accepted notification, run on its own task.
struct NotificationJob<S> {
    handler: NotificationFn<S>,
    state: S,
    ctx: NotificationCtx,
    params: Option<Box<RawValue>>,
    place: Place,
    in_flight: InFlight,
}

impl<S: Send + 'static> NotificationJob<S> {
    async fn run(mut self) {
        self.place.wait().await;
        let method = self.ctx.method;
        let call = (self.handler)(self.state, self.ctx, self.params);
        if AssertUnwindSafe(call).catch_unwind().await.is_err() {
            tracing::error!(method, "notification handler panicked");
        }
        drop(self.in_flight);
        drop(self.place);
    }
}

/// The only code that writes to the output. Ends when `done` is cancelled (after writing what
/// is queued) or when every sender is gone; on a write error it stops the peer.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut outgoing: mpsc::Receiver<String>,
    mut sink: FramedWrite<W, MessageCodec>,
    budget: Arc<OutputBudget>,
    done: CancellationToken,
    stop: CancellationToken,
) -> io::Result<()> {
    let result = async {
        loop {
            let message = tokio::select! {
                biased;
                message = outgoing.recv() => message,
                () = done.cancelled() => break,
            };
            let Some(message) = message else { break };
            let mut written = message.len();
            sink.feed(message).await?;
            // Batch whatever else is ready into one flush.
            while let Ok(message) = outgoing.try_recv() {
                written += message.len();
                sink.feed(message).await?;
            }
            sink.flush().await?;
            budget.release(written);
        }
        outgoing.close();
        while let Some(message) = outgoing.recv().await {
            let written = message.len();
            sink.feed(message).await?;
            budget.release(written);
        }
        sink.flush().await
    }
    .await;
    if let Err(error) = &result {
        tracing::error!(%error, "writing to the client failed; stopping");
        outgoing.close();
        stop.cancel();
    }
    result
}
