//! Concurrency through the daemon: slow compactions on several sessions do not hold up cheap
//! requests; a background auto-compaction (`waitForCompaction: false`) still orders later
//! mutating requests on its session behind it; pipelined reads see exactly the writes sent
//! before them, and pass a running compaction; raw entries keep their fields.

use std::time::Duration;

use devtools::daemon::{DaemonProcess, Framing, assistant, conversation, user};
use devtools::fake_llm::{FakeLlm, StreamEnd};
use serde_json::{Value, json};

const SESSIONS: usize = 4;

#[tokio::test]
async fn a_cheap_request_answers_while_four_slow_compactions_run() {
    let llm = FakeLlm::start().await;
    // Every summary request streams its first delta and then stalls (no finish, no `[DONE]`):
    // the compactions stay running until they are aborted.
    llm.set_default(
        devtools::fake_llm::openai_sse(&["## Goal\n", "- keep going"], "stop")
            .first_chunks(2)
            .ending(StreamEnd::Hang),
    );
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    let settings = json!({
        // Four slots: a server on this machine gets one by default, which would queue them.
        "providers": {"fake": {"kind": "openai", "baseUrl": llm.url(), "apiKey": "test",
                               "maxParallelRequests": 4,
                               "models": {"fake-model": {"contextWindow": 100000}}}},
        "summarizer": {"kind": "openai", "model": "fake/fake-model"},
        "compaction": {"keepRecentTokens": 200}
    });
    d.initialize(json!({}), json!({"settings": settings})).await;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let session = d.create_session().await;
        d.append(&session, conversation(4, 40)).await;
        sessions.push(session);
    }
    let mut compacts = Vec::new();
    for session in &sessions {
        compacts.push(
            d.send_request("session/compact", json!({"sessionId": session}))
                .await,
        );
    }
    // All four have started and are inside their summarizer calls, which never finish.
    for _ in 0..SESSIONS {
        d.expect_notification("session/compactionStarted").await;
    }
    llm.wait_for_requests(SESSIONS, Duration::from_secs(30))
        .await;

    let usage = d
        .ok("session/usage", json!({"sessionId": sessions[0]}))
        .await;
    assert_eq!(usage["isCompacting"], true, "{usage}");
    // No compaction answered before the usage request did.
    for id in &compacts {
        assert!(
            !d.has_response(*id),
            "session/compact {id} finished before session/usage answered"
        );
    }

    let mut aborted = Vec::new();
    for session in &sessions {
        let answer = d
            .ok("session/abortCompaction", json!({"sessionId": session}))
            .await;
        aborted.push(answer["aborted"].clone());
    }
    let mut responses = Vec::new();
    for id in compacts {
        responses.push(d.read_until_response(id).await);
    }
    for (answer, response) in aborted.iter().zip(&responses) {
        assert_eq!(answer, true, "{response}");
        assert_eq!(response["error"]["data"]["kind"], "cancelled", "{response}");
    }
    for _ in 0..SESSIONS {
        let finished = d.expect_notification("session/compactionFinished").await;
        assert_eq!(finished["aborted"], true);
        assert_eq!(finished["error"]["kind"], "cancelled");
    }
    d.take_all("session/compactionDelta");
    d.finish().await;
}

#[tokio::test]
async fn a_background_auto_compaction_answers_at_once_and_later_appends_wait_for_it() {
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    let settings = json!({
        "compaction": {"keepRecentTokens": 200, "reserveTokens": 1000, "autoContinue": false},
        "providers": {"anthropic": {"models": {"claude-sonnet-4-5": {"contextWindow": 8000}}}}
    });
    d.initialize(json!({}), json!({"settings": settings})).await;
    let session = d.create_session().await;
    d.append(&session, conversation(6, 40)).await;

    let first = d
        .send_request(
            "session/append",
            json!({"sessionId": session, "entries": [assistant("big reply", 7_100)]}),
        )
        .await;
    // Sent before the first is answered: queued on the session, and must wait for the
    // compaction the first one started.
    let second = d
        .send_request(
            "session/append",
            json!({"sessionId": session, "entries": [devtools::daemon::user("next")]}),
        )
        .await;
    let result = d.read_until_response(first).await;
    assert_eq!(result["result"]["action"], "compacting", "{result}");
    assert!(result["result"].get("autoCompaction").is_none());
    let result = d.read_until_response(second).await;
    assert_eq!(result["result"]["action"], "continue", "{result}");
    // The compaction's end was reported before the second append answered.
    let finished = d.take_all("session/autoCompactionFinished");
    assert_eq!(finished.len(), 1, "the auto-compaction had not finished");
    let started = d.take_all("session/autoCompactionStarted");
    assert_eq!(started[0]["operationId"], finished[0]["operationId"]);
    assert_eq!(finished[0]["reason"], "threshold");
    assert!(
        finished[0]["result"]["entryId"].is_string(),
        "{}",
        finished[0]
    );
    let compaction = d.take_all("session/compactionStarted");
    assert_eq!(compaction[0]["operationId"], started[0]["operationId"]);
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    // The second append's entry is the child of the compaction.
    let path = d.ok("session/tree", json!({"sessionId": session})).await;
    let leaf = path["leafId"].clone();
    let nodes = path["nodes"].as_array().unwrap();
    let node = nodes.iter().find(|n| n["id"] == leaf).unwrap();
    assert_eq!(node["parentId"], finished[0]["result"]["entryId"], "{node}");
    d.finish().await;
}

