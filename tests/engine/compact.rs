//! End-to-end tests of `engine::compact` on real session files.

use std::sync::Arc;

use compactd::engine::{
    BeforeCompactReply, CompactOptions, CompactingReply, EngineError, EngineErrorKind,
    HookCompaction, compact,
};
use compactd::session::{AgentMessage, Entry, EntryKind, Session};
use compactd::summarize::Purpose;
use compactd::testkit::NoHooks;
use devtools::engine::*;
use devtools::fixtures::{demo_copy, pi_session_copy};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn compaction_of(entry: &Entry) -> &compactd::session::CompactionEntry {
    match entry.kind() {
        EntryKind::Compaction(c) => c,
        other => panic!("not a compaction: {other:?}"),
    }
}

async fn run(
    session: &compactd::engine::SharedSession,
    env: &compactd::engine::CompactEnv,
    opts: CompactOptions,
) -> Result<compactd::engine::CompactOutcome, EngineError> {
    timed(compact(
        session,
        env,
        opts,
        CancellationToken::new(),
        &NoopObserver,
    ))
    .await
}

#[tokio::test]
async fn fixture_compacts_with_the_extractive_summarizer_and_reloads() {
    let (_dir, path) = on_backend(pi_session_copy("before-compaction.jsonl"));
    let session = open(&path);
    let env = extractive_env(20_000);
    let outcome = run(&session, &env, CompactOptions::manual()).await.unwrap();
    let id = outcome.entry_id.clone().expect("an entry was appended");
    assert!(!outcome.summary.is_empty());
    assert_eq!(outcome.summarizer, "extractive");
    assert!(outcome.tokens_after < outcome.tokens_before || outcome.tokens_before == 0);

    let reopened = reopen(&path);
    assert_eq!(reopened.leaf_id(), Some(id.as_str()));
    let entry = reopened.get(&id).expect("entry on disk");
    let c = compaction_of(entry);
    assert_eq!(c.summary, outcome.summary);
    assert_eq!(c.first_kept_entry_id, outcome.first_kept_entry_id);
    assert!(c.details.as_ref().unwrap()["modifiedFiles"].is_array());

    let ctx = reopened.context();
    match &ctx.messages[0] {
        AgentMessage::CompactionSummary(s) => assert_eq!(s.summary, outcome.summary),
        other => panic!("context starts with {other:?}"),
    }
    assert!(ctx.entry_ids.contains(&outcome.first_kept_entry_id));
    assert_eq!(
        ctx.messages.len(),
        outcome_kept(&reopened, &outcome.first_kept_entry_id) + 1
    );
}

/// Messages on the path from `first_kept` up to the leaf.
fn outcome_kept(session: &Session, first_kept: &str) -> usize {
    let path = session.path_to_leaf();
    let start = path.iter().position(|e| e.id == first_kept).unwrap();
    path[start..]
        .iter()
        .filter(|e| e.to_agent_message(false).is_some())
        .count()
}

#[tokio::test]
async fn demo_session_compacts_with_a_split_turn() {
    let (_dir, path) = on_backend(demo_copy());
    let session = open(&path);
    let env = extractive_env(2_000);
    let outcome = run(&session, &env, CompactOptions::manual()).await.unwrap();
    assert!(outcome.entry_id.is_some());
    // The demo's last turn is long: the cut lands inside it.
    assert!(outcome.summary.contains("**Turn Context (split turn):**"));
    assert!(outcome.summary.contains("\n\n<read-files>\n"));
    assert!(outcome.short_summary.is_some());
}

#[tokio::test]
async fn split_turn_summarises_history_and_prefix_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let pad = "x".repeat(2_000);
    let mut msgs = vec![
        user(&format!("first request {pad}")),
        assistant(&format!("first answer {pad}")),
        user("second request: refactor everything"),
    ];
    for i in 0..6 {
        msgs.push(tool_call(&format!("c{i}"), "read", &format!("src/f{i}.rs")));
        msgs.push(tool_result(
            &format!("c{i}"),
            "read",
            &format!("contents {i} {pad}"),
        ));
    }
    msgs.push(assistant("done"));
    let path = build_session(dir.path(), &msgs);
    let session = open(&path);
    let recording = Recording::new("HISTORY");
    let env = env_with(recording.clone(), Arc::new(NoHooks), 1_500);
    let outcome = run(&session, &env, CompactOptions::manual()).await.unwrap();
    assert!(
        outcome
            .summary
            .starts_with("HISTORY\n\n---\n\n**Turn Context (split turn):**\n\nprefix: HISTORY\n\n")
    );
    // The summarizer never saw the user's last request of the split turn verbatim in the
    // summary, so the retention guard kept it.
    assert!(
        outcome
            .summary
            .contains("- Last user request: second request: refactor everything")
    );
    assert_eq!(recording.prompts(Purpose::History).len(), 1);
    assert_eq!(recording.prompts(Purpose::TurnPrefix).len(), 1);
    assert!(recording.prompts(Purpose::TurnPrefix)[0].contains("second request"));
    assert!(recording.prompts(Purpose::History)[0].contains("first request"));
    assert_eq!(outcome.short_summary.as_deref(), Some("short"));
}

