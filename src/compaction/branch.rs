//! The entries a branch summary covers (spec §6.1) and the messages it summarises within a
//! token budget (spec §6.2).

use std::collections::HashSet;

use crate::session::{AgentMessage, Entry, EntryKind};
use crate::tokens::TokenCounter;

use super::file_ops::FileOps;

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

/// The message a branch entry contributes; tool results are skipped (the calls carry their
/// gist) and compactions become their summaries.
fn branch_message(entry: &Entry) -> Option<AgentMessage> {
    match entry.message() {
        Some(AgentMessage::ToolResult(_)) => None,
        _ => entry.to_agent_message(true),
    }
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
    fn skips_tool_results_and_turns_compactions_into_summaries() {
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
            ["user", "assistant", "compactionSummary", "branchSummary"]
        );
        assert!(p.file_ops.written.contains("w.rs"));
        assert!(p.file_ops.read.contains("r.rs") && p.file_ops.edited.contains("m.rs"));
        assert!(!p.file_ops.read.contains("ignored.rs"));
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
