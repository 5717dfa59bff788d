//! Recall (issue 32): `session/search` and `session/readEntry` find and read back what a
//! compaction hid and what the size controls moved to the blob store.

use devtools::daemon::{DaemonProcess, assistant, user};
use serde_json::{Value, json};

const FACT: &str = "the staging database listens on port 48213";
const NEEDLE: &str = "NEEDLE-7f3a-end-of-log";

fn tool_round(id: &str, command: &str, output: &str) -> Vec<Value> {
    vec![
        json!({"type": "message", "message": {"role": "assistant", "timestamp": 2,
            "content": [{"type": "toolCall", "id": id, "name": "bash",
                "arguments": {"command": command}}], "stopReason": "toolUse"}}),
        json!({"type": "message", "message": {"role": "toolResult", "toolCallId": id,
            "toolName": "bash", "timestamp": 3, "isError": false,
            "content": [{"type": "text", "text": output}]}}),
    ]
}

/// A 600,000-character output whose last characters are the needle.
fn big_output() -> String {
    let mut out: String = (0..600_000 - NEEDLE.len())
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    out.push_str(NEEDLE);
    out
}

struct Recall {
    d: DaemonProcess,
    session: String,
    path: String,
    blobs: std::path::PathBuf,
}

/// A session with the fact in a tool result and the big output, both compacted away, then
/// some recent turns.
async fn compacted_session() -> Recall {
    let mut d = DaemonProcess::spawn().await;
    let blobs = d.home.path().join("blob-store");
    d.initialize(
        json!({}),
        json!({"settings": {"storage": {"blobDir": blobs}, "tokenizer": "chars4",
            "compaction": {"keepRecentTokens": 300, "pruneEnabled": false}}}),
    )
    .await;
    // A file, named, on either backend: a test below writes to it as another writer would.
    let file = d.home.path().join("recall.jsonl");
    let info = d
        .ok("session/create", json!({"path": file, "cwd": d.project()}))
        .await;
    let session = info["sessionId"].as_str().unwrap().to_owned();
    let path = info["path"].as_str().unwrap().to_owned();
    let mut entries = vec![user("where is the staging database?")];
    entries.extend(tool_round("c1", "cat config/staging.env", FACT));
    entries.push(assistant("Found it in config/staging.env.", 1000));
    entries.push(user("dump the big log"));
    entries.extend(tool_round("c2", "cat big.log", &big_output()));
    entries.push(assistant("The log is long.", 1000));
    for i in 0..6 {
        entries.push(user(&format!(
            "Step {i}: keep going with the refactor of module {i}"
        )));
        entries.push(assistant(
            &format!("Step {i} done. {}", "ok ".repeat(60)),
            1000,
        ));
    }
    d.append(&session, Value::Array(entries)).await;
    let compacted = d.ok("session/compact", json!({"sessionId": session})).await;
    assert!(compacted["entryId"].is_string(), "{compacted}");
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionDelta");
    d.take_all("session/compactionFinished");
    d.take_all("session/entriesAppended");
    Recall {
        d,
        session,
        path,
        blobs,
    }
}

async fn search(d: &mut DaemonProcess, params: Value) -> Value {
    d.ok("session/search", params).await
}

