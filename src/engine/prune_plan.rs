//! Interim: the pruning selection of spec §5 until `compaction::prune_tool_outputs` /
//! `apply_prune` land on main; then this file is deleted and `prune.rs` imports those.

use serde_json::Value;

use crate::session::message::ContentBlock;
use crate::session::{AgentMessage, Entry, EntryKind};
use crate::tokens::TokenCounter;

/// Newest tool output kept whole, in tokens.
pub const PROTECT_TOKENS: u64 = 40_000;
/// Pruning runs only when it saves at least this many tokens.
pub const MINIMUM_SAVINGS: u64 = 20_000;
/// Tools whose output is never pruned.
pub const PROTECTED_TOOLS: &[&str] = &["skill", "read"];
/// Where a pruned entry keeps its original content (inside the message object).
pub const ORIGINAL_CONTENT_FIELD: &str = "compactdOriginalContent";

/// The tool results to prune, with their counts.
#[derive(Debug, Clone, Default)]
pub struct PrunePlan {
    pub entry_ids: Vec<String>,
    /// Per pruned entry: its token count (for the notice).
    pub tokens: Vec<u64>,
    pub tokens_saved: u64,
}

fn notice(tokens: u64) -> String {
    format!("[Output truncated - {tokens} tokens]")
}

/// Spec §5 over `entries` (the live context, oldest first).
pub fn prune_tool_outputs(entries: &[&Entry], counter: &dyn TokenCounter) -> PrunePlan {
    let mut acc = 0u64;
    let mut plan = PrunePlan::default();
    for entry in entries.iter().rev() {
        let Some(msg @ AgentMessage::ToolResult(result)) = entry.message() else {
            continue;
        };
        let tokens = counter.count_message(msg);
        if result.pruned_at.is_some()
            || acc < PROTECT_TOKENS
            || PROTECTED_TOOLS.contains(&result.tool_name.as_str())
        {
            acc += tokens;
            continue;
        }
        acc += tokens;
        let cost = counter.count_text(&notice(tokens));
        plan.tokens_saved += tokens.saturating_sub(cost);
        plan.entry_ids.push(entry.id.clone());
        plan.tokens.push(tokens);
    }
    if plan.tokens_saved < MINIMUM_SAVINGS {
        return PrunePlan::default();
    }
    plan
}

/// Replaces the content of a planned tool result with the notice, keeping the original.
pub fn apply_prune(entry: &mut Entry, plan: &PrunePlan, now_ms: i64) {
    let Some(at) = plan.entry_ids.iter().position(|id| *id == entry.id) else {
        return;
    };
    let EntryKind::Message(AgentMessage::ToolResult(result)) = &mut entry.kind else {
        return;
    };
    let original = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    result
        .extra
        .insert(ORIGINAL_CONTENT_FIELD.to_owned(), original);
    result.content = vec![ContentBlock::text(notice(plan.tokens[at]))];
    result.pruned_at = Some(Value::from(now_ms));
}
