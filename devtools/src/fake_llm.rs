//! A scripted fake LLM server on 127.0.0.1 for integration tests: real HTTP/1.1 over a plain
//! tokio `TcpListener`, real server-sent events, no extra crates.
//!
//! Use it from a test file with
//! `#[path = "support/fake_llm.rs"] mod fake_llm;`, then:
//!
//! ```ignore
//! let server = FakeLlm::start().await;
//! server.push(fake_llm::openai_sse(&["Hel", "lo"], "stop"));   // first request's reply
//! server.push(Reply::json(429, json!({"error": "slow down"})).header("retry-after", "1"));
//! server.set_default(Reply::text(500, "boom"));                 // when the queue is empty
//! let base_url = server.url();                                  // "http://127.0.0.1:<port>"
//! // ... run the code under test against base_url ...
//! let requests = server.wait_for_requests(1, TIMEOUT).await;    // method, path, headers, JSON
//! server.wait_client_closed(1, TIMEOUT).await;                  // the client hung up
//! ```
//!
//! Replies are taken from a FIFO queue, one per request, in arrival order; when the queue is
//! empty the default reply is used, or a 500 saying nothing was scripted. A reply is a full body
//! (with `content-length`, keep-alive), or a chunked stream of scripted chunks (each after an
//! optional delay) that then finishes, is cut without its terminating chunk (the client sees
//! an incomplete body), or hangs forever; or no response at all (`Reply::hang`). While it
//! serves a reply the server watches the connection, so a client that closes it (a cancelled
//! request) is counted at once in `client_closed()`.
//!
//! For fault injection a reply can also wait before its status line (`Reply::delayed`), end
//! with a TCP reset (`StreamEnd::Reset`), or stream one chunk forever (`Reply::endless`); and
//! `set_generator` computes the reply of every unscripted request from its arrival number, so
//! a test can draw random faults from a seeded generator; `set_responder` computes it from the
//! request (a server that refuses prompts over its window). A reply held by a [`Gate`]
//! (`Reply::held_by`) waits until the test opens it: a slow first token without a sleep.
//!
//! Limit discovery (what compactd asks a server on this machine before summarising: `GET
//! /models`, `GET /props`, `POST /api/show`, `GET /api/ps`) is answered apart: from
//! `set_discovery(path, reply)`, 404 otherwise, recorded in `discovery_requests()` and never
//! taking a scripted reply or counting in `requests()`.
//!
//! The server and every connection task stop when the `FakeLlm` is dropped.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The body parsed as JSON, if it is JSON.
    pub json: Option<Value>,
}

impl RecordedRequest {
    /// The first value of a header (name matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON body; panics when the body was not JSON.
    pub fn json(&self) -> &Value {
        self.json.as_ref().expect("request body is JSON")
    }
}

/// One piece of a streamed body, sent after `delay`.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub delay: Duration,
    pub data: String,
}

/// How a streamed body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The terminating chunk is sent and the connection stays open for more requests.
    Finish,
    /// The connection is closed without the terminating chunk.
    Cut,
    /// Nothing more is sent, ever; the connection stays open until the client closes it.
    Hang,
    /// The connection is reset (RST, not FIN) without the terminating chunk.
    Reset,
}

/// The body of a scripted reply.
#[derive(Debug, Clone)]
pub enum ReplyBody {
    Full(String),
    Stream {
        chunks: Vec<Chunk>,
        end: StreamEnd,
    },
    /// No status line at all: the request hangs until the client gives up.
    Hang,
    /// A 200 chunked stream that sends `data` after every `delay`, forever.
    Endless {
        data: String,
        delay: Duration,
    },
}

/// A switch a test opens to let the replies it holds go on (see [`Reply::held_by`]): a model
/// that reads its prompt until the test has seen what it waits for, with no sleep.
#[derive(Debug, Clone)]
pub struct Gate(Arc<watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate(Arc::new(watch::Sender::new(false)))
    }

    /// Lets every reply held by this gate go on, now and later.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let mut open = self.0.subscribe();
        // The sender lives in `self`: the wait ends only when the gate opens.
        let _ = open.wait_for(|open| *open).await;
    }
}

/// A scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: ReplyBody,
    /// Wait this long before sending anything.
    pub delay: Duration,
    /// Hold the body (a stream: after its status line) until this gate opens.
    pub gate: Option<Gate>,
}

