use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::compaction::test_support::{PathBuilder, text};
use crate::tokens::Chars4;

fn cut(b: &PathBuilder, keep: u64, mode: CutMode) -> CutPoint {
    let refs = b.refs();
    find_cut_point(&refs, 0, refs.len(), keep, &Chars4, mode)
}

#[test]
fn no_cut_points_returns_start() {
    let mut b = PathBuilder::new();
    b.result("c0", "bash", "orphan");
    b.model_change();
    for mode in [CutMode::Parity, CutMode::Fixed] {
        assert_eq!(
            cut(&b, 10, mode),
            CutPoint {
                first_kept_entry_index: 0,
                turn_start_index: None,
                is_split_turn: false
            }
        );
    }
}

#[test]
fn large_budget_keeps_everything() {
    let mut b = PathBuilder::new();
    b.user("hello");
    b.assistant("hi");
    b.user("more");
    for mode in [CutMode::Parity, CutMode::Fixed] {
        let c = cut(&b, 1_000_000, mode);
        assert_eq!(c.first_kept_entry_index, 0);
        assert!(!c.is_split_turn);
    }
}

#[test]
fn cuts_at_a_clean_user_turn() {
    let mut b = PathBuilder::new();
    b.user(&text(400)); // 100 tokens each
    b.assistant(&text(400));
    b.user(&text(400));
    b.assistant(&text(400));
    for mode in [CutMode::Parity, CutMode::Fixed] {
        let c = cut(&b, 200, mode);
        assert_eq!(c.first_kept_entry_index, 2, "{mode:?}");
        assert_eq!(c.turn_start_index, Some(2));
        assert!(!c.is_split_turn);
    }
}

#[test]
fn split_turn_reports_the_turn_start() {
    let mut b = PathBuilder::new();
    b.user("old");
    b.assistant("old");
    b.user("do it"); // 2
    b.assistant(&text(400)); // 3
    b.assistant(&text(400)); // 4
    for mode in [CutMode::Parity, CutMode::Fixed] {
        let c = cut(&b, 100, mode);
        assert_eq!(c.first_kept_entry_index, 4, "{mode:?}");
        assert_eq!(c.turn_start_index, Some(2));
        assert!(c.is_split_turn);
    }
}

#[test]
fn metadata_before_a_clean_turn_is_not_a_fake_split_turn() {
    let mut b = PathBuilder::new();
    b.user("u1");
    b.assistant("a1");
    b.user(&text(40)); // 2: u2
    b.assistant(&text(40)); // 3: a2
    b.model_change(); // 4
    b.user(&text(400)); // 5: u3, 100 tokens
    b.assistant(&text(400)); // 6
    let parity = cut(&b, 200, CutMode::Parity);
    // The reference walks back onto the model change and calls the previous turn a prefix.
    assert_eq!(parity.first_kept_entry_index, 4);
    assert!(parity.is_split_turn);
    assert_eq!(parity.turn_start_index, Some(2));
    let fixed = cut(&b, 200, CutMode::Fixed);
    assert_eq!(fixed.first_kept_entry_index, 4);
    assert!(!fixed.is_split_turn);
    assert_eq!(fixed.turn_start_index, Some(5));
}

#[test]
fn crossing_in_trailing_tool_results_keeps_the_budget_not_everything() {
    let mut b = PathBuilder::new();
    b.user("u0");
    b.assistant("a1");
    b.user("u2"); // 2
    b.calls(&[("c1", "bash", json!({"command":"ls"}))]); // 3
    b.result("c1", "bash", &text(1600)); // 4: 400 tokens
    let parity = cut(&b, 50, CutMode::Parity);
    assert_eq!(
        parity.first_kept_entry_index, 0,
        "reference keeps everything"
    );
    let fixed = cut(&b, 50, CutMode::Fixed);
    assert_eq!(fixed.first_kept_entry_index, 3);
    assert_eq!(fixed.turn_start_index, Some(2));
    assert!(fixed.is_split_turn);
}

#[test]
fn never_separates_a_tool_call_from_its_result() {
    let mut b = PathBuilder::new();
    b.user("u0");
    b.calls(&[("c1", "bash", json!({})), ("c2", "bash", json!({}))]); // 1
    b.result("c1", "bash", &text(1600)); // 2: 400 tokens, the crossing
    b.custom_message("hook"); // 3: injected between the two results
    b.result("c2", "bash", "out"); // 4
    b.assistant(&text(40)); // 5
    // Parity cuts at the custom message, stranding result c2 (4) from its call (1).
    assert_eq!(cut(&b, 100, CutMode::Parity).first_kept_entry_index, 3);
    let fixed = cut(&b, 100, CutMode::Fixed);
    assert_eq!(fixed.first_kept_entry_index, 1);
}

#[test]
fn fixed_counts_extension_content_and_cuts_on_new_roles() {
    let mut b = PathBuilder::new();
    b.user("u0");
    b.assistant("a1");
    b.custom_role(&text(800)); // 2: 200 tokens, free for chars4 anyway
    b.python("print(1)", "1"); // 3
    b.custom_message(&text(800)); // 4
    b.assistant("a5");
    let refs = b.refs();
    let exact = crate::tokens::Tiktoken::new(crate::tokens::Bpe::O200k);
    // The reference never counts the custom_message and cannot cut at python/custom roles.
    let parity = find_cut_point(&refs, 0, 6, 60, &Chars4, CutMode::Parity);
    assert_eq!(parity.first_kept_entry_index, 0);
    let fixed = find_cut_point(&refs, 0, 6, 30, &exact, CutMode::Fixed);
    assert_eq!(fixed.first_kept_entry_index, 4);
    assert!(!fixed.is_split_turn);
    assert_eq!(find_turn_start_index(&refs, 3, 0, CutMode::Fixed), Some(3));
    assert_eq!(find_turn_start_index(&refs, 3, 0, CutMode::Parity), Some(0));
}