/// A manual compaction asked for while a background auto-compaction runs is refused before it
/// starts anything: the auto-compaction keeps its progress and still reports its end.
#[tokio::test]
async fn a_compaction_refused_while_an_auto_compaction_runs_leaves_the_auto_one_reported() {
    let llm = FakeLlm::start().await;
    llm.set_default(
        devtools::fake_llm::openai_sse(&["## Goal\n"], "stop")
            .first_chunks(1)
            .ending(StreamEnd::Hang),
    );
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    let settings = json!({
        "compaction": {"keepRecentTokens": 200, "reserveTokens": 1000, "autoContinue": false},
        "providers": {
            "anthropic": {"models": {"claude-sonnet-4-5": {"contextWindow": 8000}}},
            "fake": {"kind": "openai", "baseUrl": llm.url(), "apiKey": "test",
                     "models": {"fake-model": {"contextWindow": 100000}}}
        },
        "summarizer": {"kind": "openai", "model": "fake/fake-model"}
    });
    d.initialize(json!({}), json!({"settings": settings})).await;
    let session = d.create_session().await;
    d.append(&session, conversation(6, 40)).await;
    let appended = d
        .ok(
            "session/append",
            json!({"sessionId": session, "entries": [assistant("big reply", 7_100)]}),
        )
        .await;
    assert_eq!(appended["action"], "compacting", "{appended}");
    let started = d.expect_notification("session/autoCompactionStarted").await;
    llm.wait_for_requests(1, Duration::from_secs(30)).await;

    d.err(
        "session/compact",
        json!({"sessionId": session}),
        "compactionInProgress",
    )
    .await;
    let aborted = d
        .ok("session/abortCompaction", json!({"sessionId": session}))
        .await;
    assert_eq!(aborted["aborted"], true);
    let finished = d
        .expect_notification("session/autoCompactionFinished")
        .await;
    assert_eq!(finished["operationId"], started["operationId"]);
    assert_eq!(finished["aborted"], true, "{finished}");
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    d.finish().await;
}

/// One write holds 30 appends, each followed by a context read and a tree read (and the
/// first append preceded by one of each): every read sees exactly the appends sent before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_reads_see_exactly_the_writes_sent_before_them() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let reads = |session: &str| {
        [
            ("session/context", json!({"sessionId": session})),
            ("session/tree", json!({"sessionId": session})),
        ]
    };
    let mut burst = Vec::from(reads(&session));
    for i in 0..30 {
        let append = json!({"sessionId": session, "entries": [user(&format!("m{i}"))]});
        burst.push(("session/append", append));
        burst.extend(reads(&session));
    }
    let ids = d.send_burst(burst).await;
    let (first, rest) = ids.split_at(2);
    check_reads_after(&mut d, 0, first).await;
    for (i, group) in rest.chunks(3).enumerate() {
        d.response_result(group[0]).await.expect("an append");
        check_reads_after(&mut d, i + 1, &group[1..]).await;
    }
    d.take_all("session/entriesAppended");
    d.finish().await;
}

