//! The entries a branch summary covers (spec §6.1) and the messages it summarises within a
//! token budget (spec §6.2).
//!
//! Unlike the reference, which skips tool results, a branch summary sees each tool result as
//! an excerpt of at most [`TOOL_RESULT_MAX_CHARS`] characters (its head and its tail, where
//! errors and test totals usually are): without them a summary cannot tell which commands
//! ran, failed or passed. The excerpt is also what the budget counts, so a huge file read costs
//! no more than the transcript shows of it.

use std::collections::HashSet;

use crate::session::message::{ContentBlock, ToolResultMessage, join_text};
use crate::session::{AgentMessage, Entry, EntryKind};
use crate::tokens::TokenCounter;

use super::file_ops::FileOps;
use super::serialize::TOOL_RESULT_MAX_CHARS;

/// Characters of a long tool result's end kept in its excerpt; the rest of
/// [`TOOL_RESULT_MAX_CHARS`] goes to its head and the note between them.
const TOOL_RESULT_TAIL_CHARS: usize = 500;

/// The entries of the branch being left, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BranchCollection {
    pub entries: Vec<Entry>,
    /// The deepest entry shared by the old branch and the target's path.
    pub common_ancestor_id: Option<String>,
}

/// Messages to summarise, oldest first, with their file operations and cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PreparedBranch {
    pub messages: Vec<AgentMessage>,
    pub file_ops: FileOps,
    pub total_tokens: u64,
}

/// `from` and its ancestors, leaf first. Stops at a missing or unknown parent, and at a cycle
/// (a corrupt file must not hang the daemon).
fn ancestors<'a>(get: &impl Fn(&str) -> Option<&'a Entry>, from: &str) -> Vec<&'a Entry> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut next = get(from);
    while let Some(entry) = next {
        if !seen.insert(entry.id.as_str()) {
            break;
        }
        out.push(entry);
        next = entry.parent_id.as_deref().and_then(get);
    }
    out
}

/// The entries between `old_leaf` and the common ancestor of `old_leaf` and `target`
/// (exclusive), oldest first. Compaction entries are included (they become summaries). No
/// old leaf: nothing. If the target is on the old path, it is the common ancestor.
pub fn collect_entries_for_branch_summary<'a>(
    get: impl Fn(&str) -> Option<&'a Entry>,
    old_leaf: Option<&str>,
    target: &str,
) -> BranchCollection {
    let Some(old_leaf) = old_leaf else {
        return BranchCollection::default();
    };
    let old_path = ancestors(&get, old_leaf);
    let old_ids: HashSet<&str> = old_path.iter().map(|e| e.id.as_str()).collect();
    let common = ancestors(&get, target)
        .into_iter()
        .find(|e| old_ids.contains(e.id.as_str()))
        .map(|e| e.id.clone());
    let mut entries: Vec<Entry> = old_path
        .into_iter()
        .take_while(|e| Some(&e.id) != common.as_ref())
        .cloned()
        .collect();
    entries.reverse();
    BranchCollection {
        entries,
        common_ancestor_id: common,
    }
}

/// The message a branch entry contributes: tool results as excerpts, compactions as their
/// summaries.
fn branch_message(entry: &Entry) -> Option<AgentMessage> {
    match entry.message() {
        Some(AgentMessage::ToolResult(result)) => {
            Some(AgentMessage::ToolResult(tool_result_excerpt(result)))
        }
        _ => entry.to_agent_message(true),
    }
}

/// `result` with its text cut to its head and tail (at most [`TOOL_RESULT_MAX_CHARS`]
/// characters in all) and without images or details, which no summary reads.
pub fn tool_result_excerpt(result: &ToolResultMessage) -> ToolResultMessage {
    let text = join_text(&result.content, "");
    ToolResultMessage {
        content: vec![ContentBlock::text(head_and_tail(&text))],
        details: None,
        ..result.clone()
    }
}