#[test]
fn caller_chosen_cuts_are_checked() {
    let mut b = PathBuilder::new();
    b.user("u0");
    b.calls(&[("c1", "bash", json!({}))]); // 1
    b.custom_message("mid"); // 2
    b.result("c1", "bash", "out"); // 3
    b.model_change(); // 4
    b.assistant("a5"); // 5
    let refs = b.refs();
    let at = |i| cut_point_at(&refs, 0, refs.len(), i, CutMode::Fixed);
    assert_eq!(at(3), Err(CutRejection::ToolResult));
    assert_eq!(at(2), Err(CutRejection::SplitsToolCall));
    assert_eq!(at(9), Err(CutRejection::OutsideWindow));
    let c = at(4).expect("metadata before an assistant message");
    assert_eq!(c.first_kept_entry_index, 4);
    assert!(c.is_split_turn);
    assert_eq!(c.turn_start_index, Some(2));
    assert!(at(1).is_ok());
}

#[derive(Clone, Debug)]
enum Op {
    User(usize),
    Assistant(usize),
    /// Tool calls with their result sizes; a custom message or metadata may sit between them.
    Calls(Vec<usize>, u8),
    Meta,
    Custom(usize),
    Bash(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..800usize).prop_map(Op::User),
        (0..800usize).prop_map(Op::Assistant),
        (prop::collection::vec(0..2000usize, 1..4), 0..3u8).prop_map(|(r, x)| Op::Calls(r, x)),
        Just(Op::Meta),
        (0..800usize).prop_map(Op::Custom),
        (0..400usize).prop_map(Op::Bash),
    ]
}

fn build(ops: &[Op]) -> PathBuilder {
    let mut b = PathBuilder::new();
    b.user("start");
    let mut call = 0;
    for op in ops {
        match op {
            Op::User(n) => drop(b.user(&text(*n))),
            Op::Assistant(n) => drop(b.assistant(&text(*n))),
            Op::Meta => drop(b.model_change()),
            Op::Custom(n) => drop(b.custom_message(&text(*n))),
            Op::Bash(n) => drop(b.bash("ls", &text(*n))),
            Op::Calls(results, extra) => {
                let ids: Vec<String> = results
                    .iter()
                    .map(|_| {
                        call += 1;
                        format!("c{call}")
                    })
                    .collect();
                let calls: Vec<(&str, &str, serde_json::Value)> = ids
                    .iter()
                    .map(|id| (id.as_str(), "bash", json!({"command":"x"})))
                    .collect();
                b.calls(&calls);
                for (i, (id, n)) in ids.iter().zip(results).enumerate() {
                    if i == 1 && *extra == 1 {
                        b.custom_message("hook");
                    }
                    if i == 1 && *extra == 2 {
                        b.model_change();
                    }
                    b.result(id, "bash", &text(*n));
                }
            }
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn fixed_cut_points_are_safe_and_keep_the_budget(
        ops in prop::collection::vec(op(), 0..40),
        keep in 0u64..3000,
    ) {
        let b = build(&ops);
        let refs = b.refs();
        let end = refs.len();
        let c = find_cut_point(&refs, 0, end, keep, &Chars4, CutMode::Fixed);
        let first = c.first_kept_entry_index;
        prop_assert!(first < end);
        // Never on a tool result, not even behind metadata.
        let content = (first..end).find(|&i| !is_metadata(refs[i], CutMode::Fixed)).unwrap_or(end);
        if content < end {
            prop_assert!(!matches!(refs[content].message(), Some(AgentMessage::ToolResult(_))));
        }
        // Every call and its result on the same side.
        let mut call_at = HashMap::new();
        for (i, e) in refs.iter().enumerate() {
            match e.message() {
                Some(AgentMessage::Assistant(a)) => {
                    for call in a.tool_calls() { call_at.insert(call.id.clone(), i); }
                }
                Some(AgentMessage::ToolResult(r)) => {
                    let a = call_at[&r.tool_call_id];
                    prop_assert_eq!(a < first, i < first, "call {} result {} cut {}", a, i, first);
                }
                _ => {}
            }
        }
        // At least the budget is kept, unless everything is.
        let kept: u64 = (first..end).filter_map(|i| walk_tokens(refs[i], &Chars4, CutMode::Fixed)).sum();
        let first_valid = valid_cut_points(&refs, 0, end, CutMode::Fixed)[0];
        prop_assert!(kept >= keep || first <= first_valid, "kept {} < {} at {}", kept, keep, first);
        // A split turn's prefix lies before the kept region.
        if c.is_split_turn {
            prop_assert!(c.turn_start_index.unwrap() < first);
        }
    }
}

#[test]
fn file_mentions_count_and_are_cut_points_with_the_exact_counter() {
    let mut b = PathBuilder::new();
    b.user("u0");
    b.assistant("a1");
    b.file_mention("src/lib.rs", &"fn main() {}\n".repeat(50)); // 2
    b.assistant("a3");
    let refs = b.refs();
    let exact = crate::tokens::Tiktoken::new(crate::tokens::Bpe::O200k);
    let c = find_cut_point(&refs, 0, refs.len(), 20, &exact, CutMode::Fixed);
    assert_eq!(c.first_kept_entry_index, 2);
    // chars4 (parity) does not see it and never cuts there.
    let p = find_cut_point(&refs, 0, refs.len(), 20, &Chars4, CutMode::Parity);
    assert_eq!(p.first_kept_entry_index, 0);
}
