//! Tool-output pruning (spec §5): replace old, large tool results in the live context with a
//! short notice.
//!
//! Deviation 4 (DESIGN §3): only the entries of the live context are looked at, so savings
//! are counted only where they shrink what the model sees (the reference scans the whole branch,
//! and in one real session 72% of its "savings" were outside the context), and the original
//! content stays recoverable in the message's `originalContent` field rather than destroyed.
//! The reference ignores unknown fields, so it still reads a pruned file.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::ORIGINAL_CONTENT_FIELD;
use crate::session::message::{ContentBlock, Extra, ToolResultMessage};
use crate::session::{AgentMessage, Entry, EntryKind, FULL_TEXT_FIELD};
use crate::tokens::TokenCounter;

/// Pruning thresholds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneConfig {
    /// Tokens of the newest tool outputs that are never pruned.
    pub protect_tokens: u64,
    /// Prune only if at least this many tokens are saved.
    pub minimum_savings: u64,
    /// Tools whose outputs are never pruned.
    pub protected_tools: Vec<String>,
}

impl Default for PruneConfig {
    fn default() -> Self {
        PruneConfig {
            protect_tokens: 40_000,
            minimum_savings: 20_000,
            protected_tools: vec!["skill".into(), "read".into()],
        }
    }
}

/// One tool result to prune.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrunedOutput {
    pub entry_id: String,
    /// Its cost before pruning.
    pub tokens: u64,
    /// The text that replaces it.
    pub notice: String,
}

/// What pruning would do. Empty (and zero) when the savings are below the minimum.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrunePlan {
    pub candidates: Vec<PrunedOutput>,
    pub pruned_count: usize,
    /// Tokens saved in the live context.
    pub tokens_saved: u64,
}

/// The notice that replaces a pruned output of `tokens` tokens.
pub fn prune_notice(tokens: u64) -> String {
    format!("[Output truncated - {tokens} tokens]")
}

fn notice_message(notice: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: String::new(),
        tool_name: String::new(),
        content: vec![ContentBlock::text(notice)],
        details: None,
        is_error: false,
        pruned_at: Some(Value::from(0)),
        timestamp: None,
        extra: Extra::new(),
    })
}

/// Plans pruning over `context_entries`, the entries of the live context in order (the
/// caller passes exactly those). Walks newest to oldest: already-pruned outputs and those of
/// protected tools count toward the protected window without being pruned; once
/// `protect_tokens` have been seen, the remaining outputs are candidates. The tokens of each
/// tool-result entry come from `count` (e.g. a [`crate::tokens::TokenCache`], so a dry run
/// does not re-tokenise the context), which must agree with `counter.count_message` of the
/// entry's message.
pub fn prune_tool_outputs(
    context_entries: &[&Entry],
    count: &dyn Fn(&Entry) -> u64,
    counter: &dyn TokenCounter,
    config: &PruneConfig,
) -> PrunePlan {
    let mut seen = 0u64;
    let mut candidates = Vec::new();
    let mut saved = 0u64;
    for entry in context_entries.iter().rev() {
        let Some(AgentMessage::ToolResult(result)) = entry.message() else {
            continue;
        };
        let tokens = count(entry);
        let protected = result.pruned_at.is_some()
            || seen < config.protect_tokens
            || config.protected_tools.contains(&result.tool_name);
        seen += tokens;
        if protected {
            continue;
        }
        let notice = prune_notice(tokens);
        saved += tokens.saturating_sub(counter.count_message(&notice_message(&notice)));
        candidates.push(PrunedOutput {
            entry_id: entry.id.clone(),
            tokens,
            notice,
        });
    }
    if candidates.is_empty() || saved < config.minimum_savings {
        return PrunePlan::default();
    }
    PrunePlan {
        pruned_count: candidates.len(),
        candidates,
        tokens_saved: saved,
    }
}

fn tool_result_mut(entry: &mut Entry) -> Option<&mut ToolResultMessage> {
    match entry.kind_mut() {
        EntryKind::Message(AgentMessage::ToolResult(r)) => Some(r),
        _ => None,
    }
}

