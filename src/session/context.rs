//! Context rebuilding (spec §3): which messages the LLM sees at a leaf ([`visit_context`],
//! on a path the session walked; `build_session_context`, the reference's algorithm from the
//! entries alone, is the tests' oracle) and how the coding agent's roles become LLM messages
//! ([`convert_to_llm`], spec §2.3), including the summary context templates.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use base64::Engine as _;

use super::entry::{Entry, EntryKind};
use super::ids::ms_from_iso;
use super::message::{
    AgentMessage, BranchSummaryMessage, CompactionSummaryMessage, Content, ContentBlock,
    CustomMessage, ExecutionMessage, Extra, FileMentionMessage, ORIGINAL_CONTENT_FIELD,
    ToolResultMessage, UserMessage, join_text,
};
use super::size_controls::{MissingBlob, default_blob_dir};
#[cfg(test)]
use super::tree::walk_path;

/// What the agent needs to continue at a leaf.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionContext {
    pub messages: Vec<AgentMessage>,
    /// The entry each message came from (`messages[i]` from `entry_ids[i]`; the compaction
    /// summary from its compaction entry).
    pub entry_ids: Vec<String>,
    /// Default `"off"`.
    pub thinking_level: String,
    /// role -> `provider/model`; every assistant message sets `default`.
    pub models: BTreeMap<String, String>,
    /// Rule names, duplicates removed, in first-seen order.
    pub injected_ttsr_rules: Vec<String>,
    /// Default `"none"`.
    pub mode: String,
    pub mode_data: Option<Value>,
    /// Full texts and images the blob store could not give back (each message keeps the
    /// truncated text or the reference instead).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_blobs: Vec<MissingBlob>,
}

impl Default for SessionContext {
    fn default() -> Self {
        SessionContext {
            messages: Vec::new(),
            entry_ids: Vec::new(),
            thinking_level: "off".into(),
            models: BTreeMap::new(),
            injected_ttsr_rules: Vec::new(),
            mode: "none".into(),
            mode_data: None,
            missing_blobs: Vec::new(),
        }
    }
}

/// Where to rebuild the context from.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextLeaf<'a> {
    /// The last entry in the array (the reference's `undefined`).
    LastEntry,
    /// No leaf (the reference's `null`): an empty context.
    Null,
    /// This entry; an unknown id falls back to the last entry.
    Id(&'a str),
}

#[cfg(test)]
impl<'a> From<Option<&'a str>> for ContextLeaf<'a> {
    fn from(leaf: Option<&'a str>) -> Self {
        leaf.map_or(ContextLeaf::Null, ContextLeaf::Id)
    }
}

#[cfg(test)]
impl<'a> From<&'a str> for ContextLeaf<'a> {
    fn from(leaf: &'a str) -> Self {
        ContextLeaf::Id(leaf)
    }
}

/// Options of a context: where its images are.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// Where `blob:sha256:<hex>` image references are resolved; `None`: the reference agent's
    /// store, `~/.omp/agent/blobs`.
    pub blob_dir: Option<PathBuf>,
}

/// `buildSessionContext` (spec §3.1) with the default options: the reference's algorithm from
/// the entries alone, which the tests hold the session's cached, path-walking contexts to.
#[cfg(test)]
pub fn build_session_context<'a>(
    entries: &[Entry],
    leaf: impl Into<ContextLeaf<'a>>,
) -> SessionContext {
    build_session_context_with(entries, leaf, &ContextOptions::default())
}

/// `buildSessionContext` (spec §3.1): the path to the leaf, the state it sets, and the
/// messages the LLM sees: with a compaction on the path, its summary, then the kept entries
/// from `firstKeptEntryId` up to it, then everything after it.
#[cfg(test)]
pub fn build_session_context_with<'a>(
    entries: &[Entry],
    leaf: impl Into<ContextLeaf<'a>>,
    options: &ContextOptions,
) -> SessionContext {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        index.entry(e.id.as_str()).or_insert(i);
    }
    let last = entries.len().checked_sub(1);
    let start = match leaf.into() {
        ContextLeaf::Null => None,
        ContextLeaf::LastEntry => last,
        ContextLeaf::Id(id) => index.get(id).copied().or(last),
    };
    let Some(start) = start else {
        return SessionContext::default();
    };
    let path = walk_path(entries, start, |p| index.get(p).copied());
    context_of_path(&path, options)
}

