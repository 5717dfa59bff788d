//! The checked-in JSON Schemas describe what really crosses the wire, checked by a real JSON
//! Schema validator (boon, draft 2020-12) rather than by the Rust types that generated them:
//! every example of docs/protocol.md, and every message of one scripted session with the
//! real daemon (requests, responses, notifications and server-to-client requests, both ways,
//! errors included), validates against `schema/protocol.schema.json`: params against the
//! method's `params`, results against its `result`, every `error` against the bundle's
//! `error` (whose `data.kind` must be one of the listed kinds).

use std::collections::HashMap;

use boon::{Compiler, SchemaIndex, Schemas};
use compactd::protocol::{Direction, MessageKind, MethodSpec};
use devtools::daemon::{DaemonProcess, Framing, SpawnOptions, Transcribed, assistant, user};
use serde_json::{Value, json};

use crate::protocol_docs::{docs, example_blocks};

const BUNDLE_URL: &str = "https://compactd.invalid/schema/protocol.schema.json";

/// The compiled schemas of every method's params and result, and of `error`.
struct Validator {
    schemas: Schemas,
    params: HashMap<String, SchemaIndex>,
    results: HashMap<String, SchemaIndex>,
    error: SchemaIndex,
}

/// Open questions by `(asked by the client, id)`: the method, or `None` for a method the
/// protocol does not have (which only a `methodNotFound` error may answer).
type Pending = HashMap<(bool, String), Option<&'static MethodSpec>>;

impl Validator {
    fn load() -> Validator {
        let path = devtools::fixtures::repo_file("schema/protocol.schema.json");
        let text = std::fs::read_to_string(&path).expect("schema/protocol.schema.json exists");
        let bundle: Value = serde_json::from_str(&text).expect("the bundle is JSON");
        let mut compiler = Compiler::new();
        compiler
            .add_resource(BUNDLE_URL, bundle.clone())
            .expect("the bundle is added");
        let mut schemas = Schemas::new();
        let mut compile = |pointer: String| {
            compiler
                .compile(&format!("{BUNDLE_URL}#{pointer}"), &mut schemas)
                .unwrap_or_else(|e| panic!("{pointer} does not compile: {e:#}"))
        };
        let (mut params, mut results) = (HashMap::new(), HashMap::new());
        let methods = bundle["methods"].as_array().expect("methods");
        for (index, method) in methods.iter().enumerate() {
            let name = method["method"].as_str().expect("a method name").to_owned();
            params.insert(name.clone(), compile(format!("/methods/{index}/params")));
            if method.get("result").is_some() {
                results.insert(name, compile(format!("/methods/{index}/result")));
            }
        }
        let error = compile("/error".to_owned());
        Validator {
            schemas,
            params,
            results,
            error,
        }
    }

    fn validate(&self, value: &Value, schema: SchemaIndex, what: &str) -> Result<(), String> {
        self.schemas
            .validate(value, schema)
            .map_err(|e| format!("{what} does not match the schema: {e:#}"))
    }