impl Reply {
    /// A full JSON body.
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::text(status, &body.to_string()).header("content-type", "application/json")
    }

    /// A full body as given.
    pub fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Full(body.to_owned()),
            delay: Duration::ZERO,
            gate: None,
        }
    }

    /// A 200 `text/event-stream` reply with one chunk per event, each framed as
    /// `data: <event>\n\n` unless it already contains a `data:` line (then sent as is, so
    /// `event:` lines can be scripted too).
    pub fn sse<S: AsRef<str>>(events: &[S]) -> Reply {
        let chunks = events
            .iter()
            .map(|e| {
                let e = e.as_ref();
                let data = if e.starts_with("data:") || e.contains("\ndata:") {
                    format!("{}\n\n", e.trim_end())
                } else {
                    format!("data: {e}\n\n")
                };
                Chunk {
                    delay: Duration::ZERO,
                    data,
                }
            })
            .collect();
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: ReplyBody::Stream {
                chunks,
                end: StreamEnd::Finish,
            },
            delay: Duration::ZERO,
            gate: None,
        }
    }

    /// No response at all.
    pub fn hang() -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Hang,
            delay: Duration::ZERO,
            gate: None,
        }
    }

    /// A 200 event stream that sends the SSE event `event` every `delay`, forever. `event` is
    /// framed as `data: <event>` unless it is a comment (starts with `:`) or has its own
    /// `data:` line (then it is sent as is).
    pub fn endless(event: &str, delay: Duration) -> Reply {
        let data = if event.starts_with(':') || event.contains("data:") {
            format!("{event}\n\n")
        } else {
            format!("data: {event}\n\n")
        };
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: ReplyBody::Endless { data, delay },
            delay: Duration::ZERO,
            gate: None,
        }
    }

    /// Holds the reply until `gate` opens: a full body before its status line, a stream after
    /// it (the request was accepted and no token came yet, as a model reading its prompt).
    pub fn held_by(mut self, gate: &Gate) -> Reply {
        self.gate = Some(gate.clone());
        self
    }

    /// Waits `delay` before sending the status line.
    pub fn delayed(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// For a streamed reply: how it ends.
    pub fn ending(mut self, how: StreamEnd) -> Reply {
        if let ReplyBody::Stream { end, .. } = &mut self.body {
            *end = how;
        }
        self
    }

    /// For a streamed reply: keeps only the first `n` chunks.
    pub fn first_chunks(mut self, n: usize) -> Reply {
        if let ReplyBody::Stream { chunks, .. } = &mut self.body {
            chunks.truncate(n);
        }
        self
    }

    /// For a streamed reply: waits `delay` before every chunk.
    pub fn chunk_delay(mut self, delay: Duration) -> Reply {
        if let ReplyBody::Stream { chunks, .. } = &mut self.body {
            for chunk in chunks {
                chunk.delay = delay;
            }
        }
        self
    }
}