/// The context and tree reads `ids` show the `n` appends `m0`..: `n` messages, the last `m{n-1}`.
async fn check_reads_after(d: &mut DaemonProcess, n: usize, ids: &[i64]) {
    let context = d.response_result(ids[0]).await.expect("a context read");
    let messages = context["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), n, "read after {n} appends: {context}");
    if n > 0 {
        let last = format!("\"m{}\"", n - 1);
        assert!(messages[n - 1].to_string().contains(&last), "{context}");
    }
    let tree = d.response_result(ids[1]).await.expect("a tree read");
    assert_eq!(tree["nodes"].as_array().map(Vec::len), Some(n), "{tree}");
}

/// A read sent right behind a compaction (whose model never answers) is answered while the
/// compaction runs, with the session as it was; an append sent behind both waits for the
/// compaction.
#[tokio::test]
async fn reads_pass_a_running_compaction_and_writes_wait_for_it() {
    let llm = FakeLlm::start().await;
    llm.set_default(
        devtools::fake_llm::openai_sse(&["## Goal\n"], "stop")
            .first_chunks(1)
            .ending(StreamEnd::Hang),
    );
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    let settings = json!({
        "providers": {"fake": {"kind": "openai", "baseUrl": llm.url(), "apiKey": "test",
                               "models": {"fake-model": {"contextWindow": 100000}}}},
        "summarizer": {"kind": "openai", "model": "fake/fake-model"},
        "compaction": {"keepRecentTokens": 200}
    });
    d.initialize(json!({}), json!({"settings": settings})).await;
    let session = d.create_session().await;
    d.append(&session, conversation(4, 40)).await;
    let before = d.ok("session/context", json!({"sessionId": session})).await;
    let s = json!({"sessionId": session});
    let append = json!({"sessionId": session, "entries": [user("after the compaction")]});
    let ids = d
        .send_burst(vec![
            ("session/compact", s.clone()),
            ("session/context", s.clone()),
            ("session/usage", s.clone()),
            ("session/append", append),
        ])
        .await;
    let [compact, context, usage, append] = ids[..] else {
        unreachable!()
    };
    let read = d.response_result(context).await.expect("a context read");
    assert_eq!(
        read["messages"], before["messages"],
        "the session as it was"
    );
    let usage = d.response_result(usage).await.expect("a usage read");
    assert_eq!(usage["isCompacting"], true, "{usage}");
    llm.wait_for_requests(1, Duration::from_secs(30)).await;
    assert!(!d.has_response(compact), "the compaction still runs");
    assert!(
        !d.has_response(append),
        "the append waits for the compaction"
    );
    d.ok("session/abortCompaction", s.clone()).await;
    let compacted = d.response_result(compact).await.expect_err("aborted");
    assert_eq!(compacted["data"]["kind"], "cancelled", "{compacted}");
    d.response_result(append)
        .await
        .expect("the append, once the compaction ended");
    let after = d.ok("session/context", s).await;
    let messages = after["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        before["messages"].as_array().unwrap().len() + 1
    );
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionFinished");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    d.finish().await;
}

#[tokio::test]
async fn raw_entries_keep_every_field() {
    let mut d = DaemonProcess::spawn().await;
    let session = d.start_session().await;
    let info = d.ok("session/open", json!({"sessionId": session})).await;
    let raw_unknown = json!({"type": "my_extension_state", "state": {"step": 3, "flags": [true, null]},
                             "note": null, "id": "client-id"});
    let raw_known = json!({"type": "custom", "customType": "x", "data": {"a": 1}, "pinned": true});
    d.append(
        &session,
        json!([{"type": "raw", "entry": raw_unknown}, {"type": "raw", "entry": raw_known}]),
    )
    .await;
    let entries = d.stored_entries(info["path"].as_str().unwrap());
    let unknown = entries
        .iter()
        .find(|e| e["type"] == "my_extension_state")
        .expect("the unknown entry is stored");
    assert_eq!(unknown["state"], json!({"step": 3, "flags": [true, null]}));
    assert_eq!(unknown["note"], Value::Null);
    assert!(unknown.as_object().unwrap().contains_key("note"));
    assert_ne!(unknown["id"], "client-id", "the server assigns ids");
    let known = entries.iter().find(|e| e["type"] == "custom").unwrap();
    assert_eq!(known["pinned"], true);
    assert_eq!(known["data"], json!({"a": 1}));
    // Reserved types are refused.
    d.err(
        "session/append",
        json!({"sessionId": session, "entries": [{"type": "raw", "entry": {"type": "compaction",
            "summary": "s", "firstKeptEntryId": "x", "tokensBefore": 1}}]}),
        "invalidParams",
    )
    .await;
    d.finish().await;
}
