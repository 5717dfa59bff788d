//! What a client is told while a summary is written: `$/progress` reports of each summary's
//! status (queued for its server's one slot, waiting for the model's first token, which chunk
//! of how many), and a streamed answer throttled to a few reports however many deltas it has.

use std::time::Duration;

use devtools::daemon::{DaemonProcess, SpawnOptions, assistant, user};
use devtools::fake_llm::{FakeLlm, Gate, openai_sse};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// The daemon with the fake server on 127.0.0.1 as its only summarizer: a server on this
/// machine, so one request at a time (no `maxParallelRequests`), with a `window`-token window.
async fn daemon_against(server: &FakeLlm, window: u64) -> DaemonProcess {
    let settings = json!({
        "providers": {"local": {"kind": "openai", "baseUrl": format!("{}/v1", server.url()),
            "models": {"m": {"contextWindow": window, "maxOutputTokens": 64}}}},
        "summarizer": {"kind": "openai", "model": "local/m"},
        "retry": {"enabled": true, "maxRetries": 1, "baseDelayMs": 5},
        "tokenizer": "chars4",
        "compaction": {"enabled": false, "keepRecentTokens": 300},
    });
    let mut d = DaemonProcess::spawn_opts(SpawnOptions {
        settings: Some(settings),
        ..SpawnOptions::default()
    })
    .await;
    d.initialize(json!({}), json!({})).await;
    d
}

fn messages_of(progress: &[Value]) -> Vec<String> {
    progress
        .iter()
        .filter(|p| p["value"]["kind"] == "report")
        .filter_map(|p| p["value"]["message"].as_str().map(str::to_owned))
        .collect()
}

const SUMMARY: &str = "## Goal\n- Refactor the parser.\n\n## Progress\n- Edited the files.\n";

/// A split turn on a one-slot server: the history (long enough for several chunks) and the turn
/// prefix are asked at once, so one of them waits in compactd's queue while the other waits
/// for its first token. The test sees both statuses before it lets the model answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_statuses_reach_the_client_as_progress() {
    let server = FakeLlm::start().await;
    let first_token = Gate::new();
    server.push(openai_sse(&[SUMMARY], "stop").held_by(&first_token));
    server.set_default(openai_sse(&[SUMMARY], "stop"));
    let mut d = daemon_against(&server, 3_000).await;
    let s = d.create_session().await;
    // About 5,600 tokens of history for a 3,000-token window: several chunks.
    let bulk = "lorem ipsum dolor sit amet ".repeat(100);
    let mut entries = Vec::new();
    for i in 0..4 {
        entries.push(user(&format!(
            "Step {i}: please edit src/file{i}.rs. {bulk}"
        )));
        entries.push(assistant(&format!("Done with step {i}. {bulk}"), 1000));
    }
    // One long last turn, cut inside: its start is the turn prefix.
    let step = "I changed one more function and ran the tests again. ".repeat(14);
    entries.push(user("Now refactor the parser into its own module."));
    for i in 0..4 {
        entries.push(assistant(&format!("Part {i}: {step}"), 1000));
    }
    d.append(&s, Value::Array(entries)).await;

    let id = d
        .send_request(
            "session/compact",
            json!({"sessionId": s, "workDoneToken": "tok"}),
        )
        .await;
    // Before the model says anything: one part sent and waiting, the other queued.
    let mut seen = Vec::new();
    while !(seen
        .iter()
        .any(|m: &String| m.contains(": queued for local/m"))
        && seen
            .iter()
            .any(|m| m.contains(": waiting for the model local/m")))
    {
        let p = tokio::time::timeout(WAIT, d.expect_notification("$/progress"))
            .await
            .unwrap_or_else(|_| panic!("no queued and waiting statuses: {seen:#?}"));
        assert_eq!(p["token"], "tok");
        seen.extend(messages_of(&[p]));
    }
    // "Waiting" is reported once the request is sent, which can be before the server has
    // recorded it: wait for that one, then check that no second one went out.
    server.wait_for_requests(1, WAIT).await;
    assert_eq!(
        server.requests().len(),
        1,
        "one request at a time to the one slot"
    );
    first_token.open();
    let result = d.read_until_response(id).await["result"].clone();
    assert_eq!(result["summarizer"], "local/m", "{result:#}");
    d.expect_notification("session/compactionFinished").await;
    let mut progress: Vec<Value> = d.take_all("$/progress");
    assert_eq!(
        progress.last().unwrap()["value"],
        json!({"kind": "end", "message": "done"})
    );
    progress.pop();
    seen.extend(messages_of(&progress));

    let chunks = seen
        .iter()
        .filter_map(|m| m.strip_prefix("history: waiting for the model local/m (chunk "))
        .map(|m| m.trim_end_matches(')'))
        .collect::<Vec<_>>();
    assert!(chunks.len() >= 2, "the history in chunks: {seen:#?}");
    let of = chunks[0].split_once(" of ").unwrap().1;
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(*chunk, format!("{} of {of}", i + 1), "{seen:#?}");
    }
    assert_eq!(chunks.len().to_string(), of, "{seen:#?}");
    assert!(
        seen.iter()
            .any(|m| m.starts_with("turn prefix: waiting for the model local/m")),
        "{seen:#?}"
    );
    d.take_all("session/compactionStarted");
    d.take_all("session/compactionDelta");
    d.take_all("session/entriesAppended");
    d.finish().await;
}

/// A fast answer of 2,000 deltas (for each part: 6,000) gives a handful of
/// `$/progress` reports, not one per delta; the final character count and the `end` arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_stream_of_many_deltas_is_throttled() {
    let server = FakeLlm::start().await;
    let words: Vec<String> = (0..2_000).map(|i| format!("w{i} ")).collect();
    let deltas: Vec<&str> = words.iter().map(String::as_str).collect();
    server.set_default(openai_sse(&deltas, "stop"));
    let mut d = daemon_against(&server, 200_000).await;
    let s = d.create_session().await;
    d.append(&s, devtools::daemon::conversation(6, 60)).await;

    let result = d
        .ok(
            "session/compact",
            json!({"sessionId": s, "workDoneToken": "tok"}),
        )
        .await;
    assert_eq!(result["summarizer"], "local/m", "{result:#}");
    d.expect_notification("session/compactionFinished").await;
    let progress = d.take_all("$/progress");
    let streamed: usize = d
        .take_all("session/compactionDelta")
        .iter()
        .map(|delta| delta["text"].as_str().unwrap().chars().count())
        .sum();
    // Every request (history, turn prefix, short summary) streamed the whole answer.
    let answers = server.requests().len();
    assert!(answers >= 2);
    assert_eq!(streamed, answers * words.concat().chars().count());

    let reports = messages_of(&progress);
    assert!(
        reports.len() < 100,
        "{} reports for {} deltas: {reports:#?}",
        reports.len(),
        answers * deltas.len()
    );
    let last_count = reports
        .iter()
        .rev()
        .find_map(|m| m.strip_prefix("summarizing ("))
        .expect("a character count");
    assert_eq!(
        last_count,
        format!("{streamed} characters)"),
        "{reports:#?}"
    );
    assert_eq!(
        progress.last().unwrap()["value"],
        json!({"kind": "end", "message": "done"})
    );
    d.take_all("session/compactionStarted");
    d.take_all("session/entriesAppended");
    d.finish().await;
}
