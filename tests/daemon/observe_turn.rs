//! `session/observeTurn` and `session/compact {useArmed}` through the real daemon (issue 30
//! item 6): an agent that writes its own file tells compactd about each turn; a turn whose
//! usage enters the lead band starts a background draft of the agent's branch, and the
//! agent's compaction then gets the armed result at once, with no summarizer request, or a
//! normal compaction when the armed result does not fit the agent's leaf. The summarizer is a
//! fake LLM on 127.0.0.1 whose replies a test holds until it opens a gate.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use devtools::daemon::{DaemonProcess, assistant, conversation, user};

use crate::armed::{self, WINDOW, drop_compaction_events, expect_background};
use devtools::fake_llm::{FakeLlm, Gate, openai_sse};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// The agent's own session file, which it appends to itself; compactd only reads it.
struct AgentFile {
    path: PathBuf,
    leaf: String,
    next: u32,
}

impl AgentFile {
    /// Appends `entry` (an `AppendEntry` message, as `user`/`assistant` make) as the agent
    /// writes it; returns its id.
    fn write(&mut self, entry: Value) -> String {
        self.next += 1;
        let id = format!("a9e{:05x}", self.next);
        let line = json!({
            "type": "message", "id": id, "parentId": self.leaf,
            "timestamp": "2026-03-01T10:00:00.000Z", "message": entry["message"],
        });
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .unwrap();
        writeln!(file, "{line}").unwrap();
        self.leaf = id.clone();
        id
    }
}

/// An agent's session with some history (written through a first, closed session), opened
/// read-only as the oh-my-pi extension opens it; and the context's token estimate.
async fn agent_session(d: &mut DaemonProcess) -> (String, AgentFile, u64) {
    let created = d.ok("session/create", json!({"cwd": d.project()})).await;
    let writer = created["sessionId"].as_str().unwrap().to_owned();
    let path = PathBuf::from(created["path"].as_str().unwrap());
    d.append(&writer, conversation(10, 40)).await;
    let tokens = d.ok("session/context", json!({"sessionId": writer})).await["tokens"]
        .as_u64()
        .unwrap();
    d.ok("session/close", json!({"sessionId": writer})).await;
    let opened = d
        .ok("session/open", json!({"path": path, "readOnly": true}))
        .await;
    let leaf = opened["leafId"].as_str().unwrap().to_owned();
    let session = opened["sessionId"].as_str().unwrap().to_owned();
    (
        session,
        AgentFile {
            path,
            leaf,
            next: 0,
        },
        tokens,
    )
}

/// What the agent tells compactd after a turn: its threshold and window.
fn observe(session: &str, threshold: u64) -> Value {
    json!({"sessionId": session, "thresholdTokens": threshold, "contextWindow": WINDOW})
}

#[tokio::test]
async fn a_turn_in_the_band_arms_a_draft_that_the_agents_compaction_gets_at_once() {
    let llm = FakeLlm::start().await;
    let gate = Gate::new();
    llm.set_default(openai_sse(&["## Goal\n", "- the armed draft"], "stop").held_by(&gate));
    let mut d = armed::daemon(&llm).await;
    let (session, mut agent, tokens) = agent_session(&mut d).await;
    let threshold = tokens + 1500;

    // The agent's turn enters the band [threshold - 1000, threshold): a draft starts.
    let snapshot = agent.write(assistant("in the band", tokens + 700));
    let observed = d
        .ok("session/observeTurn", observe(&session, threshold))
        .await;
    assert_eq!(observed["started"], true, "{observed}");
    assert_eq!(observed["leafId"], snapshot.as_str(), "{observed}");
    assert_eq!(observed["contextTokens"], tokens + 710, "{observed}");
    assert_eq!(observed["thresholdTokens"], threshold, "{observed}");
    let started = expect_background(&mut d, "started").await;
    assert_eq!(
        observed["backgroundCompaction"]["operationId"],
        started["operationId"]
    );
    llm.wait_for_requests(1, WAIT).await;

    // The agent goes on; a second turn in the band starts nothing more.
    agent.write(user("the message sent while it ran"));
    agent.write(assistant("still in the band", tokens + 900));
    let again = d
        .ok("session/observeTurn", observe(&session, threshold))
        .await;
    assert_eq!(again["started"], false, "{again}");
    gate.open();
    let armed = expect_background(&mut d, "armed").await;
    assert_eq!(armed["operationId"], started["operationId"]);
    let requests = llm.requests().len();

    // The turn that crosses the threshold: the agent's compaction hook asks with useArmed and
    // gets the armed result, computed for its leaf, with no summarizer request.
    let leaf = agent.write(assistant("over", tokens + 1600));
    let before = std::fs::read(&agent.path).unwrap();
    let result = d
        .ok(
            "session/compact",
            json!({"sessionId": session, "preview": true, "leafId": leaf, "useArmed": true}),
        )
        .await;
    assert_eq!(
        result["backgroundOperationId"], started["operationId"],
        "{result}"
    );
    assert_eq!(result["preview"], true, "{result}");
    assert!(result.get("entryId").is_none(), "{result}");
    assert!(result.get("previewId").is_none(), "read-only: {result}");
    assert!(
        result["summary"]
            .as_str()
            .unwrap()
            .contains("the armed draft"),
        "{result}"
    );
    assert_eq!(
        llm.requests().len(),
        requests,
        "nothing was summarised again"
    );
    assert_eq!(
        std::fs::read(&agent.path).unwrap(),
        before,
        "compactd wrote nothing"
    );
    let previewed = expect_background(&mut d, "previewed").await;
    assert_eq!(previewed["operationId"], started["operationId"]);
    drop_compaction_events(&mut d);
    let usage = d.ok("session/usage", json!({"sessionId": session})).await;
    assert!(usage.get("backgroundCompaction").is_none(), "{usage}");
    d.finish().await;
}

