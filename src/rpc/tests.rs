//! End-to-end tests of the peer over in-memory pipes: a test plays the client, a [`Router`]
//! of small handlers plays the daemon. Synchronisation is by events and gates, never sleeps;
//! every wait has a timeout.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;

use super::framing::{DetectedFraming, Frame, Framing, MessageCodec};
use super::peer::PeerConfig;
use super::*;

/// The longest any single step may take before the test fails.
const STEP: Duration = Duration::from_secs(5);

async fn within<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), test)
        .await
        .expect("the test took longer than 30 s")
}

/// What handlers share with the test: an event stream and named gates they wait on.
#[derive(Clone)]
struct TestState {
    events: mpsc::UnboundedSender<String>,
    gates: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl TestState {
    fn new() -> (Self, mpsc::UnboundedReceiver<String>) {
        let (events, rx) = mpsc::unbounded_channel();
        let state = Self {
            events,
            gates: Arc::default(),
        };
        (state, rx)
    }

    fn event(&self, event: String) {
        // The test may have stopped listening; that is fine.
        let _ = self.events.send(event);
    }

    fn gate(&self, name: &str) -> Arc<Semaphore> {
        let mut gates = self
            .gates
            .lock()
            .expect("no test code panics while holding this lock");
        Arc::clone(
            gates
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(0))),
        )
    }

    fn open(&self, gate: &str, permits: usize) {
        self.gate(gate).add_permits(permits);
    }

    /// Records that `tag` started, then waits for one permit of `gate`.
    async fn pass(&self, tag: &str, gate: &str) {
        self.event(format!("start:{tag}"));
        let semaphore = self.gate(gate);
        let permit = semaphore.acquire().await.expect("gates are never closed");
        permit.forget();
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WaitParams {
    #[serde(default)]
    session_id: String,
    tag: String,
    #[serde(default)]
    gate: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // the key is read by the peer, not the handler
struct RecordParams {
    session_id: String,
    n: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AskParams {
    timeout_ms: u64,
}

#[derive(Deserialize)]
struct AbortParams {
    id: RequestId,
}

async fn ping(_: TestState, _: RequestCtx, _: ()) -> Result<&'static str, RpcError> {
    Ok("pong")
}

async fn wait(state: TestState, _: RequestCtx, params: WaitParams) -> Result<String, RpcError> {
    state.pass(&params.tag, &params.gate).await;
    Ok(params.tag)
}

async fn session_wait(
    state: TestState,
    _: RequestCtx,
    params: WaitParams,
) -> Result<String, RpcError> {
    state.pass(&params.tag, &params.session_id).await;
    Ok(params.tag)
}

async fn global_wait(
    state: TestState,
    _: RequestCtx,
    params: WaitParams,
) -> Result<String, RpcError> {
    state.pass(&params.tag, "global").await;
    Ok(params.tag)
}

/// A long session-serial job, like a compaction waiting on its model: lets later reads pass,
/// then waits on the gate named after its session.
async fn session_long(
    state: TestState,
    ctx: RequestCtx,
    params: WaitParams,
) -> Result<String, RpcError> {
    ctx.let_reads_pass();
    state.pass(&params.tag, &params.session_id).await;
    Ok(params.tag)
}

async fn record(state: TestState, _: RequestCtx, params: RecordParams) -> Result<u32, RpcError> {
    state.event(format!("rec:{}", params.n));
    Ok(params.n)
}

async fn cancellable(state: TestState, ctx: RequestCtx, _: ()) -> Result<(), RpcError> {
    state.event(format!("start:{}", ctx.id()));
    ctx.token().cancelled().await;
    Err(RpcError::request_cancelled())
}

async fn abort(_: TestState, ctx: RequestCtx, params: AbortParams) -> Result<bool, RpcError> {
    Ok(ctx.peer().cancel_request(&params.id))
}

async fn ask(_: TestState, ctx: RequestCtx, params: AskParams) -> Result<Value, RpcError> {
    let timeout = Duration::from_millis(params.timeout_ms);
    ctx.client()
        .request("client/echo", json!({ "question": 1 }), timeout)
        .await
        .map_err(RpcError::internal)
}

async fn explode(_: TestState, _: RequestCtx, _: ()) -> Result<(), RpcError> {
    panic!("a handler bug");
}

async fn initialize(_: TestState, _: RequestCtx, _: Value) -> Result<Value, RpcError> {
    Ok(json!({ "capabilities": {} }))
}

async fn shutdown(_: TestState, _: RequestCtx, _: ()) -> Result<(), RpcError> {
    Ok(())
}

async fn initialized(state: TestState, _: NotificationCtx, _: ()) {
    state.event("initialized".into());
}

fn router(state: TestState) -> Router<TestState> {
    use Concurrency::*;
    Router::new(state)
        .request("initialize", GlobalSerial, initialize)
        .request("shutdown", GlobalSerial, shutdown)
        .notification("initialized", Parallel, initialized)
        .request("ping", Parallel, ping)
        .request("wait", Parallel, wait)
        .request("session/wait", SessionSerial, session_wait)
        .request("session/record", SessionSerial, record)
        .request("session/long", SessionSerial, session_long)
        .request("session/peek", SessionRead, wait)
        .request("global/wait", GlobalSerial, global_wait)
        .request("cancellable", Parallel, cancellable)
        .request("abort", Parallel, abort)
        .request("ask", Parallel, ask)
        .request("explode", Parallel, explode)
}

/// The client's end of a served connection.
struct Harness {
    input: WriteHalf<DuplexStream>,
    output: FramedRead<ReadHalf<DuplexStream>, MessageCodec>,
    /// What the server's replies were framed as.
    reply_framing: DetectedFraming,
    server: JoinHandle<io::Result<ExitReason>>,
}

impl Harness {
    fn start(router: Router<TestState>, config: PeerConfig) -> Self {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (server_read, server_write) = tokio::io::split(server);
        let server = tokio::spawn(Peer::serve_with(config, server_read, server_write, router));
        let (client_read, input) = tokio::io::split(client);
        let reply_framing = DetectedFraming::default();
        let output = FramedRead::new(
            client_read,
            MessageCodec::new(usize::MAX, reply_framing.clone()),
        );
        Self {
            input,
            output,
            reply_framing,
            server,
        }
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        self.input
            .write_all(bytes)
            .await
            .expect("the server reads its input");
    }

    async fn send(&mut self, message: Value) {
        self.send_raw(format!("{message}\n").as_bytes()).await;
    }

    async fn request(&mut self, id: impl Into<Value>, method: &str, params: Value) {
        let id = id.into();
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
    }

    /// The next message from the server.
    async fn recv(&mut self) -> Value {
        let frame = tokio::time::timeout(STEP, self.output.next())
            .await
            .expect("the server answers in time")
            .expect("the server's output is open")
            .expect("reading from a pipe does not fail");
        match frame {
            Frame::Message(bytes) => serde_json::from_slice(&bytes).expect("the server sends JSON"),
            Frame::Error(error) => panic!("the server sent a broken frame: {error}"),
        }
    }

    /// Sends a request and returns its response (nothing else may arrive in between).
    async fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.request(id, method, params).await;
        let response = self.recv().await;
        assert_eq!(response["id"], json!(id), "{response}");
        response
    }

    /// Closes the input and waits for `serve` to return, checking the output ended too.
    async fn close(mut self) -> ExitReason {
        self.input
            .shutdown()
            .await
            .expect("closing a pipe does not fail");
        self.finished().await
    }

    async fn finished(mut self) -> ExitReason {
        let reason = tokio::time::timeout(STEP, self.server)
            .await
            .expect("serve returns in time")
            .expect("serve does not panic")
            .expect("serve has no I/O error");
        let rest = tokio::time::timeout(STEP, self.output.next())
            .await
            .expect("output ends");
        assert!(rest.is_none(), "unexpected message after the end: {rest:?}");
        reason
    }
}

async fn next_event(events: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(STEP, events.recv())
        .await
        .expect("the handler reports in time")
        .expect("the state is alive")
}

fn error_code_of(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error: {response}"))
}

#[tokio::test]
async fn lifecycle_gate_orders_initialize_and_shutdown() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state).with_lifecycle(), PeerConfig::default());

        let early = h.call(1, "ping", Value::Null).await;
        assert_eq!(error_code_of(&early), error_code::NOT_INITIALIZED);
        assert_eq!(early["error"]["data"]["kind"], "notInitialized");

        let init = h.call(2, "initialize", json!({})).await;
        assert_eq!(init["result"], json!({ "capabilities": {} }));
        let again = h.call(3, "initialize", json!({})).await;
        assert_eq!(again["error"]["data"]["kind"], "alreadyInitialized");
        h.notify("initialized", Value::Null).await;
        assert_eq!(next_event(&mut events).await, "initialized");
        assert_eq!(h.call(4, "ping", Value::Null).await["result"], "pong");

        assert_eq!(
            h.call(5, "shutdown", Value::Null).await["result"],
            Value::Null
        );
        let late = h.call(6, "ping", Value::Null).await;
        assert_eq!(error_code_of(&late), error_code::INVALID_REQUEST);
        assert_eq!(late["error"]["message"], "server is shutting down");

        h.notify("exit", Value::Null).await;
        assert_eq!(
            h.finished().await,
            ExitReason::Exit {
                after_shutdown: true
            }
        );
    })
    .await;
}