    /// Checks one message. `from_client` is who sent it, when known (a transcript); the docs'
    /// examples leave it to the method table.
    fn check(
        &self,
        message: &Value,
        from_client: Option<bool>,
        pending: &mut Pending,
    ) -> Result<(), String> {
        if message.get("jsonrpc") != Some(&Value::from("2.0")) {
            return Err("missing \"jsonrpc\":\"2.0\"".into());
        }
        let id = message.get("id").filter(|id| !id.is_null());
        if let Some(method) = message.get("method").and_then(Value::as_str) {
            let Some(spec) = MethodSpec::find(method) else {
                // A client may send anything; the server must refuse it as unknown.
                return match (from_client, id) {
                    (Some(true), Some(id)) => {
                        pending.insert((true, id.to_string()), None);
                        Ok(())
                    }
                    _ => Err(format!("unknown method {method}")),
                };
            };
            let by_client = spec.direction == Direction::ClientToServer;
            if from_client.is_some_and(|c| c != by_client) {
                return Err(format!("{method} sent the wrong way"));
            }
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            let schema = self.params[method];
            self.validate(&params, schema, &format!("{method} params"))?;
            return match (id, spec.kind) {
                (Some(id), MessageKind::Request) => {
                    let key = (by_client, id.to_string());
                    match pending.insert(key, Some(spec)) {
                        Some(_) => Err(format!("id {id} is already awaiting an answer")),
                        None => Ok(()),
                    }
                }
                (None, MessageKind::Notification) => Ok(()),
                (_, kind) => Err(format!("{method} is a {kind:?}, sent as the other kind")),
            };
        }
        // A response answers the other side's request.
        let spec = match id {
            Some(id) => {
                let id = id.to_string();
                let asked_by = match from_client {
                    Some(from_client) => vec![!from_client],
                    None => vec![true, false],
                };
                let key = asked_by
                    .into_iter()
                    .map(|c| (c, id.clone()))
                    .find(|key| pending.contains_key(key))
                    .ok_or(format!("response to id {id}, which nobody asked"))?;
                pending.remove(&key).map(|spec| spec.ok_or(message))
            }
            // Refused before its id could be read (a parse error): only an error can say so.
            None => None,
        };
        let spec = match spec {
            // The answer to a method the protocol lacks.
            Some(Err(answer)) => {
                return match answer.pointer("/error/data/kind") {
                    Some(kind) if kind == "methodNotFound" => {
                        self.validate(&answer["error"], self.error, "methodNotFound error")
                    }
                    _ => Err(format!("an unknown method was answered with {answer}")),
                };
            }
            Some(Ok(spec)) => Some(spec),
            None => None,
        };
        match (message.get("result"), message.get("error"), spec) {
            (Some(result), None, Some(spec)) => {
                let schema = self.results[spec.name];
                self.validate(result, schema, &format!("{} result", spec.name))
            }
            (None, Some(error), _) => {
                let what = spec.map_or("error".to_owned(), |s| format!("{} error", s.name));
                self.validate(error, self.error, &what)?;
                match error.pointer("/data/kind") {
                    Some(_) => Ok(()),
                    None => Err(format!("{what} has no data.kind: {error}")),
                }
            }
            (Some(_), None, None) => Err("a result with a null id".into()),
            _ => Err("a response needs exactly one of result and error".into()),
        }
    }
}

#[test]
fn every_documented_example_validates_against_the_schema() {
    let validator = Validator::load();
    let docs = docs();
    let mut failures = Vec::new();
    let mut checked = 0;
    for block in example_blocks(&docs) {
        let mut pending = Pending::new();
        for (number, line) in block {
            let message: Value = match serde_json::from_str(line) {
                Ok(message) => message,
                Err(e) => {
                    failures.push(format!("docs/protocol.md:{number}: not JSON: {e}"));
                    continue;
                }
            };
            checked += 1;
            if let Err(e) = validator.check(&message, None, &mut pending) {
                failures.push(format!("docs/protocol.md:{number}: {e}"));
            }
        }
    }
    assert!(checked >= 30, "only {checked} example messages");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_validator_sees_what_the_schema_forbids() {
    let validator = Validator::load();
    let mut pending = Pending::new();
    let mut check = |message: Value| validator.check(&message, None, &mut pending);
    // A raw entry without its type; a compaction without a session id.
    let raw = json!({"jsonrpc": "2.0", "id": 1, "method": "session/append",
        "params": {"sessionId": "s", "entries": [{"type": "raw", "entry": {"data": 1}}]}});
    assert!(check(raw).unwrap_err().contains("type"));
    let compact = json!({"jsonrpc": "2.0", "id": 2, "method": "session/compact", "params": {}});
    assert!(check(compact).unwrap_err().contains("sessionId"));
    // An error kind nobody lists, and an error without data.
    let unknown = json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32000, "message": "x", "data": {"kind": "madeUp"}}});
    assert!(check(unknown).is_err());
    let bare = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}});
    assert!(check(bare).unwrap_err().contains("data.kind"));
    // The transport's own kinds are listed.
    for kind in [
        "parseError",
        "overloaded",
        "messageTooLarge",
        "shuttingDown",
    ] {
        let error = json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32600, "message": "x", "data": {"kind": kind}}});
        assert_eq!(check(error), Ok(()), "{kind}");
    }
}

/// The server's requests, answered as a client that declared every capability would.
fn answer_for(method: &str, params: &Value) -> Value {
    match method {
        "hooks/beforeCompact" | "hooks/beforeTree" => json!({}),
        "hooks/compacting" => json!({"context": ["The user prefers small commits."],
                                     "preserveData": {"ticket": "T-1"}}),
        "summarizer/summarize" => {
            json!({"text": format!("## Goal\n- Summary for {}.", params["purpose"])})
        }
        "window/workDoneProgress/create" => Value::Null,
        other => panic!("unexpected server request {other}"),
    }
}

