//! Pruning as the client sees it (issue 35, item 4): the context holds what the model will
//! see, and its token counts match it.

use serde_json::{Value, json};

/// A 600,000-character tool output (its full text in the blob store, a truncated copy in the
/// file) pruned by `session/prune`: the context shows the prune notice, with no original
/// content, and counts it as such; the file keeps the original, with the blob reference moved
/// to it. Before: the full text came back over the notice (1.1 MB of context, counted as 13
/// tokens), and every pruned result carried `originalContent` in `session/context`.
#[tokio::test]
async fn a_pruned_blob_backed_output_stays_pruned_in_the_context() {
    let mut d = devtools::daemon::DaemonProcess::spawn().await;
    let blobs = d.home.path().join("blob-store");
    d.initialize(
        json!({}),
        // Pruning on request only, so this test's prune is the one that happens.
        json!({"settings": {"storage": {"blobDir": blobs}, "tokenizer": "chars4",
            "compaction": {"pruneEnabled": false}}}),
    )
    .await;
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let session = info["sessionId"].as_str().unwrap().to_owned();
    let path = info["path"].as_str().unwrap().to_owned();
    let output: String = (0..600_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let mut entries = vec![
        json!({"type": "message", "message": {"role": "user", "timestamp": 1,
            "content": [{"type": "text", "text": "dump the log"}]}}),
        json!({"type": "message", "message": {"role": "assistant", "timestamp": 2,
            "content": [{"type": "toolCall", "id": "c1", "name": "bash",
                "arguments": {"command": "cat big.log"}}],
            "stopReason": "toolUse"}}),
        json!({"type": "message", "message": {"role": "toolResult", "toolCallId": "c1",
            "toolName": "bash", "timestamp": 3, "isError": false,
            "content": [{"type": "text", "text": output}]}}),
    ];
    // 50k tokens of later tool output, so the big one is outside the protected newest 40k.
    for i in 0..2 {
        let id = format!("later{i}");
        entries.push(
            json!({"type": "message", "message": {"role": "assistant", "timestamp": 4,
            "content": [{"type": "toolCall", "id": id, "name": "bash",
                "arguments": {"command": "ls"}}], "stopReason": "toolUse"}}),
        );
        entries.push(json!({"type": "message", "message": {"role": "toolResult",
            "toolCallId": id, "toolName": "bash", "timestamp": 5, "isError": false,
            "content": [{"type": "text", "text": "file ".repeat(20_000)}]}}));
    }
    entries.push(devtools::daemon::assistant("done", 1000));
    d.ok(
        "session/append",
        json!({"sessionId": session, "entries": entries}),
    )
    .await;
    let pruned = d.ok("session/prune", json!({"sessionId": session})).await;
    assert_eq!(pruned["prunedCount"], 1, "{pruned}");
    let result_id = pruned["prunedEntryIds"][0].as_str().unwrap().to_owned();

    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let messages = context["messages"].as_array().unwrap();
    let result = &messages[2];
    assert_eq!(result["role"], "toolResult");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.len() < 1_000,
        "the pruned output came back: {} chars",
        text.len()
    );
    assert!(result.get("originalContent").is_none(), "{result}");
    assert!(
        context.to_string().len() < 400_000,
        "the context carries more than the model sees"
    );
    // The counts are those of what the context holds: the notice, not 150k tokens.
    let per_message = d
        .ok(
            "session/context",
            json!({"sessionId": session, "perMessage": true}),
        )
        .await;
    let tokens = per_message["messageTokens"].as_array().unwrap();
    assert!(tokens[2].as_u64().unwrap() < 500, "{}", tokens[2]);
    assert!(
        context["tokens"].as_u64().unwrap() < 100_000,
        "{}",
        context["tokens"]
    );

    // The file keeps the original, and the full text's reference now points at it.
    let stored: Vec<Value> = d.stored_entries(&path);
    let entry = stored
        .iter()
        .find(|e| e["id"] == result_id.as_str())
        .unwrap();
    let refs = entry["compactdFullText"].as_object().unwrap();
    assert_eq!(
        refs.keys().collect::<Vec<_>>(),
        ["/message/originalContent/0/text"]
    );
    assert!(
        entry["message"]["originalContent"][0]["text"]
            .as_str()
            .unwrap()
            .ends_with("[Session persistence truncated large content]")
    );
    d.drain_buffer();
    d.finish().await;
}