#[tokio::test]
async fn two_compactions_in_a_row_keep_or_summarise_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let pad = "y".repeat(300);
    let turn = |i: usize| {
        vec![
            user(&format!("ask-{i} {pad}")),
            assistant(&format!("reply-{i} {pad}")),
        ]
    };
    let msgs: Vec<_> = (0..20).flat_map(turn).collect();
    let path = build_session(dir.path(), &msgs);
    let session = open(&path);

    let first = Recording::new("FIRST");
    let env = env_with(first.clone(), Arc::new(NoHooks), 600);
    let c1 = run(&session, &env, CompactOptions::manual()).await.unwrap();
    {
        let mut s = session.write().await;
        for i in 20..24 {
            for m in turn(i) {
                s.append(EntryKind::Message(AgentMessage::from_value(m).unwrap()))
                    .unwrap();
            }
        }
    }
    let second = Recording::new("SECOND");
    let env = env_with(second.clone(), Arc::new(NoHooks), 600);
    let c2 = run(&session, &env, CompactOptions::manual()).await.unwrap();
    assert_ne!(c1.first_kept_entry_id, c2.first_kept_entry_id);

    // Every message is in a summarised span of one compaction or in the final context.
    let summarised: Vec<String> = first
        .prompts(Purpose::History)
        .into_iter()
        .chain(first.prompts(Purpose::TurnPrefix))
        .chain(second.prompts(Purpose::History))
        .chain(second.prompts(Purpose::TurnPrefix))
        .collect();
    let ctx = reopen(&path).context();
    let context_text: Vec<String> = ctx
        .messages
        .iter()
        .map(|m| serde_json::to_string(&m.to_value()).unwrap())
        .collect();
    for i in 0..24 {
        for marker in [format!("ask-{i} "), format!("reply-{i} ")] {
            let found = summarised.iter().any(|p| p.contains(&marker))
                || context_text.iter().any(|m| m.contains(&marker));
            assert!(found, "{marker} vanished");
        }
    }
    // The first compaction's kept messages went into the second one's span.
    let kept_by_first = second.prompts(Purpose::History).join("\n");
    assert!(kept_by_first.contains("ask-19 ") || kept_by_first.contains("reply-19 "));
}

#[tokio::test]
async fn preview_writes_nothing() {
    let (_dir, path) = on_backend(demo_copy());
    let before = stored_bytes(&path);
    let session = open(&path);
    let opts = CompactOptions {
        preview: true,
        ..CompactOptions::manual()
    };
    let outcome = run(&session, &extractive_env(2_000), opts).await.unwrap();
    assert!(outcome.preview);
    assert_eq!(outcome.entry_id, None);
    assert!(!outcome.summary.is_empty());
    assert_eq!(stored_bytes(&path), before);
}

#[tokio::test]
async fn a_caller_chosen_boundary_is_validated() {
    let dir = tempfile::tempdir().unwrap();
    let msgs = vec![
        user("one"),
        assistant("a1"),
        user("two"),
        tool_call("c1", "read", "src/x.rs"),
        tool_result("c1", "read", "fn x() {}"),
        assistant("a2"),
        user("three"),
        assistant("a3"),
    ];
    let path = build_session(dir.path(), &msgs);
    let session = open(&path);
    let ids: Vec<String> = session
        .read()
        .await
        .path_to_leaf()
        .iter()
        .map(|e| e.id.clone())
        .collect();
    let env = extractive_env(20_000);

    let at = |id: &str| CompactOptions {
        first_kept_entry_id: Some(id.to_owned()),
        preview: true,
        ..CompactOptions::manual()
    };
    let ok = run(&session, &env, at(&ids[2])).await.unwrap();
    assert_eq!(ok.first_kept_entry_id, ids[2]);

    for bad in [ids[4].as_str(), "nope"] {
        let err = run(&session, &env, at(bad)).await.unwrap_err();
        assert_eq!(err.kind(), EngineErrorKind::InvalidParams, "{bad}: {err}");
        assert!(err.to_string().contains("firstKeptEntryId"), "{err}");
    }
}