#[tokio::test]
async fn exit_without_shutdown_is_reported() {
    within(async {
        let (state, _events) = TestState::new();
        let mut h = Harness::start(router(state).with_lifecycle(), PeerConfig::default());
        h.call(1, "initialize", json!({})).await;
        h.notify("exit", Value::Null).await;
        assert_eq!(
            h.finished().await,
            ExitReason::Exit {
                after_shutdown: false
            }
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_requests_do_not_block_each_other() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state.clone()), PeerConfig::default());
        for id in 1..=4 {
            h.request(id, "wait", json!({ "tag": id.to_string(), "gate": "slow" }))
                .await;
        }
        for _ in 1..=4 {
            assert!(next_event(&mut events).await.starts_with("start:"));
        }
        // All four are running and blocked; a fast request still answers at once.
        assert_eq!(h.call(5, "ping", Value::Null).await["result"], "pong");

        state.open("slow", 4);
        let mut ids: Vec<i64> = Vec::new();
        for _ in 1..=4 {
            ids.push(h.recv().await["id"].as_i64().expect("numeric id"));
        }
        ids.sort_unstable();
        assert_eq!(ids, [1, 2, 3, 4]);
        assert_eq!(h.close().await, ExitReason::InputClosed);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_serial_orders_one_session_and_runs_sessions_concurrently() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state.clone()), PeerConfig::default());
        h.request(1, "session/wait", json!({ "sessionId": "a", "tag": "a1" }))
            .await;
        h.request(2, "session/wait", json!({ "sessionId": "a", "tag": "a2" }))
            .await;
        h.request(3, "session/wait", json!({ "sessionId": "b", "tag": "b1" }))
            .await;

        let mut started = vec![next_event(&mut events).await, next_event(&mut events).await];
        started.sort();
        assert_eq!(
            started,
            ["start:a1", "start:b1"],
            "a2 waits; b1 does not wait for a1"
        );
        state.open("b", 1);
        assert_eq!(h.recv().await["result"], "b1");
        assert!(
            events.try_recv().is_err(),
            "a2 must not start before a1 ends"
        );

        state.open("a", 1);
        assert_eq!(h.recv().await["result"], "a1");
        assert_eq!(next_event(&mut events).await, "start:a2");
        state.open("a", 1);
        assert_eq!(h.recv().await["result"], "a2");
        h.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_serial_keeps_arrival_order() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state), PeerConfig::default());
        let mut burst = String::new();
        for n in 0..100 {
            let request = json!({ "id": n, "method": "session/record", "params": { "sessionId": "s", "n": n } });
            burst.push_str(&format!("{request}\n"));
        }
        h.send_raw(burst.as_bytes()).await;
        for n in 0..100 {
            assert_eq!(next_event(&mut events).await, format!("rec:{n}"));
        }
        for n in 0..100 {
            assert_eq!(h.recv().await["id"], n, "answers leave in order too");
        }
        h.close().await;
    })
    .await;
}