/// An OpenAI chat-completions stream: one chunk per delta, the finish reason, a usage chunk
/// (prompt 100, completion 20, cached 40) and `[DONE]`.
pub fn openai_sse(deltas: &[&str], finish_reason: &str) -> Reply {
    let mut events: Vec<String> = vec![
        serde_json::json!({"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]})
            .to_string(),
    ];
    for delta in deltas {
        events.push(
            serde_json::json!({"choices":[{"index":0,"delta":{"content":delta},"finish_reason":null}]})
                .to_string(),
        );
    }
    events.push(
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":finish_reason}]})
            .to_string(),
    );
    events.push(
        serde_json::json!({"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,
            "total_tokens":120,"prompt_tokens_details":{"cached_tokens":40}}})
        .to_string(),
    );
    events.push("[DONE]".to_owned());
    Reply::sse(&events)
}

/// An Anthropic Messages stream: `message_start` (input 100, cache read 40), one text block
/// with a `text_delta` per delta, `message_delta` with `stop_reason` (output 20), and
/// `message_stop`.
pub fn anthropic_sse(deltas: &[&str], stop_reason: &str) -> Reply {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}");
    let mut events = vec![
        event(
            "message_start",
            serde_json::json!({"type":"message_start","message":{"id":"msg_1","role":"assistant",
                "content":[],"usage":{"input_tokens":100,"cache_read_input_tokens":40,"output_tokens":1}}}),
        ),
        event(
            "content_block_start",
            serde_json::json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        event("ping", serde_json::json!({"type":"ping"})),
    ];
    for delta in deltas {
        events.push(event(
            "content_block_delta",
            serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":delta}}),
        ));
    }
    events.push(event(
        "content_block_stop",
        serde_json::json!({"type":"content_block_stop","index":0}),
    ));
    events.push(event(
        "message_delta",
        serde_json::json!({"type":"message_delta","delta":{"stop_reason":stop_reason},"usage":{"output_tokens":20}}),
    ));
    events.push(event(
        "message_stop",
        serde_json::json!({"type":"message_stop"}),
    ));
    Reply::sse(&events)
}

/// Computes the reply of an unscripted request from its arrival number (0-based).
pub type Generator = Box<dyn Fn(usize) -> Reply + Send + Sync>;

/// Computes the reply of an unscripted request from the request itself (`None`: the
/// generator or the default answers).
pub type Responder = Box<dyn Fn(&RecordedRequest) -> Option<Reply> + Send + Sync>;

/// Whether a request is a limit-discovery request (see the module docs).
fn is_discovery(request: &RecordedRequest) -> bool {
    request.method == "GET" || request.path.ends_with("/api/show")
}

struct State {
    discovery: Mutex<Vec<(String, Reply)>>,
    discovery_requests: Mutex<Vec<RecordedRequest>>,
    replies: Mutex<VecDeque<Reply>>,
    generator: Mutex<Option<Generator>>,
    responder: Mutex<Option<Responder>>,
    served: std::sync::atomic::AtomicUsize,
    default_reply: Mutex<Option<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    request_count: watch::Sender<usize>,
    closed_count: watch::Sender<usize>,
}

impl State {
    fn next_reply(&self, request: &RecordedRequest) -> Reply {
        let n = self
            .served
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let queued = self.replies.lock().unwrap().pop_front();
        queued
            .or_else(|| self.responder.lock().unwrap().as_ref()?(request))
            .or_else(|| self.generator.lock().unwrap().as_ref().map(|g| g(n)))
            .or_else(|| self.default_reply.lock().unwrap().clone())
            .unwrap_or_else(|| Reply::text(500, "fake_llm: no scripted reply"))
    }

    fn record(&self, request: RecordedRequest) {
        self.requests.lock().unwrap().push(request);
        self.request_count.send_modify(|n| *n += 1);
    }

    fn client_closed(&self) {
        self.closed_count.send_modify(|n| *n += 1);
    }
}

/// The fake server; see the module docs.
pub struct FakeLlm {
    addr: std::net::SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeLlm {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start() -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            discovery: Mutex::new(Vec::new()),
            discovery_requests: Mutex::new(Vec::new()),
            replies: Mutex::new(VecDeque::new()),
            generator: Mutex::new(None),
            responder: Mutex::new(None),
            served: std::sync::atomic::AtomicUsize::new(0),
            default_reply: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            request_count: watch::Sender::new(0),
            closed_count: watch::Sender::new(0),
        });
        let serving = Arc::clone(&state);
        let task = tokio::spawn(async move {
            // Owning the connection tasks here means aborting this task stops them all.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            connections.spawn(serve_connection(stream, Arc::clone(&serving)));
                        }
                        Err(_) => return,
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        FakeLlm { addr, state, task }
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The reply to limit-discovery requests for `path` (e.g. `/v1/models`, `/props`).
    pub fn set_discovery(&self, path: &str, reply: Reply) {
        self.state
            .discovery
            .lock()
            .unwrap()
            .push((path.to_owned(), reply));
    }

    /// The limit-discovery requests received so far.
    pub fn discovery_requests(&self) -> Vec<RecordedRequest> {
        self.state.discovery_requests.lock().unwrap().clone()
    }

    /// Queues the reply for the next unanswered request.
    pub fn push(&self, reply: Reply) {
        self.state.replies.lock().unwrap().push_back(reply);
    }

    /// The reply used when the queue is empty.
    pub fn set_default(&self, reply: Reply) {
        *self.state.default_reply.lock().unwrap() = Some(reply);
    }

    /// Computes the reply of every request the queue does not answer (before the default).
    pub fn set_generator(&self, generator: impl Fn(usize) -> Reply + Send + Sync + 'static) {
        *self.state.generator.lock().unwrap() = Some(Box::new(generator));
    }

    /// Computes the reply of every request the queue does not answer from the request (before
    /// the generator and the default): a server whose answer depends on the prompt.
    pub fn set_responder(
        &self,
        responder: impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync + 'static,
    ) {
        *self.state.responder.lock().unwrap() = Some(Box::new(responder));
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived (panics after `timeout`), then returns all.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let mut rx = self.state.request_count.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|count| *count >= n))
            .await
            .unwrap_or_else(|_| panic!("fake_llm: fewer than {n} requests within {timeout:?}"))
            .expect("fake_llm state alive");
        self.requests()
    }

    /// How many connections the client closed (or reset) while the server still held them.
    pub fn client_closed(&self) -> usize {
        *self.state.closed_count.borrow()
    }

    /// Waits until the client closed at least `n` connections (panics after `timeout`).
    pub async fn wait_client_closed(&self, n: usize, timeout: Duration) {
        let mut rx = self.state.closed_count.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|count| *count >= n))
            .await
            .unwrap_or_else(|_| {
                panic!("fake_llm: the client closed fewer than {n} connections within {timeout:?}")
            })
            .expect("fake_llm state alive");
    }
}