/// The context of a root→leaf path (markers excluded), for callers that already hold the
/// path or an id index.
///
/// The state (thinking level, models, mode, rules, the last compaction) is read newest first,
/// so only metadata entries and the newest assistant message with a model are parsed; the
/// messages before the last compaction's kept region are never touched.
#[cfg(test)]
pub fn context_of_path(path: &[&Entry], options: &ContextOptions) -> SessionContext {
    let state = BranchState::of_path(path);
    context_with_state(path, &state, options)
}

/// What the entries of a root→leaf path set, apart from the messages: thinking level, models,
/// mode, TTSR rules and the last compaction with the start of its kept region. Computed once
/// for a path ([`BranchState::of_path`]) and then kept up to date entry by entry as the path
/// grows ([`BranchState::extend`]), so a context after an append does not rescan the path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BranchState {
    thinking_level: Option<String>,
    models: BTreeMap<String, String>,
    mode: Option<(String, Option<Value>)>,
    /// Rule names, duplicates removed, in first-seen order.
    rules: Vec<String>,
    /// The position in the path of the last compaction, and of its first kept entry (if that
    /// entry is on the path before it).
    compaction: Option<(usize, Option<usize>)>,
}

impl BranchState {
    /// The same state with no compaction: what [`visit_context`] needs to give the state of
    /// a path without reading its messages (an empty path).
    pub(crate) fn without_messages(&self) -> BranchState {
        BranchState {
            compaction: None,
            ..self.clone()
        }
    }

    /// The state of a whole path, read newest first (see [`context_of_path`]).
    pub fn of_path(path: &[&Entry]) -> BranchState {
        let mut state = BranchState::default();
        let mut compaction = None;
        let mut rules_newest_first: Vec<&Vec<String>> = Vec::new();
        for (k, e) in path.iter().enumerate().rev() {
            match e.type_name() {
                "thinking_level_change"
                | "model_change"
                | "compaction"
                | "ttsr_injection"
                | "mode_change" => {}
                // Only the newest assistant model sets `default`; older messages cannot matter.
                "message" if !state.models.contains_key("default") => {}
                _ => continue,
            }
            match e.kind() {
                EntryKind::ThinkingLevelChange { thinking_level: t } => {
                    state.thinking_level.get_or_insert_with(|| t.clone());
                }
                EntryKind::ModelChange {
                    model: Some(model),
                    role,
                } => {
                    let role = role.clone().unwrap_or_else(|| "default".into());
                    state.models.entry(role).or_insert_with(|| model.clone());
                }
                EntryKind::Message(AgentMessage::Assistant(a)) => {
                    if let (Some(provider), Some(model)) = (&a.provider, &a.model) {
                        state
                            .models
                            .entry("default".into())
                            .or_insert_with(|| format!("{provider}/{model}"));
                    }
                }
                EntryKind::Compaction(_) => {
                    compaction.get_or_insert(k);
                }
                EntryKind::TtsrInjection { injected_rules } => {
                    rules_newest_first.push(injected_rules)
                }
                EntryKind::ModeChange { mode: m, data } => {
                    state.mode.get_or_insert_with(|| (m.clone(), data.clone()));
                }
                _ => {}
            }
        }
        for rule in rules_newest_first.into_iter().rev().flatten() {
            if !state.rules.contains(rule) {
                state.rules.push(rule.clone());
            }
        }
        state.compaction = compaction.map(|k| (k, kept_from(path, k)));
        state
    }