/// The fact a compaction summarised and the needle at the end of a blob-stored output are
/// both found, marked compacted, and read back whole.
#[tokio::test]
async fn compacted_facts_and_blob_stored_needles_are_found_and_read_back_whole() {
    let Recall { mut d, session, .. } = compacted_session().await;
    // The model no longer sees either: the context holds the summary and the recent turns.
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    assert!(!context.to_string().contains(NEEDLE));

    let found = search(&mut d, json!({"sessionId": session, "query": "PORT 48213"})).await;
    let hits = found["hits"].as_array().unwrap();
    let fact_hit = hits
        .iter()
        .find(|h| h["role"] == "toolResult")
        .unwrap_or_else(|| panic!("{found}"));
    assert_eq!(fact_hit["compacted"], true, "{fact_hit}");
    assert!(
        fact_hit["snippet"].as_str().unwrap().contains("port 48213"),
        "{fact_hit}"
    );
    assert!(fact_hit["timestamp"].is_string());

    let found = search(&mut d, json!({"sessionId": session, "query": NEEDLE})).await;
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{found}");
    let needle_hit = &hits[0];
    assert_eq!(needle_hit["role"], "toolResult");
    assert_eq!(needle_hit["compacted"], true);
    let snippet = needle_hit["snippet"].as_str().unwrap();
    assert!(snippet.contains(NEEDLE) && snippet.len() < 400, "{snippet}");
    assert!(found.get("nextCursor").is_none());

    let read = d
        .ok(
            "session/readEntry",
            json!({"sessionId": session, "entryId": needle_hit["entryId"]}),
        )
        .await;
    let text = read["entry"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(text.chars().count(), 600_000);
    assert!(text.ends_with(NEEDLE));
    assert!(read["entry"].get("compactdFullText").is_none());
    assert_eq!(
        read["restoredFullTexts"],
        json!(["/message/content/0/text"])
    );
    assert_eq!(read["compacted"], true);

    let read = d
        .ok(
            "session/readEntry",
            json!({"sessionId": session, "entryId": fact_hit["entryId"]}),
        )
        .await;
    assert_eq!(read["entry"]["message"]["content"][0]["text"], FACT);
    assert_eq!(read["entry"]["id"], fact_hit["entryId"]);
    d.err(
        "session/readEntry",
        json!({"sessionId": session, "entryId": "no-such-entry"}),
        "entryNotFound",
    )
    .await;
    d.finish().await;
}

/// Pages follow `nextCursor` to the end without repeats; a regex finds what a literal
/// cannot; a bad pattern or cursor is `invalidParams`.
#[tokio::test]
async fn search_pages_and_takes_regexes() {
    let Recall { mut d, session, .. } = compacted_session().await;
    let mut seen = Vec::new();
    let mut cursor: Option<Value> = None;
    for _ in 0..10 {
        let mut params = json!({"sessionId": session, "query": "step", "limit": 4});
        if let Some(c) = &cursor {
            params["cursor"] = c.clone();
        }
        let page = search(&mut d, params).await;
        let hits = page["hits"].as_array().unwrap();
        assert!(hits.len() <= 4, "{page}");
        seen.extend(
            hits.iter()
                .map(|h| h["entryId"].as_str().unwrap().to_owned()),
        );
        match page.get("nextCursor") {
            Some(c) => cursor = Some(c.clone()),
            None => break,
        }
    }
    // Six user and six assistant messages say "Step"; the compaction's summary may too.
    assert!(seen.len() >= 12, "{seen:?}");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a hit came twice: {seen:?}");
    let all = search(
        &mut d,
        json!({"sessionId": session, "query": "step", "limit": 200}),
    )
    .await;
    assert_eq!(all["hits"].as_array().unwrap().len(), seen.len());

    let case = search(
        &mut d,
        json!({"sessionId": session, "query": "step", "caseSensitive": true}),
    )
    .await;
    assert!(case["hits"].as_array().unwrap().len() < seen.len());

    let regex = search(
        &mut d,
        json!({"sessionId": session, "query": "port \\d{5}$", "regex": true}),
    )
    .await;
    let hits = regex["hits"].as_array().unwrap();
    assert!(hits.iter().any(|h| h["role"] == "toolResult"), "{regex}");
    let literal = search(
        &mut d,
        json!({"sessionId": session, "query": "port \\d{5}$"}),
    )
    .await;
    assert_eq!(literal["hits"], json!([]));
    d.err(
        "session/search",
        json!({"sessionId": session, "query": "(", "regex": true}),
        "invalidParams",
    )
    .await;
    d.err(
        "session/search",
        json!({"sessionId": session, "query": "step", "cursor": "nope"}),
        "invalidParams",
    )
    .await;
    d.err(
        "session/search",
        json!({"sessionId": session, "query": ""}),
        "invalidParams",
    )
    .await;
    d.finish().await;
}

/// `scope: "branch"` walks the root→leaf path only; `"session"` every entry of the tree.
#[tokio::test]
async fn scope_branch_leaves_other_branches_out() {
    let Recall { mut d, session, .. } = compacted_session().await;
    let usage = d.ok("session/tree", json!({"sessionId": session})).await;
    let fork_point = usage["leafId"].clone();
    d.append(
        &session,
        json!([
            user("side question about zebras"),
            assistant("zebras have stripes", 1000)
        ]),
    )
    .await;
    d.ok(
        "session/navigateTree",
        json!({"sessionId": session, "targetId": fork_point}),
    )
    .await;
    d.take_all("session/treeNavigated");
    d.append(&session, json!([user("back to the refactor")]))
        .await;

    let branch = search(&mut d, json!({"sessionId": session, "query": "zebra"})).await;
    assert_eq!(branch["hits"], json!([]), "{branch}");
    let whole = search(
        &mut d,
        json!({"sessionId": session, "query": "zebra", "scope": "session"}),
    )
    .await;
    let hits = whole["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{whole}");
    assert!(hits.iter().all(|h| h["compacted"] == true));
    assert_eq!(hits[0]["role"], "user");
    assert_eq!(hits[1]["role"], "assistant");
    let live = search(
        &mut d,
        json!({"sessionId": session, "query": "back to the refactor"}),
    )
    .await;
    assert_eq!(live["hits"][0]["compacted"], false, "{live}");
    d.finish().await;
}

/// A full text missing from the store is an error naming the blob, never a cut text; a
/// reference that is a path, not a blob name, is never followed outside the store; a
/// session not open is not searched.
#[tokio::test]
async fn missing_blobs_are_named_and_paths_are_never_followed() {
    let Recall {
        mut d,
        session,
        path,
        blobs,
    } = compacted_session().await;
    let found = search(&mut d, json!({"sessionId": session, "query": NEEDLE})).await;
    let entry_id = found["hits"][0]["entryId"].clone();
    let blob: Vec<_> = std::fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(blob.len(), 1, "{blob:?}");
    let name = blob[0].file_name().unwrap().to_str().unwrap().to_owned();
    std::fs::remove_file(&blob[0]).unwrap();

    let error = d
        .err(
            "session/readEntry",
            json!({"sessionId": session, "entryId": entry_id}),
            "blobMissing",
        )
        .await;
    assert_eq!(error["code"], -32024);
    assert_eq!(error["data"]["blob"], name.as_str());
    assert_eq!(error["data"]["entryId"], entry_id);
    assert!(
        error["message"].as_str().unwrap().contains(&name),
        "{error}"
    );
    let found = search(&mut d, json!({"sessionId": session, "query": NEEDLE})).await;
    assert_eq!(found["hits"], json!([]));
    assert_eq!(found["missingBlobs"], json!([name]));

    // A reference spelled as a path to a file beside the store.
    std::fs::write(
        d.home.path().join("secret.txt"),
        "TOPSECRET the owner's key",
    )
    .unwrap();
    // Written by another writer, as compactd never writes such a reference itself.
    let leaf = d.ok("session/tree", json!({"sessionId": session})).await["leafId"].clone();
    let forged = json!({"type": "message", "id": "forged01", "parentId": leaf,
        "timestamp": "2026-12-05T00:00:00.000Z",
        "message": {"role": "user", "content": "a short text", "timestamp": 1},
        "compactdFullText": {"/message/content": "blob:sha256:../secret.txt"}});
    d.ignore_external_appends(true);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, format!("{forged}\n").as_bytes()).unwrap();
    let forged_id = json!("forged01");
    let found = search(&mut d, json!({"sessionId": session, "query": "TOPSECRET"})).await;
    assert_eq!(found["hits"], json!([]), "{found}");
    let error = d
        .err(
            "session/readEntry",
            json!({"sessionId": session, "entryId": forged_id}),
            "blobMissing",
        )
        .await;
    assert_eq!(error["data"]["blob"], "../secret.txt");
    assert!(!error.to_string().contains("TOPSECRET"));

    d.err(
        "session/search",
        json!({"sessionId": "not-open", "query": "x"}),
        "sessionNotFound",
    )
    .await;
    d.err(
        "session/readEntry",
        json!({"sessionId": "not-open", "entryId": "x"}),
        "sessionNotFound",
    )
    .await;
    d.finish().await;
}
