//! Where a compaction cuts (spec §4.8): the first entry kept verbatim, and whether that cut
//! splits a turn.
//!
//! Two modes. [`CutMode::Parity`] reproduces the reference exactly (use it with `Chars4` to
//! compare cut points). [`CutMode::Fixed`], the default, fixes the quirks of spec §13 #7 that
//! lose or break context:
//! * every role has a cost and `custom`, `pythonExecution` and `fileMention` messages are cut
//!   points (`custom` and `pythonExecution` also start turns), as are `custom_message` and
//!   `branch_summary` entries, whose content now counts toward the budget (deviation 5);
//! * a tool result is never the first kept entry, and no cut falls between a tool call and its
//!   result, so every pair stays on one side (no orphaned results, earendil-works/pi #4570);
//! * at least the budget is kept: the cut is the last valid cut point at or before the entry
//!   where the budget is reached. The reference takes the first one after it, which keeps less
//!   than the budget, and keeps *everything* when the crossing is in trailing tool results;
//! * metadata before the cut is pulled into the kept region, but a clean turn start behind it
//!   is no longer mistaken for a split turn whose "prefix" is the whole previous turn.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::session::{AgentMessage, Entry, EntryKind};
use crate::tokens::TokenCounter;

/// Which cut-point rules to apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CutMode {
    /// compactd's rules (see the module documentation).
    #[default]
    Fixed,
    /// The reference's rules, quirks included.
    Parity,
}

/// The result of [`find_cut_point`]; indices are into the slice it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CutPoint {
    /// First entry kept verbatim.
    pub first_kept_entry_index: usize,
    /// Start of the turn the cut falls in, if one was found.
    pub turn_start_index: Option<usize>,
    /// The cut falls inside a turn: `[turn_start_index, first_kept_entry_index)` is its prefix.
    pub is_split_turn: bool,
}

// The walks below look at every entry of a window that may hold a million: each is parsed
// for the look unless it already is (`Entry::peek`), so none stays parsed (issue 35 item 7).

fn is_user(entry: &Entry) -> bool {
    entry.peek().message().map(AgentMessage::role) == Some("user")
}

/// Whether the entry may be the first kept entry, ignoring tool-call pairing.
fn is_cut_kind(entry: &Entry, mode: CutMode) -> bool {
    match entry.peek().kind() {
        EntryKind::CustomMessage(_) | EntryKind::BranchSummary(_) => true,
        EntryKind::Message(m) => match mode {
            CutMode::Parity => matches!(
                m.role(),
                "user" | "assistant" | "bashExecution" | "branchSummary" | "compactionSummary"
            ),
            CutMode::Fixed => matches!(
                m,
                AgentMessage::User(_)
                    | AgentMessage::Assistant(_)
                    | AgentMessage::BashExecution(_)
                    | AgentMessage::PythonExecution(_)
                    | AgentMessage::Custom(_)
                    | AgentMessage::FileMention(_)
                    | AgentMessage::BranchSummary(_)
                    | AgentMessage::CompactionSummary(_)
            ),
        },
        _ => false,
    }
}

/// Whether the entry begins a turn (a user prompt or something standing in for one).
fn is_turn_start(entry: &Entry, mode: CutMode) -> bool {
    match entry.peek().kind() {
        EntryKind::CustomMessage(_) | EntryKind::BranchSummary(_) => true,
        EntryKind::Message(m) => match mode {
            CutMode::Parity => matches!(m.role(), "user" | "bashExecution"),
            CutMode::Fixed => matches!(
                m,
                AgentMessage::User(_)
                    | AgentMessage::BashExecution(_)
                    | AgentMessage::PythonExecution(_)
                    | AgentMessage::Custom(_)
                    | AgentMessage::BranchSummary(_)
            ),
        },
        _ => false,
    }
}

/// Whether the entry carries no conversation content (model changes, labels, ...).
fn is_metadata(entry: &Entry, mode: CutMode) -> bool {
    let entry = &*entry.peek();
    match mode {
        CutMode::Parity => !matches!(
            entry.kind(),
            EntryKind::Message(_) | EntryKind::Compaction(_)
        ),
        CutMode::Fixed => {
            !matches!(entry.kind(), EntryKind::Compaction(_))
                && entry.agent_message(false).is_none()
        }
    }
}

/// The tokens the cut-point walk charges for an entry; `None` for entries it skips.
fn walk_tokens(entry: &Entry, counter: &dyn TokenCounter, mode: CutMode) -> Option<u64> {
    let entry = &*entry.peek();
    match mode {
        // The reference only counts `message` entries.
        CutMode::Parity => entry.message().map(|m| counter.count_message(m)),
        CutMode::Fixed => entry
            .agent_message(false)
            .map(|m| counter.count_message(&m)),
    }
}

/// For each index in `[start, end)`, whether a tool call before it has its result at or
/// after it, i.e. whether cutting there would separate a call from its result.
pub(crate) fn splits_tool_pair(entries: &[&Entry], start: usize, end: usize) -> Vec<bool> {
    let mut call_at: HashMap<String, usize> = HashMap::new();
    // depth[i - start] > 0 means some call/result interval (call, result] covers i.
    let mut delta = vec![0i64; end.saturating_sub(start) + 1];
    for (i, entry) in entries.iter().enumerate().take(end).skip(start) {
        match entry.peek().message() {
            Some(AgentMessage::Assistant(a)) => {
                for call in a.tool_calls() {
                    call_at.insert(call.id.clone(), i);
                }
            }
            Some(AgentMessage::ToolResult(r)) => {
                if let Some(&call) = call_at.get(r.tool_call_id.as_str()) {
                    delta[call + 1 - start] += 1;
                    delta[i + 1 - start] -= 1;
                }
            }
            _ => {}
        }
    }
    let mut depth = 0;
    delta[..delta.len() - 1]
        .iter()
        .map(|d| {
            depth += d;
            depth > 0
        })
        .collect()
}

