//! `session/undoCompaction` and `compactd undo` through the real binary: the context after an
//! undo is the one from before the compaction followed by what came after, message for
//! message; an undo of the undo puts the compaction back; two undos peel two compactions; a
//! compaction after an undo works; the errors; the CLI writes what the daemon writes.

use devtools::daemon::{DaemonProcess, assistant, conversation, user};
use serde_json::{Value, json};

async fn start() -> (DaemonProcess, String) {
    let mut d = DaemonProcess::spawn().await;
    d.initialize(
        json!({}),
        json!({"settings": {"compaction": {"keepRecentTokens": 200}}}),
    )
    .await;
    let session = d.create_session().await;
    (d, session)
}

async fn messages(d: &mut DaemonProcess, session: &str) -> Vec<Value> {
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    context["messages"].as_array().expect("messages").clone()
}

async fn compact(d: &mut DaemonProcess, session: &str) -> String {
    let result = d.ok("session/compact", json!({"sessionId": session})).await;
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    result["entryId"]
        .as_str()
        .expect("a compaction entry")
        .to_owned()
}

/// Undoes `entry` (default: the latest compaction); checks the notification announces what
/// the result lists.
async fn undo(d: &mut DaemonProcess, session: &str, entry: Option<&str>) -> Value {
    let mut params = json!({"sessionId": session});
    if let Some(entry) = entry {
        params["entryId"] = json!(entry);
    }
    let result = d.ok("session/undoCompaction", params).await;
    let appended = d.take_all("session/entriesAppended");
    let announced: Vec<Value> = appended
        .iter()
        .flat_map(|n| n["entries"].as_array().unwrap().clone())
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(Value::Array(announced), result["entryIds"], "{appended:?}");
    assert_eq!(result["entryIds"][0], result["undoEntryId"]);
    assert_eq!(
        result["entryIds"].as_array().unwrap().last().unwrap(),
        &result["leafId"]
    );
    result
}

/// Whether `message` is a compaction summary (the context shows it as user text).
fn is_summary(message: &Value) -> bool {
    message.to_string().contains("<summary>")
}

#[tokio::test]
async fn undo_after_two_messages_gives_the_context_before_the_compaction_then_them() {
    let (mut d, session) = start().await;
    d.append(&session, conversation(8, 40)).await;
    let before = messages(&mut d, &session).await;
    let compaction = compact(&mut d, &session).await;
    d.append(
        &session,
        json!([user("after one"), assistant("after two", 900)]),
    )
    .await;
    let compacted = messages(&mut d, &session).await;
    assert!(is_summary(&compacted[0]));
    assert!(
        compacted.len() < before.len() + 2,
        "the compaction summarised something"
    );

    let result = undo(&mut d, &session, None).await;
    assert_eq!(result["compactionId"], compaction);
    assert_eq!(result["undoneEntryId"], compaction);
    assert_eq!(result["restored"], false);
    // The record, then copies of the two messages.
    assert_eq!(result["entryIds"].as_array().unwrap().len(), 3);
    let undone = messages(&mut d, &session).await;
    let mut expected = before.clone();
    expected.extend(compacted[compacted.len() - 2..].iter().cloned());
    assert_eq!(undone, expected, "message for message");
    let usage = d.ok("session/usage", json!({"sessionId": session})).await;
    assert!(usage["tokens"].as_u64().unwrap_or(1) > 0);

    // What another reader of the stored session rebuilds: the same.
    let info = d.ok("session/open", json!({"sessionId": session})).await;
    let path = info["path"].as_str().unwrap().to_owned();
    let (stored, _) = d.stored_session(&path);
    assert_eq!(stored.leaf_id(), result["leafId"].as_str());
    assert_eq!(
        stored.context().messages.len(),
        expected.len(),
        "the stored session rebuilds the undone context"
    );

    // The undo of the undo: the compacted context and the two messages.
    let redo = undo(&mut d, &session, result["undoEntryId"].as_str()).await;
    assert_eq!(redo["restored"], true);
    assert_eq!(redo["compactionId"], compaction);
    assert_eq!(redo["undoneEntryId"], result["undoEntryId"]);
    assert_eq!(messages(&mut d, &session).await, compacted);
    d.finish().await;
}