/// Replaces a tool result's content with `notice`, sets `prunedAt`, and keeps the original
/// content in `originalContent`. Returns false (and changes nothing) if the entry is not a
/// tool result or is already pruned.
pub fn apply_prune(entry: &mut Entry, notice: &str, pruned_at_ms: i64) -> bool {
    let Some(result) = tool_result_mut(entry) else {
        return false;
    };
    if result.pruned_at.is_some() {
        return false;
    }
    let original = std::mem::replace(&mut result.content, vec![ContentBlock::text(notice)]);
    // Serialising content blocks cannot fail: their keys are strings.
    let original = serde_json::to_value(original).expect("content serialises");
    result
        .extra
        .insert(ORIGINAL_CONTENT_FIELD.to_owned(), original);
    result.pruned_at = Some(Value::from(pruned_at_ms));
    move_full_text_pointers(entry, CONTENT_POINTER, ORIGINAL_POINTER);
    true
}

/// Where a tool result's content sits in its entry, and where pruning moves it.
const CONTENT_POINTER: &str = "/message/content";
const ORIGINAL_POINTER: &str = "/message/originalContent";

/// Points the entry's full-text references (strings the size controls truncated on disk,
/// `compactdFullText`) at the content's new place: left at `/message/content/…`, they would
/// put the whole original text back over the prune notice when the entry is read.
fn move_full_text_pointers(entry: &mut Entry, from: &str, to: &str) {
    let Some(Value::Object(refs)) = entry.extra_mut().get_mut(FULL_TEXT_FIELD) else {
        return;
    };
    let moved = std::mem::take(refs)
        .into_iter()
        .map(|(pointer, reference)| match pointer.strip_prefix(from) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                (format!("{to}{rest}"), reference)
            }
            _ => (pointer, reference),
        })
        .collect();
    *refs = moved;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::CutMode;
    use crate::compaction::prepare::effective_window;
    use crate::compaction::test_support::{PathBuilder, text};
    use crate::tokens::Chars4;
    use serde_json::json;

    /// Restores a tool result pruned by [`apply_prune`]. Returns false if there is nothing to
    /// restore (not a tool result, or pruned by the reference, which kept no original).
    /// (Reading history back, `session::recall::read_entry`, restores the original in the
    /// entry's JSON; this shows on the typed entry that a prune keeps all of it.)
    fn unprune(entry: &mut Entry) -> bool {
        let Some(result) = tool_result_mut(entry) else {
            return false;
        };
        let Some(original) = result.extra.get(ORIGINAL_CONTENT_FIELD) else {
            return false;
        };
        let Ok(content) = serde_json::from_value::<Vec<ContentBlock>>(original.clone()) else {
            return false;
        };
        result.content = content;
        result.pruned_at = None;
        result.extra.remove(ORIGINAL_CONTENT_FIELD);
        move_full_text_pointers(entry, ORIGINAL_POINTER, CONTENT_POINTER);
        true
    }

    /// The plan with every entry counted by chars4, as the engine counts without a cache.
    fn plan_with_chars4(entries: &[&Entry], config: &PruneConfig) -> PrunePlan {
        let count = |e: &Entry| e.message().map_or(0, |m| Chars4.count_message(m));
        prune_tool_outputs(entries, &count, &Chars4, config)
    }

    fn small_config() -> PruneConfig {
        PruneConfig {
            protect_tokens: 1_000,
            minimum_savings: 500,
            protected_tools: vec!["read".into()],
        }
    }

    #[test]
    fn prunes_old_outputs_beyond_the_protected_window() {
        let mut b = PathBuilder::new();
        b.user("go");
        let old = b.result("c1", "bash", &text(2400)); // 600 tokens
        let read = b.result("c2", "read", &text(2400)); // protected tool
        let crossing = b.result("c3", "bash", &text(2400)); // crosses 1000: still protected
        b.result("c4", "bash", &text(2400)); // newest
        let plan = plan_with_chars4(&b.refs(), &small_config());
        // c4 (0 seen) and c3 (600 seen) protected; c2 protected tool; c1 pruned.
        assert_eq!(plan.pruned_count, 1);
        assert_eq!(plan.candidates[0].entry_id, old);
        assert_eq!(plan.candidates[0].tokens, 600);
        assert_eq!(plan.candidates[0].notice, "[Output truncated - 600 tokens]");
        // The notice costs ceil(31/4) = 8.
        assert_eq!(plan.tokens_saved, 592);
        assert!(
            !plan
                .candidates
                .iter()
                .any(|c| c.entry_id == read || c.entry_id == crossing)
        );
    }

    #[test]
    fn nothing_is_pruned_below_the_minimum_savings() {
        let mut b = PathBuilder::new();
        b.result("c1", "bash", &text(400));
        b.result("c2", "bash", &text(4000));
        let plan = plan_with_chars4(&b.refs(), &small_config());
        assert_eq!(plan, PrunePlan::default());
    }

    #[test]
    fn deviation4_savings_outside_the_context_are_not_counted() {
        // Two big outputs before a compaction that kept only the tail.
        let mut b = PathBuilder::new();
        b.user("go");
        b.result("c1", "bash", &text(4000)); // 1000 tokens, summarised
        b.result("c2", "bash", &text(4000)); // 1000 tokens, summarised
        let kept = b.user("next"); // e3
        b.result("c3", "bash", &text(4000)); // e4: 1000
        b.result("c4", "bash", &text(1600)); // e5: 400
        b.compaction(&kept, "s", json!(null));
        b.result("c5", "bash", &text(4000)); // e7: 1000, the protected window
        let config = PruneConfig {
            minimum_savings: 1_500,
            ..small_config()
        };
        let whole = b.refs();
        // The reference scans the whole branch: c1 and c2 push it over the minimum.
        let reference = plan_with_chars4(&whole, &config);
        assert_eq!(reference.pruned_count, 4);
        assert_eq!(reference.tokens_saved, 3 * 992 + 392);
        // compactd passes the live context only, where pruning would save too little.
        let context: Vec<&Entry> = effective_window(&whole, CutMode::Fixed)
            .into_iter()
            .map(|i| whole[i])
            .collect();
        assert_eq!(
            context.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["e3", "e4", "e5", "e7"]
        );
        assert_eq!(plan_with_chars4(&context, &config), PrunePlan::default());
        let plan = plan_with_chars4(&context, &small_config());
        assert_eq!(plan.pruned_count, 2);
        assert_eq!(plan.tokens_saved, 992 + 392);
    }

    #[test]
    fn apply_keeps_the_original_and_unprune_restores_it() {
        let mut b = PathBuilder::new();
        b.result("c1", "bash", "long output");
        let mut entry = b.entries.remove(0);
        let before = entry.clone();
        assert!(apply_prune(
            &mut entry,
            "[Output truncated - 3 tokens]",
            1234
        ));
        assert!(!apply_prune(&mut entry, "again", 99), "already pruned");
        let v = entry.to_value();
        assert_eq!(v["message"]["prunedAt"], json!(1234));
        assert_eq!(
            v["message"]["content"],
            json!([{"type":"text","text":"[Output truncated - 3 tokens]"}])
        );
        assert_eq!(
            v["message"]["originalContent"],
            json!([{"type":"text","text":"long output"}])
        );
        // Still a valid entry after a round trip through JSON.
        let reread = Entry::from_value(v).unwrap();
        let mut restored = reread.clone();
        assert!(unprune(&mut restored));
        assert_eq!(restored, before);
        let mut user = PathBuilder::new();
        user.user("hi");
        assert!(!apply_prune(&mut user.entries[0], "x", 1));
        assert!(!unprune(&mut user.entries[0]));
    }

    /// A tool result whose text the size controls truncated on disk keeps a reference to the
    /// full text by JSON pointer; pruning moves that pointer with the content it names, and
    /// unpruning moves it back (otherwise reading the pruned entry put the whole text back over
    /// the notice).
    #[test]
    fn pruning_moves_full_text_references_with_the_content() {
        let mut b = PathBuilder::new();
        b.result("c1", "bash", "truncated copy");
        let mut entry = b.entries.remove(0);
        let refs = json!({"/message/content/0/text": "blob:sha256:ab",
            "/message/details/log": "blob:sha256:cd"});
        entry
            .extra_mut()
            .insert(FULL_TEXT_FIELD.to_owned(), refs.clone());
        assert!(apply_prune(&mut entry, "[Output truncated - 9 tokens]", 1));
        assert_eq!(
            entry.extra()[FULL_TEXT_FIELD],
            json!({"/message/originalContent/0/text": "blob:sha256:ab",
                "/message/details/log": "blob:sha256:cd"})
        );
        assert!(unprune(&mut entry));
        assert_eq!(entry.extra()[FULL_TEXT_FIELD], refs);
    }
}
