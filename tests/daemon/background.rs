//! Background (speculative) compaction through the real daemon (issue 30): a reply in the
//! lead band starts a compaction of a snapshot while appends go on; the reply that crosses the
//! threshold writes the armed result at once, with what was appended since in the kept part;
//! navigation discards it; `session/abortCompaction` and SIGKILL while it runs write nothing.
//! The summarizer is a fake LLM on 127.0.0.1 whose replies a test holds until it opens a gate.

use std::time::Duration;

use devtools::daemon::{DaemonProcess, assistant, conversation, user};

use crate::armed::{self, drop_compaction_events, expect_background};
use devtools::fake_llm::{FakeLlm, Gate, openai_sse};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// A daemon summarising with `llm`, a session with some history, and the context's token
/// estimate `tokens`; the threshold is `tokens + 1500`, the lead 1000 tokens.
async fn setup(llm: &FakeLlm) -> (DaemonProcess, String, u64) {
    let mut d = armed::daemon(llm).await;
    let session = d.create_session().await;
    d.append(&session, conversation(10, 40)).await;
    let tokens = d.ok("session/context", json!({"sessionId": session})).await["tokens"]
        .as_u64()
        .unwrap();
    let threshold = json!({"compaction": {"thresholdTokens": tokens + 1500}});
    d.ok(
        "settings/update",
        json!({"patch": threshold, "target": "user"}),
    )
    .await;
    (d, session, tokens)
}

fn background_states(d: &mut DaemonProcess) -> Vec<Value> {
    d.take_all("session/backgroundCompaction")
}

#[tokio::test]
async fn the_crossing_append_writes_the_armed_result_at_once() {
    let llm = FakeLlm::start().await;
    let gate = Gate::new();
    llm.set_default(openai_sse(&["## Goal\n", "- keep going"], "stop").held_by(&gate));
    let (mut d, session, tokens) = setup(&llm).await;

    // Into the band [threshold - 1000, threshold): the background compaction starts.
    let result = d
        .append(&session, json!([assistant("in the band", tokens + 700)]))
        .await;
    assert_eq!(result["action"], "continue", "{result}");
    let started = expect_background(&mut d, "started").await;
    let usage = d.ok("session/usage", json!({"sessionId": session})).await;
    assert_eq!(
        usage["backgroundCompaction"]["operationId"], started["operationId"],
        "{usage}"
    );
    assert_eq!(usage["backgroundCompaction"]["armed"], false, "{usage}");
    assert_eq!(
        usage["isCompacting"], false,
        "appends and prunes are not held up"
    );
    llm.wait_for_requests(1, WAIT).await;

    // The agent goes on while it runs.
    d.append(&session, json!([user("the message sent while it ran")]))
        .await;
    d.append(
        &session,
        json!([assistant("still in the band", tokens + 900)]),
    )
    .await;
    gate.open();
    let armed = expect_background(&mut d, "armed").await;
    assert_eq!(armed["operationId"], started["operationId"]);
    let requests = llm.requests().len();

    // The crossing reply writes the armed result: no summarizer request, no wait.
    let crossing = d
        .append(&session, json!([assistant("over", tokens + 1600)]))
        .await;
    assert_eq!(crossing["action"], "continue", "{crossing}");
    let outcome = &crossing["autoCompaction"];
    assert_eq!(outcome["reason"], "threshold", "{crossing}");
    let entry_id = outcome["result"]["entryId"].clone();
    assert!(entry_id.is_string(), "{crossing}");
    assert_eq!(
        llm.requests().len(),
        requests,
        "nothing was summarised again"
    );
    let committed = expect_background(&mut d, "committed").await;
    assert_eq!(committed["operationId"], started["operationId"]);
    drop_compaction_events(&mut d);

    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let text = context["messages"].to_string();
    assert!(text.contains("the message sent while it ran"), "{text}");
    assert!(text.contains("still in the band"), "{text}");
    assert!(
        text.contains("keep going"),
        "the summary is the armed one: {text}"
    );
    let threshold = tokens + 1500;
    assert!(
        context["tokens"].as_u64().unwrap() <= threshold * 4 / 5,
        "{} > 80% of {threshold}",
        context["tokens"]
    );
    let usage = d.ok("session/usage", json!({"sessionId": session})).await;
    assert!(usage.get("backgroundCompaction").is_none(), "{usage}");
    d.finish().await;
}

