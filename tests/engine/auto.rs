//! The engine's registry and auto-compaction, end to end with the offline extractive
//! summarizer, on session files or (`COMPACTD_TEST_BACKEND=postgres`) in PostgreSQL.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use compactd::engine::{
    AppendAction, CompactReason, Engine, EngineError, EngineEvent, EventSink, PauseReason,
};
use compactd::session::{AgentMessage, Entry, EntryKind};
use compactd::settings::SettingsStack;
use devtools::engine::{
    Backend, NoopObserver, backend, load, reopen, stored_bytes, test_database_url,
};

#[derive(Default)]
struct Recorder(Mutex<Vec<EngineEvent>>);

impl EventSink for Recorder {
    fn emit(&self, event: EngineEvent) {
        self.0.lock().unwrap().push(event);
    }
}

impl Recorder {
    fn names(&self) -> Vec<&'static str> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| match e {
                EngineEvent::EntriesAppended { .. } => "appended",
                EngineEvent::ExternalEntries { .. } => "external",
                EngineEvent::CompactionStarted { .. } => "compactionStarted",
                EngineEvent::CompactionFinished { .. } => "compactionFinished",
                EngineEvent::AutoCompactionStarted { .. } => "autoStarted",
                EngineEvent::AutoCompactionFinished { .. } => "autoFinished",
                EngineEvent::TreeNavigated { .. } => "treeNavigated",
                EngineEvent::AutoContinue { .. } => "autoContinue",
                EngineEvent::BackgroundCompaction { .. } => "background",
                EngineEvent::AutoCompactionPaused { .. } => "paused",
            })
            .collect()
    }
    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    root: PathBuf,
    engine: Engine,
    events: Arc<Recorder>,
    id: String,
    path: PathBuf,
}

/// Every test gets its own directory as sessions dir and cwd, and `overrides` as the
/// `initialize` settings layer (chars4 counting keeps the tests fast).
async fn harness(overrides: Value) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let mut stack = SettingsStack::new();
    let mut layer = json!({"tokenizer": "chars4"});
    merge(&mut layer, storage_settings());
    merge(&mut layer, overrides);
    stack.set_initialize(&layer).unwrap();
    let events = Arc::new(Recorder::default());
    let engine = Engine::new(stack, events.clone()).with_sessions_dir(root.join("sessions"));
    let info = engine.create(&root, None, None).await.unwrap();
    let stored = info.path.to_str().unwrap().starts_with("postgres:");
    assert_eq!(stored, backend() == Backend::Postgres, "{:?}", info.path);
    Harness {
        _dir: dir,
        root,
        engine,
        events,
        id: info.id,
        path: info.path,
    }
}

