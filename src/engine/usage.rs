//! Read-only views of a session: the LLM-ready context with token figures
//! ([`ContextView`]), context usage (spec §9, [`UsageView`]) and the tree ([`TreeView`]).
//!
//! Token counts come from the session's per-entry cache, so each entry is tokenised once and a
//! `context` call after an append costs only the new entries.

use std::collections::HashSet;

use serde::Serialize;

use crate::session::tree::FlatTreeNode;
use crate::session::{AgentMessage, Entry, EntryKind, Session, SessionContext, convert_to_llm};
use crate::settings::Settings;
use crate::tokens::TokenCache;

/// One message of the LLM-ready context.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextMessage {
    /// The entry it came from (the compaction entry for the summary).
    pub entry_id: String,
    /// The message as the LLM sees it (`user`, `assistant` or `toolResult`).
    pub message: AgentMessage,
    /// Its token cost with the view's counter.
    pub tokens: u64,
}

/// The LLM-ready context at the leaf with token figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextView {
    pub leaf_id: Option<String>,
    pub messages: Vec<ContextMessage>,
    /// Our estimate of the whole context (sum of the messages).
    pub total_tokens: u64,
    pub context_window: u64,
    /// Compaction threshold for the window; `None` when the window is unknown (0).
    pub threshold: Option<u64>,
    /// The counter used (`chars4`, `o200k`, `cl100k`).
    pub tokenizer: String,
    pub thinking_level: String,
    /// The session's model (`provider/model`), if known.
    pub model: Option<String>,
    pub usage: UsageView,
    /// Full texts and images the blob store could not give back.
    pub missing_blobs: Vec<crate::session::size_controls::MissingBlob>,
}

/// Context usage (spec §9 `getContextUsage`, plus our own estimate).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    /// From the provider's usage: the last valid assistant usage plus the estimated messages
    /// after it. `None` ("unknown") when a compaction exists and no valid usage came after it.
    pub context_tokens: Option<u64>,
    /// Our estimate of the whole context with the session's counter; always known.
    pub estimated_tokens: u64,
    pub context_window: u64,
    pub threshold: Option<u64>,
    /// `context_tokens` (or the estimate when unknown) as a percentage of the window.
    pub percent: Option<f64>,
    /// The entry whose usage `context_tokens` is based on.
    pub usage_entry_id: Option<String>,
    /// The counter used for the estimates.
    pub tokenizer: String,
}

/// The session tree (markers hidden), in pre-order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeView {
    pub leaf_id: Option<String>,
    pub nodes: Vec<FlatTreeNode>,
    /// Ids on the root → leaf path.
    pub active_path: Vec<String>,
    /// The nodes' entries, in node order, when they were asked for; empty otherwise (and never
    /// in the command line's `--json` tree).
    #[serde(skip)]
    pub entries: Vec<Entry>,
}

/// The context window for the session's model: the last assistant's `provider/model` on the
/// path, else the path's default model change, else the `default` model role, else 128000.
pub fn session_window(session: &Session, settings: &Settings) -> u64 {
    let ctx = session.context_state();
    window_for(model_of(&ctx, settings).as_deref(), settings)
}

/// The context window of `model` (`provider/model`) from settings; 128000 when unknown.
pub fn window_for(model: Option<&str>, settings: &Settings) -> u64 {
    settings.context_window_for(model.unwrap_or(""))
}

fn model_of(ctx: &SessionContext, settings: &Settings) -> Option<String> {
    ctx.models
        .get("default")
        .cloned()
        .or_else(|| settings.model_roles.get("default").cloned())
}

