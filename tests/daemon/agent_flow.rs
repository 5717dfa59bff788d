//! The agent flow: threshold compaction with auto-continue, overflow recovery, and the hooks
//! answering cancel / replace / nothing in time.

use devtools::daemon::{DaemonProcess, Framing, assistant, conversation, overflow_reply, user};
use serde_json::json;

async fn spawn(settings: serde_json::Value) -> (DaemonProcess, String) {
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    d.initialize(json!({}), json!({"settings": settings})).await;
    let session = d.create_session().await;
    d.append(&session, conversation(6, 40)).await;
    (d, session)
}

#[tokio::test]
async fn threshold_compaction_appends_the_continue_prompt() {
    // A small window, so the reported usage matches what is in the session: 8000 - 1000.
    let (mut d, session) = spawn(json!({
        "compaction": {"keepRecentTokens": 200, "reserveTokens": 1000},
        "providers": {"anthropic": {"models": {"claude-sonnet-4-5": {"contextWindow": 8000}}}}
    }))
    .await;
    let result = d
        .append(&session, json!([assistant("big reply", 7_100)]))
        .await;
    assert_eq!(result["action"], "autoContinue", "{result}");
    assert_eq!(result["autoCompaction"]["reason"], "threshold");
    let started = d.expect_notification("session/autoCompactionStarted").await;
    assert_eq!(started["reason"], "threshold");
    let compaction = d.expect_notification("session/compactionStarted").await;
    assert_eq!(compaction["operationId"], started["operationId"]);
    d.expect_notification("session/compactionFinished").await;
    let finished = d
        .expect_notification("session/autoCompactionFinished")
        .await;
    assert_eq!(finished["willRetry"], false);
    let cont = d.expect_notification("session/autoContinue").await;
    assert_eq!(cont["prompt"], "Continue if you have next steps.");
    assert_eq!(cont["entryId"], result["autoContinueEntryId"]);
    d.take_all("session/compactionDelta");
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let messages = context["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"],
        "Continue if you have next steps."
    );
    d.finish().await;
}

#[tokio::test]
async fn overflow_is_recovered_once_and_the_failed_reply_leaves_the_context() {
    let (mut d, session) = spawn(json!({"compaction": {"keepRecentTokens": 200}})).await;
    d.append(&session, json!([user("now do the big thing")]))
        .await;
    let result = d.append(&session, json!([overflow_reply()])).await;
    assert_eq!(result["action"], "retry", "{result}");
    assert_eq!(result["autoCompaction"]["willRetry"], true);
    let failed_id = result["appended"][0].clone();
    let finished = d
        .expect_notification("session/autoCompactionFinished")
        .await;
    assert_eq!(finished["reason"], "overflow");
    assert_eq!(finished["willRetry"], true);
    d.expect_notification("session/autoCompactionStarted").await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert!(!context.to_string().contains("prompt is too long"));
    let tree = d.ok("session/tree", json!({"sessionId": session})).await;
    assert!(
        tree["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == failed_id),
        "the reply stays in the file"
    );

    // A second overflow right after the recovery surfaces instead of looping.
    let again = d.append(&session, json!([overflow_reply()])).await;
    assert_eq!(again["action"], "failed", "{again}");
    let message = again["autoCompaction"]["errorMessage"].as_str().unwrap();
    assert!(
        message.starts_with("Context overflow recovery failed: "),
        "{message}"
    );
    d.take_all("session/autoCompactionStarted");
    d.take_all("session/autoCompactionFinished");
    d.finish().await;
}

#[tokio::test]
async fn hooks_cancel_replace_and_time_out() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(
        json!({"hooks": {"beforeCompact": true, "compacting": true}}),
        json!({"settings": {"compaction": {"keepRecentTokens": 200}, "hooks": {"compactingTimeoutMs": 200}}}),
    )
    .await;
    let session = d.create_session().await;
    d.append(&session, conversation(6, 40)).await;

    // Cancel.
    let id = d
        .send_request("session/compact", json!({"sessionId": session}))
        .await;
    let (hook_id, params) = d.expect_request("hooks/beforeCompact").await;
    assert_eq!(params["sessionId"], session);
    assert_eq!(params["reason"], "manual");
    d.respond(hook_id, json!({"cancel": true})).await;
    let response = d.read_until_response(id).await;
    assert_eq!(response["error"]["data"]["kind"], "cancelled");
    assert_eq!(response["error"]["message"], "Compaction cancelled");
    d.take_all("session/compactionStarted");
    let finished = d.take_all("session/compactionFinished");
    assert_eq!(finished[0]["aborted"], true);

    // Replace.
    let first_kept = params["preparation"]["firstKeptEntryId"].clone();
    let id = d
        .send_request("session/compact", json!({"sessionId": session}))
        .await;
    let (hook_id, _) = d.expect_request("hooks/beforeCompact").await;
    d.respond(hook_id, json!({"compaction": {"summary": "HOOK SUMMARY", "firstKeptEntryId": first_kept, "tokensBefore": 42}})).await;
    let response = d.read_until_response(id).await;
    assert_eq!(response["result"]["summary"], "HOOK SUMMARY", "{response}");
    assert_eq!(response["result"]["fromExtension"], true);
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/entriesAppended");

    // No answer in time from `hooks/compacting`: the default path runs.
    d.append(&session, conversation(4, 40)).await;
    let id = d
        .send_request("session/compact", json!({"sessionId": session}))
        .await;
    let (hook_id, _) = d.expect_request("hooks/beforeCompact").await;
    d.respond(hook_id, json!({})).await;
    let (_ignored, _) = d.expect_request("hooks/compacting").await;
    let response = d.read_until_response(id).await;
    assert!(response["result"]["entryId"].is_string(), "{response}");
    assert_eq!(response["result"]["fromExtension"], false);
    // The server cancelled its timed-out request.
    let cancel = d.expect_notification("$/cancelRequest").await;
    assert_eq!(cancel["id"], _ignored);
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    d.finish().await;
}