#[tokio::test]
async fn two_undos_peel_two_compactions_and_a_later_compaction_works() {
    let (mut d, session) = start().await;
    d.append(&session, conversation(6, 40)).await;
    let original = messages(&mut d, &session).await;
    let first = compact(&mut d, &session).await;
    d.append(&session, conversation(6, 40)).await;
    let once = messages(&mut d, &session).await;
    let second = compact(&mut d, &session).await;
    d.append(&session, json!([user("tail")])).await;

    assert_eq!(undo(&mut d, &session, None).await["compactionId"], second);
    let mut expected = once.clone();
    expected.push(messages(&mut d, &session).await.last().unwrap().clone());
    assert_eq!(messages(&mut d, &session).await, expected);
    assert_eq!(undo(&mut d, &session, None).await["compactionId"], first);
    let all = messages(&mut d, &session).await;
    assert!(all.iter().all(|m| !is_summary(m)), "no summary left");
    assert_eq!(all[..original.len()], original[..]);
    assert_eq!(all.len(), original.len() + 12 + 1);
    let error = d
        .err(
            "session/undoCompaction",
            json!({"sessionId": session}),
            "nothingToUndo",
        )
        .await;
    assert_eq!(error["code"], -32026);

    // A compaction after the undos works as usual, and can be undone in turn.
    d.append(&session, conversation(2, 40)).await;
    let uncompacted = messages(&mut d, &session).await;
    let third = compact(&mut d, &session).await;
    let compacted = messages(&mut d, &session).await;
    assert!(is_summary(&compacted[0]));
    assert!(compacted.len() < uncompacted.len());
    assert_eq!(undo(&mut d, &session, None).await["compactionId"], third);
    assert_eq!(messages(&mut d, &session).await, uncompacted);
    d.finish().await;
}

#[tokio::test]
async fn undo_errors_write_nothing() {
    let (mut d, session) = start().await;
    let first = d.append(&session, json!([user("one")])).await;
    d.err(
        "session/undoCompaction",
        json!({"sessionId": session}),
        "nothingToUndo",
    )
    .await;
    d.err(
        "session/undoCompaction",
        json!({"sessionId": session, "entryId": "feedbeef"}),
        "entryNotFound",
    )
    .await;
    let not_undoable = d
        .err(
            "session/undoCompaction",
            json!({"sessionId": session, "entryId": first["leafId"]}),
            "nothingToUndo",
        )
        .await;
    assert!(
        not_undoable["message"]
            .as_str()
            .unwrap()
            .contains("neither a compaction nor an undo"),
        "{not_undoable}"
    );
    d.append(&session, conversation(6, 40)).await;
    let compaction = compact(&mut d, &session).await;
    d.err(
        "session/undoCompaction",
        json!({"sessionId": session, "expectedLeafId": first["leafId"]}),
        "leafMoved",
    )
    .await;
    // Off the branch: navigate back above the compaction.
    d.ok(
        "session/navigateTree",
        json!({"sessionId": session, "targetId": first["leafId"]}),
    )
    .await;
    d.take_all("session/treeNavigated");
    d.take_all("session/entriesAppended");
    let off = d
        .err(
            "session/undoCompaction",
            json!({"sessionId": session, "entryId": compaction}),
            "nothingToUndo",
        )
        .await;
    assert!(
        off["message"]
            .as_str()
            .unwrap()
            .contains("not on the session's branch"),
        "{off}"
    );
    assert!(d.take_all("session/entriesAppended").is_empty());
    d.finish().await;
}

fn cli(d: &DaemonProcess, args: &[&str]) -> std::process::Output {
    let home = d.home.path();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(args)
        .env("COMPACTD_CONFIG_DIR", home.join("config"))
        .env("COMPACTD_DATA_DIR", home.join("data"))
        .env("HOME", home)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("the CLI runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
async fn the_cli_undo_writes_what_the_daemon_writes() {
    let (mut d, session) = start().await;
    d.append(&session, conversation(8, 40)).await;
    let before = messages(&mut d, &session).await;
    compact(&mut d, &session).await;
    d.append(
        &session,
        json!([user("after one"), assistant("after two", 900)]),
    )
    .await;
    let compacted = messages(&mut d, &session).await;
    let info = d.ok("session/open", json!({"sessionId": session})).await;
    // A copy as a file, whatever the backend: the CLI undoes the file.
    let file = d.home.path().join("copy.jsonl");
    std::fs::write(&file, d.stored_bytes(info["path"].as_str().unwrap())).unwrap();
    let file = file.to_str().unwrap();

    let out = cli(&d, &["undo", file]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("undid compaction "), "{text}");
    assert!(text.contains("2 entries copied"), "{text}");
    let context: Value =
        serde_json::from_slice(&cli(&d, &["context", "--json", file]).stdout).unwrap();
    let mut expected = before.clone();
    expected.extend(compacted[compacted.len() - 2..].iter().cloned());
    assert_eq!(context["messages"], Value::Array(expected.clone()));

    // The daemon's undo of the same session gives the same context.
    undo(&mut d, &session, None).await;
    assert_eq!(messages(&mut d, &session).await, expected);

    // `--entry` the undo entry puts the compaction back; `--json` prints the protocol result.
    let record = file_entries(file)
        .into_iter()
        .find(|e| e["customType"] == "compactd.undo")
        .expect("the undo record");
    let out = cli(
        &d,
        &[
            "undo",
            file,
            "--entry",
            record["id"].as_str().unwrap(),
            "--json",
        ],
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["restored"], true);
    let context: Value =
        serde_json::from_slice(&cli(&d, &["context", "--json", file]).stdout).unwrap();
    assert_eq!(context["messages"], Value::Array(compacted));
    d.finish().await;
}

fn file_entries(path: &str) -> Vec<Value> {
    devtools::daemon::file_entries(std::path::Path::new(path))
}