#[tokio::test]
async fn already_compacted_and_nothing_to_compact() {
    let dir = tempfile::tempdir().unwrap();
    let empty = build_session(dir.path(), &[]);
    let err = run(
        &open(&empty),
        &extractive_env(100),
        CompactOptions::manual(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "Nothing to compact (session too small)");

    let (_d, path) = on_backend(demo_copy());
    let session = open(&path);
    run(&session, &extractive_env(2_000), CompactOptions::manual())
        .await
        .unwrap();
    let err = run(&session, &extractive_env(2_000), CompactOptions::manual())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Already compacted");
}

#[tokio::test]
async fn hook_cancel_stops_and_writes_nothing() {
    let (_dir, path) = on_backend(demo_copy());
    let before = stored_bytes(&path);
    let hooks = CannedHooks {
        before_compact: Some(BeforeCompactReply {
            cancel: true,
            compaction: None,
        }),
        ..CannedHooks::default()
    };
    let env = env_with(Recording::new("S"), Arc::new(hooks), 2_000);
    let err = run(&open(&path), &env, CompactOptions::manual())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Compaction cancelled");
    assert_eq!(err.kind(), EngineErrorKind::Cancelled);
    assert_eq!(stored_bytes(&path), before);
}

#[tokio::test]
async fn a_hook_supplied_compaction_is_validated_then_persisted_as_given() {
    let (_dir, path) = on_backend(demo_copy());
    let session = open(&path);
    let first_user = session
        .read()
        .await
        .path_to_leaf()
        .iter()
        .find(|e| matches!(e.message(), Some(AgentMessage::User(_))))
        .unwrap()
        .id
        .clone();
    let supplied = |first_kept: &str| CannedHooks {
        before_compact: Some(BeforeCompactReply {
            cancel: false,
            compaction: Some(HookCompaction {
                summary: "from the hook".into(),
                short_summary: None,
                first_kept_entry_id: first_kept.into(),
                tokens_before: Some(42),
                details: Some(json!({"custom": 1})),
                preserve_data: Some(json!({"keep": true})),
            }),
        }),
        ..CannedHooks::default()
    };
    // An invalid boundary: ignored, the default path runs.
    let recording = Recording::new("DEFAULT");
    let env = env_with(recording.clone(), Arc::new(supplied("missing")), 2_000);
    let opts = CompactOptions {
        preview: true,
        ..CompactOptions::manual()
    };
    let o = run(&session, &env, opts).await.unwrap();
    assert!(!o.from_extension);
    assert!(o.summary.starts_with("DEFAULT"));

    let recording = Recording::new("DEFAULT");
    let env = env_with(recording.clone(), Arc::new(supplied(&first_user)), 2_000);
    let o = run(&session, &env, CompactOptions::manual()).await.unwrap();
    assert!(o.from_extension);
    assert_eq!(o.summary, "from the hook");
    assert_eq!(o.tokens_before, 42);
    assert!(
        recording.requests.lock().unwrap().is_empty(),
        "no summarizer call"
    );
    let c = reopen(&path);
    let entry = compaction_of(c.get(o.entry_id.as_deref().unwrap()).unwrap()).clone();
    assert_eq!(entry.from_extension, Some(true));
    assert_eq!(entry.preserve_data, Some(json!({"keep": true})));
    assert_eq!(
        entry.details,
        Some(json!({"custom": 1, "reason": "manual"}))
    );
}

#[tokio::test]
async fn compacting_hook_adds_context_replaces_the_prompt_and_preserves_data() {
    let (_dir, path) = on_backend(demo_copy());
    let hooks = CannedHooks {
        compacting: Some(CompactingReply {
            context: vec!["the deploy is frozen".into()],
            prompt: Some("CUSTOM BASE PROMPT".into()),
            preserve_data: Some(json!({"ticket": 7})),
        }),
        ..CannedHooks::default()
    };
    let recording = Recording::new("S");
    let env = env_with(recording.clone(), Arc::new(hooks), 2_000);
    let opts = CompactOptions {
        custom_instructions: Some("focus on tests".into()),
        ..CompactOptions::manual()
    };
    let o = run(&open(&path), &env, opts).await.unwrap();
    let history = &recording.prompts(Purpose::History)[0];
    assert!(history.contains("<additional-context>\n- the deploy is frozen"));
    assert!(history.contains("CUSTOM BASE PROMPT"));
    assert!(history.contains("focus on tests"));
    assert!(recording.prompts(Purpose::Short)[0].contains("- the deploy is frozen"));
    assert_eq!(o.preserve_data, Some(json!({"ticket": 7})));
    let entry = reopen(&path)
        .get(o.entry_id.as_deref().unwrap())
        .cloned()
        .unwrap();
    assert_eq!(
        compaction_of(&entry).preserve_data,
        Some(json!({"ticket": 7}))
    );
}

#[tokio::test]
async fn cancelling_mid_summary_writes_nothing() {
    let (_dir, path) = on_backend(demo_copy());
    let before = stored_bytes(&path);
    let waits = Arc::new(WaitsForCancel {
        started: tokio::sync::Notify::new(),
    });
    let env = env_with(waits.clone(), Arc::new(NoHooks), 2_000);
    let session = open(&path);
    let cancel = CancellationToken::new();
    let task = {
        let (session, cancel) = (session.clone(), cancel.clone());
        tokio::spawn(async move {
            compact(
                &session,
                &env,
                CompactOptions::manual(),
                cancel,
                &NoopObserver,
            )
            .await
        })
    };
    timed(waits.started.notified()).await;
    cancel.cancel();
    let err = timed(task).await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "Compaction cancelled");
    assert_eq!(stored_bytes(&path), before);
}