#[tokio::test]
async fn navigating_away_discards_the_armed_result_with_the_reason() {
    let llm = FakeLlm::start().await;
    llm.set_default(openai_sse(&["## Goal\n", "- keep going"], "stop"));
    let (mut d, session, tokens) = setup(&llm).await;
    let before = d
        .append(
            &session,
            json!([assistant("before the band", tokens + 100)]),
        )
        .await;
    let fork_point = before["leafId"].clone();
    d.append(&session, json!([assistant("in the band", tokens + 700)]))
        .await;
    expect_background(&mut d, "started").await;
    expect_background(&mut d, "armed").await;
    // Back to before the snapshot's leaf, then a new branch grows past the threshold.
    d.ok(
        "session/navigateTree",
        json!({"sessionId": session, "targetId": fork_point, "summarize": false}),
    )
    .await;
    d.take_all("session/treeNavigated");
    let requests = llm.requests().len();
    let crossing = d
        .append(
            &session,
            json!([assistant("another branch", tokens + 1600)]),
        )
        .await;
    let discarded = d.expect_notification("session/backgroundCompaction").await;
    assert_eq!(discarded["state"], "discarded", "{discarded}");
    assert_eq!(discarded["reason"], "leafLeftBranch", "{discarded}");
    // The crossing compacted the leaf's own branch instead.
    assert!(
        crossing["autoCompaction"]["result"]["entryId"].is_string(),
        "{crossing}"
    );
    assert!(llm.requests().len() > requests);
    drop_compaction_events(&mut d);
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert!(!context["messages"].to_string().contains("in the band"));
    d.finish().await;
}

#[tokio::test]
async fn abort_compaction_drops_a_running_background_compaction() {
    let llm = FakeLlm::start().await;
    let gate = Gate::new();
    llm.set_default(openai_sse(&["## Goal\n"], "stop").held_by(&gate));
    let (mut d, session, tokens) = setup(&llm).await;
    d.append(&session, json!([assistant("in the band", tokens + 700)]))
        .await;
    expect_background(&mut d, "started").await;
    llm.wait_for_requests(1, WAIT).await;
    let aborted = d
        .ok("session/abortCompaction", json!({"sessionId": session}))
        .await;
    assert_eq!(aborted["aborted"], true, "{aborted}");
    let discarded = expect_background(&mut d, "discarded").await;
    assert_eq!(discarded["reason"], "aborted", "{discarded}");
    let usage = d.ok("session/usage", json!({"sessionId": session})).await;
    assert!(usage.get("backgroundCompaction").is_none(), "{usage}");
    gate.open();
    let tree = d.ok("session/tree", json!({"sessionId": session})).await;
    assert!(
        !tree.to_string().contains("\"compaction\""),
        "nothing was written: {tree}"
    );
    assert!(background_states(&mut d).is_empty());
    d.finish().await;
}

#[tokio::test]
async fn a_kill_while_armed_leaves_the_file_as_it_was() {
    let llm = FakeLlm::start().await;
    llm.set_default(openai_sse(&["## Goal\n", "- keep going"], "stop"));
    let (mut d, session, tokens) = setup(&llm).await;
    d.append(&session, json!([assistant("in the band", tokens + 700)]))
        .await;
    expect_background(&mut d, "started").await;
    expect_background(&mut d, "armed").await;
    let info = d.ok("session/usage", json!({"sessionId": session})).await;
    assert_eq!(info["backgroundCompaction"]["armed"], true, "{info}");
    let listed = d.ok("session/list", json!({})).await;
    let path = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == session)
        .and_then(|s| s["path"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("the session is listed: {listed}"));
    let before = d.stored_bytes(&path);
    // SIGKILL, keeping the driver (and its temp home) to read the file after.
    let pid = d.pid();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + WAIT;
    while !std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_or(true, |s| s.contains("State:\tZ"))
    {
        assert!(std::time::Instant::now() < deadline, "compactd did not die");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What the daemon stored (the file, or the database's rows on PostgreSQL), read after the kill.
    let after = d.stored_bytes(&path);
    assert_eq!(
        before, after,
        "nothing of the armed compaction reached the store"
    );
    let (session, _) = d.stored_session(&path);
    assert!(
        session
            .path_to_leaf()
            .iter()
            .all(|e| !matches!(e.kind(), compactd::session::EntryKind::Compaction(_)))
    );
    drop(d);
}
