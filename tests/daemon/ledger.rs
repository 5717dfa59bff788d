//! The progress ledger through the real binary: six phases each compacted by a summarizer
//! that forgets everything (a fake model on 127.0.0.1 answering a bland summary), pins, the
//! `session/ledger` answer, and the unresolved compile error that a new request used to push
//! out of the offline summary.

use devtools::daemon::{DaemonProcess, Framing, user};
use devtools::fake_llm::{FakeLlm, openai_sse};
use serde_json::{Value, json};

/// What the forgetful model answers to every request.
const BLAND: &str =
    "## Goal\nKeep working on the project.\n\n## Progress\n- Work is going on as planned.\n";

fn calls(calls: &[(&str, &str, Value)]) -> Value {
    let content: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"type":"toolCall","id":id,"name":name,"arguments":args}))
        .collect();
    json!({"type":"message","message":{"role":"assistant","content":content,
        "stopReason":"toolUse","timestamp":1767225600000_i64}})
}

fn result(id: &str, tool: &str, text: &str, is_error: bool) -> Value {
    json!({"type":"message","message":{"role":"toolResult","toolCallId":id,"toolName":tool,
        "content":[{"type":"text","text":text}],"isError":is_error,"timestamp":1767225600000_i64}})
}

fn answer(text: &str) -> Value {
    json!({"type":"message","message":{"role":"assistant",
        "content":[{"type":"text","text":text}],"stopReason":"stop","timestamp":1767225600000_i64}})
}

/// The request of phase `i`, its user message verbatim.
fn request(i: usize) -> String {
    format!("Phase {i}: port the module phase{i} to the new API.\nKeep the old names as aliases.")
}

/// Phase `i`: a request, a read and an edit of its own files, padding, and (by phase) a
/// compile error, its fix, or a new unresolved compile error. The last phase stops mid-turn.
fn phase(i: usize) -> Value {
    let pad = "lorem ipsum dolor sit amet ".repeat(60);
    let mut entries = vec![
        user(&request(i)),
        calls(&[(
            &format!("r{i}"),
            "read",
            json!({"path": format!("src/phase{i}/read.rs")}),
        )]),
        result(&format!("r{i}"), "read", &pad, false),
        calls(&[(
            &format!("e{i}"),
            "edit",
            json!({"path": format!("src/phase{i}/edit.rs")}),
        )]),
        result(&format!("e{i}"), "edit", "Edited.", false),
    ];
    let build = |id: String, command: &str, output: &str, failed: bool| {
        vec![
            calls(&[(&id, "bash", json!({"command": command}))]),
            result(&id, "bash", output, failed),
        ]
    };
    match i {
        2 => entries.extend(build(
            "b2".into(),
            "cargo build",
            "error[E0308]: mismatched types\n --> src/phase2/edit.rs:3:5",
            true,
        )),
        3 => entries.extend(build("b3".into(), "cargo build", "Finished dev", false)),
        5 => entries.extend(build(
            "b5".into(),
            "cargo check",
            "error[E0425]: cannot find value `phase5_total` in this scope\n --> src/phase5/edit.rs:9",
            true,
        )),
        _ => {}
    }
    if i < 6 {
        entries.push(answer(&format!("Phase {i} is done. {pad}")));
    } else {
        entries.push(calls(&[(
            "r6b",
            "read",
            json!({"path": "src/phase6/more.rs"}),
        )]));
        entries.push(result("r6b", "read", &pad, false));
    }
    Value::Array(entries)
}

async fn compact(d: &mut DaemonProcess, session: &str) -> Value {
    let result = d.ok("session/compact", json!({"sessionId": session})).await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    result
}

/// The compaction summary the model sees at the leaf.
async fn summary_in_context(d: &mut DaemonProcess, session: &str) -> String {
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let messages = context["messages"].as_array().expect("messages");
    let text = messages[0]["content"]
        .as_array()
        .map(|blocks| blocks.iter().filter_map(|b| b["text"].as_str()).collect())
        .or_else(|| messages[0]["content"].as_str().map(str::to_owned))
        .unwrap_or_default();
    assert!(
        text.contains("<summary>"),
        "the context opens with the summary: {text}"
    );
    text
}

