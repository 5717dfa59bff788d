//! A summarizer whose server has a smaller window than configured and does not say it until it
//! refuses a prompt (as llama.cpp does: 400, `n_prompt_tokens`, `n_ctx`), and whose tokenizer
//! counts 40 % more than compactd's: the refused prompt is planned again from what the refusal
//! said, smaller, and the server accepts it; the rest of the operation is planned to that
//! window, so nothing else is refused.

use std::sync::{Arc, Mutex};

use devtools::daemon::{DaemonProcess, SpawnOptions, assistant, user};
use devtools::fake_llm::{FakeLlm, RecordedRequest, Reply, openai_sse};
use serde_json::{Value, json};

/// The server's window, in its own tokens.
const SERVED_WINDOW: u64 = 3_000;
/// Its tokens per character (compactd's `chars4` counts 0.25).
const SERVED_TOKENS_PER_CHAR: f64 = 0.35;

/// What the server did with one request.
#[derive(Debug, Clone)]
struct Served {
    prompt_tokens: u64,
    accepted: bool,
    short: bool,
}

fn prompt_text(request: &RecordedRequest) -> String {
    let messages = request.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    messages
        .iter()
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            _ => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A llama.cpp-like server: refuses what does not fit its window, answers the rest.
fn serve(log: Arc<Mutex<Vec<Served>>>) -> impl Fn(&RecordedRequest) -> Option<Reply> {
    move |request| {
        let prompt = prompt_text(request);
        let prompt_tokens = (prompt.chars().count() as f64 * SERVED_TOKENS_PER_CHAR).ceil() as u64;
        let short = prompt.contains("Describe the changes made");
        let accepted = prompt_tokens + 8 <= SERVED_WINDOW;
        log.lock().unwrap().push(Served {
            prompt_tokens,
            accepted,
            short,
        });
        Some(if !accepted {
            Reply::json(
                400,
                json!({"error": {"code": 400, "type": "exceed_context_size_error",
                    "n_prompt_tokens": prompt_tokens, "n_ctx": SERVED_WINDOW,
                    "message": "the request exceeds the available context size, try increasing it"}}),
            )
        } else if short {
            openai_sse(
                &["I edited the files under src/ as each step asked."],
                "stop",
            )
        } else {
            openai_sse(
                &["## Goal\n- Edit the files step by step.\n\n## Progress\n- Steps done.\n"],
                "stop",
            )
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_prompt_is_retried_smaller_and_accepted_and_the_window_is_kept() {
    let server = FakeLlm::start().await;
    let log = Arc::new(Mutex::new(Vec::new()));
    server.set_responder(serve(log.clone()));
    let settings = json!({
        "providers": {"local": {"kind": "openai", "baseUrl": format!("{}/v1", server.url()),
            "discoverLimits": false,
            "models": {"m": {"contextWindow": 8192, "maxOutputTokens": 64}}}},
        "summarizer": {"kind": "openai", "model": "local/m"},
        "retry": {"enabled": true, "maxRetries": 1, "baseDelayMs": 5},
        "tokenizer": "chars4",
        // The kept messages are what the short summary reads: more than the served window.
        "compaction": {"enabled": false, "keepRecentTokens": 2_400},
    });
    let mut d = DaemonProcess::spawn_opts(SpawnOptions {
        settings: Some(settings),
        ..SpawnOptions::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;
    let s = d.create_session().await;
    let bulk = "lorem ipsum dolor sit amet ".repeat(60);
    let mut entries = Vec::new();
    for i in 0..8 {
        entries.push(user(&format!(
            "Step {i}: please edit src/file{i}.rs. {bulk}"
        )));
        entries.push(assistant(&format!("Done with step {i}. {bulk}"), 1000));
    }
    d.append(&s, Value::Array(entries)).await;

    let result = d.ok("session/compact", json!({"sessionId": s})).await;
    let served = log.lock().unwrap().clone();
    assert_eq!(result["summarizer"], "local/m", "{result:#}\n{served:#?}");
    assert!(
        result["summary"].as_str().unwrap().contains("Steps done."),
        "{result:#}"
    );
    assert_eq!(
        result["shortSummary"], "I edited the files under src/ as each step asked.",
        "{served:#?}"
    );

    // The history prompt planned for the configured window was refused; the next one was
    // smaller, fitted the served window, and was accepted.
    assert!(!served[0].accepted && !served[0].short, "{served:#?}");
    assert!(served[0].prompt_tokens > SERVED_WINDOW);
    assert!(served[1].accepted, "{served:#?}");
    assert!(served[1].prompt_tokens < served[0].prompt_tokens);
    // Only that one refusal: every later request (the history's chunks, the short summary) was
    // planned to the window the refusal said.
    let refused = served.iter().filter(|r| !r.accepted).count();
    assert_eq!(refused, 1, "{served:#?}");
    assert!(served.iter().any(|r| r.short && r.accepted), "{served:#?}");

    d.expect_notification("session/compactionFinished").await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    d.finish().await;
}
