//! The blob store as the client sees it (issue 35, item 5 and the minors): a full text that
//! cannot be read back is told to the client in `session/context` `missingBlobs`, and a
//! symlink named like a blob is never followed.

use devtools::daemon::DaemonProcess;
use serde_json::json;

/// A session with a 600,000-character tool output (its full text in the store, a truncated
/// copy in the file). Returns the daemon, the session id, the store, the blob's name, the
/// output and the session's path.
async fn session_with_a_blob() -> (
    DaemonProcess,
    String,
    std::path::PathBuf,
    String,
    String,
    String,
) {
    let mut d = DaemonProcess::spawn().await;
    let blobs = d.home.path().join("blob-store");
    d.initialize(
        json!({}),
        json!({"settings": {"storage": {"blobDir": blobs}, "tokenizer": "chars4"}}),
    )
    .await;
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let session = info["sessionId"].as_str().unwrap().to_owned();
    let path = info["path"].as_str().unwrap().to_owned();
    let output: String = (0..600_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    d.ok(
        "session/append",
        json!({"sessionId": session, "entries": [
            {"type": "message", "message": {"role": "user", "timestamp": 1, "content": "run it"}},
            {"type": "message", "message": {"role": "toolResult", "toolCallId": "c1",
                "toolName": "bash", "timestamp": 2, "isError": false,
                "content": [{"type": "text", "text": output}]}}]}),
    )
    .await;
    d.take_all("session/entriesAppended");
    let hex = devtools::fixtures::sha256_hex(output.as_bytes());
    assert!(blobs.join(&hex).is_file());
    (d, session, blobs, hex, output, path)
}

/// A full text whose blob was deleted: the context holds the truncated text and says so in
/// `missingBlobs` (entry, blob, pointer, reason). Before: only a warning on the daemon's stderr.
#[tokio::test]
async fn a_missing_blob_is_told_to_the_client() {
    let (mut d, session, blobs, hex, output, _path) = session_with_a_blob().await;
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert!(
        context.get("missingBlobs").is_none(),
        "{}",
        context["missingBlobs"]
    );
    assert_eq!(
        context["messages"][1]["content"][0]["text"],
        output.as_str()
    );

    std::fs::remove_file(blobs.join(&hex)).unwrap();
    // A new view (the context of an unchanged session may be cached): append a message.
    d.ok(
        "session/append",
        json!({"sessionId": session, "entries": [
            {"type": "message", "message": {"role": "user", "timestamp": 3, "content": "and?"}}]}),
    )
    .await;
    d.take_all("session/entriesAppended");
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let text = context["messages"][1]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.ends_with("[Session persistence truncated large content]"));
    let missing = context["missingBlobs"].as_array().expect("missingBlobs");
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(missing[0]["blob"], hex.as_str());
    assert_eq!(missing[0]["pointer"], "/message/content/0/text");
    assert!(
        missing[0]["entryId"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    let reason = missing[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&hex) && reason.contains("not in the blob store"),
        "{reason}"
    );
    d.finish().await;
}

/// A symlink named like a blob (to a file outside the store) is refused: the context keeps the
/// truncated text, never the link target's bytes, and `missingBlobs` names the link. Before:
/// the target file's bytes came back in the context.
#[tokio::test]
async fn a_symlink_in_the_blob_store_is_not_followed() {
    let (mut d, session, blobs, hex, _output, path) = session_with_a_blob().await;
    let secret = d.home.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET target bytes").unwrap();
    std::fs::remove_file(blobs.join(&hex)).unwrap();
    std::os::unix::fs::symlink(&secret, blobs.join(&hex)).unwrap();
    // Reopen, so nothing cached in the daemon is used.
    d.ok("session/close", json!({"sessionId": session})).await;
    let info = d.ok("session/open", json!({"path": path})).await;
    let session = info["sessionId"].as_str().unwrap().to_owned();
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert!(
        !context.to_string().contains("TOP-SECRET"),
        "the link's target must not be read"
    );
    let text = context["messages"][1]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.ends_with("[Session persistence truncated large content]"));
    let missing = context["missingBlobs"].as_array().expect("missingBlobs");
    assert_eq!(missing.len(), 1, "{missing:?}");
    let reason = missing[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&hex) && reason.contains("is a symbolic link, not a regular file"),
        "{reason}"
    );
    d.finish().await;
}