/// Indices in `[start, end)` where a cut is allowed in `mode`.
fn valid_cut_points(entries: &[&Entry], start: usize, end: usize, mode: CutMode) -> Vec<usize> {
    let blocked = match mode {
        CutMode::Fixed => splits_tool_pair(entries, start, end),
        CutMode::Parity => vec![false; end.saturating_sub(start)],
    };
    (start..end)
        .filter(|&i| is_cut_kind(entries[i], mode) && !blocked[i - start])
        .collect()
}

/// The first kept entry for a budget of `keep_recent_tokens` within `entries[start..end)`,
/// with the rules of `mode`.
pub fn find_cut_point(
    entries: &[&Entry],
    start: usize,
    end: usize,
    keep_recent_tokens: u64,
    counter: &dyn TokenCounter,
    mode: CutMode,
) -> CutPoint {
    let end = end.min(entries.len());
    let valid = valid_cut_points(entries, start, end, mode);
    let Some(&first_valid) = valid.first() else {
        // Nowhere to cut: keep the whole window.
        return CutPoint {
            first_kept_entry_index: start,
            turn_start_index: None,
            is_split_turn: false,
        };
    };
    let mut cut = first_valid;
    let mut acc = 0u64;
    for i in (start..end).rev() {
        let Some(tokens) = walk_tokens(entries[i], counter, mode) else {
            continue;
        };
        acc += tokens;
        if acc < keep_recent_tokens {
            continue;
        }
        cut = match mode {
            // First cut point at or after the crossing; none: keep everything.
            CutMode::Parity => valid
                .iter()
                .copied()
                .find(|&c| c >= i)
                .unwrap_or(first_valid),
            // Last cut point at or before the crossing, so at least the budget is kept.
            CutMode::Fixed => valid
                .iter()
                .copied()
                .rfind(|&c| c <= i)
                .unwrap_or(first_valid),
        };
        break;
    }
    cut_at(entries, start, cut, mode)
}

/// The [`CutPoint`] for cutting at `cut`: metadata right before it is pulled into the kept
/// region, and the turn it falls in is found.
fn cut_at(entries: &[&Entry], start: usize, cut: usize, mode: CutMode) -> CutPoint {
    let content = cut;
    let mut cut = cut;
    while cut > start && is_metadata(entries[cut - 1], mode) {
        cut -= 1;
    }
    // The reference judges the turn from the entry it walked back to (often metadata), which
    // turns a clean turn start into a fake split turn; judge it from the content entry.
    let judged = match mode {
        CutMode::Parity => cut,
        CutMode::Fixed => content,
    };
    let starts_turn = match mode {
        CutMode::Parity => is_user(entries[judged]),
        CutMode::Fixed => is_turn_start(entries[judged], mode),
    };
    let turn_start_index = find_turn_start_index(entries, judged, start, mode);
    CutPoint {
        first_kept_entry_index: cut,
        turn_start_index,
        is_split_turn: !starts_turn && turn_start_index.is_some(),
    }
}

/// The [`CutPoint`] when the caller chose the first kept entry: `first_kept` must be a valid
/// cut point of `mode`, or metadata followed (through more metadata) by one. `None` otherwise.
pub(crate) fn cut_point_at(
    entries: &[&Entry],
    start: usize,
    end: usize,
    first_kept: usize,
    mode: CutMode,
) -> Result<CutPoint, CutRejection> {
    let end = end.min(entries.len());
    if first_kept < start || first_kept >= end {
        return Err(CutRejection::OutsideWindow);
    }
    let mut content = first_kept;
    while content < end && is_metadata(entries[content], mode) {
        content += 1;
    }
    if content == end {
        return Err(CutRejection::NoMessageAfter);
    }
    let entry = entries[content];
    if matches!(entry.message(), Some(AgentMessage::ToolResult(_))) {
        return Err(CutRejection::ToolResult);
    }
    if !is_cut_kind(entry, mode) {
        return Err(CutRejection::NotACutPoint);
    }
    if mode == CutMode::Fixed && splits_tool_pair(entries, start, end)[content - start] {
        return Err(CutRejection::SplitsToolCall);
    }
    let judged = content;
    let starts_turn = is_turn_start(entries[judged], mode);
    let turn_start_index = find_turn_start_index(entries, judged, start, mode);
    Ok(CutPoint {
        first_kept_entry_index: first_kept,
        turn_start_index,
        is_split_turn: !starts_turn && turn_start_index.is_some(),
    })
}

/// Why an entry cannot be the first kept entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CutRejection {
    OutsideWindow,
    NoMessageAfter,
    ToolResult,
    NotACutPoint,
    SplitsToolCall,
}

/// The start of the turn containing `index`: scanning back from `index` (inclusive) to
/// `start`, the first turn start under the rules of `mode` (the reference's turn starts are
/// `branch_summary`, `custom_message`, and `user` / `bashExecution` messages). `None` if
/// there is none.
pub fn find_turn_start_index(
    entries: &[&Entry],
    index: usize,
    start: usize,
    mode: CutMode,
) -> Option<usize> {
    (start..=index.min(entries.len().checked_sub(1)?))
        .rev()
        .find(|&i| is_turn_start(entries[i], mode))
}

#[cfg(test)]
mod tests;
