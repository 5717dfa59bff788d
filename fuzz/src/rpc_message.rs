//! `rpc_message`: arbitrary bytes as a client's whole input to a [`Peer`] serving a tiny
//! router over an in-memory pipe.
//!
//! Invariants: `serve` returns (within [`DEADLINE`]) without an I/O error or a panic, and
//! everything it wrote is well-framed JSON-RPC 2.0: responses with a number, string or
//! (errors only) null id and exactly one of `result` / `error`, and server-to-client requests
//! of the one method the router sends.

use std::time::Duration;

use compactd::rpc::{Concurrency, NotificationCtx, Peer, RequestCtx, Router, RpcError};
use compactd::testkit::{DetectedFraming, Frame, MessageCodec, PeerConfig};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

/// A run that takes longer than this is a hang: every handler here finishes at once, and the
/// server-to-client request times out after [`ASK_TIMEOUT`].
const DEADLINE: Duration = Duration::from_secs(10);
const ASK_TIMEOUT: Duration = Duration::from_millis(20);
/// Small, so oversized messages, overload and a full output queue are all reachable.
const MAX_MESSAGE_BYTES: usize = 4096;
const ASK_METHOD: &str = "client/ask";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionParams {
    session_id: String,
    #[serde(default)]
    value: Value,
}

async fn echo(_: (), _: RequestCtx, params: Value) -> Result<Value, RpcError> {
    Ok(params)
}

async fn session_step(_: (), ctx: RequestCtx, params: SessionParams) -> Result<Value, RpcError> {
    // Let other tasks run in between, so queued calls of the session really wait.
    tokio::task::yield_now().await;
    ctx.check_cancelled()?;
    Ok(serde_json::json!({ "sessionId": params.session_id, "value": params.value }))
}

/// Asks the client something, so the input's responses have a request to complete.
async fn ask(_: (), ctx: RequestCtx, params: Value) -> Result<Value, RpcError> {
    ctx.client()
        .request::<_, Value>(ASK_METHOD, params, ASK_TIMEOUT)
        .await
        .map_err(RpcError::internal)
}

/// A long session job: lets the session's later reads pass, then steps.
async fn session_long(_: (), ctx: RequestCtx, params: SessionParams) -> Result<Value, RpcError> {
    ctx.let_reads_pass();
    session_step((), ctx, params).await
}

async fn initialize(_: (), _: RequestCtx, _: Value) -> Result<Value, RpcError> {
    Ok(serde_json::json!({ "capabilities": {} }))
}

async fn shutdown(_: (), _: RequestCtx, _: ()) -> Result<(), RpcError> {
    Ok(())
}

async fn note(_: (), _: NotificationCtx, _: Value) {}

fn router() -> Router<()> {
    Router::new(())
        .with_lifecycle()
        .request("initialize", Concurrency::Parallel, initialize)
        .request("shutdown", Concurrency::GlobalSerial, shutdown)
        .request("echo", Concurrency::Parallel, echo)
        .request("session/step", Concurrency::SessionSerial, session_step)
        .request("session/long", Concurrency::SessionSerial, session_long)
        .request("session/peek", Concurrency::SessionRead, session_step)
        .request("ask", Concurrency::Parallel, ask)
        .notification("initialized", Concurrency::Parallel, note)
        .notification("session/note", Concurrency::SessionSerial, note)
}

pub fn check(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime can be built");
    let output = runtime.block_on(async {
        tokio::time::timeout(DEADLINE, serve(data))
            .await
            .expect("the server terminates after its input ends")
    });
    check_output(&output);
}

/// Serves `input` to completion and returns everything the server wrote.
async fn serve(input: &[u8]) -> Vec<u8> {
    let (client, server) = tokio::io::duplex(1024);
    let (server_read, server_write) = tokio::io::split(server);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let config = PeerConfig {
        max_message_bytes: MAX_MESSAGE_BYTES,
        max_in_flight: 4,
        outgoing_queue: 2,
        drain_timeout: Duration::from_secs(1),
        ..PeerConfig::default()
    };
    let input = input.to_vec();
    // The server may stop reading (on `exit`) before the input is all written: a failed
    // write is expected then.
    let writer = tokio::spawn(async move {
        let _ = client_write.write_all(&input).await;
        let _ = client_write.shutdown().await;
    });
    let reader = tokio::spawn(async move {
        let mut output = Vec::new();
        client_read
            .read_to_end(&mut output)
            .await
            .expect("reading an in-memory pipe does not fail");
        output
    });
    let served = Peer::serve_with(config, server_read, server_write, router()).await;
    served.expect("serve has no I/O error on an in-memory pipe");
    writer.abort();
    reader.await.expect("the output reader does not panic")
}

fn check_output(output: &[u8]) {
    let mut codec = MessageCodec::new(usize::MAX, DetectedFraming::default());
    let mut buf = BytesMut::from(output);
    let mut frames = Vec::new();
    while let Some(frame) = codec.decode(&mut buf).expect("decode never fails") {
        frames.push(frame);
    }
    while let Some(frame) = codec.decode_eof(&mut buf).expect("decode_eof never fails") {
        frames.push(frame);
    }
    for frame in frames {
        let body = match frame {
            Frame::Message(body) => body,
            Frame::Error(error) => panic!("the server wrote a broken frame: {error}"),
        };
        let message: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("the server wrote invalid JSON ({e}): {body:?}"));
        check_message(&message);
    }
}

fn check_message(message: &Value) {
    let Value::Object(members) = message else {
        panic!("not a JSON object: {message}");
    };
    assert_eq!(
        members.get("jsonrpc"),
        Some(&Value::from("2.0")),
        "{message}"
    );
    if let Some(method) = members.get("method") {
        assert_eq!(
            method, ASK_METHOD,
            "unexpected server-to-client message: {message}"
        );
        assert!(members.get("id").is_some_and(Value::is_i64), "{message}");
        return;
    }
    let id = members
        .get("id")
        .unwrap_or_else(|| panic!("no id: {message}"));
    match (members.get("result"), members.get("error")) {
        (Some(_), None) => assert!(id.is_i64() || id.is_string(), "bad id: {message}"),
        (None, Some(error)) => {
            assert!(
                id.is_i64() || id.is_string() || id.is_null(),
                "bad id: {message}"
            );
            assert!(error["code"].is_i64(), "error without a code: {message}");
            assert!(
                error["message"].is_string(),
                "error without a message: {message}"
            );
        }
        _ => panic!("a response needs exactly one of result and error: {message}"),
    }
    let allowed = ["jsonrpc", "id", "result", "error"];
    assert!(
        members.keys().all(|key| allowed.contains(&key.as_str())),
        "unexpected members: {message}"
    );
}
