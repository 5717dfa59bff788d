use serde_json::json;

use super::*;
use crate::compaction::test_support::{PathBuilder, text};
use crate::tokens::{Bpe, Chars4, Tiktoken};

fn params(keep: u64, mode: CutMode) -> CompactionParams {
    CompactionParams {
        keep_recent_tokens: keep,
        mode,
        recompact: false,
    }
}

/// The text of every user/assistant message in `msgs`.
/// The ids of the entries whose messages `span` gives.
fn ids(span: &EntrySpan) -> Vec<&str> {
    span.message_ids().collect()
}

fn texts(span: &EntrySpan) -> Vec<String> {
    span.messages()
        .map(|m| match &*m {
            AgentMessage::User(u) => u.content.joined_text(""),
            AgentMessage::Assistant(a) => crate::session::message::join_text(&a.content, ""),
            other => other.role().to_owned(),
        })
        .collect()
}

/// A message of 100 chars4 tokens whose text starts with `tag`.
fn t(tag: &str) -> String {
    format!("{tag}{}", text(400 - tag.len()))
}

#[test]
fn empty_or_freshly_compacted_paths_have_nothing_to_prepare() {
    assert!(prepare_compaction(&[], &CompactionParams::default(), &Chars4).is_none());
    let mut b = PathBuilder::new();
    let u = b.user("hi");
    b.compaction(&u, "sum", json!(null));
    assert!(prepare_compaction(&b.refs(), &CompactionParams::default(), &Chars4).is_none());
    assert_eq!(
        validate_boundary(&b.refs(), &u),
        Err(BoundaryError::AlreadyCompacted)
    );
}

#[test]
fn splits_a_plain_path_into_history_and_recent() {
    let mut b = PathBuilder::new();
    for tag in ["u0", "a1", "u2", "a3"] {
        if tag.starts_with('u') {
            b.user(&t(tag));
        } else {
            b.assistant(&t(tag));
        }
    }
    let p = prepare_compaction(&b.refs(), &params(200, CutMode::Fixed), &Chars4).unwrap();
    assert_eq!(p.first_kept_entry_id, "e2");
    assert_eq!(p.first_kept_entry_index, 2);
    assert_eq!(p.messages_to_summarize.len(), 2);
    assert_eq!(p.recent_messages.len(), 2);
    assert!(!p.is_split_turn && p.turn_prefix_messages.is_empty());
    assert_eq!(ids(&p.summarized), ["e0", "e1"]);
    assert_eq!(p.previous_summary, None);
    assert_eq!(p.tokens_before, 2);
}

/// `[u0 a1 u2 a3 u4 a5 C6(firstKept=u4) u7 a8 u9 a10]`, 100 tokens each.
fn compacted_path() -> PathBuilder {
    let mut b = PathBuilder::new();
    for tag in ["u0", "a1", "u2", "a3", "u4", "a5"] {
        if tag.starts_with('u') {
            b.user(&t(tag));
        } else {
            b.assistant(&t(tag));
        }
    }
    b.compaction(
        "e4",
        "summary one",
        json!({"readFiles":["old.rs"],"modifiedFiles":[]}),
    );
    for tag in ["u7", "a8", "u9", "a10"] {
        if tag.starts_with('u') {
            b.user(&t(tag));
        } else {
            b.assistant(&t(tag));
        }
    }
    b
}

#[test]
fn deviation1_the_kept_region_is_summarised_or_kept_never_dropped() {
    let b = compacted_path();
    let path = b.refs();
    assert_eq!(effective_window(&path, CutMode::Fixed), [4, 5, 7, 8, 9, 10]);
    let p = prepare_compaction(&path, &params(200, CutMode::Fixed), &Chars4).unwrap();
    let mut seen = texts(&p.messages_to_summarize);
    seen.extend(texts(&p.turn_prefix_messages));
    seen.extend(texts(&p.recent_messages));
    for kept in ["u4", "a5", "u7", "a8", "u9", "a10"] {
        assert_eq!(
            seen.iter().filter(|s| s.starts_with(kept)).count(),
            1,
            "{kept} must appear exactly once"
        );
    }
    assert_eq!(ids(&p.summarized), ["e4", "e5", "e7", "e8"]);
    assert_eq!(p.first_kept_entry_id, "e9");
    assert_eq!(p.previous_summary.as_deref(), Some("summary one"));

    // The reference's window starts after the compaction: u4 and a5 vanish.
    let r = prepare_compaction(&path, &params(200, CutMode::Parity), &Chars4).unwrap();
    let mut seen = texts(&r.messages_to_summarize);
    seen.extend(texts(&r.recent_messages));
    assert!(
        !seen
            .iter()
            .any(|s| s.starts_with("u4") || s.starts_with("a5"))
    );
}

