//! `session/commitCompaction`: a preview of `session/compact` written later, as previewed or
//! with the user's edited text, only while the branch is unchanged (issue 33, item 1).

use devtools::daemon::{DaemonProcess, conversation, user};
use serde_json::{Value, json};

/// A daemon with a session holding a conversation worth compacting; the session id and its
/// stored path.
async fn session_to_compact() -> (DaemonProcess, String, String) {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(
        json!({}),
        json!({"settings": {"compaction": {"keepRecentTokens": 1000}}}),
    )
    .await;
    let session = d.create_session().await;
    d.append(&session, conversation(8, 40)).await;
    let list = d.ok("session/list", json!({})).await;
    let path = list["sessions"][0]["path"].as_str().unwrap().to_owned();
    (d, session, path)
}

async fn preview(d: &mut DaemonProcess, session: &str) -> Value {
    let preview = d
        .ok(
            "session/compact",
            json!({"sessionId": session, "preview": true}),
        )
        .await;
    assert_eq!(preview["preview"], true);
    assert!(preview.get("entryId").is_none());
    d.expect_notification("session/compactionStarted").await;
    d.expect_notification("session/compactionFinished").await;
    d.take_all("session/compactionDelta");
    preview
}

fn compactions(d: &DaemonProcess, path: &str) -> Vec<Value> {
    d.stored_entries(path)
        .into_iter()
        .filter(|e| e["type"] == "compaction")
        .collect()
}

#[tokio::test]
async fn an_edited_preview_is_written_with_the_users_text_guarded_and_marked() {
    let (mut d, session, path) = session_to_compact().await;
    let preview = preview(&mut d, &session).await;
    let preview_id = preview["previewId"]
        .as_str()
        .expect("a previewId")
        .to_owned();
    let generated = preview["summary"].as_str().unwrap().to_owned();
    assert!(
        compactions(&d, &path).is_empty(),
        "a preview writes nothing"
    );

    let mine = "The user rewrote this summary: the steps so far edited the source files.";
    let id = d
        .send_request(
            "session/commitCompaction",
            json!({"sessionId": session, "previewId": preview_id, "summary": mine,
                   "shortSummary": "Edited by hand."}),
        )
        .await;
    let started = d.expect_notification("session/compactionStarted").await;
    assert_eq!(started["reason"], "manual");
    let result = d.read_until_response(id).await["result"].clone();
    let entry_id = result["entryId"].as_str().expect("an entry id").to_owned();
    assert_eq!(result["preview"], false);
    assert_eq!(result["details"]["edited"], true);
    let summary = result["summary"].as_str().unwrap();
    assert!(summary.starts_with(mine), "{summary}");
    // The text dropped the last request the summary must keep: the guard put it back.
    assert!(summary.contains("## Retained Facts"), "{summary}");
    let retained = result["details"]["retainedFacts"]
        .as_array()
        .expect("facts");
    assert!(
        retained.iter().any(|f| f["kind"] == "lastUserRequest"),
        "{retained:?}"
    );
    // The ledger block of the generated summary is re-appended to the user's.
    let at = generated.find("<progress-ledger>").expect("a ledger block");
    assert!(summary.ends_with(generated[at..].trim_end()), "{summary}");
    assert_eq!(summary.matches("<progress-ledger>").count(), 1);
    let appended = d.expect_notification("session/entriesAppended").await;
    assert_eq!(appended["entries"][0]["id"], entry_id);
    let finished = d.expect_notification("session/compactionFinished").await;
    assert_eq!(finished["operationId"], started["operationId"]);
    assert_eq!(finished["result"]["entryId"], entry_id);

    // Read back as stored.
    let stored = compactions(&d, &path);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["id"], entry_id);
    assert_eq!(stored[0]["summary"], summary);
    assert_eq!(stored[0]["shortSummary"], "Edited by hand.");
    assert_eq!(stored[0]["details"]["edited"], true);
    assert_eq!(stored[0]["firstKeptEntryId"], preview["firstKeptEntryId"]);

    // The context opens with the edited summary.
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let first = context["messages"][0].to_string();
    assert!(first.contains("The user rewrote this summary"), "{first}");

    // A preview is written once.
    let error = d
        .err(
            "session/commitCompaction",
            json!({"sessionId": session, "previewId": preview_id}),
            "previewNotFound",
        )
        .await;
    assert_eq!(error["code"], -32025);
    assert_eq!(error["data"]["previewId"], preview_id);
    assert_eq!(compactions(&d, &path).len(), 1);
    d.finish().await;
}