#[tokio::test]
async fn abort_compaction_while_a_hook_holds_it_leaves_nothing_written() {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(
        json!({"hooks": {"beforeCompact": true}}),
        json!({"settings": {"compaction": {"keepRecentTokens": 200}}}),
    )
    .await;
    let session = d.create_session().await;
    d.append(&session, conversation(6, 40)).await;
    for how in ["abort", "cancelRequest", "progressCancel"] {
        let id = d
            .send_request(
                "session/compact",
                json!({"sessionId": session, "workDoneToken": how}),
            )
            .await;
        let (_hook_id, _) = d.expect_request("hooks/beforeCompact").await;
        match how {
            "abort" => {
                let aborted = d
                    .ok("session/abortCompaction", json!({"sessionId": session}))
                    .await;
                assert_eq!(aborted["aborted"], true);
            }
            "cancelRequest" => {
                d.send_notification("$/cancelRequest", json!({"id": id}))
                    .await
            }
            _ => {
                d.send_notification("window/workDoneProgress/cancel", json!({"token": how}))
                    .await
            }
        }
        let response = d.read_until_response(id).await;
        assert_eq!(response["error"]["code"], -32800, "{how}: {response}");
        let progress = d.take_all("$/progress");
        assert_eq!(
            progress.last().unwrap()["value"]["message"],
            "cancelled",
            "{how}"
        );
        d.take_all("session/compactionStarted");
        d.take_all("session/compactionFinished");
        // The server gives up on its hook request.
        d.take_all("$/cancelRequest");
    }
    let tree = d.ok("session/tree", json!({"sessionId": session})).await;
    assert!(
        tree["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["type"] != "compaction")
    );
    d.finish().await;
}

/// A first turn that reads, writes and edits files, then `turns` turns of bulk: the file
/// operations sit in the part that gets summarised.
fn conversation_with_files(turns: usize) -> serde_json::Value {
    let call = |id: &str, name: &str, path: &str| json!({"type": "toolCall", "id": id, "name": name, "arguments": {"path": path}});
    let result = |id: &str, name: &str| {
        json!({"type": "message", "message": {"role": "toolResult", "toolCallId": id,
            "toolName": name, "content": [{"type": "text", "text": "ok"}], "isError": false,
            "timestamp": devtools::daemon::now_ms()}})
    };
    let mut entries = vec![
        user("look at the parser"),
        json!({"type": "message", "message": {
            "role": "assistant",
            "content": [call("c1", "read", "src/lexer.rs"), call("c2", "write", "src/new.rs"),
                        call("c3", "edit", "src/parser.rs")],
            "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 110},
            "stopReason": "toolUse", "timestamp": devtools::daemon::now_ms()}}),
        result("c1", "read"),
        result("c2", "write"),
        result("c3", "edit"),
    ];
    entries.extend(conversation(turns, 40).as_array().unwrap().iter().cloned());
    serde_json::Value::Array(entries)
}

/// The preparation of `hooks/beforeCompact` is whole on each path: what is summarised, what is
/// kept, and the file operations (spec §7, §4.4.4).
fn assert_whole_preparation(params: &serde_json::Value, reason: &str) {
    assert_eq!(params["reason"], reason, "{params}");
    let prep = &params["preparation"];
    let summarised = prep["messagesToSummarize"].as_array().unwrap();
    assert!(!summarised.is_empty(), "{reason}: {prep}");
    let recent = prep["recentMessages"].as_array().unwrap();
    assert!(!recent.is_empty(), "{reason}: recentMessages empty: {prep}");
    assert!(prep["firstKeptEntryId"].is_string(), "{reason}: {prep}");
    assert!(
        prep["tokensBefore"].as_u64().unwrap() > 0,
        "{reason}: {prep}"
    );
    assert_eq!(
        prep["fileOps"]["read"],
        json!(["src/lexer.rs"]),
        "{reason}: {prep}"
    );
    assert_eq!(
        prep["fileOps"]["written"],
        json!(["src/new.rs"]),
        "{reason}: {prep}"
    );
    assert_eq!(
        prep["fileOps"]["edited"],
        json!(["src/parser.rs"]),
        "{reason}: {prep}"
    );
    // The kept messages are the ones after the cut: the branch holds the first kept entry,
    // and the last kept message is the newest of the branch.
    let branch = params["branchEntries"].as_array().unwrap();
    assert!(
        branch.iter().any(|e| e["id"] == prep["firstKeptEntryId"]),
        "{reason}: the first kept entry is on the branch"
    );
    let newest_message = branch
        .iter()
        .rev()
        .find(|e| e["type"] == "message")
        .unwrap();
    assert_eq!(
        recent.last().unwrap()["content"],
        newest_message["message"]["content"],
        "{reason}"
    );
}

#[tokio::test]
async fn before_compact_carries_the_whole_preparation_on_every_path() {
    // No background compaction: its own hook request would come first.
    let settings = json!({
        "compaction": {"keepRecentTokens": 200, "reserveTokens": 1000,
                       "background": {"enabled": false}},
        "providers": {"anthropic": {"models": {"claude-sonnet-4-5": {"contextWindow": 8000}}}}
    });
    let mut recorded = Vec::new();

    // Manual.
    let mut d = DaemonProcess::spawn().await;
    d.initialize(
        json!({"hooks": {"beforeCompact": true}}),
        json!({"settings": settings}),
    )
    .await;
    let session = d.create_session().await;
    d.append(&session, conversation_with_files(6)).await;
    let id = d
        .send_request("session/compact", json!({"sessionId": session}))
        .await;
    let (hook_id, params) = d.expect_request("hooks/beforeCompact").await;
    d.respond(hook_id, json!({})).await;
    let response = d.read_until_response(id).await;
    assert!(response["result"]["entryId"].is_string(), "{response}");
    recorded.push(("manual", params));

    // Threshold: a reply whose usage passes 8000 - 1000.
    let session = d.create_session().await;
    d.append(&session, conversation_with_files(6)).await;
    let id = d
        .send_request(
            "session/append",
            json!({"sessionId": session, "entries": [assistant("big reply", 7_100)],
                   "waitForCompaction": true}),
        )
        .await;
    let (hook_id, params) = d.expect_request("hooks/beforeCompact").await;
    d.respond(hook_id, json!({})).await;
    let response = d.read_until_response(id).await;
    assert_eq!(
        response["result"]["autoCompaction"]["reason"], "threshold",
        "{response}"
    );
    recorded.push(("threshold", params));

    // Overflow.
    let session = d.create_session().await;
    d.append(&session, conversation_with_files(6)).await;
    let id = d
        .send_request(
            "session/append",
            json!({"sessionId": session, "entries": [overflow_reply()],
                   "waitForCompaction": true}),
        )
        .await;
    let (hook_id, params) = d.expect_request("hooks/beforeCompact").await;
    d.respond(hook_id, json!({})).await;
    let response = d.read_until_response(id).await;
    assert_eq!(response["result"]["action"], "retry", "{response}");
    recorded.push(("overflow", params));

    for (reason, params) in &recorded {
        assert_whole_preparation(params, reason);
    }
    // Only events are left: no second hook request on any path.
    let left = d.drain_buffer();
    assert!(
        left.iter().all(|m| m.get("id").is_none()),
        "unexpected requests: {left:#?}"
    );
    d.finish().await;
}