#[test]
fn deviation2_a_prefix_only_split_turn_keeps_the_previous_summary() {
    // One long in-flight turn that started at u2, which the previous compaction kept.
    let mut b = PathBuilder::new();
    b.user(&t("u0"));
    b.assistant(&t("a1"));
    b.user(&t("u2"));
    b.assistant(&t("a3"));
    b.compaction("e2", "distilled history", json!(null));
    for tag in ["a5", "a6", "a7"] {
        b.assistant(&t(tag));
    }
    let p = prepare_compaction(&b.refs(), &params(150, CutMode::Fixed), &Chars4).unwrap();
    assert!(p.is_split_turn);
    assert!(p.messages_to_summarize.is_empty());
    assert_eq!(p.turn_start_index, Some(2));
    assert_eq!(texts(&p.turn_prefix_messages).len(), 3);
    assert!(p.reuse_previous_summary);
    assert_eq!(p.previous_summary.as_deref(), Some("distilled history"));

    // The reference in the same spot: empty history, "No prior history." would replace it.
    let mut b = PathBuilder::new();
    b.user(&t("u0"));
    b.assistant(&t("a1"));
    b.compaction("e1", "distilled history", json!(null));
    b.user(&t("u3"));
    for tag in ["a4", "a5", "a6"] {
        b.assistant(&t(tag));
    }
    let r = prepare_compaction(&b.refs(), &params(150, CutMode::Parity), &Chars4).unwrap();
    assert!(r.is_split_turn && r.messages_to_summarize.is_empty());
    assert!(!r.reuse_previous_summary);
}

#[test]
fn keep_budget_is_scaled_by_measured_usage_only_for_chars4() {
    let mut b = PathBuilder::new();
    b.user(&t("u0"));
    b.assistant(&t("a1"));
    b.user(&t("u2"));
    // 400 estimated tokens, 800 measured: ratio 2.
    b.assistant_with_usage(&t("a3"), 800);
    let p = prepare_compaction(&b.refs(), &params(200, CutMode::Fixed), &Chars4).unwrap();
    assert_eq!(p.keep_recent_tokens, 100);
    assert_eq!(p.first_kept_entry_id, "e3");
    assert_eq!(p.tokens_before, 810);
    let exact = Tiktoken::new(Bpe::O200k);
    let p = prepare_compaction(&b.refs(), &params(200, CutMode::Fixed), &exact).unwrap();
    assert_eq!(p.keep_recent_tokens, 200);
}

#[test]
fn tokens_before_skips_error_and_aborted_replies() {
    let mut b = PathBuilder::new();
    b.user("q");
    b.assistant_with_usage("ok", 5000);
    b.message(json!({"role":"assistant","content":[],"stopReason":"error",
        "errorMessage":"boom","usage":{"input":9999,"output":0}}));
    let p = prepare_compaction(&b.refs(), &CompactionParams::default(), &Chars4).unwrap();
    assert_eq!(p.tokens_before, 5010);
}

#[test]
fn file_ops_carry_the_previous_lists_and_the_summarised_calls_only() {
    let mut b = PathBuilder::new();
    b.user(&t("u0"));
    b.calls(&[("c1", "read", json!({"path":"seen.rs"}))]);
    b.result("c1", "read", &t("r"));
    b.compaction(
        "e0",
        "s",
        json!({"readFiles":["old.rs"],"modifiedFiles":["mod.rs"]}),
    );
    b.user(&t("u4"));
    b.calls(&[("c2", "edit", json!({"path":"kept.rs"}))]);
    b.result("c2", "edit", &t("r"));
    let p = prepare_compaction(&b.refs(), &params(150, CutMode::Fixed), &Chars4).unwrap();
    assert_eq!(p.first_kept_entry_id, "e4");
    let read: Vec<&str> = p.file_ops.read.iter().map(String::as_str).collect();
    assert_eq!(read, ["old.rs", "seen.rs"]);
    assert!(p.file_ops.edited.contains("mod.rs"));
    assert!(!p.file_ops.edited.contains("kept.rs"));
}

#[test]
fn caller_chosen_boundaries_are_validated() {
    let mut b = compacted_path();
    b.calls(&[("c1", "bash", json!({})), ("c2", "bash", json!({}))]); // e11
    b.result("c1", "bash", "x"); // e12
    b.custom_message("mid"); // e13
    b.result("c2", "bash", "y"); // e14
    b.user("last"); // e15
    let path = b.refs();
    assert_eq!(
        validate_boundary(&path, "nope"),
        Err(BoundaryError::NotOnBranch("nope".into()))
    );
    assert_eq!(
        validate_boundary(&path, "e2"),
        Err(BoundaryError::OutsideWindow("e2".into()))
    );
    assert_eq!(
        validate_boundary(&path, "e6"),
        Err(BoundaryError::OutsideWindow("e6".into()))
    );
    assert!(matches!(
        validate_boundary(&path, "e12"),
        Err(BoundaryError::NotACutPoint { .. })
    ));
    let err = validate_boundary(&path, "e13").unwrap_err();
    assert!(err.to_string().contains("tool call before it"), "{err}");
    assert_eq!(validate_boundary(&path, "e4"), Ok(()));
    let p =
        prepare_compaction_at(&owned(&path), "e9", &CompactionParams::default(), &Chars4).unwrap();
    assert_eq!(p.first_kept_entry_id, "e9");
    assert_eq!(p.first_kept_entry_index, 9);
    assert_eq!(ids(&p.summarized), ["e4", "e5", "e7", "e8"]);
    let p =
        prepare_compaction_at(&owned(&path), "e11", &CompactionParams::default(), &Chars4).unwrap();
    assert!(p.is_split_turn);
    assert_eq!(p.turn_start_index, Some(9));
}