/// Sends a request and reads until its response, answering every server request meanwhile.
async fn call(d: &mut DaemonProcess, method: &str, params: Value) -> Value {
    let id = d.send_request(method, params).await;
    loop {
        let message = d.receive().await.expect("compactd is still running");
        if message["id"] == id && message.get("method").is_none() {
            return message;
        }
        if let (Some(server_method), Some(server_id)) =
            (message["method"].as_str(), message.get("id"))
        {
            let answer = answer_for(server_method, &message["params"]);
            d.respond(server_id.clone(), answer).await;
        }
    }
}

async fn ok(d: &mut DaemonProcess, method: &str, params: Value) -> Value {
    let response = call(d, method, params).await;
    assert!(response.get("error").is_none(), "{method}: {response}");
    response["result"].clone()
}

async fn err(d: &mut DaemonProcess, method: &str, params: Value, kind: &str) {
    let response = call(d, method, params).await;
    assert_eq!(
        response["error"]["data"]["kind"], kind,
        "{method}: {response}"
    );
}

/// One session that uses every method and provokes the errors a client meets.
async fn scripted_session() -> Vec<Transcribed> {
    let mut d = DaemonProcess::spawn_opts(SpawnOptions {
        framing: Framing::Ndjson,
        ..SpawnOptions::default()
    })
    .await;
    d.record();
    let capabilities = json!({
        "hooks": {"beforeCompact": true, "compacting": true, "beforeTree": true},
        "summarizer": true, "workDoneProgress": true,
    });
    let settings = json!({"settings": {
        "compaction": {"keepRecentTokens": 200, "reserveTokens": 1000},
        "branchSummary": {"enabled": true},
        "providers": {"anthropic": {"models": {"claude-sonnet-4-5": {"contextWindow": 8000}}}},
    }});
    let init = json!({"processId": std::process::id(), "clientInfo": {"name": "schema-test"},
                      "capabilities": capabilities, "initializationOptions": settings});
    ok(&mut d, "initialize", init.clone()).await;
    d.send_notification("initialized", json!({})).await;
    err(&mut d, "initialize", init, "alreadyInitialized").await;

    let project = d.project();
    let info = ok(
        &mut d,
        "session/create",
        json!({"cwd": project, "title": "schema"}),
    )
    .await;
    let s = info["sessionId"].as_str().unwrap().to_owned();
    let first = ok(
        &mut d,
        "session/append",
        json!({"sessionId": s, "entries": [
            {"type": "modelChange", "model": "anthropic/claude-sonnet-4-5"},
            {"type": "thinkingLevelChange", "thinkingLevel": "high"},
            {"type": "modeChange", "mode": "plan", "data": {"step": 1}},
            user("Port the parser to Rust; keep the tests green."),
            {"type": "customMessage", "customType": "note", "content": "remember the lexer"},
            {"type": "custom", "customType": "state", "data": {"open": ["src/lib.rs"]}},
            {"type": "raw", "entry": {"type": "ttsr_injection", "injectedRules": ["no unsafe"]}},
        ]}),
    )
    .await;
    let user_entry = first["appended"][3].as_str().unwrap().to_owned();
    for turn in 0..6 {
        let text = format!("Turn {turn}: {}", "detail ".repeat(200));
        ok(
            &mut d,
            "session/append",
            json!({"sessionId": s, "checkCompaction": false, "entries": [
                user(&text),
                assistant(&text, 1_000 + turn * 100),
            ]}),
        )
        .await;
    }
    ok(
        &mut d,
        "session/append",
        json!({"sessionId": s, "entries": [
            {"type": "label", "targetId": user_entry, "label": "start"}]}),
    )
    .await;
    ok(
        &mut d,
        "session/setLabel",
        json!({"sessionId": s, "targetId": user_entry, "label": "the start"}),
    )
    .await;
    ok(
        &mut d,
        "session/context",
        json!({"sessionId": s, "perMessage": true}),
    )
    .await;
    ok(
        &mut d,
        "session/tree",
        json!({"sessionId": s, "includeEntries": true}),
    )
    .await;
    ok(&mut d, "session/usage", json!({"sessionId": s})).await;
    ok(&mut d, "session/list", json!({})).await;
    ok(&mut d, "settings/get", json!({})).await;
    ok(
        &mut d,
        "settings/update",
        json!({"target": "session", "patch": {"compaction": {"keepRecentTokens": 250}}}),
    )
    .await;
    ok(
        &mut d,
        "session/prune",
        json!({"sessionId": s, "dryRun": true}),
    )
    .await;
    ok(&mut d, "session/abortCompaction", json!({"sessionId": s})).await;

    // A threshold auto-compaction with its continue prompt.
    let auto = ok(
        &mut d,
        "session/append",
        json!({"sessionId": s, "waitForCompaction": true, "entries": [
            assistant("Dates are next.", 7_100),
        ]}),
    )
    .await;
    assert_eq!(auto["action"], "autoContinue", "{auto}");
    // A compaction with progress, hooks and the client's summarizer; a preview first.
    ok(
        &mut d,
        "session/compact",
        json!({"sessionId": s, "preview": true}),
    )
    .await;
    ok(
        &mut d,
        "session/compact",
        json!({"sessionId": s, "customInstructions": "Keep the tests.", "workDoneToken": "c-1"}),
    )
    .await;
    // A navigation back to the first message, summarising the branch left.
    ok(
        &mut d,
        "session/navigateTree",
        json!({"sessionId": s, "targetId": user_entry, "summarize": true,
               "workDoneToken": "n-1"}),
    )
    .await;
    let fork = ok(&mut d, "session/fork", json!({"sessionId": s})).await;
    ok(
        &mut d,
        "session/close",
        json!({"sessionId": fork["sessionId"]}),
    )
    .await;
    ok(
        &mut d,
        "session/open",
        json!({"sessionId": s, "cwd": project}),
    )
    .await;

    // The errors a client meets.
    err(
        &mut d,
        "session/context",
        json!({"sessionId": "nope"}),
        "sessionNotFound",
    )
    .await;
    err(
        &mut d,
        "session/setLabel",
        json!({"sessionId": s, "targetId": "nope", "label": "x"}),
        "entryNotFound",
    )
    .await;
    err(
        &mut d,
        "session/append",
        json!({"sessionId": s, "expectedLeafId": "nope",
               "entries": [user("late")]}),
        "leafMoved",
    )
    .await;
    // Valid by the schema, refused by the server: neither path nor id.
    err(&mut d, "session/open", json!({}), "invalidParams").await;
    err(
        &mut d,
        "session/open",
        json!({"path": project.join("missing.jsonl")}),
        "sessionNotFound",
    )
    .await;
    err(&mut d, "session/frobnicate", json!({}), "methodNotFound").await;
    // Not JSON (sent raw, so only the answer is in the transcript).
    d.send_raw(b"{\"jsonrpc\": \"2.0\", \"id\": 99, \"method\": \n")
        .await;
    loop {
        let message = d.receive().await.expect("an answer to the broken line");
        if message.pointer("/error/data/kind") == Some(&json!("parseError")) {
            break;
        }
    }

    ok(&mut d, "shutdown", Value::Null).await;
    err(
        &mut d,
        "session/usage",
        json!({"sessionId": s}),
        "shuttingDown",
    )
    .await;
    d.send_notification("exit", Value::Null).await;
    while d.receive().await.is_some() {}
    let transcript = d.take_transcript();
    assert_eq!(d.close_stdin_and_wait().await, Some(0));
    transcript
}