/// The `storage` settings of the backend the suite runs on (see `devtools::engine::backend`).
fn storage_settings() -> Value {
    match backend() {
        Backend::File => json!({}),
        Backend::Postgres => json!({"storage": {"backend": "postgres",
            "postgres": {"url": test_database_url()}}}),
    }
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn msg(v: Value) -> EntryKind {
    EntryKind::Message(AgentMessage::from_value(v).unwrap())
}

fn user(text: &str) -> EntryKind {
    msg(json!({"role":"user","content":text,"timestamp":now()}))
}

fn assistant(text: &str, extra: Value) -> EntryKind {
    let mut v = json!({"role":"assistant","content":[{"type":"text","text":text}],
        "provider":"test","model":"m","stopReason":"stop","timestamp":now()});
    merge(&mut v, extra);
    msg(v)
}

fn now() -> i64 {
    compactd::session::now_ms()
}

/// `words` distinct words of prose, so summaries and token counts are realistic.
fn prose(tag: &str, words: usize) -> String {
    (0..words)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn append(h: &Harness, kinds: Vec<EntryKind>) -> compactd::testkit::AppendOutcome {
    tokio::time::timeout(
        Duration::from_secs(60),
        h.engine.append(&h.id, kinds, None, &NoopObserver),
    )
    .await
    .expect("append finished")
    .expect("append succeeded")
}

/// Several turns of conversation (no usage on the replies).
async fn converse(h: &Harness, turns: usize, words: usize) {
    for t in 0..turns {
        append(
            h,
            vec![
                user(&format!(
                    "Turn {t}: please look at src/file{t}.rs. {}",
                    prose("u", words)
                )),
                assistant(
                    &format!("Done with turn {t}. {}", prose("a", words)),
                    json!({}),
                ),
            ],
        )
        .await;
    }
}

fn entries_on_disk(path: &Path) -> Vec<Entry> {
    reopen(path).entries().to_vec()
}

fn compactions(path: &Path) -> usize {
    entries_on_disk(path)
        .iter()
        .filter(|e| matches!(e.kind(), EntryKind::Compaction(_)))
        .count()
}

#[tokio::test]
async fn threshold_compaction_appends_a_compaction_and_a_continue_prompt() {
    let h = harness(json!({"compaction": {"keepRecentTokens": 400}})).await;
    converse(&h, 8, 300).await;
    let before = h.engine.context(&h.id, None).await.unwrap().total_tokens;
    // Threshold just under what the provider reports for the context.
    h.engine
        .update_settings(|s| {
            s.set_initialize(&json!({"tokenizer":"chars4","compaction":{
                "keepRecentTokens":400,"thresholdTokens": before}}))
                .map_err(|e| EngineError::Settings(e.to_string()))
        })
        .unwrap();
    h.events.clear();
    let usage = json!({"usage":{"input":before + 50,"output":10,"totalTokens":before + 60}});
    let out = append(&h, vec![assistant("All done.", usage)]).await;
    assert_eq!(out.action, AppendAction::Compacted, "{out:?}");
    let auto = out.auto.expect("auto result");
    assert_eq!(auto.reason, CompactReason::Threshold);
    assert!(auto.outcome.is_some() && auto.error_message.is_none());
    assert_eq!(
        h.events.names(),
        [
            "appended",
            "autoStarted",
            "compactionStarted",
            "appended",
            "compactionFinished",
            "autoFinished",
            "appended",
            "autoContinue"
        ]
    );
    let on_disk = entries_on_disk(&h.path);
    assert_eq!(compactions(&h.path), 1);
    let last = on_disk.last().unwrap();
    assert_eq!(Some(last.id.clone()), auto.continue_entry_id);
    match last.message() {
        Some(AgentMessage::User(u)) => {
            assert_eq!(u.synthetic, Some(true));
            assert_eq!(
                u.content.joined_text(""),
                "Continue if you have next steps."
            );
        }
        other => panic!("expected the continue prompt, got {other:?}"),
    }
    // The compaction shrank the context.
    let after = h.engine.context(&h.id, None).await.unwrap();
    assert!(
        after.total_tokens < before,
        "{} !< {before}",
        after.total_tokens
    );
    // Usage since the compaction is unknown; our estimate is always known.
    assert_eq!(after.usage.context_tokens, None);
    assert_eq!(after.usage.estimated_tokens, after.total_tokens);
}

#[tokio::test]
async fn a_compaction_that_keeps_too_much_compacts_once_more_keeping_less() {
    // The settings keep more recent tokens than fit under 80% of the threshold beside a
    // summary: the first compaction leaves the context over its target, so a second one
    // keeps less, and the context ends under the target with no error.
    let h = harness(json!({"compaction": {"keepRecentTokens": 1200, "autoContinue": false}})).await;
    converse(&h, 12, 60).await;
    let before = h.engine.context(&h.id, None).await.unwrap().total_tokens;
    let threshold = before.saturating_sub(100);
    h.engine
        .update_settings(|s| {
            s.set_initialize(&json!({"tokenizer":"chars4","compaction":{
                "keepRecentTokens":1200,"thresholdTokens": threshold,"autoContinue":false}}))
                .map_err(|e| EngineError::Settings(e.to_string()))
        })
        .unwrap();
    h.events.clear();
    // The provider counts exactly what we count: no fixed overhead.
    let counted = before + 10;
    let usage = json!({"usage":{"input":counted,"output":4,"totalTokens":counted + 4}});
    let out = append(&h, vec![assistant("All done.", usage)]).await;
    assert_eq!(out.action, AppendAction::Compacted, "{out:?}");
    let auto = out.auto.expect("auto result");
    assert!(auto.error_message.is_none(), "{auto:?}");
    assert_eq!(
        compactions(&h.path),
        2,
        "one more compaction, never a third"
    );
    let starts = h
        .events
        .names()
        .iter()
        .filter(|n| **n == "compactionStarted")
        .count();
    assert_eq!(starts, 2, "{:?}", h.events.names());
    let after = h.engine.context(&h.id, None).await.unwrap().total_tokens;
    assert!(
        after <= threshold * 4 / 5,
        "context {after} over 80% of the threshold {threshold}"
    );
}

#[tokio::test]
async fn a_kept_tail_above_the_threshold_fails_once_without_looping() {
    let h =
        harness(json!({"compaction": {"keepRecentTokens": 200, "thresholdTokens": 3000}})).await;
    converse(&h, 4, 200).await;
    // One giant final turn: it is kept whole, and alone exceeds the threshold.
    append(&h, vec![user(&prose("huge", 4000))]).await;
    h.events.clear();
    let usage = json!({"usage":{"input":20000,"output":10,"totalTokens":20010}});
    let out = append(&h, vec![assistant("ok", usage.clone())]).await;
    assert_eq!(out.action, AppendAction::Failed, "{out:?}");
    let auto = out.auto.unwrap();
    let message = auto.error_message.unwrap();
    assert!(message.starts_with("Auto-compaction failed: "), "{message}");
    assert_eq!(
        auto.error_kind,
        Some(compactd::engine::EngineErrorKind::CannotGetUnderThreshold)
    );
    assert!(auto.continue_entry_id.is_none());
    assert_eq!(compactions(&h.path), 1);
    assert!(!h.events.names().contains(&"autoContinue"));
    // The reply that triggered it is older than the compaction now: its usage is not reused.
    let usage_view = h.engine.usage(&h.id).await.unwrap();
    assert_eq!(usage_view.context_tokens, None);
}

#[tokio::test]
async fn overflow_moves_the_failed_reply_off_the_path_and_asks_for_a_retry() {
    let h = harness(json!({"compaction": {"keepRecentTokens": 300}})).await;
    converse(&h, 6, 250).await;
    append(&h, vec![user("one more question")]).await;
    let overflow = json!({"stopReason":"error",
        "errorMessage":"prompt is too long: 210000 tokens > 200000 maximum","content":[]});
    let out = append(&h, vec![assistant("", overflow.clone())]).await;
    assert_eq!(out.action, AppendAction::Retry, "{out:?}");
    let failed = out.appended[0].clone();
    let auto = out.auto.unwrap();
    assert!(auto.will_retry);
    assert_eq!(auto.reason, CompactReason::Overflow);
    assert_eq!(compactions(&h.path), 1);
    let ctx = h.engine.context(&h.id, None).await.unwrap();
    assert!(ctx.messages.iter().all(|m| m.entry_id != failed));
    // The failed reply is still in the file, off the path.
    assert!(entries_on_disk(&h.path).iter().any(|e| e.id == failed));

    // The retry overflows again: no second recovery.
    let again = append(&h, vec![assistant("", overflow)]).await;
    assert_eq!(again.action, AppendAction::Failed, "{again:?}");
    let auto = again.auto.unwrap();
    assert!(!auto.will_retry);
    assert!(
        auto.error_message
            .as_deref()
            .unwrap()
            .starts_with("Context overflow recovery failed: ")
    );
    assert_eq!(compactions(&h.path), 1);
}

#[tokio::test]
async fn prune_dry_run_changes_nothing_and_a_real_prune_keeps_originals() {
    let h = harness(json!({"compaction": {"enabled": false}})).await;
    append(&h, vec![user("read everything")]).await;
    for i in 0..8 {
        let call = json!({"role":"assistant","content":[{"type":"toolCall","id":format!("c{i}"),
            "name":"bash","arguments":{"command":format!("cat big{i}")}}],
            "stopReason":"toolUse","timestamp":now()});
        let result = json!({"role":"toolResult","toolCallId":format!("c{i}"),"toolName":"bash",
            "content":[{"type":"text","text":"x".repeat(40_000)}],"isError":false,"timestamp":now()});
        append(&h, vec![msg(call), msg(result)]).await;
    }
    let bytes = stored_bytes(&h.path);
    let dry = h.engine.prune(&h.id, true, None).await.unwrap();
    assert!(
        dry.pruned_count > 0 && dry.tokens_saved >= 20_000,
        "{dry:?}"
    );
    assert_eq!(stored_bytes(&h.path), bytes, "dry run wrote");
    let real = h.engine.prune(&h.id, false, None).await.unwrap();
    assert_eq!(real.entry_ids, dry.entry_ids);
    assert_eq!(real.tokens_saved, dry.tokens_saved);
    let on_disk = entries_on_disk(&h.path);
    for id in &real.entry_ids {
        let e = on_disk.iter().find(|e| &e.id == id).unwrap();
        let Some(AgentMessage::ToolResult(r)) = e.message() else {
            panic!("not a tool result")
        };
        assert!(r.pruned_at.is_some());
        // Reading it back (what `session/readEntry` and the recall tools answer) gives the
        // original output.
        let read = h.engine.read_entry(&h.id, id).await.unwrap();
        assert!(read.restored_pruned, "{id}");
        let text = read.entry["message"]["content"][0]["text"]
            .as_str()
            .unwrap();
        assert_eq!(text.len(), 40_000);
    }
    // Nothing left worth pruning.
    assert_eq!(
        h.engine
            .prune(&h.id, true, None)
            .await
            .unwrap()
            .pruned_count,
        0
    );
}

#[tokio::test]
async fn paths_must_be_jsonl_files_and_ids_plain() {
    let h = harness(json!({})).await;
    for bad in [
        "../../etc/passwd",
        "a/../../b",
        "x.txt",
        "..",
        "id with space",
    ] {
        match h.engine.open(bad).await {
            Err(EngineError::PathOutsideAllowed(_)) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    match h
        .engine
        .create(&h.root, Some(h.root.join("notes.txt")), None)
        .await
    {
        Err(EngineError::PathOutsideAllowed(_)) => {}
        other => panic!("{other:?}"),
    }
    // A plain id is looked up in the sessions dir.
    h.engine.close(&h.id).await.unwrap();
    let info = h.engine.open(&h.id).await.unwrap();
    assert_eq!(info.path, h.path);
    assert!(matches!(
        h.engine.open("0123456789abcdef").await,
        Err(EngineError::SessionNotFound(_))
    ));
    // `postgres:ID` names a stored session: the path its `SessionInfo` shows.
    let named = format!("postgres:{}", h.id);
    h.engine.close(&h.id).await.unwrap();
    match (backend(), h.engine.open(&named).await) {
        (Backend::Postgres, Ok(info)) => assert_eq!(info.path, h.path),
        (Backend::File, Err(EngineError::PathOutsideAllowed(message))) => {
            assert!(message.contains("storage.backend is \"file\""), "{message}")
        }
        (backend, other) => panic!("{backend:?}: {other:?}"),
    }
}

#[tokio::test]
async fn an_unexpected_leaf_writes_nothing() {
    let h = harness(json!({})).await;
    let out = append(&h, vec![user("hello")]).await;
    let bytes = stored_bytes(&h.path);
    let err = h
        .engine
        .append(
            &h.id,
            vec![user("again")],
            Some(Some("00000000".into())),
            &NoopObserver,
        )
        .await
        .unwrap_err();
    match err {
        EngineError::LeafMoved { expected, actual } => {
            assert_eq!(expected.as_deref(), Some("00000000"));
            assert_eq!(actual, out.leaf_id);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(stored_bytes(&h.path), bytes);
    // The right leaf is accepted.
    h.engine
        .append(&h.id, vec![user("again")], Some(out.leaf_id), &NoopObserver)
        .await
        .unwrap();
}

#[tokio::test]
async fn appends_by_another_process_are_seen() {
    let h = harness(json!({})).await;
    append(&h, vec![user("hello")]).await;
    let (mut other, _) = load(&h.path);
    other.append(user("from elsewhere")).unwrap();
    let ctx = h.engine.context(&h.id, None).await.unwrap();
    assert_eq!(ctx.messages.len(), 2);
}

/// `session/usage` is remembered per session revision: repeated calls agree, and every kind
/// of change (an append here, another process's append, a settings update) is seen.
#[tokio::test]
async fn usage_follows_appends_other_writers_and_settings() {
    let h = harness(json!({})).await;
    let usage = json!({"usage": {"input": 1000, "output": 10, "totalTokens": 1010}});
    append(&h, vec![user("hello"), assistant("hi", usage)]).await;
    let first = h.engine.usage(&h.id).await.unwrap();
    assert_eq!(first.context_tokens, Some(1010), "{first:?}");
    assert_eq!(h.engine.usage(&h.id).await.unwrap(), first);

    append(&h, vec![user(&prose("q", 50))]).await;
    let second = h.engine.usage(&h.id).await.unwrap();
    assert!(
        second.estimated_tokens > first.estimated_tokens,
        "{second:?}"
    );
    assert!(second.context_tokens > first.context_tokens, "{second:?}");

    let (mut other, _) = load(&h.path);
    other.append(user(&prose("o", 50))).unwrap();
    let third = h.engine.usage(&h.id).await.unwrap();
    assert!(
        third.estimated_tokens > second.estimated_tokens,
        "{third:?}"
    );

    h.engine
        .update_settings(|stack| {
            stack
                .set_initialize(&{
                    let mut layer =
                        json!({"tokenizer": "chars4", "compaction": {"reserveTokens": 50000}});
                    merge(&mut layer, storage_settings());
                    layer
                })
                .map_err(|e| EngineError::Settings(e.to_string()))
        })
        .unwrap();
    let fourth = h.engine.usage(&h.id).await.unwrap();
    assert_ne!(fourth.threshold, third.threshold, "{fourth:?}");
    assert_eq!(fourth.estimated_tokens, third.estimated_tokens);
}

/// The operation ids of the auto and compaction events, in order.
fn operation_ids(events: &Recorder) -> Vec<String> {
    events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            EngineEvent::AutoCompactionStarted { operation_id, .. }
            | EngineEvent::AutoCompactionFinished { operation_id, .. }
            | EngineEvent::CompactionStarted { operation_id, .. }
            | EngineEvent::CompactionFinished { operation_id, .. } => Some(operation_id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn auto_runs_carry_one_operation_id_and_record_their_reason() {
    let h = harness(json!({"compaction": {"keepRecentTokens": 300}})).await;
    converse(&h, 6, 250).await;
    append(&h, vec![user("one more question")]).await;
    h.events.clear();
    let overflow = json!({"stopReason":"error",
        "errorMessage":"prompt is too long: 210000 tokens > 200000 maximum","content":[]});
    let out = append(&h, vec![assistant("", overflow)]).await;
    assert_eq!(out.action, AppendAction::Retry, "{out:?}");
    let ids = operation_ids(&h.events);
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(
        ids.iter().all(|id| id == &ids[0] && !id.is_empty()),
        "{ids:?}"
    );
    let entry = entries_on_disk(&h.path)
        .into_iter()
        .find(|e| matches!(e.kind(), EntryKind::Compaction(_)))
        .unwrap();
    let EntryKind::Compaction(c) = entry.kind() else {
        unreachable!()
    };
    assert_eq!(c.details.as_ref().unwrap()["reason"], "overflow");
}

#[tokio::test]
async fn the_overflow_recovery_memory_survives_a_restart() {
    let h = harness(json!({"compaction": {"keepRecentTokens": 300}})).await;
    converse(&h, 6, 250).await;
    append(&h, vec![user("one more question")]).await;
    let overflow = json!({"stopReason":"error",
        "errorMessage":"prompt is too long: 210000 tokens > 200000 maximum","content":[]});
    let out = append(&h, vec![assistant("", overflow.clone())]).await;
    assert_eq!(out.action, AppendAction::Retry, "{out:?}");

    // A new engine (a restarted daemon) opens the same file: the retry overflows again and is
    // not recovered a second time.
    let mut stack = SettingsStack::new();
    let mut layer = json!({"tokenizer": "chars4", "compaction": {"keepRecentTokens": 300}});
    merge(&mut layer, storage_settings());
    stack.set_initialize(&layer).unwrap();
    let engine = Engine::new(stack, Arc::new(Recorder::default()));
    let info = engine.open(h.path.to_str().unwrap()).await.unwrap();
    let again = engine
        .append(&info.id, vec![assistant("", overflow)], None, &NoopObserver)
        .await
        .unwrap();
    assert_eq!(again.action, AppendAction::Failed, "{again:?}");
    let message = again.auto.unwrap().error_message.unwrap();
    assert!(
        message.starts_with("Context overflow recovery failed: "),
        "{message}"
    );
    assert_eq!(compactions(&h.path), 1);
}

#[tokio::test]
async fn the_last_reply_of_a_batch_is_checked_even_when_tool_results_follow() {
    let h = harness(json!({"compaction": {"keepRecentTokens": 400}})).await;
    converse(&h, 8, 300).await;
    let before = h.engine.context(&h.id, None).await.unwrap().total_tokens;
    h.engine
        .update_settings(|s| {
            let mut layer = json!({"tokenizer":"chars4","compaction":{
                "keepRecentTokens":400,"thresholdTokens": before, "autoContinue": false}});
            merge(&mut layer, storage_settings());
            s.set_initialize(&layer)
                .map_err(|e| EngineError::Settings(e.to_string()))
        })
        .unwrap();
    let call = json!({"role":"assistant","content":[{"type":"toolCall","id":"c1",
        "name":"read","arguments":{"path":"src/lib.rs"}}],"provider":"test","model":"m",
        "usage":{"input":before + 50,"output":10,"totalTokens":before + 60},
        "stopReason":"toolUse","timestamp":now()});
    let result = json!({"role":"toolResult","toolCallId":"c1","toolName":"read",
        "content":[{"type":"text","text":"fn main() {}"}],"isError":false,"timestamp":now()});
    let out = append(&h, vec![msg(call), msg(result)]).await;
    assert_eq!(out.action, AppendAction::Compacted, "{out:?}");
    assert_eq!(compactions(&h.path), 1);
}

#[tokio::test]
async fn a_large_reported_usage_over_a_real_session_ends_under_the_threshold() {
    // The default 200k window and threshold (183,616); the session is ~150k tokens by our
    // count and the provider reports 190k (system prompt and tools make the difference).
    let h =
        harness(json!({"providers": {"test": {"models": {"m": {"contextWindow": 200000}}}}})).await;
    converse(&h, 23, 2_400).await;
    let counted = h.engine.context(&h.id, None).await.unwrap().total_tokens;
    assert!((140_000..175_000).contains(&counted), "{counted}");
    let usage = json!({"usage":{"input":190_000,"output":100,"totalTokens":190_100}});
    let out = append(&h, vec![assistant("All done.", usage)]).await;
    assert_eq!(out.action, AppendAction::Compacted, "{out:?}");
    let auto = out.auto.unwrap();
    assert!(auto.error_message.is_none(), "{auto:?}");
    assert_eq!(compactions(&h.path), 1);
}

/// Sets `compaction` in the `initialize` layer (chars4 counting kept); sessions resume a
/// paused automatic compaction on a settings change.
fn set_compaction(h: &Harness, compaction: Value) {
    h.engine
        .update_settings(|s| {
            s.set_initialize(&json!({"tokenizer": "chars4", "compaction": compaction}))
                .map_err(|e| EngineError::Settings(e.to_string()))
        })
        .unwrap();
}

fn paused_events(events: &Recorder) -> Vec<(PauseReason, u32)> {
    events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            EngineEvent::AutoCompactionPaused { reason, count, .. } => Some((*reason, *count)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn three_failed_automatic_compactions_open_the_breaker_until_the_user_acts() {
    let compaction = json!({"keepRecentTokens": 200, "thresholdTokens": 3000,
                            "background": {"enabled": false}});
    let h = harness(json!({ "compaction": compaction.clone() })).await;
    converse(&h, 4, 200).await;
    let usage = json!({"usage":{"input":20000,"output":10,"totalTokens":20010}});
    // Each round ends with a kept tail that alone exceeds the threshold: the compaction fails.
    let round = |tag: &'static str| {
        let (h, usage) = (&h, usage.clone());
        async move {
            append(h, vec![user(&prose(tag, 4000))]).await;
            append(h, vec![assistant("ok", usage)]).await
        }
    };
    for tag in ["one", "two", "three"] {
        let out = round(tag).await;
        assert_eq!(out.action, AppendAction::Failed, "{tag}: {out:?}");
    }
    assert_eq!(
        paused_events(&h.events),
        [(PauseReason::RepeatedFailures, 3)]
    );
    let written = compactions(&h.path);
    // Paused: the fourth crossing does not try again.
    let out = round("four").await;
    assert_eq!(out.action, AppendAction::Continue, "{out:?}");
    assert!(out.auto.is_none());
    assert_eq!(compactions(&h.path), written);
    let activity = h.engine.activity(&h.id).unwrap();
    assert_eq!(
        activity.auto_compaction_paused,
        Some(PauseReason::RepeatedFailures)
    );
    // A settings change resumes it.
    set_compaction(&h, compaction);
    assert_eq!(
        h.engine.activity(&h.id).unwrap().auto_compaction_paused,
        None
    );
    let out = round("five").await;
    assert_eq!(out.action, AppendAction::Failed, "{out:?}");
}

#[tokio::test]
async fn a_context_that_refills_within_three_replies_three_times_pauses_compaction() {
    let compaction = json!({"keepRecentTokens": 200, "thresholdTokens": 6000,
                            "background": {"enabled": false}});
    let h = harness(json!({ "compaction": compaction })).await;
    converse(&h, 2, 100).await;
    // Every round the agent pulls in a large tool output, then replies once: the context is
    // over the threshold again one reply after each compaction.
    let mut actions = Vec::new();
    for r in 0..4 {
        append(&h, vec![user(&prose(&format!("r{r}x"), 4000))]).await;
        append(&h, vec![assistant("read it", json!({}))]).await;
        // Enough recent text that the kept part starts after the large output.
        append(&h, vec![user(&prose(&format!("next{r}x"), 150))]).await;
        let tokens = h.engine.context(&h.id, None).await.unwrap().total_tokens;
        let usage = json!({"usage":{"input":tokens + 50,"output":10,"totalTokens":tokens + 60}});
        let out = append(&h, vec![assistant("ok", usage)]).await;
        actions.push(out.action);
    }
    assert_eq!(
        actions,
        [
            AppendAction::Compacted,
            AppendAction::Compacted,
            AppendAction::Compacted,
            AppendAction::Continue
        ]
    );
    assert_eq!(paused_events(&h.events), [(PauseReason::Thrashing, 3)]);
    assert_eq!(
        h.engine.activity(&h.id).unwrap().auto_compaction_paused,
        Some(PauseReason::Thrashing)
    );
}