#[tokio::test]
async fn use_armed_compacts_the_usual_way_when_the_draft_does_not_fit_the_leaf() {
    let llm = FakeLlm::start().await;
    llm.set_default(openai_sse(&["## Goal\n", "- a summary"], "stop"));
    let mut d = armed::daemon(&llm).await;
    let (session, mut agent, tokens) = agent_session(&mut d).await;
    let threshold = tokens + 1500;
    let earlier = agent.write(assistant("before the band", tokens + 100));
    let observed = d
        .ok("session/observeTurn", observe(&session, threshold))
        .await;
    assert_eq!(observed["started"], false, "below the band: {observed}");
    agent.write(user("go on"));
    agent.write(assistant("in the band", tokens + 700));
    let observed = d
        .ok("session/observeTurn", observe(&session, threshold))
        .await;
    assert_eq!(observed["started"], true, "{observed}");
    expect_background(&mut d, "started").await;
    expect_background(&mut d, "armed").await;
    let requests = llm.requests().len();

    // The agent went back before the snapshot (its leaf is an earlier entry).
    let result = d
        .ok(
            "session/compact",
            json!({"sessionId": session, "preview": true, "leafId": earlier, "useArmed": true}),
        )
        .await;
    let discarded = expect_background(&mut d, "discarded").await;
    assert_eq!(discarded["reason"], "leafLeftBranch", "{discarded}");
    assert!(result.get("backgroundOperationId").is_none(), "{result}");
    assert!(llm.requests().len() > requests, "summarised at the leaf");
    drop_compaction_events(&mut d);
    d.finish().await;
}

#[tokio::test]
async fn on_a_session_compactd_writes_use_armed_appends_the_armed_result() {
    let llm = FakeLlm::start().await;
    llm.set_default(openai_sse(&["## Goal\n", "- the armed draft"], "stop"));
    let mut d = armed::daemon(&llm).await;
    d.ok(
        "settings/update",
        json!({"patch": {"compaction": {"background": {"enabled": true}}}, "target": "session"}),
    )
    .await;
    let session = d.create_session().await;
    d.append(&session, conversation(10, 40)).await;
    // The agent's usage comes with the turn (`contextTokens`), not from the file.
    let observed = d
        .ok(
            "session/observeTurn",
            json!({"sessionId": session, "contextTokens": 9_000, "thresholdTokens": 9_500}),
        )
        .await;
    assert_eq!(observed["started"], true, "{observed}");
    assert_eq!(observed["contextTokens"], 9_000, "{observed}");
    let started = expect_background(&mut d, "started").await;
    expect_background(&mut d, "armed").await;
    let requests = llm.requests().len();
    let result = d
        .ok(
            "session/compact",
            json!({"sessionId": session, "useArmed": true}),
        )
        .await;
    assert!(result["entryId"].is_string(), "{result}");
    assert_eq!(result["backgroundOperationId"], started["operationId"]);
    assert_eq!(llm.requests().len(), requests);
    expect_background(&mut d, "committed").await;
    drop_compaction_events(&mut d);
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert!(context["messages"].to_string().contains("the armed draft"));
    d.finish().await;
}

#[tokio::test]
async fn a_threshold_above_the_window_given_with_it_is_refused_and_starts_nothing() {
    let llm = FakeLlm::start().await;
    llm.set_default(openai_sse(&["## Goal\n", "- a draft"], "stop"));
    let mut d = armed::daemon(&llm).await;
    // A session compactd writes (so the test runs on every storage backend).
    let session = d.create_session().await;
    d.append(&session, conversation(4, 40)).await;
    let error = d
        .err(
            "session/observeTurn",
            json!({"sessionId": session, "thresholdTokens": WINDOW + 1, "contextWindow": WINDOW}),
            "invalidParams",
        )
        .await;
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("thresholdTokens ({})", WINDOW + 1))
            && message.contains(&format!("contextWindow ({WINDOW})")),
        "{message}"
    );
    // The same turn with the threshold at the window is taken (and in no band: nothing runs).
    let observed = d
        .ok(
            "session/observeTurn",
            json!({"sessionId": session, "thresholdTokens": WINDOW, "contextWindow": WINDOW}),
        )
        .await;
    assert_eq!(observed["started"], false, "{observed}");
    // Without the agent's window, compactd's is a guess: the agent's threshold stands.
    let observed = d
        .ok(
            "session/observeTurn",
            json!({"sessionId": session, "thresholdTokens": WINDOW * 4}),
        )
        .await;
    assert_eq!(observed["thresholdTokens"], WINDOW * 4, "{observed}");
    assert_eq!(observed["started"], false, "{observed}");
    assert!(llm.requests().is_empty(), "no summarizer request");
    d.finish().await;
}
