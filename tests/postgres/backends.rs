//! One scenario, both backends: what a client sees does not depend on where entries live.

use devtools::daemon::{assistant, user};
use serde_json::{Value, json};

use crate::support::{BOTH, Backend, daemon, user_texts};

fn settings() -> Value {
    json!({"tokenizer": "chars4", "compaction": {"enabled": false, "keepRecentTokens": 60}})
}

fn turn(i: usize) -> Value {
    json!([
        user(&format!("question {i}: {}", "words ".repeat(30))),
        assistant(&format!("answer {i}: {}", "more ".repeat(30)), 100)
    ])
}

/// Strips what differs by design between two runs (ids, times, paths).
fn shape(context: &Value) -> Vec<(String, String)> {
    context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                other => other.to_string(),
            };
            (m["role"].as_str().unwrap_or("").to_owned(), text)
        })
        .collect()
}

async fn scenario(backend: Backend) -> Vec<Value> {
    let mut d = daemon(backend, settings()).await;
    let s = d.create_session().await;
    let mut seen = Vec::new();
    for i in 0..6 {
        d.append(&s, turn(i)).await;
    }
    let compacted = d.ok("session/compact", json!({"sessionId": s})).await;
    assert!(compacted["entryId"].is_string(), "{backend:?}: {compacted}");
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    let context = d.ok("session/context", json!({"sessionId": s})).await;
    seen.push(json!(shape(&context)));
    let tree = d.ok("session/tree", json!({"sessionId": s})).await;
    // The second answer: navigating there leaves four turns and the compaction behind.
    let first = tree["nodes"][3]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{tree}"))
        .to_owned();
    d.ok(
        "session/setLabel",
        json!({"sessionId": s, "targetId": first, "label": "start"}),
    )
    .await;
    d.take_all("session/entriesAppended");
    let nav = d
        .ok(
            "session/navigateTree",
            json!({"sessionId": s, "targetId": first, "summarize": true}),
        )
        .await;
    assert_eq!(nav["cancelled"], false, "{nav}");
    d.take_all("session/treeNavigated");
    d.take_all("session/entriesAppended");
    let after_nav = d.ok("session/context", json!({"sessionId": s})).await;
    seen.push(json!(shape(&after_nav)));
    d.append(&s, json!([user("on the new branch")])).await;
    let forked = d.ok("session/fork", json!({"sessionId": s})).await;
    let fork_id = forked["sessionId"].as_str().unwrap().to_owned();
    let fork_context = d.ok("session/context", json!({"sessionId": fork_id})).await;
    let own = d.ok("session/context", json!({"sessionId": s})).await;
    assert_eq!(
        shape(&fork_context),
        shape(&own),
        "{backend:?}: a fork has the same context"
    );
    seen.push(json!(user_texts(&own)));
    let listed = d.ok("session/list", json!({})).await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["sessionId"].as_str())
        .collect();
    assert!(
        ids.contains(&s.as_str()) && ids.contains(&fork_id.as_str()),
        "{backend:?}: {listed}"
    );
    d.ok("session/close", json!({"sessionId": s})).await;
    // Opened again by id (files: from the sessions directory; Postgres: from the database).
    let reopened = d.ok("session/open", json!({"sessionId": s})).await;
    assert_eq!(reopened["sessionId"], s);
    let again = d.ok("session/context", json!({"sessionId": s})).await;
    assert_eq!(
        shape(&again),
        shape(&own),
        "{backend:?}: reopening gives the same context"
    );
    d.finish().await;
    seen
}

#[tokio::test]
async fn the_same_scenario_gives_the_same_context_on_both_backends() {
    let mut results = Vec::new();
    for backend in BOTH {
        results.push(scenario(backend).await);
    }
    assert_eq!(results[0], results[1]);
}