#[test]
fn a_preparation_reads_its_messages_from_the_path_and_carries_file_ops() {
    let b = compacted_path();
    let p = prepare_compaction(&b.refs(), &params(200, CutMode::Fixed), &Chars4).unwrap();
    assert_eq!(p.first_kept_entry_id, "e9");
    assert!(p.file_ops.read.contains("old.rs"), "{:?}", p.file_ops);
    assert_eq!(ids(&p.summarized), ["e4", "e5", "e7", "e8"]);
    assert_eq!(p.messages_to_summarize.to_vec()[0].role(), "user");
    let summarized: Vec<AgentMessage> = p
        .messages_to_summarize
        .messages()
        .chain(p.turn_prefix_messages.messages())
        .map(std::borrow::Cow::into_owned)
        .collect();
    assert_eq!(p.summarized.to_vec(), summarized);
    assert_eq!(p.summarized.len(), ids(&p.summarized).len());
}

#[test]
fn deviation1_chained_compactions_lose_no_message() {
    let mut b = PathBuilder::new();
    for i in 0..6 {
        b.user(&t(&format!("u{i}")));
        b.assistant(&t(&format!("a{i}")));
    }
    let params = params(250, CutMode::Fixed);
    let first = prepare_compaction(&b.refs(), &params, &Chars4).unwrap();
    let kept_by_first = texts(&first.recent_messages);
    assert!(kept_by_first.len() >= 3);
    b.compaction(&first.first_kept_entry_id, "first", json!(null));
    // Nothing new yet: everything in the window is kept.
    b.user(&t("v0"));
    let again = prepare_compaction(&b.refs(), &CompactionParams::default(), &Chars4).unwrap();
    assert!(again.summarizes_nothing());
    b.assistant(&t("w0"));
    let second = prepare_compaction(&b.refs(), &params, &Chars4).unwrap();
    let mut seen = texts(&second.messages_to_summarize);
    seen.extend(texts(&second.turn_prefix_messages));
    seen.extend(texts(&second.recent_messages));
    for kept in kept_by_first.iter().chain([&t("v0"), &t("w0")]) {
        assert!(seen.contains(kept), "{} vanished", &kept[..2]);
    }
    assert_eq!(second.previous_summary.as_deref(), Some("first"));
}

/// `summarize_compaction` reports what `prepare_compaction` prepares, without the messages.
#[test]
fn the_summary_counts_what_the_preparation_holds() {
    let mut split = PathBuilder::new();
    split.user(&t("u0"));
    split.assistant(&t("a1"));
    split.user(&t("u2"));
    split.calls(&[("c1", "read", json!({"path":"seen.rs"}))]);
    split.result("c1", "read", &t("r"));
    split.branch_summary("left branch");
    for tag in ["a5", "a6", "a7"] {
        split.assistant(&t(tag));
    }
    let mut files = PathBuilder::new();
    files.user(&t("u0"));
    files.calls(&[("c1", "write", json!({"path":"new.rs"}))]);
    files.result("c1", "write", &t("r"));
    files.compaction(
        "e0",
        "s",
        json!({"readFiles":["old.rs"],"modifiedFiles":[]}),
    );
    files.user(&t("u4"));
    files.calls(&[("c2", "edit", json!({"path":"kept.rs"}))]);
    files.result("c2", "edit", &t("r"));
    files.user(&t("u7"));
    let mut compared = 0;
    for b in [compacted_path(), split, files] {
        let path = b.refs();
        for mode in [CutMode::Fixed, CutMode::Parity] {
            for keep in [50, 150, 250, 450, 10_000] {
                let params = params(keep, mode);
                let Some(p) = prepare_compaction(&path, &params, &Chars4) else {
                    assert_eq!(summarize_compaction(&path, &params, &Chars4), None);
                    continue;
                };
                let s = summarize_compaction(&path, &params, &Chars4).expect("a summary");
                assert_eq!(
                    s,
                    CompactionSummary {
                        first_kept_entry_id: p.first_kept_entry_id.clone(),
                        first_kept_entry_index: p.first_kept_entry_index,
                        is_split_turn: p.is_split_turn,
                        turn_start_index: p.turn_start_index,
                        messages_to_summarize: p.messages_to_summarize.len(),
                        turn_prefix_messages: p.turn_prefix_messages.len(),
                        recent_messages: p.recent_messages.len(),
                        tokens_before: p.tokens_before,
                        has_previous_summary: p.previous_summary.is_some(),
                        file_ops: p.file_ops.clone(),
                        keep_recent_tokens: p.keep_recent_tokens,
                    },
                    "keep {keep}, {mode:?}"
                );
                compared += 1;
            }
        }
    }
    assert!(compared >= 20, "only {compared} plans compared");
}