    /// The state of `path` given `self`, the state of its first `path.len() - new` entries:
    /// only the `new` last entries are read, oldest first, each overriding what it sets.
    pub fn extend(&mut self, path: &[&Entry], new: usize) {
        let first = path.len() - new;
        for (k, e) in path.iter().enumerate().skip(first) {
            match e.type_name() {
                "thinking_level_change"
                | "model_change"
                | "compaction"
                | "ttsr_injection"
                | "mode_change"
                | "message" => {}
                _ => continue,
            }
            match e.kind() {
                EntryKind::ThinkingLevelChange { thinking_level: t } => {
                    self.thinking_level = Some(t.clone());
                }
                EntryKind::ModelChange {
                    model: Some(model),
                    role,
                } => {
                    let role = role.clone().unwrap_or_else(|| "default".into());
                    self.models.insert(role, model.clone());
                }
                EntryKind::Message(AgentMessage::Assistant(a)) => {
                    if let (Some(provider), Some(model)) = (&a.provider, &a.model) {
                        self.models
                            .insert("default".into(), format!("{provider}/{model}"));
                    }
                }
                EntryKind::Compaction(_) => self.compaction = Some((k, kept_from(path, k))),
                EntryKind::TtsrInjection { injected_rules } => {
                    for rule in injected_rules {
                        if !self.rules.contains(rule) {
                            self.rules.push(rule.clone());
                        }
                    }
                }
                EntryKind::ModeChange { mode: m, data } => {
                    self.mode = Some((m.clone(), data.clone()));
                }
                _ => {}
            }
        }
    }
}