#[tokio::test]
async fn every_message_of_a_scripted_session_validates_against_the_schema() {
    let transcript = scripted_session().await;
    let validator = Validator::load();
    let mut pending = Pending::new();
    let mut failures = Vec::new();
    let mut methods = std::collections::BTreeSet::new();
    for (
        index,
        Transcribed {
            from_client,
            message,
        },
    ) in transcript.iter().enumerate()
    {
        if let Some(method) = message["method"].as_str() {
            methods.insert(method.to_owned());
        }
        if let Err(e) = validator.check(message, Some(*from_client), &mut pending) {
            let who = if *from_client { "client" } else { "server" };
            failures.push(format!("message {index} ({who}): {e}\n  {message}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(pending.is_empty(), "never answered: {:?}", pending.keys());
    // The script reached every kind of message it is meant to cover.
    let expected = [
        "$/progress",
        "hooks/beforeCompact",
        "hooks/compacting",
        "hooks/beforeTree",
        "summarizer/summarize",
        "session/compactionStarted",
        "session/compactionFinished",
        "session/autoCompactionStarted",
        "session/autoCompactionFinished",
        "session/autoContinue",
        "session/treeNavigated",
        "session/entriesAppended",
    ];
    let missing: Vec<_> = expected.iter().filter(|m| !methods.contains(**m)).collect();
    assert!(missing.is_empty(), "the script never saw {missing:?}");
}