/// The context view of `session` at its leaf, counted with `cache`'s counter.
pub fn context_view(session: &Session, settings: &Settings, cache: &TokenCache) -> ContextView {
    // Each message is converted as it is read: the session's own form is never all held.
    let (mut messages, mut counts, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    let ctx = session.visit_context(|id, msg| {
        let tokens = count_id(session, cache, id, &msg);
        for llm in convert_to_llm(std::slice::from_ref(&msg)) {
            messages.push(ContextMessage {
                entry_id: id.to_owned(),
                message: llm,
                tokens,
            });
        }
        counts.push(tokens);
        ids.push(id.to_owned());
    });
    let model = model_of(&ctx, settings);
    let window = window_for(model.as_deref(), settings);
    let usage = usage_of(session, &counts, &ids, settings, window, cache);
    ContextView {
        leaf_id: session.leaf_id().map(str::to_owned),
        total_tokens: usage.estimated_tokens,
        messages,
        context_window: window,
        threshold: settings.threshold_tokens(window),
        tokenizer: cache.counter().name().to_owned(),
        thinking_level: ctx.thinking_level.clone(),
        model,
        usage,
        missing_blobs: ctx.missing_blobs.clone(),
    }
}

/// The usage view of `session` at its leaf.
pub fn usage_view(session: &Session, settings: &Settings, cache: &TokenCache) -> UsageView {
    // Counted message by message: the context itself is never held (issue 35 item 7).
    let mut counts = Vec::new();
    let mut ids = Vec::new();
    let ctx = session.visit_context(|id, m| {
        counts.push(count_id(session, cache, id, &m));
        ids.push(id.to_owned());
    });
    let window = window_for(model_of(&ctx, settings).as_deref(), settings);
    usage_of(session, &counts, &ids, settings, window, cache)
}

/// Our estimate of the context at the leaf.
pub fn estimate_context(session: &Session, cache: &TokenCache) -> u64 {
    let mut total = 0;
    session.visit_context(|id, m| total += count_id(session, cache, id, &m));
    total
}

/// Our estimate of the context messages up to and including the one from entry `through`
/// (all of them when it is not in the context).
pub fn estimate_context_through(session: &Session, cache: &TokenCache, through: &str) -> u64 {
    let (mut total, mut reached) = (0, false);
    session.visit_context(|id, m| {
        if !reached {
            total += count_id(session, cache, id, &m);
            reached = id == through;
        }
    });
    total
}

/// The cached count of the entry `id` (the message itself when the id is not unique or
/// unknown, which the cache cannot key).
fn count_id(session: &Session, cache: &TokenCache, id: &str, msg: &AgentMessage) -> u64 {
    // Parsed for the moment unless it already is (see `Entry::peek`).
    match session.get(id).map(Entry::peek) {
        Some(entry) if entry_yields(&entry) => cache.count_entry(&entry),
        _ => cache.counter().count_message(msg),
    }
}

/// Whether the cache's count of `entry` is the count of the message it adds to the context.
fn entry_yields(entry: &Entry) -> bool {
    matches!(
        entry.kind(),
        EntryKind::Message(_)
            | EntryKind::CustomMessage(_)
            | EntryKind::BranchSummary(_)
            | EntryKind::Compaction(_)
    )
}

/// The usage at the leaf from the token counts of the context's messages (`counts[i]` of the
/// message from entry `entry_ids[i]`).
fn usage_of(
    session: &Session,
    counts: &[u64],
    entry_ids: &[String],
    settings: &Settings,
    window: u64,
    cache: &TokenCache,
) -> UsageView {
    let estimated: u64 = counts.iter().sum();
    let path = session.path_to_leaf();
    // By the wire type first: no body is parsed on the way back to the compaction.
    let latest_compaction = path.iter().rposition(|e| {
        e.type_name() == "compaction" && matches!(e.kind(), EntryKind::Compaction(_))
    });
    let last_usage = path.iter().enumerate().rev().find_map(|(i, e)| {
        let a = e.message()?.as_assistant()?;
        let usage = a.usage.as_ref()?;
        let valid = !a.is_error() && !a.is_aborted() && usage.context_tokens() > 0;
        valid.then_some((i, e.id.as_str(), usage.context_tokens()))
    });
    let from_usage = match (last_usage, latest_compaction) {
        (Some((at, _, _)), Some(c)) if at < c => None,
        (Some((_, id, tokens)), _) => {
            // The usage covers the context up to its message; add what came after it.
            let after = entry_ids.iter().rposition(|e| e == id);
            let trailing: u64 = after.map_or(0, |i| counts[i + 1..].iter().sum());
            Some((id.to_owned(), tokens + trailing))
        }
        (None, _) => None,
    };
    let threshold = settings.threshold_tokens(window);
    let shown = from_usage.as_ref().map_or(estimated, |(_, t)| *t);
    UsageView {
        context_tokens: from_usage.as_ref().map(|(_, t)| *t),
        estimated_tokens: estimated,
        context_window: window,
        threshold,
        percent: (window > 0).then(|| shown as f64 * 100.0 / window as f64),
        usage_entry_id: from_usage.map(|(id, _)| id),
        tokenizer: cache.counter().name().to_owned(),
    }
}

/// The tree view of `session`.
pub fn tree_view(session: &Session) -> TreeView {
    let active_path: Vec<String> = session
        .path_to_leaf()
        .iter()
        .map(|e| e.id.clone())
        .collect();
    TreeView {
        leaf_id: session.leaf_id().map(str::to_owned),
        nodes: session.tree().flat_nodes(),
        active_path,
        entries: Vec::new(),
    }
}

/// The tree as text: one line per entry, indented only where the tree branches, the leaf
/// marked `*`, entries on the active path `│`-free and others dimmed with `·`, labels in
/// brackets.
pub fn render_tree(view: &TreeView) -> String {
    use std::collections::HashMap;
    use std::fmt::Write;
    let on_path: HashSet<&str> = view.active_path.iter().map(String::as_str).collect();
    let mut children: HashMap<Option<&str>, usize> = HashMap::new();
    for n in &view.nodes {
        *children.entry(n.parent_id.as_deref()).or_default() += 1;
    }
    let roots = children.get(&None).copied().unwrap_or(0);
    // Indentation level per node id: a child sits one level deeper than its parent only when
    // the parent (or the root set) has several children.
    let mut level: HashMap<&str, usize> = HashMap::new();
    let mut out = String::new();
    for n in &view.nodes {
        let (parent_level, siblings) = match n.parent_id.as_deref() {
            Some(p) => (
                level.get(p).copied(),
                children.get(&Some(p)).copied().unwrap_or(0),
            ),
            None => (None, roots),
        };
        let branched = siblings > 1;
        let lvl = match parent_level {
            Some(l) => l + usize::from(branched),
            None => usize::from(branched),
        };
        level.insert(n.id.as_str(), lvl);
        let leaf = view.leaf_id.as_deref() == Some(n.id.as_str());
        let marker = if leaf {
            "*"
        } else if on_path.contains(n.id.as_str()) {
            "│"
        } else {
            "·"
        };
        let branch = if branched { "├ " } else { "  " };
        let kind = match &n.role {
            Some(role) => role.clone(),
            None => n.entry_type.clone(),
        };
        let label = n
            .label
            .as_deref()
            .map(|l| format!(" [{l}]"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{indent}{branch}{marker} {id} {kind}{label}: {preview}{leaf_note}",
            indent = "  ".repeat(lvl.saturating_sub(usize::from(branched))),
            id = n.id,
            preview = n.preview,
            leaf_note = if leaf { "  <- leaf" } else { "" },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_falls_back_to_the_default_role_then_to_the_default_window() {
        use crate::settings::{ModelSettings, ProviderSettings};
        let dir = tempfile::tempdir().unwrap();
        let session = Session::create(
            dir.path().join("s.jsonl"),
            "/tmp/p",
            crate::session::CreateOptions::default(),
        )
        .unwrap();
        let mut settings = Settings::default();
        assert_eq!(
            session_window(&session, &settings),
            crate::settings::DEFAULT_CONTEXT_WINDOW
        );
        let mut acme = ProviderSettings::default();
        acme.models.insert(
            "big".into(),
            ModelSettings {
                context_window: 1_000_000,
                max_output_tokens: None,
            },
        );
        settings.providers.insert("acme".into(), acme);
        settings
            .model_roles
            .insert("default".into(), "acme/big".into());
        // The session names no model: `modelRoles.default` decides.
        assert_eq!(session_window(&session, &settings), 1_000_000);
    }

    fn node(id: &str, parent: Option<&str>, label: Option<&str>) -> FlatTreeNode {
        FlatTreeNode {
            id: id.into(),
            parent_id: parent.map(Into::into),
            entry_type: "message".into(),
            role: Some("user".into()),
            label: label.map(Into::into),
            preview: format!("text of {id}"),
            timestamp: String::new(),
            depth: 0,
        }
    }

    #[test]
    fn linear_chains_stay_flat_and_branches_indent() {
        let view = TreeView {
            leaf_id: Some("c".into()),
            nodes: vec![
                node("a", None, None),
                node("b", Some("a"), Some("checkpoint")),
                node("c", Some("b"), None),
                node("d", Some("a"), None),
            ],
            active_path: vec!["a".into(), "b".into(), "c".into()],
            entries: Vec::new(),
        };
        let text = render_tree(&view);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("  │ a user: text of a"), "{text}");
        assert!(lines[1].contains("├ │ b user [checkpoint]"), "{text}");
        assert!(lines[2].contains("* c user: text of c  <- leaf"), "{text}");
        assert!(lines[3].contains("├ · d user"), "{text}");
    }
}