/// The positions in `path` of the entries that anything computed from a root→leaf path still
/// reads once the path goes on past `path` with a compaction that keeps nothing of it: what
/// [`BranchState`] reads (the newest thinking level, the newest model change of each role,
/// the newest assistant message naming its model, the newest mode, every rule injection that
/// adds a rule) and what a compaction plan reads (the newest usable assistant usage, for its
/// `tokensBefore`). In path order.
///
/// So `state_entries(X) ++ Y` stands for `X ++ Y` wherever `Y` holds the newest compaction
/// and its kept region: a stored session is opened with only these entries before the kept
/// region (`session::file::backend`). The set is its own fixed point: applied to
/// `state_entries(X) ++ Y` it picks what it picks from `X ++ Y`.
pub(crate) fn state_entries(path: &[&Entry]) -> Vec<usize> {
    let mut picked = Vec::new();
    let (mut thinking, mut mode, mut named_model, mut usage) = (false, false, false, false);
    let mut roles: Vec<String> = Vec::new();
    for (k, e) in path.iter().enumerate().rev() {
        let take = match e.type_name() {
            "thinking_level_change" => {
                matches!(e.kind(), EntryKind::ThinkingLevelChange { .. })
                    && !std::mem::replace(&mut thinking, true)
            }
            "mode_change" => {
                matches!(e.kind(), EntryKind::ModeChange { .. })
                    && !std::mem::replace(&mut mode, true)
            }
            "model_change" => match e.kind() {
                EntryKind::ModelChange {
                    model: Some(_),
                    role,
                } => {
                    let role = role.clone().unwrap_or_else(|| "default".into());
                    let new = !roles.contains(&role);
                    if new {
                        roles.push(role);
                    }
                    new
                }
                _ => false,
            },
            "message" if !(named_model && usage) => match e.kind() {
                EntryKind::Message(AgentMessage::Assistant(a)) => {
                    let names = a.provider.is_some() && a.model.is_some() && !named_model;
                    let counts = a.usage.is_some() && !a.is_aborted() && !a.is_error() && !usage;
                    named_model |= names;
                    usage |= counts;
                    names || counts
                }
                _ => false,
            },
            _ => false,
        };
        if take {
            picked.push(k);
        }
    }
    // Rule injections oldest first: one that adds no new rule changes nothing.
    let mut rules: Vec<&String> = Vec::new();
    for (k, e) in path.iter().enumerate() {
        if e.type_name() != "ttsr_injection" {
            continue;
        }
        if let EntryKind::TtsrInjection { injected_rules } = e.kind() {
            let before = rules.len();
            for rule in injected_rules {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
            if rules.len() > before {
                picked.push(k);
            }
        }
    }
    picked.sort_unstable();
    picked
}

/// Where the kept region of the compaction at `path[k]` starts on the path, if it does.
fn kept_from(path: &[&Entry], k: usize) -> Option<usize> {
    let EntryKind::Compaction(c) = path[k].kind() else {
        return None;
    };
    path[..k].iter().position(|e| e.id == c.first_kept_entry_id)
}

/// The context of a path whose [`BranchState`] is known (it must be the state of this path).
#[cfg(test)]
pub fn context_with_state(
    path: &[&Entry],
    state: &BranchState,
    options: &ContextOptions,
) -> SessionContext {
    let (mut messages, mut entry_ids) = (Vec::new(), Vec::new());
    let mut ctx = visit_context(path, state, options, |id, m| {
        messages.push(m);
        entry_ids.push(id.to_owned());
    });
    ctx.messages = messages;
    ctx.entry_ids = entry_ids;
    ctx
}

/// The context of a path whose [`BranchState`] is known (it must be the state of this path),
/// one message at a time: `visit` gets each message of the context in order with the id of
/// its entry, and the returned context has everything but the messages
/// and their ids. A pass that only counts them never holds the whole context: on a path of a
/// million messages it would cost many times the file (issue 35 item 7). The entries are
/// kept parsed, as reading them one by one would, while that is at most a few MB of lines
/// ([`Entry::worth_keeping_parsed`]); beyond, each is parsed for its message and the parse
/// dropped.
pub fn visit_context(
    path: &[&Entry],
    state: &BranchState,
    options: &ContextOptions,
    mut visit: impl FnMut(&str, AgentMessage),
) -> SessionContext {
    let mut ctx = SessionContext {
        models: state.models.clone(),
        injected_ttsr_rules: state.rules.clone(),
        ..SessionContext::default()
    };
    if let Some(t) = &state.thinking_level {
        ctx.thinking_level = t.clone();
    }
    if let Some((m, data)) = &state.mode {
        ctx.mode = m.clone();
        ctx.mode_data = data.clone();
    }

    let mut blobs = BlobResolver::new(options.blob_dir.clone().or_else(default_blob_dir));
    let mut emit_all = |entries: &[&Entry], visit: &mut dyn FnMut(&str, AgentMessage)| {
        if Entry::worth_keeping_parsed(entries) {
            Entry::parse_all(entries);
        }
        for e in entries {
            if let Some(m) = emittable(e.peek(), &mut blobs) {
                visit(&e.id, m);
            }
        }
    };
    match state.compaction {
        None => emit_all(path, &mut visit),
        Some((k, kept_from)) => {
            let c_entry = path[k];
            let EntryKind::Compaction(c) = c_entry.kind() else {
                unreachable!("compaction index points at a compaction entry")
            };
            visit(
                &c_entry.id,
                AgentMessage::CompactionSummary(CompactionSummaryMessage {
                    summary: c.summary.clone(),
                    short_summary: c.short_summary.clone(),
                    tokens_before: c.tokens_before,
                    timestamp: iso_ms(&c_entry.timestamp),
                    extra: Extra::new(),
                }),
            );
            if let Some(from) = kept_from {
                emit_all(&path[from..k], &mut visit);
            }
            emit_all(&path[k + 1..], &mut visit);
        }
    }
    ctx.missing_blobs = blobs.missing;
    ctx
}

fn iso_ms(timestamp: &str) -> Option<Value> {
    ms_from_iso(timestamp).map(Value::from)
}

/// The message an entry contributes to the context, if any, with its blob references resolved
/// (images, and the full text of strings the size controls truncated on disk).
fn emittable(e: Cow<'_, Entry>, blobs: &mut BlobResolver) -> Option<AgentMessage> {
    use crate::session::size_controls::{BlobStore, FULL_TEXT_FIELD, restore_full_text};
    if e.extra().contains_key(FULL_TEXT_FIELD) {
        let mut value = e.to_value();
        // A pruned output's original is not part of the context: its full text is not read.
        drop_original_content(&mut value);
        let restored = match &blobs.dir {
            Some(dir) => restore_full_text(&mut value, &BlobStore::new(dir)),
            None => Err(vec![MissingBlob {
                entry_id: String::new(),
                blob: None,
                pointer: String::new(),
                reason: "no blob store (no home directory)".to_owned(),
            }]),
        };
        if let Err(missing) = restored {
            tracing::warn!(
                entry_id = %e.id,
                missing = ?missing,
                "blob store: the full text of a truncated string is missing; using the truncated text"
            );
            blobs.missing.extend(missing.into_iter().map(|mut m| {
                m.entry_id = e.id.clone();
                m
            }));
        }
        if let Ok(full) = Entry::from_value(value)
            && !full.extra().contains_key(FULL_TEXT_FIELD)
        {
            return emittable(Cow::Owned(full), blobs);
        }
    }
    let before = blobs.missing.len();
    let id = e.id.clone();
    let out = emittable_resolved(e, blobs);
    if blobs.missing.len() > before {
        for m in &mut blobs.missing[before..] {
            m.entry_id = id.clone();
        }
        tracing::warn!(
            entry_id = %id,
            missing = ?&blobs.missing[before..],
            "blob store: an image blob is missing; the reference is left in the message"
        );
    }
    out
}

/// Removes what a prune kept of a tool result's original content from an entry's JSON, with
/// the full-text references that pointed into it.
fn drop_original_content(value: &mut Value) {
    use crate::session::size_controls::FULL_TEXT_FIELD;
    let original = format!("/message/{ORIGINAL_CONTENT_FIELD}");
    if let Some(Value::Object(message)) = value.get_mut("message") {
        message.remove(ORIGINAL_CONTENT_FIELD);
    }
    if let Some(Value::Object(refs)) = value.get_mut(FULL_TEXT_FIELD) {
        refs.retain(|pointer, _| {
            !(pointer.starts_with(&original)
                && pointer[original.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| c == '/'))
        });
    }
}

fn emittable_resolved(e: Cow<'_, Entry>, blobs: &mut BlobResolver) -> Option<AgentMessage> {
    match e.kind() {
        EntryKind::Message(m) => {
            // A parse of the moment is moved out, not copied.
            let mut m = match e {
                Cow::Borrowed(_) => m.clone(),
                Cow::Owned(e) => e.into_agent_message(false)?,
            };
            // The model sees the prune notice; the original stays recoverable in the file,
            // not in every context sent to the client.
            if let AgentMessage::ToolResult(r) = &mut m {
                r.extra.remove(ORIGINAL_CONTENT_FIELD);
            }
            blobs.resolve_message(&mut m);
            Some(m)
        }
        EntryKind::CustomMessage(c) => {
            let mut content = c.content.clone();
            blobs.resolve_content(&mut content);
            Some(AgentMessage::Custom(CustomMessage {
                custom_type: c.custom_type.clone(),
                content,
                display: c.display,
                details: c.details.clone(),
                timestamp: iso_ms(&e.timestamp),
                extra: Extra::new(),
            }))
        }
        EntryKind::BranchSummary(b) if !b.summary.is_empty() => {
            Some(AgentMessage::BranchSummary(BranchSummaryMessage {
                summary: b.summary.clone(),
                from_id: b.from_id.clone(),
                timestamp: iso_ms(&e.timestamp),
                extra: Extra::new(),
            }))
        }
        _ => None,
    }
}

const BLOB_PREFIX: &str = "blob:sha256:";

/// Resolves `blob:sha256:<hex>` image data from the blob store, caching within one build.
/// A missing or unreadable blob leaves the reference as it is.
struct BlobResolver {
    dir: Option<PathBuf>,
    cache: HashMap<String, Result<String, String>>,
    /// References that could not be resolved, in context order.
    missing: Vec<MissingBlob>,
}

impl BlobResolver {
    fn new(dir: Option<PathBuf>) -> Self {
        BlobResolver {
            dir,
            cache: HashMap::new(),
            missing: Vec::new(),
        }
    }

    fn resolve_message(&mut self, m: &mut AgentMessage) {
        match m {
            AgentMessage::User(u) => self.resolve_content(&mut u.content),
            AgentMessage::Custom(c) => self.resolve_content(&mut c.content),
            AgentMessage::ToolResult(t) => self.resolve_blocks(&mut t.content),
            _ => {}
        }
    }

    fn resolve_content(&mut self, content: &mut Content) {
        if let Content::Blocks(blocks) = content {
            self.resolve_blocks(blocks);
        }
    }

    fn resolve_blocks(&mut self, blocks: &mut [ContentBlock]) {
        for block in blocks {
            if let ContentBlock::Image(img) = block
                && let Some(hex) = img.data.strip_prefix(BLOB_PREFIX)
            {
                match self.load(hex) {
                    Ok(data) => img.data = data,
                    Err(reason) => self.missing.push(MissingBlob {
                        entry_id: String::new(),
                        blob: Some(hex.to_owned()),
                        pointer: "image".to_owned(),
                        reason,
                    }),
                }
            }
        }
    }

    fn load(&mut self, hex: &str) -> Result<String, String> {
        let Some(dir) = self.dir.as_deref() else {
            return Err("no blob store (no home directory)".to_owned());
        };
        if let Some(hit) = self.cache.get(hex) {
            return hit.clone();
        }
        let loaded = read_blob(dir, hex);
        self.cache.insert(hex.to_owned(), loaded.clone());
        loaded
    }
}

/// The blob's bytes as base64; only a plain hex name is read (the reference must not reach
/// outside the store), never through a symlink.
fn read_blob(dir: &Path, hex: &str) -> Result<String, String> {
    use super::size_controls::{BlobStore, blob_error_text};
    BlobStore::new(dir)
        .read(hex)
        .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
        .map_err(|e| blob_error_text(&e))
}

const COMPACTION_SUMMARY_CONTEXT: &str =
    include_str!("../../prompts/compaction-summary-context.md");
const BRANCH_SUMMARY_CONTEXT: &str = include_str!("../../prompts/branch-summary-context.md");

/// Renders a context template: the template's line endings are normalised to LF and it is
/// trimmed, then `{{summary}}` is replaced.
///
/// Unlike the reference (spec §3.2, DESIGN §3 deviation 6), the substituted summary is left
/// exactly as it is: its indentation, blank lines, trailing spaces and line endings reach the
/// LLM unchanged.
pub fn render_summary_template(template: &str, summary: &str) -> String {
    let template = template.replace("\r\n", "\n");
    // One pass over the template only: a `{{summary}}` inside the summary stays literal.
    template
        .trim()
        .split("{{summary}}")
        .collect::<Vec<_>>()
        .join(summary)
}

/// The user text a compaction summary becomes.
pub fn compaction_summary_text(summary: &str) -> String {
    render_summary_template(COMPACTION_SUMMARY_CONTEXT, summary)
}

/// The user text a branch summary becomes.
pub fn branch_summary_text(summary: &str) -> String {
    render_summary_template(BRANCH_SUMMARY_CONTEXT, summary)
}

/// Notice for a pruned tool result that kept no text.
pub const PRUNED_NO_TEXT: &str = "[Output truncated]";

/// `convertToLlm` (spec §2.3): every message as an LLM message (only `User`, `Assistant` and
/// `ToolResult` come out). Excluded executions and unknown roles are dropped.
pub fn convert_to_llm(messages: &[AgentMessage]) -> Vec<AgentMessage> {
    messages.iter().filter_map(convert_one).collect()
}

/// [`convert_to_llm`] of one message, kept as it came (borrowed or owned) when the model
/// sees it unchanged: a user or assistant message, a tool result not pruned.
pub(crate) fn convert_for_llm(m: Cow<'_, AgentMessage>) -> Option<Cow<'_, AgentMessage>> {
    match &*m {
        AgentMessage::User(_) | AgentMessage::Assistant(_) => Some(m),
        AgentMessage::ToolResult(t) if !is_pruned(t) => Some(m),
        other => convert_one(other).map(Cow::Owned),
    }
}

fn is_pruned(t: &ToolResultMessage) -> bool {
    t.pruned_at.as_ref().is_some_and(|v| !v.is_null())
}

fn convert_one(m: &AgentMessage) -> Option<AgentMessage> {
    Some(match m {
        AgentMessage::User(_) | AgentMessage::Assistant(_) => m.clone(),
        AgentMessage::ToolResult(t) => AgentMessage::ToolResult(tool_result_for_llm(t)),
        AgentMessage::BashExecution(e) => {
            if e.exclude_from_context == Some(true) {
                return None;
            }
            user(vec![ContentBlock::text(bash_text(e))], &e.timestamp)
        }
        AgentMessage::PythonExecution(e) => {
            if e.exclude_from_context == Some(true) {
                return None;
            }
            user(vec![ContentBlock::text(python_text(e))], &e.timestamp)
        }
        AgentMessage::Custom(c) => user(c.content.blocks(), &c.timestamp),
        AgentMessage::BranchSummary(b) => user(
            vec![ContentBlock::text(branch_summary_text(&b.summary))],
            &b.timestamp,
        ),
        AgentMessage::CompactionSummary(c) => user(
            vec![ContentBlock::text(compaction_summary_text(&c.summary))],
            &c.timestamp,
        ),
        AgentMessage::FileMention(f) => user(file_mention_blocks(f), &f.timestamp),
        // oh-my-pi 13.19 sends its own prompts (the synthetic "Continue if you have next
        // steps.") to the model with the LLM role `developer`; it stays one.
        AgentMessage::Unknown(_) if m.role() == "developer" => m.clone(),
        AgentMessage::Unknown(_) => return None,
    })
}

fn user(blocks: Vec<ContentBlock>, timestamp: &Option<Value>) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: Content::Blocks(blocks),
        synthetic: None,
        timestamp: timestamp.clone(),
        extra: Extra::new(),
    })
}

