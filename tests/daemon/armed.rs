//! What the background-compaction tests share (`background`, `observe_turn`): a daemon whose
//! summarizer is a fake LLM on 127.0.0.1, and the notifications they wait for or set aside.

use devtools::daemon::{DaemonProcess, Framing};
use devtools::fake_llm::FakeLlm;
use serde_json::{Value, json};

/// The context window of the fake model.
pub const WINDOW: u64 = 100_000;

/// A daemon summarising with `llm` (keepRecentTokens 300, a lead of 1000 tokens, no automatic
/// continuation; the fixtures' model and the fake one have a window of [`WINDOW`]).
pub async fn daemon(llm: &FakeLlm) -> DaemonProcess {
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    d.initialize(json!({}), json!({"settings": {}})).await;
    let settings = json!({
        "compaction": {"keepRecentTokens": 300, "autoContinue": false,
                       "background": {"leadTokens": 1000}},
        "providers": {
            "anthropic": {"models": {"claude-sonnet-4-5": {"contextWindow": WINDOW}}},
            "fake": {"kind": "openai", "baseUrl": llm.url(), "apiKey": "test",
                     "models": {"fake-model": {"contextWindow": WINDOW}}}
        },
        "summarizer": {"kind": "openai", "model": "fake/fake-model"}
    });
    d.ok(
        "settings/update",
        json!({"patch": settings, "target": "user"}),
    )
    .await;
    d
}

/// Waits for the next `session/backgroundCompaction` and checks its state.
pub async fn expect_background(d: &mut DaemonProcess, state: &str) -> Value {
    let event = d.expect_notification("session/backgroundCompaction").await;
    assert_eq!(event["state"], state, "{event}");
    event
}

/// Sets aside the compaction and append notifications received so far.
pub fn drop_compaction_events(d: &mut DaemonProcess) {
    for method in [
        "session/autoCompactionStarted",
        "session/autoCompactionFinished",
        "session/compactionStarted",
        "session/compactionFinished",
        "session/compactionDelta",
        "session/entriesAppended",
    ] {
        d.take_all(method);
    }
}
