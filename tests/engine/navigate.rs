//! End-to-end tests of `engine::navigate_tree` on session files.

use std::sync::Arc;

use compactd::engine::{
    BeforeTreeReply, EngineError, NavigateOptions, NavigateOutcome, SharedSession, navigate_tree,
};
use compactd::session::{AgentMessage, EntryKind};
use compactd::summarize::Purpose;
use compactd::testkit::NoHooks;
use devtools::engine::*;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// root user "start" → a0 → u1 → a1 (branch A leaf), plus a sibling branch from a0:
/// u2 → a2 (branch B). The leaf is at a1. Returns the ids in that order.
struct Tree {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    ids: Vec<String>,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let path = build_session(
        dir.path(),
        &[
            user("start the project"),
            assistant("started"),
            user("Use sqlite for storage. Never add a network dependency."),
            tool_call("c1", "write", "src/db.rs"),
            tool_result("c1", "write", "ok"),
            assistant("I wrote src/db.rs.\n\nShould I add migrations too?"),
        ],
    );
    let (mut s, _) = load(&path);
    let mut ids: Vec<String> = s.path_to_leaf().iter().map(|e| e.id.clone()).collect();
    let a0 = ids[1].clone();
    s.move_leaf(Some(&a0)).unwrap();
    for m in [
        user("try postgres instead"),
        assistant("switched to postgres"),
    ] {
        let e = s
            .append(EntryKind::Message(AgentMessage::from_value(m).unwrap()))
            .unwrap();
        ids.push(e.id.clone());
    }
    // Back on branch A's leaf.
    s.move_leaf(Some(&ids[5])).unwrap();
    Tree {
        _dir: dir,
        path,
        ids,
    }
}

async fn nav(
    session: &SharedSession,
    env: &compactd::engine::CompactEnv,
    target: &str,
    opts: NavigateOptions,
) -> Result<NavigateOutcome, EngineError> {
    timed(navigate_tree(
        session,
        env,
        target,
        opts,
        CancellationToken::new(),
        &NoopObserver,
    ))
    .await
}

fn summarize() -> NavigateOptions {
    NavigateOptions {
        summarize: true,
        ..NavigateOptions::default()
    }
}

#[tokio::test]
async fn navigation_without_summary_moves_and_persists_the_leaf() {
    let t = tree();
    let session = open(&t.path);
    let o = nav(
        &session,
        &extractive_env(20_000),
        &t.ids[7],
        NavigateOptions::default(),
    )
    .await
    .unwrap();
    assert!(!o.cancelled);
    assert_eq!(o.leaf_id.as_deref(), Some(t.ids[7].as_str()));
    assert_eq!(o.old_leaf_id.as_deref(), Some(t.ids[5].as_str()));
    assert!(o.summary_entry.is_none());
    let (reopened, _) = load(&t.path);
    assert_eq!(reopened.leaf_id(), Some(t.ids[7].as_str()));
}

#[tokio::test]
async fn navigation_with_summary_attaches_it_at_the_target() {
    let t = tree();
    let session = open(&t.path);
    let o = nav(&session, &extractive_env(20_000), &t.ids[7], summarize())
        .await
        .unwrap();
    let entry = o.summary_entry.clone().expect("a summary entry");
    assert_eq!(entry.parent_id.as_deref(), Some(t.ids[7].as_str()));
    assert_eq!(o.leaf_id.as_deref(), Some(entry.id.as_str()));
    assert_eq!(o.from_extension, Some(false));
    let EntryKind::BranchSummary(b) = entry.kind() else {
        panic!("not a branch summary")
    };
    let preamble = compactd::summarize::Prompts::embedded().branch_preamble;
    assert!(
        b.summary.starts_with(&format!("{preamble}\n\n")),
        "{}",
        b.summary
    );
    assert!(
        b.summary
            .contains("<modified-files>\nsrc/db.rs\n</modified-files>")
    );
    assert_eq!(
        b.details.as_ref().unwrap()["modifiedFiles"],
        Value::from(vec!["src/db.rs"])
    );
    let (reopened, _) = load(&t.path);
    assert_eq!(reopened.leaf_id(), Some(entry.id.as_str()));
}

