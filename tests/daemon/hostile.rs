//! Hostile and broken replies from the client side (issue 6, item 4): hook replies and
//! client-summarizer replies that are malformed, late, or name entries that do not exist.
//! Every compaction ends with a valid file and nothing half-written.

use compactd::session::Session;
use devtools::daemon::{DaemonProcess, conversation};
use serde_json::{Value, json};

async fn start(capabilities: Value, settings: Value) -> (DaemonProcess, String, String) {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(capabilities, json!({"settings": settings}))
        .await;
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let s = info["sessionId"].as_str().unwrap().to_owned();
    let path = info["path"].as_str().unwrap().to_owned();
    d.append(&s, conversation(8, 40)).await;
    (d, s, path)
}

/// The session at `path` as another reader loads it: whole, every line intact.
fn assert_valid(d: &DaemonProcess, path: &str) -> Session {
    let (s, report) = d.stored_session(path);
    assert!(
        report.skipped.is_empty() && report.torn_tail.is_none(),
        "{report:?}"
    );
    assert!(s.leaf_id().is_some_and(|l| s.get(l).is_some()));
    s
}

fn compactions(s: &Session) -> Vec<Value> {
    s.entries()
        .iter()
        .map(|e| e.to_value())
        .filter(|v| v["type"] == "compaction")
        .collect()
}

#[tokio::test]
async fn malformed_and_dangling_hook_replies_fall_back_to_the_default_path() {
    let (mut d, s, path) = start(
        json!({"hooks": {"beforeCompact": true}}),
        json!({"compaction": {"keepRecentTokens": 200}}),
    )
    .await;
    let replies = [
        json!({"compaction": "not an object"}),
        json!({"cancel": "yes please"}),
        json!([1, 2, 3]),
        json!({"compaction": {"summary": "DANGLING", "firstKeptEntryId": "no-such-entry", "tokensBefore": 1}}),
    ];
    for (i, reply) in replies.into_iter().enumerate() {
        let id = d
            .send_request("session/compact", json!({"sessionId": s}))
            .await;
        let (hook_id, _) = d.expect_request("hooks/beforeCompact").await;
        d.respond(hook_id, reply.clone()).await;
        let response = d.read_until_response(id).await;
        let session = assert_valid(&d, &path);
        let written = compactions(&session);
        match response.get("error") {
            // A typed refusal writes nothing new.
            Some(error) => {
                assert!(error["data"]["kind"].is_string(), "{error}");
                assert_eq!(written.len(), i.min(written.len()), "{reply}");
            }
            None => {
                let entry = response["result"]["entryId"].as_str().unwrap();
                let c = session.get(entry).expect("the compaction is on disk");
                let kept = c.to_value()["firstKeptEntryId"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(session.get(&kept).is_some(), "{reply}: kept entry exists");
                assert_ne!(response["result"]["summary"], "DANGLING", "{reply}");
            }
        }
        d.append(&s, conversation(3, 40)).await;
        d.take_all("session/compactionStarted");
        d.take_all("session/compactionFinished");
        d.take_all("session/compactionDelta");
    }
    d.finish().await;
}

#[tokio::test]
async fn malformed_and_late_client_summaries_fall_back_to_extractive() {
    let (mut d, s, path) = start(
        json!({"summarizer": true}),
        json!({"compaction": {"keepRecentTokens": 200},
               "summarizer": {"clientTimeoutMs": 300}}),
    )
    .await;
    let mut late = Vec::new();
    for reply in [
        Some(json!({"text": 42})),
        Some(json!("just a string")),
        None,
    ] {
        let id = d
            .send_request("session/compact", json!({"sessionId": s}))
            .await;
        let (call, params) = d.expect_request("summarizer/summarize").await;
        assert_eq!(params["sessionId"], s);
        match reply {
            Some(reply) => d.respond(call, reply).await,
            // Late: never answered in time; answered after the compaction ended (below).
            None => late.push(call),
        }
        // More summarizer calls may follow (a split turn): answer them late too.
        let response = loop {
            if let Some(r) = d.take_response(id) {
                break r;
            }
            d.pump(std::time::Duration::from_millis(50)).await;
            let pending: Vec<Value> = d
                .take_all_requests("summarizer/summarize")
                .into_iter()
                .collect();
            late.extend(pending.into_iter().map(|call| call["id"].clone()));
        };
        for call in late.drain(..) {
            d.respond(call, json!({"text": "TOO LATE"})).await;
        }
        let result = &response["result"];
        assert!(result["entryId"].is_string(), "{response}");
        let summary = result["summary"].as_str().unwrap();
        assert!(!summary.contains("TOO LATE"));
        assert_valid(&d, &path);
        d.append(&s, conversation(3, 40)).await;
        d.drain_buffer();
    }
    d.kill().await;
}