#[tokio::test]
async fn a_preview_committed_unedited_writes_the_previewed_text() {
    let (mut d, session, path) = session_to_compact().await;
    let preview = preview(&mut d, &session).await;
    let preview_id = preview["previewId"].as_str().unwrap();
    let result = d
        .ok(
            "session/commitCompaction",
            json!({"sessionId": session, "previewId": preview_id}),
        )
        .await;
    assert_eq!(result["summary"], preview["summary"]);
    assert!(result["details"].get("edited").is_none(), "{result}");
    let stored = compactions(&d, &path);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["id"], result["entryId"]);
    assert_eq!(stored[0]["summary"], preview["summary"]);
    assert_eq!(stored[0]["firstKeptEntryId"], preview["firstKeptEntryId"]);
    assert_eq!(stored[0]["details"]["reason"], "manual");
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/entriesAppended");
    d.finish().await;
}

#[tokio::test]
async fn a_stale_or_unknown_preview_is_refused_and_nothing_is_written() {
    let (mut d, session, path) = session_to_compact().await;

    // An append after the preview: the leaf moved.
    let first = preview(&mut d, &session).await;
    d.append(&session, json!([user("one more thing")])).await;
    let error = d
        .err(
            "session/commitCompaction",
            json!({"sessionId": session, "previewId": first["previewId"], "summary": "mine"}),
            "leafMoved",
        )
        .await;
    assert_eq!(error["code"], -32016);
    let finished = d.take_all("session/compactionFinished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["error"]["kind"], "leafMoved", "{finished:?}");
    d.take_all("session/compactionStarted");
    assert!(d.take_all("session/entriesAppended").is_empty());
    assert!(compactions(&d, &path).is_empty());

    // A navigation away and back leaves the same leaf, but the branch was written: refused.
    let second = preview(&mut d, &session).await;
    let tree = d.ok("session/tree", json!({"sessionId": session})).await;
    let leaf = tree["leafId"].as_str().unwrap().to_owned();
    let earlier = tree["nodes"][2]["id"].as_str().unwrap().to_owned();
    for target in [&earlier, &leaf] {
        d.ok(
            "session/navigateTree",
            json!({"sessionId": session, "targetId": target}),
        )
        .await;
        d.expect_notification("session/treeNavigated").await;
    }
    d.err(
        "session/commitCompaction",
        json!({"sessionId": session, "previewId": second["previewId"]}),
        "leafMoved",
    )
    .await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    assert!(compactions(&d, &path).is_empty());

    // An unknown id; an empty summary (the preview stays usable).
    let error = d
        .err(
            "session/commitCompaction",
            json!({"sessionId": session, "previewId": "preview-nope"}),
            "previewNotFound",
        )
        .await;
    assert!(error["message"].as_str().unwrap().contains("preview-nope"));
    let third = preview(&mut d, &session).await;
    d.err(
        "session/commitCompaction",
        json!({"sessionId": session, "previewId": third["previewId"], "summary": "  \n"}),
        "invalidParams",
    )
    .await;
    assert!(compactions(&d, &path).is_empty());
    let written = d
        .ok(
            "session/commitCompaction",
            json!({"sessionId": session, "previewId": third["previewId"]}),
        )
        .await;
    assert_eq!(compactions(&d, &path).len(), 1);
    assert_eq!(compactions(&d, &path)[0]["id"], written["entryId"]);
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/entriesAppended");

    // Closing the session drops its previews.
    d.append(&session, conversation(4, 40)).await;
    let fourth = preview(&mut d, &session).await;
    d.ok("session/close", json!({"sessionId": session})).await;
    let reopened = d.ok("session/open", json!({"sessionId": session})).await;
    let session = reopened["sessionId"].as_str().unwrap().to_owned();
    d.err(
        "session/commitCompaction",
        json!({"sessionId": session, "previewId": fourth["previewId"]}),
        "previewNotFound",
    )
    .await;
    assert_eq!(compactions(&d, &path).len(), 1);
    d.finish().await;
}