#[tokio::test]
async fn six_forgetful_compactions_keep_where_the_agent_stands() {
    let llm = FakeLlm::start().await;
    llm.set_default(openai_sse(&[BLAND], "stop"));
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    let settings = json!({
        "providers": {"fake": {"kind": "openai", "baseUrl": llm.url(), "apiKey": "test",
                               "models": {"fake-model": {"contextWindow": 100000}}}},
        "summarizer": {"kind": "openai", "model": "fake/fake-model"},
        "compaction": {"keepRecentTokens": 300, "ledgerBudgetPercent": 100}
    });
    d.initialize(json!({}), json!({"settings": settings})).await;
    let session = d.create_session().await;
    let pin = "Never change the public error codes: clients match on them.";
    let mut pin_id = Value::Null;
    for i in 1..=6 {
        d.append(&session, phase(i)).await;
        if i == 1 {
            let pinned = d
                .ok("session/pin", json!({"sessionId": session, "text": pin}))
                .await;
            pin_id = pinned["pinId"].clone();
            d.take_all("session/entriesAppended");
        }
        let result = compact(&mut d, &session).await;
        assert_eq!(result["summarizer"], "fake/fake-model", "{result}");
    }

    let summary = summary_in_context(&mut d, &session).await;
    for i in 1..=6 {
        for path in [
            format!("src/phase{i}/read.rs"),
            format!("src/phase{i}/edit.rs"),
        ] {
            assert!(summary.contains(&path), "{path} is named:\n{summary}");
        }
    }
    assert!(
        summary.contains(&request(6)),
        "the current request verbatim:\n{summary}"
    );
    assert!(summary.contains(pin), "the pin verbatim:\n{summary}");
    assert!(
        summary.contains("error[E0425]: cannot find value `phase5_total` in this scope"),
        "the unresolved error:\n{summary}"
    );
    assert!(
        summary.contains("Keep working on the project."),
        "the model wrote the prose"
    );

    let ledger = d.ok("session/ledger", json!({"sessionId": session})).await;
    let statuses: Vec<&str> = ledger["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "answered", "answered", "answered", "answered", "answered", "current"
        ],
        "{ledger}"
    );
    assert_eq!(ledger["requests"][5]["text"], request(6));
    let errors: Vec<(&str, bool)> = ledger["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["command"].as_str().unwrap(),
                e["resolved"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [("bash: cargo build", true), ("bash: cargo check", false)]
    );
    assert_eq!(ledger["pins"], json!([{"pinId": pin_id, "text": pin}]));
    // The same session, the same bytes.
    let again = d.ok("session/ledger", json!({"sessionId": session})).await;
    assert_eq!(again.to_string(), ledger.to_string());

    // Unpinned, the next compaction leaves the pin out.
    d.ok(
        "session/unpin",
        json!({"sessionId": session, "pinId": pin_id}),
    )
    .await;
    d.take_all("session/entriesAppended");
    d.append(
        &session,
        json!([answer(&format!("Phase 6 is done. {}", "pad ".repeat(400)))]),
    )
    .await;
    compact(&mut d, &session).await;
    let summary = summary_in_context(&mut d, &session).await;
    assert!(!summary.contains(pin), "{summary}");
    let ledger = d.ok("session/ledger", json!({"sessionId": session})).await;
    assert_eq!(ledger["pins"], json!([]));
    assert_eq!(ledger["requests"][5]["status"], "answered");
    d.err(
        "session/unpin",
        json!({"sessionId": session, "pinId": pin_id}),
        "invalidParams",
    )
    .await;
    d.finish().await;
}

#[tokio::test]
async fn the_offline_summary_keeps_an_unresolved_error_across_a_new_request() {
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    d.initialize(
        json!({}),
        json!({"settings": {"compaction": {"keepRecentTokens": 200}}}),
    )
    .await;
    let session = d.create_session().await;
    d.append(&session, phase(5)).await;
    d.append(&session, phase(6)).await;
    let result = compact(&mut d, &session).await;
    assert_eq!(result["summarizer"], "extractive", "{result}");
    let summary = summary_in_context(&mut d, &session).await;
    assert!(
        summary.contains("error[E0425]: cannot find value `phase5_total` in this scope"),
        "{summary}"
    );
    d.finish().await;
}
