//! Fault injection on the LLM side (issue 6, item 3): 20 sessions compact at once through an
//! OpenAI-compatible provider whose fake server, per request, delays, answers 4xx/5xx, resets
//! the connection mid-stream, sends invalid JSON, or streams forever. The daemon must keep
//! answering other requests, every compaction must end (success, typed error, or cancel after
//! a deadline), no partial summary may be written, and memory must stay bounded.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use devtools::daemon::{DaemonProcess, SpawnOptions, conversation};
use devtools::fake_llm::{FakeLlm, Reply, StreamEnd, openai_sse};
use serde_json::{Value, json};

const SESSIONS: usize = 20;
/// The complete summary of a successful reply; partial replies start with its first word.
const FULL: &str = "FAULTLESS SUMMARY COMPLETE";

/// splitmix64: a seeded, dependency-free PRNG.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn seed() -> u64 {
    std::env::var("COMPACTD_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0006)
}

/// The reply to request number `n`.
fn chaos(seed: u64, n: usize) -> Reply {
    let r = mix(seed ^ (n as u64).wrapping_mul(0x1000_0001));
    let delay = Duration::from_millis(r >> 32 & 0xff);
    let delta =
        json!({"choices":[{"index":0,"delta":{"content":"x".repeat(2000)},"finish_reason":null}]});
    match r % 10 {
        0 | 1 => openai_sse(&["FAULTLESS ", "SUMMARY ", "COMPLETE"], "stop").delayed(delay),
        2 => Reply::json(400, json!({"error": {"message": "bad request"}})),
        3 => Reply::json(500, json!({"error": {"message": "internal"}})).delayed(delay),
        4 => Reply::json(503, json!({"error": "overloaded"})),
        5 => openai_sse(&["FAULTLESS ", "SUMMARY ", "COMPLETE"], "stop")
            .first_chunks(2)
            .ending(StreamEnd::Reset),
        6 => Reply::sse(&["{\"choices\": [", "not json at all"]),
        7 => Reply::endless(&delta.to_string(), Duration::from_millis(1)),
        8 => Reply::text(200, "<html>not an event stream</html>"),
        _ => Reply::endless(": keep-alive", Duration::from_millis(20)).delayed(delay),
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// The daemon with the fake server as its only summarizer (two retries, 5 ms apart), chars/4
/// counting and no automatic compaction.
async fn daemon_against(server: &FakeLlm) -> DaemonProcess {
    let settings = json!({
        // Every session's request at once, as against a hosted API (a server on this machine
        // would get one slot by default).
        "providers": {"fake": {"kind": "openai", "baseUrl": format!("{}/v1", server.url()),
            "maxParallelRequests": 32,
            "models": {"m": {"contextWindow": 200000, "maxOutputTokens": 8000}}}},
        "summarizer": {"kind": "openai", "model": "fake/m"},
        "retry": {"enabled": true, "maxRetries": 2, "baseDelayMs": 5},
        "tokenizer": "chars4",
        "compaction": {"enabled": false, "keepRecentTokens": 300},
    });
    DaemonProcess::spawn_opts(SpawnOptions {
        settings: Some(settings),
        ..SpawnOptions::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_sessions_survive_a_chaotic_llm() {
    let seed = seed();
    let server = FakeLlm::start().await;
    server.set_generator(move |n| chaos(seed, n));
    let mut d = daemon_against(&server).await;
    d.initialize(json!({}), json!({})).await;
    let bystander = d.create_session().await;
    let mut sessions = Vec::new();
    let mut paths = HashMap::new();
    for _ in 0..SESSIONS {
        let info = d.ok("session/create", json!({"cwd": d.project()})).await;
        let s = info["sessionId"].as_str().unwrap().to_owned();
        paths.insert(s.clone(), info["path"].as_str().unwrap().to_owned());
        d.append(&s, conversation(6, 60)).await;
        sessions.push(s);
    }
    let rss_before = rss_kib(d.pid());

    let mut pending: HashMap<i64, String> = HashMap::new();
    for s in &sessions {
        let id = d
            .send_request("session/compact", json!({"sessionId": s}))
            .await;
        pending.insert(id, s.clone());
    }
    let started = Instant::now();
    let deadline = Duration::from_secs(8);
    let mut aborted = HashSet::new();
    let mut results: HashMap<String, Value> = HashMap::new();
    let mut slowest_cheap = Duration::ZERO;
    while !pending.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "compactions still running after 60 s: {pending:?}"
        );
        // A cheap request on an idle session is answered while the compactions run.
        let asked = Instant::now();
        d.ok("session/usage", json!({"sessionId": bystander})).await;
        slowest_cheap = slowest_cheap.max(asked.elapsed());
        d.pump(Duration::from_millis(50)).await;
        for (id, s) in pending.clone() {
            if let Some(response) = d.take_response(id) {
                results.insert(s, response);
                pending.remove(&id);
            }
        }
        if started.elapsed() > deadline {
            for s in pending.values() {
                if aborted.insert(s.clone()) {
                    d.ok("session/abortCompaction", json!({"sessionId": s}))
                        .await;
                }
            }
        }
    }
    assert!(
        slowest_cheap < Duration::from_secs(2),
        "a cheap request waited {slowest_cheap:?}"
    );

    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for s in &sessions {
        let response = &results[s];
        let entries = d.stored_entries(&paths[s]);
        let compactions: Vec<&Value> = entries
            .iter()
            .filter(|e| e["type"] == "compaction")
            .collect();
        if let Some(error) = response.get("error") {
            let kind = error["data"]["kind"].as_str().unwrap_or("?");
            assert!(
                ["cancelled", "summarizationFailed"].contains(&kind),
                "untyped error: {error}"
            );
            assert!(
                compactions.is_empty(),
                "a failed compaction wrote {compactions:?}"
            );
            *outcomes
                .entry(if kind == "cancelled" {
                    "cancelled"
                } else {
                    "failed"
                })
                .or_default() += 1;
        } else {
            assert_eq!(compactions.len(), 1, "{s}: {response}");
            let summary = compactions[0]["summary"].as_str().unwrap();
            // Either the whole model answer or the extractive fallback, never a fragment.
            assert!(
                summary.contains(FULL) || !summary.contains("FAULTLESS"),
                "partial summary written: {summary}"
            );
            assert!(!summary.contains("xxxxxxxxxx"), "endless stream text kept");
            let kind = if summary.contains(FULL) {
                "model"
            } else {
                "fallback"
            };
            *outcomes.entry(kind).or_default() += 1;
        }
        // Every session still loads whole.
        let (session, report) = d.stored_session(&paths[s]);
        assert!(report.skipped.is_empty() && report.torn_tail.is_none());
        assert!(session.leaf_id().is_some());
    }
    let rss_after = rss_kib(d.pid());
    eprintln!(
        "faults: seed {seed:#x}, outcomes {outcomes:?}, aborted {}, slowest cheap request \
         {slowest_cheap:?}, RSS {rss_before} -> {rss_after} KiB, {} LLM requests",
        aborted.len(),
        server.requests().len()
    );
    assert!(
        rss_after < rss_before + 256 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
    assert!(outcomes.values().sum::<usize>() == SESSIONS);
    d.kill().await;
}

/// A stream that breaks after some of its text reached the client is retried; the client is
/// told to discard the text it has (`reset: true`) before the new attempt's text, so a viewer
/// that concatenates deltas shows the summary actually written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_stream_resets_the_streamed_text() {
    let server = FakeLlm::start().await;
    // The first request streams two pieces, slowly enough to be sent on, then the connection
    // is reset; every later request succeeds.
    server.push(
        openai_sse(&["LOST DRAFT ", "MORE LOST ", "NEVER SENT"], "stop")
            .chunk_delay(Duration::from_millis(120))
            .first_chunks(3)
            .ending(StreamEnd::Reset),
    );
    server.set_default(openai_sse(&["## Goal\nThe final ", "summary."], "stop"));
    let mut d = daemon_against(&server).await;
    let s = d.start_session().await;
    d.append(&s, conversation(6, 60)).await;
    let result = d.ok("session/compact", json!({"sessionId": s})).await;
    let summary = result["summary"].as_str().unwrap();
    assert!(summary.contains("The final summary."), "{summary}");
    assert!(!summary.contains("LOST"), "{summary}");
    d.expect_notification("session/compactionFinished").await;

    let deltas = d.take_all("session/compactionDelta");
    let resets: Vec<&Value> = deltas.iter().filter(|d| d["reset"] == true).collect();
    assert_eq!(resets.len(), 1, "{deltas:#?}");
    assert_eq!(resets[0]["text"], "");
    // What a client that appends deltas and clears on a reset shows, per part.
    let mut shown: HashMap<String, String> = HashMap::new();
    for delta in &deltas {
        let text = shown
            .entry(delta["part"].as_str().unwrap().to_owned())
            .or_default();
        if delta["reset"] == true {
            text.clear();
        }
        text.push_str(delta["text"].as_str().unwrap());
    }
    let reset_part = resets[0]["part"].as_str().unwrap();
    assert!(
        deltas
            .iter()
            .take_while(|d| d["reset"] != true)
            .any(|d| d["part"] == reset_part && d["text"].as_str().unwrap().contains("LOST")),
        "the broken attempt's text was sent before the reset: {deltas:#?}"
    );
    for (part, text) in &shown {
        assert!(!text.contains("LOST"), "{part}: {text}");
    }
    assert_eq!(shown["history"], "## Goal\nThe final summary.");
    d.drain_buffer();
    d.finish().await;
}

/// The history report of a compaction result's `details.summarizers`.
fn history_report(details: &Value) -> &Value {
    details["summarizers"]
        .as_array()
        .and_then(|reports| reports.iter().find(|r| r["part"] == "history"))
        .unwrap_or_else(|| panic!("no history report in {details}"))
}

/// Every model fails: one answers HTTP 500, the other echoes the prompt's markup (rejected by
/// the answer checks). The extractive rung writes the summary, and the client is told which
/// summarizer wrote it and why each one before it gave up: in the result, in
/// `session/compactionFinished`, in the entry's `details`; the same for a branch summary (in
/// the `session/navigateTree` result and `session/treeNavigated`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_says_which_summarizer_wrote_it_and_why_the_others_failed() {
    let down = FakeLlm::start().await;
    down.set_default(Reply::json(500, json!({"error": {"message": "internal"}})));
    let echo = FakeLlm::start().await;
    echo.set_default(openai_sse(
        &["<conversation>\n[User]: please go on\n[Assistant]: going on"],
        "stop",
    ));
    let provider = |server: &FakeLlm| {
        json!({"kind": "openai", "baseUrl": format!("{}/v1", server.url()),
               "discoverLimits": false,
               "models": {"m": {"contextWindow": 200000, "maxOutputTokens": 8000}}})
    };
    let settings = json!({
        "providers": {"down": provider(&down), "echo": provider(&echo)},
        "summarizer": {"model": "down/m", "candidates": ["echo/m"]},
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
    let info = d.ok("session/create", json!({"cwd": d.project()})).await;
    let s = info["sessionId"].as_str().unwrap().to_owned();
    let path = info["path"].as_str().unwrap().to_owned();
    let appended = d.append(&s, conversation(6, 60)).await;
    let first_user = appended["appended"][0].clone();

    let check = |report: &Value, what: &str| {
        assert_eq!(report["summarizer"], "extractive", "{what}: {report}");
        let failures = report["failures"].as_array().expect("failures");
        let tried: Vec<&str> = failures
            .iter()
            .map(|f| f["summarizer"].as_str().unwrap())
            .collect();
        assert_eq!(tried, ["down/m", "echo/m"], "{what}: {report}");
        let why = |i: usize| failures[i]["reason"].as_str().unwrap();
        assert!(why(0).contains("HTTP 500"), "{what}: {}", why(0));
        assert!(
            why(1).starts_with("answer rejected: "),
            "{what}: {}",
            why(1)
        );
    };

    let result = d.ok("session/compact", json!({"sessionId": s})).await;
    assert_eq!(result["summarizer"], "extractive", "{result}");
    check(history_report(&result["details"]), "the result");
    let finished = d.expect_notification("session/compactionFinished").await;
    assert_eq!(finished["result"]["details"], result["details"]);
    let entries = d.stored_entries(&path);
    let compaction = entries
        .iter()
        .find(|e| e["type"] == "compaction")
        .expect("the compaction entry");
    check(history_report(&compaction["details"]), "the entry");
    assert_eq!(
        compaction["details"]["summarizers"],
        result["details"]["summarizers"]
    );

    let navigated = d
        .ok(
            "session/navigateTree",
            json!({"sessionId": s, "targetId": first_user, "summarize": true}),
        )
        .await;
    assert_eq!(navigated["summarizer"], "extractive", "{navigated}");
    let report = &navigated["summarizers"][0];
    assert_eq!(report["part"], "branch");
    check(report, "the navigation result");
    let event = d.expect_notification("session/treeNavigated").await;
    assert_eq!(event["summarizer"], "extractive");
    assert_eq!(event["summarizers"], navigated["summarizers"]);
    let stored = &navigated["summaryEntry"]["details"]["summarizers"];
    assert_eq!(stored, &navigated["summarizers"], "{navigated}");
    let entries = d.stored_entries(&path);
    let branch = entries
        .iter()
        .find(|e| e["type"] == "branch_summary")
        .expect("the branch summary entry");
    assert_eq!(&branch["details"]["summarizers"], stored);
    d.drain_buffer();
    d.finish().await;
}