/// What happened to a connection while a reply was being served.
enum Served {
    KeepAlive,
    ServerClosed,
    ClientClosed,
    /// Close with a reset.
    Reset,
}

async fn serve_connection(stream: TcpStream, state: Arc<State>) {
    let (mut reader, mut writer) = stream.into_split();
    let mut buffer = Vec::new();
    loop {
        let request = match read_request(&mut reader, &mut buffer).await {
            Some(request) => request,
            None => {
                state.client_closed();
                return;
            }
        };
        let reply = if is_discovery(&request) {
            let reply = state
                .discovery
                .lock()
                .unwrap()
                .iter()
                .find(|(path, _)| *path == request.path)
                .map(|(_, reply)| reply.clone())
                .unwrap_or_else(|| Reply::text(404, "not found"));
            state.discovery_requests.lock().unwrap().push(request);
            reply
        } else {
            let reply = state.next_reply(&request);
            state.record(request);
            reply
        };
        let served = tokio::select! {
            served = write_reply(&mut writer, &reply) => served,
            () = wait_for_eof(&mut reader, &mut buffer) => Served::ClientClosed,
        };
        match served {
            Served::KeepAlive => continue,
            Served::ServerClosed => return,
            Served::Reset => {
                if let Ok(stream) = reader.reunite(writer) {
                    // Linger 0: closing sends RST instead of FIN.
                    let _ = stream.set_zero_linger();
                }
                return;
            }
            Served::ClientClosed => {
                state.client_closed();
                return;
            }
        }
    }
}

/// Reads until the peer closes the connection; bytes that arrive meanwhile are kept.
async fn wait_for_eof(reader: &mut OwnedReadHalf, buffer: &mut Vec<u8>) {
    let mut chunk = [0u8; 4096];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads one request (headers and a `content-length` body); `None` when the connection ends
/// first.
async fn read_request(reader: &mut OwnedReadHalf, buffer: &mut Vec<u8>) -> Option<RecordedRequest> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = find(buffer, b"\r\n\r\n") {
            break at;
        }
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buffer[body_start..body_start + length]).into_owned();
    buffer.drain(..body_start + length);
    let json = serde_json::from_str(&body).ok();
    Some(RecordedRequest {
        method,
        path,
        headers,
        body,
        json,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn write_reply(writer: &mut OwnedWriteHalf, reply: &Reply) -> Served {
    match write_reply_inner(writer, reply).await {
        Ok(served) => served,
        Err(_) => Served::ClientClosed,
    }
}

async fn write_reply_inner(writer: &mut OwnedWriteHalf, reply: &Reply) -> std::io::Result<Served> {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match &reply.body {
        ReplyBody::Hang => std::future::pending().await,
        ReplyBody::Full(body) => {
            if let Some(gate) = &reply.gate {
                gate.passed().await;
            }
            head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            writer.write_all(head.as_bytes()).await?;
            writer.write_all(body.as_bytes()).await?;
            writer.flush().await?;
            Ok(Served::KeepAlive)
        }
        ReplyBody::Stream { chunks, end } => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            writer.write_all(head.as_bytes()).await?;
            writer.flush().await?;
            if let Some(gate) = &reply.gate {
                gate.passed().await;
            }
            for chunk in chunks {
                if !chunk.delay.is_zero() {
                    tokio::time::sleep(chunk.delay).await;
                }
                let framed = format!("{:x}\r\n{}\r\n", chunk.data.len(), chunk.data);
                writer.write_all(framed.as_bytes()).await?;
                writer.flush().await?;
            }
            match end {
                StreamEnd::Finish => {
                    writer.write_all(b"0\r\n\r\n").await?;
                    writer.flush().await?;
                    Ok(Served::KeepAlive)
                }
                StreamEnd::Cut => {
                    writer.shutdown().await?;
                    Ok(Served::ServerClosed)
                }
                StreamEnd::Hang => std::future::pending().await,
                StreamEnd::Reset => Ok(Served::Reset),
            }
        }
        ReplyBody::Endless { data, delay } => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            writer.write_all(head.as_bytes()).await?;
            let framed = format!("{:x}\r\n{}\r\n", data.len(), data);
            loop {
                if !delay.is_zero() {
                    tokio::time::sleep(*delay).await;
                }
                writer.write_all(framed.as_bytes()).await?;
                writer.flush().await?;
            }
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}