#[tokio::test]
async fn retention_guard_applies_to_branch_summaries() {
    let t = tree();
    let session = open(&t.path);
    let recording = Recording::new("## Goal\nStorage.");
    let env = env_with(recording.clone(), Arc::new(NoHooks), 20_000);
    let o = nav(&session, &env, &t.ids[7], summarize()).await.unwrap();
    let EntryKind::BranchSummary(b) = o.summary_entry.unwrap().into_kind() else {
        panic!()
    };
    assert!(
        b.summary
            .contains("- Pending question to the user: Should I add migrations too?")
    );
    assert!(
        b.summary
            .contains("- User constraint: Never add a network dependency.")
    );
    let facts = &b.details.as_ref().unwrap()["retainedFacts"];
    assert!(
        facts
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "pendingQuestion")
    );
}

#[tokio::test]
async fn a_user_message_target_reopens_it_for_editing() {
    let t = tree();
    let session = open(&t.path);
    let o = nav(
        &session,
        &extractive_env(20_000),
        &t.ids[6],
        NavigateOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(o.editor_text.as_deref(), Some("try postgres instead"));
    assert_eq!(o.leaf_id.as_deref(), Some(t.ids[1].as_str()));
}

#[tokio::test]
async fn the_root_user_message_target_summarises_into_a_new_root() {
    let t = tree();
    let session = open(&t.path);
    let o = nav(&session, &extractive_env(20_000), &t.ids[0], summarize())
        .await
        .unwrap();
    assert_eq!(o.editor_text.as_deref(), Some("start the project"));
    let entry = o.summary_entry.expect("summary of the whole branch");
    assert_eq!(entry.parent_id, None);
    let EntryKind::BranchSummary(b) = entry.kind() else {
        panic!()
    };
    assert_eq!(b.from_id, "root");
}

#[tokio::test]
async fn custom_instructions_are_appended_or_replace_the_prompt() {
    let t = tree();
    let recording = Recording::new("S");
    let env = env_with(recording.clone(), Arc::new(NoHooks), 20_000);
    let session = open(&t.path);
    let opts = NavigateOptions {
        summarize: true,
        custom_instructions: Some("FOCUS ON STORAGE".into()),
        ..NavigateOptions::default()
    };
    nav(&session, &env, &t.ids[7], opts.clone()).await.unwrap();
    let template = compactd::summarize::Prompts::embedded().branch_summary;
    let appended = &recording.prompts(Purpose::Branch)[0];
    assert!(appended.contains(&template) && appended.contains("FOCUS ON STORAGE"));

    let t = tree();
    let recording = Recording::new("S");
    let env = env_with(recording.clone(), Arc::new(NoHooks), 20_000);
    let replace = NavigateOptions {
        replace_instructions: true,
        ..opts
    };
    nav(&open(&t.path), &env, &t.ids[7], replace).await.unwrap();
    let replaced = &recording.prompts(Purpose::Branch)[0];
    // The instructions end the prompt; only the answer's length follows them.
    let (instructions, length) = replaced.rsplit_once("\n\nLength: ").expect("length line");
    assert!(!replaced.contains(&template) && instructions.ends_with("FOCUS ON STORAGE"));
    assert!(length.contains("2048 tokens"), "{length}");
}

#[tokio::test]
async fn same_leaf_is_a_no_op_and_unknown_targets_fail() {
    let t = tree();
    let before = stored_bytes(&t.path);
    let session = open(&t.path);
    let o = nav(&session, &extractive_env(20_000), &t.ids[5], summarize())
        .await
        .unwrap();
    assert!(!o.cancelled && o.summary_entry.is_none());
    assert_eq!(stored_bytes(&t.path), before);
    let err = nav(&session, &extractive_env(20_000), "deadbeef", summarize())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Entry deadbeef not found");
}

#[tokio::test]
async fn hooks_cancel_or_supply_the_summary() {
    let t = tree();
    let before = stored_bytes(&t.path);
    let cancel = CannedHooks {
        before_tree: Some(BeforeTreeReply {
            cancel: true,
            summary: None,
        }),
        ..CannedHooks::default()
    };
    let env = env_with(Recording::new("S"), Arc::new(cancel), 20_000);
    let o = nav(&open(&t.path), &env, &t.ids[7], summarize())
        .await
        .unwrap();
    assert!(o.cancelled && !o.aborted);
    assert_eq!(stored_bytes(&t.path), before);

    let supply = || CannedHooks {
        before_tree: Some(BeforeTreeReply {
            cancel: false,
            summary: Some(("hook summary".into(), None)),
        }),
        ..CannedHooks::default()
    };
    // Not asked to summarise: the hook's summary is not used.
    let env = env_with(Recording::new("S"), Arc::new(supply()), 20_000);
    let session = open(&t.path);
    let o = nav(&session, &env, &t.ids[7], NavigateOptions::default())
        .await
        .unwrap();
    assert!(o.summary_entry.is_none());
    let hooks = Arc::new(supply());
    let env = env_with(Recording::new("S"), hooks.clone(), 20_000);
    let o = nav(&session, &env, &t.ids[5], summarize()).await.unwrap();
    assert_eq!(*hooks.seen_tree_entries.lock().unwrap(), Some(2));
    let EntryKind::BranchSummary(b) = o.summary_entry.unwrap().into_kind() else {
        panic!()
    };
    assert_eq!(b.summary, "hook summary");
    assert_eq!(b.from_extension, Some(true));
}

#[tokio::test]
async fn a_branch_with_nothing_to_summarise_persists_no_summary() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_session(dir.path(), &[user("hi"), assistant("hello")]);
    let (mut s, _) = load(&path);
    let ids: Vec<String> = s.path_to_leaf().iter().map(|e| e.id.clone()).collect();
    // A branch holding only a label: no message to summarise.
    s.set_label(&ids[0], Some("start")).unwrap();
    drop(s);
    let session = open(&path);
    let o = nav(&session, &extractive_env(20_000), &ids[1], summarize())
        .await
        .unwrap();
    assert!(o.summary_entry.is_none());
    assert_eq!(o.leaf_id.as_deref(), Some(ids[1].as_str()));
    let (reopened, _) = load(&path);
    assert!(
        !reopened
            .entries()
            .iter()
            .any(|e| matches!(e.kind(), EntryKind::BranchSummary(_)))
    );
}

