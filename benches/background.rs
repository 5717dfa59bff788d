//! Background compaction as an agent sees it (issue 30): a scripted agent drives the release
//! `compactd` binary over real pipes, growing a session turn by turn past the threshold, with
//! a summarizer on 127.0.0.1 that takes seconds per request and some "model time" between
//! turns. Every assistant reply is appended with `waitForCompaction: true`, as a simple agent
//! does. It prints the slowest append over the run, the append that crossed the threshold,
//! the context after the compaction beside 80% of the threshold, and checks that no
//! acknowledged entry was lost and that every message appended while the compaction ran is
//! still in the context. Run it once with background compaction on and once off, to compare:
//!
//! ```text
//! cargo bench --bench background                     # defaults: 4 s per summary request
//! cargo bench --bench background -- --summary-ms 2000 --model-ms 1000 --turn-tokens 1500
//! ```
#![allow(clippy::print_stdout)] // A benchmark's job is to print its table.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use clap::Parser;
use devtools::daemon::{DaemonProcess, Framing, assistant, user};
use devtools::fake_llm::{FakeLlm, openai_sse};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(about = "compactd background compaction benchmark")]
struct Args {
    /// How long the fake summarizer takes to answer each request.
    #[arg(long, default_value_t = 4000)]
    summary_ms: u64,
    /// "Model time" between two turns.
    #[arg(long, default_value_t = 1500)]
    model_ms: u64,
    /// Tokens a turn adds (one user message of about that size).
    #[arg(long, default_value_t = 1500)]
    turn_tokens: u64,
    /// The threshold, in tokens above the starting context.
    #[arg(long, default_value_t = 12_000)]
    headroom: u64,
    /// `compaction.background.leadTokens`.
    #[arg(long, default_value_t = 6000)]
    lead: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// What one run measured.
struct Run {
    slowest: Duration,
    crossing: Option<Duration>,
    after: u64,
    threshold: u64,
    lost: usize,
    missing_since: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    println!(
        "background compaction: summarizer {} ms/request, model {} ms/turn, {} tokens/turn, \
         threshold start+{}, lead {}",
        args.summary_ms, args.model_ms, args.turn_tokens, args.headroom, args.lead
    );
    println!(
        "{:<12} {:>14} {:>14} {:>10} {:>10} {:>6} {:>8}",
        "background", "slowest append", "crossing", "ctx after", "80% thr", "lost", "missing"
    );
    for background in [true, false] {
        let run = run(&args, background).await?;
        let crossing = run
            .crossing
            .map_or("-".to_owned(), |c| format!("{:.1} ms", ms(c)));
        println!(
            "{:<12} {:>11.1} ms {:>14} {:>10} {:>10} {:>6} {:>8}",
            if background { "on" } else { "off" },
            ms(run.slowest),
            crossing,
            run.after,
            run.threshold * 4 / 5,
            run.lost,
            run.missing_since
        );
        ensure!(run.lost == 0, "acknowledged entries were lost");
        ensure!(
            run.missing_since == 0,
            "messages appended meanwhile left the context"
        );
    }
    println!(
        "goal: the crossing append <= 50 ms with background on, when the armed result is ready"
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run(args: &Args, background: bool) -> Result<Run> {
    let llm = FakeLlm::start().await;
    llm.set_default(
        openai_sse(&["## Goal\n", "- keep going\n"], "stop")
            .delayed(Duration::from_millis(args.summary_ms)),
    );
    let mut d = DaemonProcess::spawn_with(Framing::Ndjson, None).await;
    d.initialize(json!({}), json!({"settings": {}})).await;
    let session = d.create_session().await;
    d.append(&session, json!([user("Start the task.")])).await;
    let start = context_tokens(&mut d, &session).await;
    let threshold = start + args.headroom;
    let settings = json!({
        "compaction": {"keepRecentTokens": args.turn_tokens * 2, "autoContinue": false,
                       "thresholdTokens": threshold,
                       "background": {"enabled": background, "leadTokens": args.lead}},
        "providers": {
            "anthropic": {"models": {"claude-sonnet-4-5": {"contextWindow": threshold * 2}}},
            "fake": {"kind": "openai", "baseUrl": llm.url(), "apiKey": "bench",
                     "models": {"fake-model": {"contextWindow": 200000}}}
        },
        "summarizer": {"kind": "openai", "model": "fake/fake-model"}
    });
    d.ok(
        "settings/update",
        json!({"patch": settings, "target": "user"}),
    )
    .await;
    // Roughly `turn_tokens` of text per user message (about 1.3 tokens a word).
    let words = (args.turn_tokens * 3 / 4) as usize;
    let mut appended = 1usize;
    let mut slowest = Duration::ZERO;
    let mut crossing = None;
    let mut since_started: Vec<String> = Vec::new();
    let mut started = false;
    for turn in 0.. {
        let text = format!("Turn {turn}: {}", "token ".repeat(words));
        d.append(&session, json!([user(&text)])).await;
        appended += 1;
        if started {
            since_started.push(format!("Turn {turn}:"));
        }
        tokio::time::sleep(Duration::from_millis(args.model_ms)).await;
        let usage = context_tokens(&mut d, &session).await + 50;
        let at = Instant::now();
        let result = d
            .append(
                &session,
                json!([assistant(&format!("reply {turn}"), usage)]),
            )
            .await;
        let took = at.elapsed();
        appended += 1;
        slowest = slowest.max(took);
        if !d.take_all("session/backgroundCompaction").is_empty() {
            started = true;
        }
        if result.get("autoCompaction").is_some() {
            crossing = Some(took);
            break;
        }
        ensure!(turn < 200, "the threshold was never crossed");
    }
    for method in [
        "session/autoCompactionStarted",
        "session/autoCompactionFinished",
        "session/compactionStarted",
        "session/compactionFinished",
        "session/compactionDelta",
        "session/backgroundCompaction",
    ] {
        d.take_all(method);
    }
    let after = context_tokens(&mut d, &session).await;
    let context = d.ok("session/context", json!({"sessionId": session})).await;
    let text = context["messages"].to_string();
    let missing_since = since_started
        .iter()
        .filter(|m| !text.contains(m.as_str()))
        .count();
    let tree = d.ok("session/tree", json!({"sessionId": session})).await;
    let messages = tree["nodes"]
        .as_array()
        .map_or(0, |n| n.iter().filter(|n| n["type"] == "message").count());
    d.finish().await;
    Ok(Run {
        slowest,
        crossing,
        after,
        threshold,
        lost: appended.saturating_sub(messages),
        missing_since,
    })
}

async fn context_tokens(d: &mut DaemonProcess, session: &str) -> u64 {
    let context: Value = d.ok("session/context", json!({"sessionId": session})).await;
    context["tokens"].as_u64().unwrap_or(0)
}