/// Asserts no handler starts within a moment: what must wait has had time not to.
async fn nothing_starts(events: &mut mpsc::UnboundedReceiver<String>, why: &str) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(events.try_recv().ok(), None, "{why}");
}

async fn two_events(events: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut two = vec![next_event(events).await, next_event(events).await];
    two.sort();
    two
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_reads_see_the_writes_sent_before_them_and_none_after() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state.clone()), PeerConfig::default());
        let write = |tag: &str| json!({ "sessionId": "s", "tag": tag });
        let read =
            |session: &str, tag: &str| json!({ "sessionId": session, "tag": tag, "gate": "r" });
        h.request(1, "session/wait", write("w1")).await;
        h.request(2, "session/peek", read("s", "r1")).await;
        h.request(3, "session/peek", read("s", "r2")).await;
        h.request(4, "session/wait", write("w2")).await;
        h.request(5, "session/peek", read("s", "r3")).await;
        h.request(6, "session/peek", read("t", "t1")).await;

        assert_eq!(
            two_events(&mut events).await,
            ["start:t1", "start:w1"],
            "another session's read runs at once"
        );
        nothing_starts(&mut events, "reads wait for the write sent before them").await;
        state.open("s", 1);
        assert_eq!(h.recv().await["result"], "w1");
        assert_eq!(
            two_events(&mut events).await,
            ["start:r1", "start:r2"],
            "reads run together"
        );
        nothing_starts(&mut events, "a write waits for the reads sent before it").await;
        state.open("r", 3);
        let mut answered = [h.recv().await, h.recv().await, h.recv().await];
        answered.sort_by_key(|a| a["id"].as_i64());
        assert_eq!(
            answered.iter().map(|a| a["id"].clone()).collect::<Vec<_>>(),
            [2, 3, 6]
        );
        assert_eq!(next_event(&mut events).await, "start:w2");
        nothing_starts(&mut events, "r3 waits for w2").await;
        state.open("s", 1);
        assert_eq!(h.recv().await["result"], "w2");
        assert_eq!(next_event(&mut events).await, "start:r3");
        state.open("r", 1);
        assert_eq!(h.recv().await["result"], "r3");
        h.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_write_lets_reads_pass_but_not_writes() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state.clone()), PeerConfig::default());
        h.request(1, "session/long", json!({ "sessionId": "s", "tag": "l1" }))
            .await;
        h.request(
            2,
            "session/peek",
            json!({ "sessionId": "s", "tag": "r1", "gate": "r" }),
        )
        .await;
        h.request(3, "session/wait", json!({ "sessionId": "s", "tag": "w2" }))
            .await;
        assert_eq!(two_events(&mut events).await, ["start:l1", "start:r1"]);
        state.open("r", 1);
        assert_eq!(
            h.recv().await["result"],
            "r1",
            "the read ends while l1 runs"
        );
        nothing_starts(&mut events, "a write still waits for the long one").await;
        state.open("s", 1);
        assert_eq!(h.recv().await["result"], "l1");
        assert_eq!(next_event(&mut events).await, "start:w2");
        state.open("s", 1);
        assert_eq!(h.recv().await["result"], "w2");
        h.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_serial_runs_one_at_a_time() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state.clone()), PeerConfig::default());
        h.request(1, "global/wait", json!({ "tag": "g1" })).await;
        h.request(2, "global/wait", json!({ "tag": "g2" })).await;
        assert_eq!(next_event(&mut events).await, "start:g1");
        assert_eq!(h.call(3, "ping", Value::Null).await["result"], "pong");
        assert!(events.try_recv().is_err(), "g2 must wait for g1");

        state.open("global", 1);
        assert_eq!(h.recv().await["result"], "g1");
        assert_eq!(next_event(&mut events).await, "start:g2");
        state.open("global", 1);
        assert_eq!(h.recv().await["result"], "g2");
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn cancel_request_cancels_running_and_queued_requests() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state.clone()), PeerConfig::default());

        h.request("c1", "cancellable", Value::Null).await;
        assert_eq!(next_event(&mut events).await, "start:\"c1\"");
        h.notify("$/cancelRequest", json!({ "id": "c1" })).await;
        let cancelled = h.recv().await;
        assert_eq!(cancelled["id"], "c1");
        assert_eq!(error_code_of(&cancelled), error_code::REQUEST_CANCELLED);

        // Domain code cancels through the handle, as session/abortCompaction will.
        h.request(2, "cancellable", Value::Null).await;
        assert_eq!(next_event(&mut events).await, "start:2");
        let mut answers = Vec::new();
        h.request(3, "abort", json!({ "id": 2 })).await;
        answers.push(h.recv().await);
        answers.push(h.recv().await);
        answers.sort_by_key(|a| a["id"].as_i64());
        assert_eq!(error_code_of(&answers[0]), error_code::REQUEST_CANCELLED);
        assert_eq!(answers[1]["result"], true);

        // A queued request is answered at once, but the queue stays serial.
        h.request(4, "session/wait", json!({ "sessionId": "a", "tag": "a1" }))
            .await;
        assert_eq!(next_event(&mut events).await, "start:a1");
        h.request(5, "session/wait", json!({ "sessionId": "a", "tag": "a2" }))
            .await;
        h.request(6, "session/wait", json!({ "sessionId": "a", "tag": "a3" }))
            .await;
        h.notify("$/cancelRequest", json!({ "id": 5 })).await;
        let queued = h.recv().await;
        assert_eq!(
            (queued["id"].clone(), error_code_of(&queued)),
            (json!(5), error_code::REQUEST_CANCELLED)
        );
        assert!(events.try_recv().is_err(), "a3 must still wait for a1");
        state.open("a", 1);
        assert_eq!(h.recv().await["result"], "a1");
        assert_eq!(next_event(&mut events).await, "start:a3");
        state.open("a", 1);
        assert_eq!(h.recv().await["result"], "a3");
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn server_to_client_request_gets_the_answer() {
    within(async {
        let (state, _events) = TestState::new();
        let mut h = Harness::start(router(state), PeerConfig::default());
        h.request(1, "ask", json!({ "timeoutMs": 5000 })).await;
        let question = h.recv().await;
        assert_eq!(question["method"], "client/echo");
        assert_eq!(question["params"], json!({ "question": 1 }));
        h.send(json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "answer": 42 } }))
            .await;
        assert_eq!(h.recv().await["result"], json!({ "answer": 42 }));

        h.request(2, "ask", json!({ "timeoutMs": 5000 })).await;
        let question = h.recv().await;
        let refusal = json!({ "code": -1, "message": "no thanks" });
        h.send(json!({ "jsonrpc": "2.0", "id": question["id"], "error": refusal }))
            .await;
        let response = h.recv().await;
        let message = response["error"]["message"]
            .as_str()
            .expect("an error message");
        assert!(
            message.contains("answered `client/echo` with an error: no thanks"),
            "{message}"
        );
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn server_to_client_request_times_out_and_is_cancelled() {
    within(async {
        let (state, _events) = TestState::new();
        let mut h = Harness::start(router(state), PeerConfig::default());
        h.request(1, "ask", json!({ "timeoutMs": 20 })).await;
        let question = h.recv().await;
        let cancel = h.recv().await;
        assert_eq!(cancel["method"], "$/cancelRequest");
        assert_eq!(cancel["params"]["id"], question["id"]);
        let response = h.recv().await;
        let message = response["error"]["message"]
            .as_str()
            .expect("an error message");
        assert!(
            message.contains("did not answer `client/echo` within 20ms"),
            "{message}"
        );

        // A late answer is ignored, and the server keeps serving.
        h.send(json!({ "jsonrpc": "2.0", "id": question["id"], "result": 1 }))
            .await;
        assert_eq!(h.call(2, "ping", Value::Null).await["result"], "pong");
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn server_to_client_request_fails_when_the_input_closes() {
    within(async {
        let (state, _events) = TestState::new();
        let mut h = Harness::start(router(state), PeerConfig::default());
        h.request(1, "ask", json!({ "timeoutMs": 600_000 })).await;
        assert_eq!(h.recv().await["method"], "client/echo");
        h.input
            .shutdown()
            .await
            .expect("closing a pipe does not fail");
        let response = h.recv().await;
        let message = response["error"]["message"]
            .as_str()
            .expect("an error message");
        assert!(message.contains("connection closed"), "{message}");
        assert_eq!(h.finished().await, ExitReason::InputClosed);
    })
    .await;
}

#[tokio::test]
async fn overload_is_answered_at_once() {
    within(async {
        let (state, mut events) = TestState::new();
        let config = PeerConfig {
            max_in_flight: 2,
            ..PeerConfig::default()
        };
        let mut h = Harness::start(router(state.clone()), config);
        h.request(1, "wait", json!({ "tag": "1", "gate": "g" }))
            .await;
        h.request(2, "wait", json!({ "tag": "2", "gate": "g" }))
            .await;
        next_event(&mut events).await;
        next_event(&mut events).await;
        let refused = h.call(3, "ping", Value::Null).await;
        assert_eq!(error_code_of(&refused), error_code::OVERLOADED);
        assert_eq!(
            refused["error"]["message"],
            "server overloaded; retry later"
        );

        state.open("g", 2);
        h.recv().await;
        h.recv().await;
        assert_eq!(h.call(4, "ping", Value::Null).await["result"], "pong");
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn lsp_framing_round_trip() {
    within(async {
        let (state, _events) = TestState::new();
        let mut h = Harness::start(router(state), PeerConfig::default());
        let frame = |id: i64| {
            let body = json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }).to_string();
            format!("Content-Length: {}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{body}", body.len())
        };
        let first = frame(1);
        let (head, tail) = first.split_at(10);
        h.send_raw(head.as_bytes()).await;
        h.send_raw(format!("{tail}{}", frame(2)).as_bytes()).await;
        assert_eq!(h.recv().await["result"], "pong");
        assert_eq!(h.recv().await["result"], "pong");
        assert_eq!(h.reply_framing.get(), Some(Framing::Lsp));
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn ndjson_framing_round_trip() {
    within(async {
        let (state, _events) = TestState::new();
        let mut h = Harness::start(router(state), PeerConfig::default());
        h.send_raw(b"{\"id\":1,\"method\":\"ping\"}\r\n\n{\"id\":2,\"method\":\"ping\"}\n")
            .await;
        assert_eq!(h.recv().await["id"], 1);
        assert_eq!(h.recv().await["id"], 2);
        assert_eq!(h.reply_framing.get(), Some(Framing::Ndjson));
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_answered_and_the_server_keeps_serving() {
    within(async {
        let (state, _events) = TestState::new();
        let mut h = Harness::start(router(state), PeerConfig::default());
        let cases: &[(&str, Value, i64)] = &[
            ("{\"broken", Value::Null, error_code::PARSE_ERROR),
            ("[1,2]", Value::Null, error_code::INVALID_REQUEST),
            ("{\"id\":1}", json!(1), error_code::INVALID_REQUEST),
            (
                "{\"id\":2,\"method\":\"nope\"}",
                json!(2),
                error_code::METHOD_NOT_FOUND,
            ),
            (
                "{\"id\":3,\"method\":\"session/record\",\"params\":{\"n\":1}}",
                json!(3),
                error_code::INVALID_PARAMS,
            ),
            (
                "{\"id\":4,\"method\":\"ask\",\"params\":{\"timeoutMs\":\"soon\"}}",
                json!(4),
                error_code::INVALID_PARAMS,
            ),
            (
                "{\"id\":5,\"method\":\"explode\"}",
                json!(5),
                error_code::INTERNAL_ERROR,
            ),
        ];
        for (input, id, code) in cases {
            h.send_raw(format!("{input}\n").as_bytes()).await;
            let response = h.recv().await;
            assert_eq!(
                (&response["id"], error_code_of(&response)),
                (id, *code),
                "{input} -> {response}"
            );
        }
        h.request(6, "nope", Value::Null).await;
        assert_eq!(h.recv().await["error"]["message"], "unknown method `nope`");
        h.request(7, "session/record", json!({ "n": 1 })).await;
        let message = h.recv().await["error"]["message"].clone();
        assert_eq!(
            message,
            "invalid params for session/record: missing field `sessionId` at line 1 column 7"
        );
        h.request(8, "ask", json!({ "timeoutMs": -1 })).await;
        let message = h.recv().await["error"]["message"].clone();
        assert!(
            message
                .as_str()
                .is_some_and(|m| m.contains("at `timeoutMs`")),
            "{message}"
        );

        assert_eq!(h.call(9, "ping", Value::Null).await["result"], "pong");
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn bad_and_oversized_lsp_frames_are_answered_and_skipped() {
    within(async {
        let (state, _events) = TestState::new();
        let config = PeerConfig {
            max_message_bytes: 100,
            ..PeerConfig::default()
        };
        let mut h = Harness::start(router(state), config);
        let ping = r#"{"id":1,"method":"ping"}"#;
        let big = format!(r#"{{"id":2,"method":"ping","params":"{}"}}"#, "x".repeat(500));
        let input = format!(
            "Content-Length: soon\r\n\r\n{ping}Content-Length: {}\r\n\r\n{big}Content-Length: {}\r\n\r\n{ping}",
            big.len(),
            ping.len()
        );
        h.send_raw(input.as_bytes()).await;
        let bad = h.recv().await;
        assert_eq!((&bad["id"], error_code_of(&bad)), (&Value::Null, error_code::PARSE_ERROR));
        let too_big = h.recv().await;
        assert_eq!(too_big["error"]["data"]["kind"], "messageTooLarge");
        assert_eq!(h.recv().await["result"], "pong");
        h.close().await;
    })
    .await;
}

#[tokio::test]
async fn parent_exit_stops_the_server() {
    within(async {
        let mut child = tokio::process::Command::new("true")
            .spawn()
            .expect("`true` exists on every Unix");
        let pid = child.id().expect("the child has not been waited for yet");
        child.wait().await.expect("waiting for `true` succeeds");

        let (state, _events) = TestState::new();
        let config = PeerConfig {
            parent_pid: Some(pid),
            parent_poll_interval: Duration::from_millis(10),
            ..PeerConfig::default()
        };
        let h = Harness::start(router(state), config);
        assert_eq!(h.finished().await, ExitReason::ParentExited);
    })
    .await;
}

#[tokio::test]
async fn at_eof_in_flight_requests_finish_and_are_answered() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state.clone()), PeerConfig::default());
        h.request(1, "wait", json!({ "tag": "last", "gate": "g" }))
            .await;
        assert_eq!(next_event(&mut events).await, "start:last");
        h.input
            .shutdown()
            .await
            .expect("closing a pipe does not fail");
        state.open("g", 1);
        assert_eq!(h.recv().await["result"], "last");
        assert_eq!(h.finished().await, ExitReason::InputClosed);
    })
    .await;
}

#[tokio::test]
async fn exit_cancels_in_flight_requests_and_flushes_their_answers() {
    within(async {
        let (state, mut events) = TestState::new();
        let mut h = Harness::start(router(state).with_lifecycle(), PeerConfig::default());
        h.call(1, "initialize", json!({})).await;
        h.request(2, "cancellable", Value::Null).await;
        assert_eq!(next_event(&mut events).await, "start:2");
        h.notify("exit", Value::Null).await;
        let cancelled = h.recv().await;
        assert_eq!(
            (cancelled["id"].clone(), error_code_of(&cancelled)),
            (json!(2), error_code::REQUEST_CANCELLED)
        );
        assert_eq!(h.finished().await.exit_code(), 1);
    })
    .await;
}

/// A result whose serialisation waits (up to [`STEP`]) for a signal another request sends:
/// it reports `"met"` when the signal came, `"alone"` when it waited in vain.
struct WaitsWhileSerialised {
    serialising: mpsc::UnboundedSender<String>,
    signal: Arc<Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl serde::Serialize for WaitsWhileSerialised {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let _ = self.serialising.send("serialising".into());
        let signal = self.signal.lock().expect("one serialisation at a time");
        let met = signal.recv_timeout(STEP).is_ok();
        serializer.serialize_str(if met { "met" } else { "alone" })
    }
}

/// On a runtime of one thread, a large result is serialised while another request runs: had
/// it been serialised on the runtime, the signalling request could not run until it was done.
#[tokio::test(flavor = "current_thread")]
async fn a_large_result_is_serialised_off_the_runtime() {
    within(async {
        let (state, mut events) = TestState::new();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let signal = Arc::new(Mutex::new(rx));
        let tx = Arc::new(Mutex::new(tx));
        let router = Router::new(state.clone())
            .large_request(
                "big",
                Concurrency::Parallel,
                move |state: TestState, _, _: ()| {
                    let signal = Arc::clone(&signal);
                    async move {
                        Ok(WaitsWhileSerialised {
                            serialising: state.events.clone(),
                            signal,
                        })
                    }
                },
            )
            .request(
                "signal",
                Concurrency::Parallel,
                move |_: TestState, _, _: ()| {
                    let tx = Arc::clone(&tx);
                    async move {
                        let sent = tx.lock().expect("not poisoned").send(()).is_ok();
                        Ok(sent)
                    }
                },
            );
        let mut h = Harness::start(router, PeerConfig::default());
        h.request(1, "big", Value::Null).await;
        assert_eq!(next_event(&mut events).await, "serialising");
        let mut answers = HashMap::new();
        h.request(2, "signal", Value::Null).await;
        for _ in 0..2 {
            let answer = h.recv().await;
            answers.insert(answer["id"].as_i64().expect("numeric id"), answer);
        }
        assert_eq!(answers[&2]["result"], true, "{answers:?}");
        assert_eq!(answers[&1]["result"], "met", "{answers:?}");
        assert_eq!(h.close().await, ExitReason::InputClosed);
    })
    .await;
}

/// Input is bounded in bytes, not only in count (issue 35, item 6): while accepted requests
/// queued behind a slow writer hold more than `max_input_bytes` of params, the peer reads
/// nothing more, so even a `ping` sent after them waits; once they finish, reading resumes.
/// Before, every pipelined request was read and held (24 appends of 50 MB: 1.28 GB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_params_past_the_input_budget_stop_the_reader() {
    within(async {
        let (state, mut events) = TestState::new();
        let config = PeerConfig {
            max_input_bytes: 10_000,
            ..PeerConfig::default()
        };
        let mut h = Harness::start(router(state.clone()), config);
        let pad = "x".repeat(3_000);
        // One running (waiting on its gate), the rest queued behind it on the session.
        for n in 0..12 {
            h.request(
                n,
                "session/wait",
                json!({ "sessionId": "s", "tag": format!("w{n}"), "pad": pad }),
            )
            .await;
        }
        h.request(100, "ping", json!(null)).await;
        assert_eq!(next_event(&mut events).await, "start:w0");
        let early = tokio::time::timeout(Duration::from_millis(200), h.output.next()).await;
        assert!(
            early.is_err(),
            "the ping behind 36 KB of queued params must not be read yet: {early:?}"
        );
        state.open("s", 12);
        let mut ids = Vec::new();
        for _ in 0..13 {
            ids.push(h.recv().await["id"].as_i64().unwrap());
        }
        assert!(ids.contains(&100), "the ping is answered once room is back");
        h.close().await;
    })
    .await;
}