/// A pruned result shows only its text (the pruning notice); images are dropped.
fn tool_result_for_llm(t: &ToolResultMessage) -> ToolResultMessage {
    let mut out = t.clone();
    if is_pruned(t) {
        let has_text = t.content.iter().any(|b| b.as_text().is_some());
        let text = if has_text {
            join_text(&t.content, "\n")
        } else {
            PRUNED_NO_TEXT.to_owned()
        };
        out.content = vec![ContentBlock::text(text)];
    }
    out
}

fn fenced(lang: &str, body: &str) -> String {
    let body = body.strip_suffix('\n').unwrap_or(body);
    format!("```{lang}\n{body}\n```")
}

/// The outcome lines shared by bash and python: cancelled, or a non-zero exit, then a
/// truncation notice.
fn outcome(e: &ExecutionMessage) -> String {
    let mut out = String::new();
    if e.cancelled {
        out.push_str("\n\n(command cancelled)");
    } else if let Some(code) = e.exit_code.filter(|&c| c != 0) {
        out.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    if e.truncated {
        out.push_str("\n\n(output truncated)");
    }
    out
}

fn bash_text(e: &ExecutionMessage) -> String {
    let output = if e.output.is_empty() {
        "(no output)".to_owned()
    } else {
        fenced("", &e.output)
    };
    format!("Ran `{}`\n{output}{}", e.source(), outcome(e))
}

fn python_text(e: &ExecutionMessage) -> String {
    let output = if e.output.is_empty() {
        "(no output)".to_owned()
    } else {
        format!("Output:\n{}", fenced("", &e.output))
    };
    format!(
        "Ran Python code:\n{}\n{output}{}",
        fenced("python", e.source()),
        outcome(e)
    )
}

fn file_mention_blocks(f: &FileMentionMessage) -> Vec<ContentBlock> {
    let mut text = String::from("<system-reminder>\n");
    for file in &f.files {
        let path = file.path.replace('&', "&amp;").replace('"', "&quot;");
        let body = match file.skipped_reason.as_deref() {
            Some("tooLarge") => "(not included: the file is too large)".to_owned(),
            Some(other) => format!("(not included: {other})"),
            None if file.image.is_some() && file.content.is_empty() => {
                "(image attached below)".to_owned()
            }
            None => file
                .content
                .strip_suffix('\n')
                .unwrap_or(&file.content)
                .to_owned(),
        };
        text.push_str(&format!("<file path=\"{path}\">\n{body}\n</file>\n"));
    }
    text.push_str("</system-reminder>");
    let mut blocks = vec![ContentBlock::text(text)];
    blocks.extend(
        f.files
            .iter()
            .filter_map(|file| file.image.clone().map(ContentBlock::Image)),
    );
    blocks
}

#[cfg(test)]
mod tests;