#[tokio::test]
async fn retention_guard_adds_a_missing_pending_question() {
    let dir = tempfile::tempdir().unwrap();
    let pad = "z".repeat(400);
    let msgs = vec![
        user(&format!("Set up CI. Never push to main directly. {pad}")),
        assistant(&format!(
            "I added the workflow. {pad}\n\nShould the workflow also run on tags?"
        )),
        user(&format!("Something else now. {pad}")),
        assistant(&format!("ok {pad}")),
        user(&format!("And another thing {pad}")),
        assistant(&format!("sure {pad}")),
    ];
    let path = build_session(dir.path(), &msgs);
    let session = open(&path);
    let first_kept = session.read().await.path_to_leaf()[2].id.clone();
    let env = env_with(
        Recording::new("## Goal\nSet up CI."),
        Arc::new(NoHooks),
        20_000,
    );
    let opts = CompactOptions {
        first_kept_entry_id: Some(first_kept),
        ..CompactOptions::manual()
    };
    let o = run(&session, &env, opts).await.unwrap();
    assert!(
        o.summary
            .starts_with("## Goal\nSet up CI.\n\n## Retained Facts\n")
    );
    assert!(
        o.summary
            .contains("- Pending question to the user: Should the workflow also run on tags?")
    );
    assert!(
        o.summary
            .contains("- User constraint: Never push to main directly.")
    );
    let facts = o.details["retainedFacts"].as_array().unwrap();
    assert!(
        facts.iter().any(|f| f["kind"] == "pendingQuestion"
            && f["text"] == "Should the workflow also run on tags?")
    );
    let entry = reopen(&path)
        .get(o.entry_id.as_deref().unwrap())
        .cloned()
        .unwrap();
    assert_eq!(
        compaction_of(&entry).details.as_ref().unwrap()["retainedFacts"],
        o.details["retainedFacts"]
    );
}

#[tokio::test]
async fn a_moved_leaf_is_refused() {
    let (_dir, path) = on_backend(demo_copy());
    let opts = CompactOptions {
        expected_leaf_id: Some(Some("not-the-leaf".into())),
        ..CompactOptions::manual()
    };
    let err = run(&open(&path), &extractive_env(2_000), opts)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), EngineErrorKind::LeafMoved);
}

/// History and turn-prefix requests must both be in flight at once: each waits for the other.
struct Rendezvous {
    barrier: tokio::sync::Barrier,
}

impl compactd::summarize::Summarizer for Rendezvous {
    fn id(&self) -> String {
        "test/rendezvous".into()
    }
    fn context_window(&self) -> u64 {
        1_000_000
    }
    fn summarize<'a>(
        &'a self,
        req: &'a compactd::summarize::SummaryRequest,
        _cancel: CancellationToken,
        _on_delta: compactd::summarize::DeltaSink<'a>,
    ) -> futures::future::BoxFuture<
        'a,
        Result<compactd::summarize::SummaryOutput, compactd::summarize::SummarizeError>,
    > {
        Box::pin(async move {
            if req.purpose != Purpose::Short {
                self.barrier.wait().await;
            }
            Ok(compactd::summarize::SummaryOutput {
                text: req.purpose.name().to_owned(),
                short_summary: None,
                usage: None,
                model: self.id(),
            })
        })
    }
}

#[tokio::test]
async fn history_and_turn_prefix_run_concurrently() {
    let (_dir, path) = on_backend(demo_copy());
    let env = env_with(
        Arc::new(Rendezvous {
            barrier: tokio::sync::Barrier::new(2),
        }),
        Arc::new(NoHooks),
        2_000,
    );
    // Sequential calls would wait at the barrier forever (and `run` times out).
    let o = run(&open(&path), &env, CompactOptions::manual())
        .await
        .unwrap();
    assert!(
        o.summary
            .starts_with("history\n\n---\n\n**Turn Context (split turn):**\n\nturnPrefix")
    );
}