/// `text` when it fits [`TOOL_RESULT_MAX_CHARS`]; else its head, a note saying how much was
/// left out, and its last [`TOOL_RESULT_TAIL_CHARS`] characters.
fn head_and_tail(text: &str) -> String {
    let total = text.chars().count();
    if total <= TOOL_RESULT_MAX_CHARS {
        return text.to_owned();
    }
    let note_room = 60;
    let head = TOOL_RESULT_MAX_CHARS - TOOL_RESULT_TAIL_CHARS - note_room;
    let omitted = total - head - TOOL_RESULT_TAIL_CHARS;
    let byte_at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n[… {omitted} characters left out …]\n{}",
        &text[..byte_at(head)],
        &text[byte_at(total - TOOL_RESULT_TAIL_CHARS)..]
    )
}

/// Picks the newest messages of `entries` that fit `token_budget` (0: no limit), oldest first.
///
/// File lists of pi-generated branch summaries are merged from every entry. Walking newest to
/// oldest, each message's file operations are added, then its cost checked; the first that
/// does not fit stops the walk, except that a compaction or branch summary is still taken
/// when less than 90% of the budget is used (a summary carries the most context per token).
/// As in the reference, file operations of the messages older than the stop are not added.
pub fn prepare_branch_entries(
    entries: &[Entry],
    token_budget: u64,
    counter: &dyn TokenCounter,
) -> PreparedBranch {
    let mut file_ops = FileOps::default();
    for entry in entries {
        if let EntryKind::BranchSummary(summary) = entry.kind() {
            file_ops.add_branch_summary(summary);
        }
    }
    let mut messages = Vec::new();
    let mut total = 0u64;
    for entry in entries.iter().rev() {
        let Some(message) = branch_message(entry) else {
            continue;
        };
        file_ops.add_message(&message);
        let tokens = counter.count_message(&message);
        if token_budget > 0 && total + tokens > token_budget {
            let is_summary = matches!(
                entry.kind(),
                EntryKind::Compaction(_) | EntryKind::BranchSummary(_)
            );
            if is_summary && (total as f64) < 0.9 * token_budget as f64 {
                messages.push(message);
                total += tokens;
            }
            break;
        }
        messages.push(message);
        total += tokens;
    }
    messages.reverse();
    PreparedBranch {
        messages,
        file_ops,
        total_tokens: total,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::compaction::test_support::{PathBuilder, text};
    use crate::tokens::Chars4;
    use serde_json::json;

    fn index(entries: &[Entry]) -> HashMap<String, Entry> {
        entries.iter().map(|e| (e.id.clone(), e.clone())).collect()
    }

    fn ids(entries: &[Entry]) -> Vec<&str> {
        entries.iter().map(|e| e.id.as_str()).collect()
    }

    /// `e0 - e1 - e2 - e3` and a side branch `s1` off `e1`.
    fn tree() -> HashMap<String, Entry> {
        let mut b = PathBuilder::new();
        b.user("root");
        b.assistant("a");
        b.user("left");
        b.assistant("left answer");
        let mut map = index(&b.entries);
        let mut side = b.entries[2].clone();
        side.id = "s1".into();
        side.parent_id = Some("e1".into());
        map.insert("s1".into(), side);
        map
    }

    #[test]
    fn collects_the_abandoned_branch_down_to_the_common_ancestor() {
        let map = tree();
        let get = |id: &str| map.get(id);
        let c = collect_entries_for_branch_summary(get, Some("e3"), "s1");
        assert_eq!(c.common_ancestor_id.as_deref(), Some("e1"));
        assert_eq!(ids(&c.entries), ["e2", "e3"]);
        // A target on the old path is its own common ancestor.
        let c = collect_entries_for_branch_summary(get, Some("e3"), "e1");
        assert_eq!(ids(&c.entries), ["e2", "e3"]);
        let c = collect_entries_for_branch_summary(get, None, "e1");
        assert_eq!(c, BranchCollection::default());
    }

    #[test]
    fn cycles_do_not_hang() {
        let mut map = tree();
        map.get_mut("e0").unwrap().parent_id = Some("e3".into());
        let get = |id: &str| map.get(id);
        let c = collect_entries_for_branch_summary(get, Some("e3"), "s1");
        assert_eq!(c.common_ancestor_id.as_deref(), Some("e1"));
        assert_eq!(ids(&c.entries), ["e2", "e3"]);
        let c = collect_entries_for_branch_summary(get, Some("e3"), "unknown");
        assert_eq!(c.common_ancestor_id, None);
        assert_eq!(c.entries.len(), 4);
    }

    #[test]
    fn keeps_tool_results_and_turns_compactions_into_summaries() {
        let mut b = PathBuilder::new();
        b.user("u");
        b.calls(&[("c1", "write", json!({"path":"w.rs"}))]);
        b.result("c1", "write", "ok");
        b.compaction("e0", "older work", json!({"readFiles":["ignored.rs"]}));
        b.push(
            "branch_summary",
            json!({"fromId":"e0","summary":"side","details":{"readFiles":["r.rs"],"modifiedFiles":["m.rs"]}}),
        );
        b.model_change();
        let p = prepare_branch_entries(&b.entries, 0, &Chars4);
        let roles: Vec<&str> = p.messages.iter().map(AgentMessage::role).collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "toolResult",
                "compactionSummary",
                "branchSummary"
            ]
        );
        assert!(p.file_ops.written.contains("w.rs"));
        assert!(p.file_ops.read.contains("r.rs") && p.file_ops.edited.contains("m.rs"));
        assert!(!p.file_ops.read.contains("ignored.rs"));
    }

    #[test]
    fn long_tool_results_become_their_head_and_tail_and_cost_only_that() {
        let output = format!(
            "first line\n{}\ntest result: ok. 9 passed",
            "x".repeat(50_000)
        );
        let mut b = PathBuilder::new();
        b.calls(&[("c1", "bash", json!({"command":"cargo test"}))]);
        b.result("c1", "bash", &output);
        let p = prepare_branch_entries(&b.entries, 0, &Chars4);
        let AgentMessage::ToolResult(result) = &p.messages[1] else {
            panic!("the tool result is kept: {:?}", p.messages);
        };
        let text = join_text(&result.content, "");
        assert!(text.starts_with("first line\n"), "{text}");
        assert!(text.ends_with("\ntest result: ok. 9 passed"), "{text}");
        assert!(text.contains("characters left out"), "{text}");
        assert!(
            text.chars().count() <= TOOL_RESULT_MAX_CHARS,
            "{}",
            text.len()
        );
        assert!(p.total_tokens < 1_000, "{}", p.total_tokens);
        // A short one is kept whole.
        assert_eq!(head_and_tail("ok"), "ok");
    }

    #[test]
    fn budget_keeps_the_newest_and_lets_a_summary_in_under_ninety_percent() {
        let mut b = PathBuilder::new();
        b.calls(&[("c0", "read", json!({"path":"too-old.rs"}))]);
        b.calls(&[("c1", "read", json!({"path":"overflowing.rs"}))]);
        b.user(&text(400)); // 100
        b.assistant(&text(400)); // 100
        let p = prepare_branch_entries(&b.entries, 205, &Chars4);
        assert_eq!(p.messages.len(), 2);
        assert_eq!(p.total_tokens, 200);
        // The message that overflowed still adds its files; older ones do not.
        assert!(p.file_ops.read.contains("overflowing.rs"));
        assert!(!p.file_ops.read.contains("too-old.rs"));

        let mut b = PathBuilder::new();
        b.branch_summary(&text(400)); // 100 tokens
        b.user(&text(400));
        let p = prepare_branch_entries(&b.entries, 150, &Chars4);
        assert_eq!(p.messages.len(), 2, "summary admitted: 100 < 0.9 * 150");
        assert_eq!(p.total_tokens, 200);
        let p = prepare_branch_entries(&b.entries, 105, &Chars4);
        assert_eq!(p.messages.len(), 1, "100 >= 0.9 * 105");
    }
}