#[tokio::test]
async fn cancelling_the_branch_summary_writes_nothing() {
    let t = tree();
    let before = stored_bytes(&t.path);
    let waits = Arc::new(WaitsForCancel {
        started: tokio::sync::Notify::new(),
    });
    let env = env_with(waits.clone(), Arc::new(NoHooks), 20_000);
    let session = open(&t.path);
    let cancel = CancellationToken::new();
    let task = {
        let (session, cancel, target) = (session.clone(), cancel.clone(), t.ids[7].clone());
        tokio::spawn(async move {
            navigate_tree(&session, &env, &target, summarize(), cancel, &NoopObserver).await
        })
    };
    timed(waits.started.notified()).await;
    cancel.cancel();
    let o = timed(task).await.unwrap().unwrap();
    assert!(o.cancelled && o.aborted);
    assert_eq!(stored_bytes(&t.path), before);
}

/// Spec §6.3.1: the branch-summary budget is (window or 128,000) − `branchSummary.reserveTokens`.
/// Three 50,000-token messages on the abandoned branch: with an unknown window (0) the budget
/// is 128,000 − 16,384 = 111,616, so the newest two fit and the oldest is left out; a 200,000
/// window (budget 183,616) takes all three.
#[tokio::test]
async fn an_unknown_window_budgets_the_branch_summary_from_128k() {
    // chars4: 200,000 ASCII characters are 50,000 tokens.
    let big = |marker: &str| format!("{marker} {}", "x".repeat(200_000 - marker.len() - 1));
    let included = |window: u64| async move {
        let dir = tempfile::tempdir().unwrap();
        let path = build_session(
            dir.path(),
            &[
                user("start"),
                assistant("started"),
                user(&big("OLDEST-MARKER")),
                assistant(&big("MIDDLE-MARKER")),
                user(&big("NEWEST-MARKER")),
            ],
        );
        let (s, _) = load(&path);
        let target = s.path_to_leaf()[1].id.clone();
        drop(s);
        let recording = Recording::new("S");
        let mut env = env_with(recording.clone(), Arc::new(NoHooks), 20_000);
        env.context_window = window;
        assert_eq!(env.settings.branch_summary.reserve_tokens, 16_384);
        nav(&open(&path), &env, &target, summarize()).await.unwrap();
        let prompt = recording.prompts(Purpose::Branch).remove(0);
        ["OLDEST-MARKER", "MIDDLE-MARKER", "NEWEST-MARKER"]
            .into_iter()
            .filter(|m| prompt.contains(m))
            .collect::<Vec<_>>()
    };
    assert_eq!(included(0).await, ["MIDDLE-MARKER", "NEWEST-MARKER"]);
    assert_eq!(
        included(200_000).await,
        ["OLDEST-MARKER", "MIDDLE-MARKER", "NEWEST-MARKER"]
    );
    // A known window smaller than 128,000 is used as it is: 100,000 − 16,384 = 83,616 holds one.
    assert_eq!(included(100_000).await, ["NEWEST-MARKER"]);
}
