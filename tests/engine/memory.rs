//! Huge sessions (issue 35 item 7): counting the context and planning a compaction of a path
//! whose lines are more than what is kept parsed leave its entries unparsed (a parsed body
//! costs about ten times its line: a million entries took `session/usage` to 15x the file),
//! and give what a pass over fully parsed entries gives; a compaction reads the messages it
//! summarises from the entries as it needs them, and writes the summary it writes from the
//! messages held. Listed in `docs/robustness.md`.

use std::io::Write;
use std::sync::Arc;

use compactd::compaction::{CompactionParams, Ledger, prepare_compaction_in, summarize_compaction};
use compactd::session::{Entry, Session};
use compactd::settings::Settings;
use compactd::summarize::{Purpose, SummaryRequest};
use compactd::testkit::{ExtractiveSummarizer, usage_view};
use compactd::tokens::{Chars4, TokenCache};
use serde_json::json;

/// A linear session of `n` small entries: turns of a user prompt, an assistant reply with a
/// tool call, its result and a closing reply (the shape of the issue's session).
fn write_linear(path: &std::path::Path, n: usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(
        out,
        r#"{{"type":"session","version":3,"id":"0a1b2c3d4e5f6789","timestamp":"2026-03-01T09:00:00.000Z","cwd":"/tmp/p"}}"#
    )
    .unwrap();
    let mut parent = serde_json::Value::Null;
    for i in 0..n {
        let turn = i / 4;
        let message = match i % 4 {
            0 => {
                json!({"role": "user", "content": format!("Please fix the failing test {turn} in src/parser.rs and explain the cause briefly."), "timestamp": i})
            }
            1 => json!({"role": "assistant", "content": [
                {"type": "text", "text": "I will read src/parser.rs first."},
                {"type": "toolCall", "id": format!("call_{turn}"), "name": "read", "arguments": {"path": "src/parser.rs"}}],
                "provider": "fake", "model": "fake-model",
                "usage": {"input": 1200, "output": 40, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1240},
                "stopReason": "toolUse", "timestamp": i}),
            2 => {
                json!({"role": "toolResult", "toolCallId": format!("call_{turn}"), "toolName": "read",
                "content": [{"type": "text", "text": format!("pub fn parse_{turn}(s: &str) -> Result<Value, Error> {{ todo!() }}")}],
                "isError": false, "timestamp": i})
            }
            _ => {
                json!({"role": "assistant", "content": [{"type": "text", "text": format!("Fixed test {turn}: the parser trimmed twice.")}],
                "provider": "fake", "model": "fake-model",
                "usage": {"input": 1300, "output": 30, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1330},
                "stopReason": "stop", "timestamp": i})
            }
        };
        let id = format!("{i:08x}");
        let entry = json!({"type": "message", "id": id, "parentId": parent,
            "timestamp": "2026-03-01T09:00:01.000Z", "message": message});
        writeln!(out, "{entry}").unwrap();
        parent = json!(id);
    }
    out.flush().unwrap();
}

fn parsed(s: &Session) -> usize {
    s.entries().iter().filter(|e| e.is_parsed()).count()
}

#[test]
fn usage_plan_and_ledger_of_a_huge_path_keep_no_body_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.jsonl");
    // About 20 MB of lines: above the 16 MB kept parsed.
    let n = 64_000;
    write_linear(&file, n);
    assert!(std::fs::metadata(&file).unwrap().len() > 17 << 20);
    let (s, _) = Session::open(&file).unwrap();
    let settings = Settings::default();
    let cache = TokenCache::new(Arc::new(Chars4));
    let usage = usage_view(&s, &settings, &cache);
    let plan = summarize_compaction(&s.path_to_leaf(), &CompactionParams::default(), &Chars4)
        .expect("a plan");
    // The ledger every compaction derives walks the whole path too.
    let ledger = Ledger::derive(&s.path_to_leaf());
    let kept_parsed = parsed(&s);

    // The same on entries all parsed beforehand, as every pass left them before.
    let (all, _) = Session::open(&file).unwrap();
    Entry::parse_all(&all.entries().iter().collect::<Vec<_>>());
    assert_eq!(parsed(&all), n);
    let all_cache = TokenCache::new(Arc::new(Chars4));
    assert_eq!(usage, usage_view(&all, &settings, &all_cache));
    assert_eq!(
        Some(plan.clone()),
        summarize_compaction(&all.path_to_leaf(), &CompactionParams::default(), &Chars4)
    );
    assert_eq!(ledger, Ledger::derive(&all.path_to_leaf()));
    assert!(
        !ledger.files.read.is_empty() || !ledger.requests.is_empty(),
        "{ledger:?}"
    );
    assert!(usage.estimated_tokens > 500_000, "{usage:?}");
    assert!(plan.messages_to_summarize > n - 2000, "{plan:?}");
    // Before: every entry of the path stayed parsed (15x the file for a million entries).
    assert!(kept_parsed < 10, "{kept_parsed} of {n} entries kept parsed");
}

#[test]
fn a_compaction_of_a_huge_path_reads_its_span_from_the_entries_and_keeps_none_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.jsonl");
    let n = 64_000;
    write_linear(&file, n);
    let (s, _) = Session::open(&file).unwrap();
    // The engine's copy of the path, which the preparation reads its messages from.
    let path: Arc<[Entry]> = s.path_to_leaf().into_iter().cloned().collect();
    let prep = prepare_compaction_in(&path, &CompactionParams::default(), &Chars4).expect("a plan");
    let mut req = SummaryRequest::new(Purpose::History, "", "", 16_384);
    req.messages = prep.messages_to_summarize.for_llm();
    let read = ExtractiveSummarizer::new().summarize_text(&req);
    let kept_parsed = path.iter().filter(|e| e.is_parsed()).count();

    // The same summary from the messages held, as compaction read them before.
    let held = prep.messages_to_summarize.for_llm().to_vec();
    assert!(held.len() > n - 2000, "{} messages", held.len());
    assert_eq!(prep.summarized.message_ids().count(), prep.summarized.len());
    req.messages = held.into();
    assert_eq!(read, ExtractiveSummarizer::new().summarize_text(&req));
    assert!(read.contains("src/parser.rs"), "{read}");
    // Before: the span's messages were held parsed, about twice the file again.
    assert!(kept_parsed < 10, "{kept_parsed} of {n} entries kept parsed");
}
