//! The extractive summarizer: offline, deterministic, no network.
//!
//! It builds the same structured summary the prompts ask a model for (Goal, Constraints &
//! Preferences, Progress, Key Decisions, Next Steps, Critical Context) from the conversation
//! itself, using plain-text cues: the user's requests and rule-like sentences, the assistant's
//! statements of completion, decisions and plans, successful edits, and errors in tool results.
//! With a previous summary it merges into it. It is compactd's default when no model is
//! configured and the last rung when every model fails, so it must never fail, always end
//! quickly (linear in its input) and stay bounded in size.
//!
//! What is kept exactly: a question the assistant left for the user, the latest user request
//! (both fenced and verbatim, up to [`MAX_VERBATIM_CHARS`]), file paths and error lines.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{DeltaSink, Purpose, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use crate::session::message::{AgentMessage, ToolCall, join_text};

/// Most items kept in one section.
pub const MAX_ITEMS: usize = 12;
/// Longest single-line item, in characters.
pub const MAX_ITEM_CHARS: usize = 300;
/// Longest verbatim block (pending question, latest request, carried-over item).
pub const MAX_VERBATIM_CHARS: usize = 2_000;
/// Most file paths listed per kind.
pub const MAX_FILES: usize = 30;
/// Most error lines taken from one tool result.
const MAX_ERRORS_PER_RESULT: usize = 2;

/// The note that tells a reader this summary was not written by a model.
const EXTRACTIVE_NOTE: &str = "This summary was extracted mechanically from the conversation; no summarization model was used.";

/// The offline summarizer. Stateless; see the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

impl ExtractiveSummarizer {
    pub fn new() -> Self {
        ExtractiveSummarizer
    }

    /// The summary text for `req`, by purpose. Pure and deterministic.
    pub fn summarize_text(&self, req: &SummaryRequest) -> String {
        let facts = Facts::extract(&req.messages);
        match req.purpose {
            Purpose::History => history(req, &facts),
            Purpose::Branch => branch(req, &facts),
            Purpose::TurnPrefix => turn_prefix(req, &facts),
            Purpose::Short => short(req, &facts),
        }
    }
}

impl Summarizer for ExtractiveSummarizer {
    fn id(&self) -> String {
        "extractive".to_owned()
    }

    fn context_window(&self) -> u64 {
        u64::MAX
    }

    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        cancel: CancellationToken,
        on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(SummarizeError::Cancelled);
            }
            let text = self.summarize_text(req);
            on_delta(&text);
            Ok(SummaryOutput {
                text,
                short_summary: None,
                usage: None,
                model: self.id(),
            })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Sections

/// Which end of a full section gives way to new items.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    /// The first items stay (goals, constraints: the original intent matters most).
    Oldest,
    /// The latest items stay (progress, errors, decisions).
    Newest,
}

/// An ordered, deduplicated, bounded list of items.
#[derive(Clone)]
struct Items {
    items: VecDeque<String>,
    keys: HashSet<String>,
    keep: Keep,
}

impl Items {
    fn new(keep: Keep) -> Self {
        Items {
            items: VecDeque::new(),
            keys: HashSet::new(),
            keep,
        }
    }

    fn push(&mut self, item: String) {
        let key = dedupe_key(&item);
        if key.is_empty() || self.keys.contains(&key) {
            return;
        }
        if self.items.len() == MAX_ITEMS {
            match self.keep {
                Keep::Oldest => return,
                Keep::Newest => {
                    if let Some(dropped) = self.items.pop_front() {
                        self.keys.remove(&dedupe_key(&dropped));
                    }
                }
            }
        }
        self.keys.insert(key);
        self.items.push_back(item);
    }

    fn extend(&mut self, other: &Items) {
        for item in &other.items {
            self.push(item.clone());
        }
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn iter(&self) -> std::collections::vec_deque::Iter<'_, String> {
        self.items.iter()
    }
}

impl Default for Items {
    fn default() -> Self {
        Items::new(Keep::Newest)
    }
}

/// The sections of a structured summary.
#[derive(Clone)]
struct Sections {
    goal: Items,
    constraints: Items,
    done: Items,
    in_progress: Items,
    blocked: Items,
    decisions: Items,
    next_steps: Items,
    critical: Items,
    notes: Items,
}

impl Default for Sections {
    fn default() -> Self {
        Sections {
            goal: Items::new(Keep::Oldest),
            constraints: Items::new(Keep::Oldest),
            done: Items::new(Keep::Newest),
            in_progress: Items::new(Keep::Newest),
            blocked: Items::new(Keep::Newest),
            decisions: Items::new(Keep::Newest),
            next_steps: Items::new(Keep::Newest),
            critical: Items::new(Keep::Newest),
            notes: Items::new(Keep::Newest),
        }
    }
}

/// Which list a parsed line belongs to.
#[derive(Clone, Copy, PartialEq)]
enum Slot {
    Goal,
    Constraints,
    Done,
    InProgress,
    Blocked,
    Decisions,
    NextSteps,
    Critical,
    Notes,
}

impl Sections {
    fn slot(&mut self, slot: Slot) -> &mut Items {
        match slot {
            Slot::Goal => &mut self.goal,
            Slot::Constraints => &mut self.constraints,
            Slot::Done => &mut self.done,
            Slot::InProgress => &mut self.in_progress,
            Slot::Blocked => &mut self.blocked,
            Slot::Decisions => &mut self.decisions,
            Slot::NextSteps => &mut self.next_steps,
            Slot::Critical => &mut self.critical,
            Slot::Notes => &mut self.notes,
        }
    }

    /// Reads a structured summary (ours or a model's) back into sections. Unknown headings
    /// and text outside any heading become notes; file-operation tags are skipped (they are
    /// recomputed and appended by the caller).
    fn parse(text: &str) -> Sections {
        let mut sections = Sections::default();
        let mut slot = Slot::Notes;
        let mut current: Option<String> = None;
        let mut fence: Option<String> = None;
        let mut in_file_tag = false;
        let flush = |sections: &mut Sections, slot: Slot, current: &mut Option<String>| {
            if let Some(item) = current.take() {
                sections
                    .slot(slot)
                    .push(clip(item.trim_end(), MAX_VERBATIM_CHARS));
            }
        };
        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(open) = &fence {
                let item = current.get_or_insert_with(String::new);
                item.push('\n');
                item.push_str(line);
                if trimmed == open.as_str() {
                    fence = None;
                }
                continue;
            }
            if matches!(trimmed, "<read-files>" | "<modified-files>") {
                in_file_tag = true;
                continue;
            }
            if in_file_tag {
                in_file_tag = !matches!(trimmed, "</read-files>" | "</modified-files>");
                continue;
            }
            if trimmed.starts_with("```") {
                let ticks = trimmed.chars().take_while(|c| *c == '`').count();
                fence = Some("`".repeat(ticks));
                let item = current.get_or_insert_with(String::new);
                if !item.is_empty() {
                    item.push('\n');
                }
                item.push_str(line);
                continue;
            }
            if let Some(heading) = trimmed.strip_prefix('#') {
                flush(&mut sections, slot, &mut current);
                let name = heading.trim_start_matches('#').trim();
                slot = heading_slot(name, slot);
                continue;
            }
            if trimmed.is_empty() || trimmed == "---" {
                flush(&mut sections, slot, &mut current);
                continue;
            }
            if let Some(body) = strip_bullet(trimmed) {
                flush(&mut sections, slot, &mut current);
                current = Some(body.to_owned());
            } else {
                let item = current.get_or_insert_with(String::new);
                if !item.is_empty() {
                    item.push('\n');
                }
                item.push_str(trimmed);
            }
        }
        flush(&mut sections, slot, &mut current);
        sections
    }
}

fn heading_slot(name: &str, current: Slot) -> Slot {
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "goal" | "goals" | "original request" => Slot::Goal,
        "constraints & preferences" | "constraints and preferences" | "constraints" => {
            Slot::Constraints
        }
        "progress" | "done" | "early progress" => Slot::Done,
        "in progress" => Slot::InProgress,
        "blocked" => Slot::Blocked,
        "key decisions" | "decisions" => Slot::Decisions,
        "next steps" => Slot::NextSteps,
        "critical context" | "context for suffix" => Slot::Critical,
        "additional notes" | "notes" => Slot::Notes,
        _ if lower.starts_with("progress") => Slot::Done,
        _ => {
            let _ = current;
            Slot::Notes
        }
    }
}

/// The text of a list item without its marker (`- [x] `, `- `, `* `, `3. `).
fn strip_bullet(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("- ")
        .or_else(|| line.strip_prefix("* "))
        .or_else(|| {
            let digits = line.bytes().take_while(u8::is_ascii_digit).count();
            (digits > 0)
                .then(|| &line[digits..])
                .and_then(|r| r.strip_prefix(". ").or_else(|| r.strip_prefix(") ")))
        })?;
    let rest = rest.trim_start();
    Some(
        ["[x] ", "[X] ", "[ ] "]
            .iter()
            .find_map(|b| rest.strip_prefix(b))
            .unwrap_or(rest)
            .trim_start(),
    )
}

/// What two items must share to count as the same: case, markup and spacing ignored.
fn dedupe_key(item: &str) -> String {
    let mut key = String::with_capacity(item.len().min(256));
    let mut space = false;
    for c in item.chars().take(MAX_VERBATIM_CHARS) {
        if c.is_alphanumeric() {
            if space && !key.is_empty() {
                key.push(' ');
            }
            space = false;
            key.extend(c.to_lowercase());
        } else if c.is_whitespace() || matches!(c, '*' | '`' | '_' | '.' | ',' | ':' | ';') {
            space = true;
        } else {
            key.push(c);
        }
    }
    key
}

// ---------------------------------------------------------------------------------------------
// Facts from the messages

/// How a tool touched a file.
#[derive(Clone, Copy, PartialEq)]
enum FileUse {
    Read,
    Modified,
    Other,
}

/// Everything the summary layouts draw on, gathered in one pass over the messages.
#[derive(Default)]
struct Facts {
    /// Real user requests, in order (synthetic prompts and carried summaries left out).
    requests: Vec<String>,
    /// Summaries carried in the messages (e.g. a compaction summary turned into user text).
    carried: Vec<String>,
    sections: Sections,
    /// The assistant's last text, and whether a user message came after it.
    last_assistant: Option<String>,
    ends_with_assistant: bool,
    /// Completion was claimed after the latest user request.
    completed_after_request: bool,
    read: BTreeSet<String>,
    modified: BTreeSet<String>,
    /// Tool calls without a result yet, in order.
    pending_calls: Vec<String>,
    /// Short descriptions of actions, in order (for a turn prefix's Early Progress).
    actions: Items,
    counts: Counts,
}

#[derive(Default)]
struct Counts {
    user: usize,
    assistant: usize,
    tool_results: usize,
    errors: usize,
}

impl Facts {
    fn extract(messages: &[AgentMessage]) -> Facts {
        let mut facts = Facts::default();
        let mut calls: HashMap<&str, (&ToolCall, FileUse, Option<String>)> = HashMap::new();
        let mut recent_assistant_texts: VecDeque<String> = VecDeque::new();
        for message in messages {
            match message {
                AgentMessage::User(user) => {
                    let text = user.content.joined_text("\n");
                    facts.user_text(&text, user.synthetic == Some(true));
                }
                AgentMessage::Custom(custom) => {
                    let text = custom.content.joined_text("\n");
                    if text.contains("<summary>") {
                        facts.carried.push(text);
                    }
                }
                AgentMessage::CompactionSummary(s) => facts.carried.push(s.summary.clone()),
                AgentMessage::BranchSummary(s) => facts.carried.push(s.summary.clone()),
                AgentMessage::Assistant(assistant) => {
                    facts.counts.assistant += 1;
                    let text = join_text(&assistant.content, "\n");
                    for call in assistant.tool_calls() {
                        let (usage, path) = classify_call(call);
                        if let Some(path) = &path {
                            match usage {
                                FileUse::Read => {
                                    facts.read.insert(path.clone());
                                }
                                FileUse::Modified => {
                                    facts.modified.insert(path.clone());
                                }
                                FileUse::Other => {}
                            }
                        }
                        facts.pending_calls.push(call.id.clone());
                        calls.insert(call.id.as_str(), (call, usage, path));
                    }
                    if !text.trim().is_empty() {
                        facts.assistant_text(&text);
                        recent_assistant_texts.push_back(text.clone());
                        if recent_assistant_texts.len() > 3 {
                            recent_assistant_texts.pop_front();
                        }
                        facts.last_assistant = Some(text);
                        facts.ends_with_assistant = true;
                    }
                    if let Some(error) = assistant
                        .error_message
                        .as_deref()
                        .filter(|_| assistant.is_error())
                    {
                        facts
                            .sections
                            .blocked
                            .push(clip_line(&format!("The model failed: {error}")));
                    }
                }
                AgentMessage::ToolResult(result) => {
                    facts.counts.tool_results += 1;
                    facts.pending_calls.retain(|id| *id != result.tool_call_id);
                    let text = join_text(&result.content, "\n");
                    let call = calls.get(result.tool_call_id.as_str());
                    facts.tool_result(&result.tool_name, call, &text, result.is_error);
                }
                AgentMessage::BashExecution(exec) | AgentMessage::PythonExecution(exec) => {
                    let failed = exec.exit_code.is_some_and(|c| c != 0);
                    facts
                        .actions
                        .push(clip_line(&format!("Ran `{}`", exec.source())));
                    if failed {
                        facts.counts.errors += 1;
                        let line = first_error_line(&exec.output).unwrap_or_default();
                        facts.sections.blocked.push(clip_line(&format!(
                            "`{}` exited with {}: {line}",
                            exec.source(),
                            exec.exit_code.unwrap_or_default()
                        )));
                    }
                }
                AgentMessage::FileMention(mention) => {
                    for file in &mention.files {
                        facts.read.insert(file.path.clone());
                    }
                }
                AgentMessage::Unknown(_) => {}
            }
        }
        for text in &recent_assistant_texts {
            collect_plans(text, &mut facts.sections.next_steps);
        }
        if let Some(last) = &facts.last_assistant {
            collect_numbered(last, &mut facts.sections.next_steps);
        }
        facts
            .pending_calls
            .retain(|id| calls.contains_key(id.as_str()));
        facts.pending_calls = facts
            .pending_calls
            .iter()
            .filter_map(|id| calls.get(id.as_str()))
            .map(|(call, _, path)| describe_call(call, path.as_deref()))
            .collect();
        facts.read.retain(|p| !facts.modified.contains(p));
        facts
    }

    fn user_text(&mut self, text: &str, synthetic: bool) {
        if text.contains("<summary>") {
            self.carried.push(text.to_owned());
            return;
        }
        if synthetic || text.trim().is_empty() {
            return;
        }
        self.counts.user += 1;
        self.requests.push(text.to_owned());
        self.ends_with_assistant = false;
        self.completed_after_request = false;
        for sentence in sentences(text) {
            let lower = sentence.to_lowercase();
            if !sentence.ends_with('?') && CONSTRAINT_CUES.iter().any(|c| contains_word(&lower, c))
            {
                self.sections.constraints.push(clip_line(sentence));
            }
        }
    }

    fn assistant_text(&mut self, text: &str) {
        for sentence in sentences(text) {
            let lower = sentence.to_lowercase();
            if sentence.ends_with('?') {
                continue;
            }
            let future = FUTURE_CUES.iter().any(|c| contains_word(&lower, c));
            if DECISION_CUES.iter().any(|c| contains_word(&lower, c)) {
                self.sections.decisions.push(clip_line(sentence));
            } else if !future && DONE_CUES.iter().any(|c| contains_word(&lower, c)) {
                self.sections.done.push(clip_line(sentence));
                self.completed_after_request = true;
            }
        }
    }

    fn tool_result(
        &mut self,
        tool_name: &str,
        call: Option<&(&ToolCall, FileUse, Option<String>)>,
        text: &str,
        is_error: bool,
    ) {
        let name = call.map_or(tool_name, |(c, _, _)| c.name.as_str());
        let path = call.and_then(|(_, _, p)| p.as_deref());
        if let Some((c, _, _)) = call {
            self.actions.push(describe_call(c, path));
        }
        if is_error {
            self.counts.errors += 1;
            let line = first_error_line(text)
                .or_else(|| text.lines().map(str::trim).find(|l| !l.is_empty()))
                .unwrap_or("(no output)");
            let target = path.map(|p| format!(" on `{p}`")).unwrap_or_default();
            self.sections
                .blocked
                .push(clip_line(&format!("`{name}`{target} failed: {line}")));
            return;
        }
        if let Some((_, FileUse::Modified, Some(path))) = call {
            self.sections.done.push(format!("Modified `{path}`"));
        }
        for line in text
            .lines()
            .filter(|l| looks_like_error(l))
            .take(MAX_ERRORS_PER_RESULT)
        {
            self.counts.errors += 1;
            self.sections.blocked.push(clip_line(line.trim()));
        }
    }

    /// A question the assistant asked and the user has not answered, verbatim.
    fn pending_question(&self) -> Option<String> {
        let text = self
            .last_assistant
            .as_deref()
            .filter(|_| self.ends_with_assistant)?;
        let first_q = text.find('?')?;
        // Start at the paragraph holding the first question, so its lead-in and any options
        // listed below it stay together.
        let start = text[..first_q].rfind("\n\n").map_or(0, |i| i + 2);
        let question = text[start..].trim();
        Some(if question.chars().count() > MAX_VERBATIM_CHARS {
            let lines: Vec<&str> = question.lines().filter(|l| l.contains('?')).collect();
            clip(&lines.join("\n"), MAX_VERBATIM_CHARS)
        } else {
            question.to_owned()
        })
    }
}

const CONSTRAINT_CUES: &[&str] = &[
    "always",
    "never",
    "don't",
    "dont",
    "do not",
    "must",
    "mustn't",
    "should",
    "shouldn't",
    "prefer",
    "avoid",
    "make sure",
    "only use",
    "instead of",
    "without",
    "no need to",
    "please use",
    "keep",
];
const DECISION_CUES: &[&str] = &[
    "decided",
    "decide to",
    "let's",
    "let us",
    "i'll use",
    "i will use",
    "we'll use",
    "instead",
    "going with",
    "chose",
    "opted",
    "switch to",
    "switched to",
    "the approach",
    "rather than",
];
const DONE_CUES: &[&str] = &[
    "done",
    "fixed",
    "implemented",
    "added",
    "created",
    "updated",
    "completed",
    "finished",
    "now passes",
    "now pass",
    "tests pass",
    "all tests pass",
    "successfully",
    "i've",
    "i have",
    "resolved",
    "removed",
    "renamed",
    "refactored",
];
const FUTURE_CUES: &[&str] = &[
    "will", "i'll", "let me", "going to", "next", "need to", "should", "plan", "todo",
];
const PLAN_CUES: &[&str] = &[
    "next",
    "next step",
    "then i will",
    "then i'll",
    "i will now",
    "i'll now",
    "todo",
    "remaining",
    "still need",
    "needs to",
    "after that",
    "afterwards",
    "i plan",
];
const ERROR_CUES: &[&str] = &[
    "error:",
    "error[",
    "panicked",
    "traceback",
    "exception",
    "fatal:",
    "failed",
    "failure",
    "cannot find",
    "not found",
    "undefined reference",
    "segmentation fault",
];

fn looks_like_error(line: &str) -> bool {
    let line = line.trim();
    if line.is_empty() || line.len() > 2_000 {
        return false;
    }
    let lower = line.to_lowercase();
    // Test summaries say "0 failed" on success.
    if lower.contains("0 failed") || lower.contains("failed: 0") {
        return false;
    }
    ERROR_CUES.iter().any(|c| lower.contains(c))
}

fn first_error_line(text: &str) -> Option<&str> {
    text.lines().find(|l| looks_like_error(l)).map(str::trim)
}

/// What a tool call does to a file, and the path it names.
fn classify_call(call: &ToolCall) -> (FileUse, Option<String>) {
    let path = ["path", "file_path", "filePath", "file", "filename"]
        .iter()
        .find_map(|k| call.arguments.get(k).and_then(Value::as_str))
        .map(str::to_owned);
    let name = call.name.to_ascii_lowercase();
    let usage = if [
        "write", "edit", "replace", "patch", "create", "delete", "move", "rename",
    ]
    .iter()
    .any(|k| name.contains(k))
    {
        FileUse::Modified
    } else if ["read", "view", "cat", "open"]
        .iter()
        .any(|k| name.contains(k))
    {
        FileUse::Read
    } else {
        FileUse::Other
    };
    (usage, path)
}

fn describe_call(call: &ToolCall, path: Option<&str>) -> String {
    if let Some(path) = path {
        return format!("{} `{path}`", call.name);
    }
    let command = ["command", "cmd", "query", "pattern"]
        .iter()
        .find_map(|k| call.arguments.get(k).and_then(Value::as_str));
    match command {
        Some(command) => clip_line(&format!("{} `{command}`", call.name)),
        None => call.name.clone(),
    }
}

fn collect_plans(text: &str, out: &mut Items) {
    for sentence in sentences(text) {
        let lower = sentence.to_lowercase();
        if !sentence.ends_with('?') && PLAN_CUES.iter().any(|c| contains_word(&lower, c)) {
            out.push(clip_line(sentence));
        }
    }
}

/// The numbered list items of `text` (outside code blocks).
fn collect_numbered(text: &str, out: &mut Items) {
    for line in prose_lines(text) {
        let trimmed = line.trim_start();
        let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0
            && let Some(item) = trimmed[digits..]
                .strip_prefix(". ")
                .or_else(|| trimmed[digits..].strip_prefix(") "))
        {
            out.push(clip_line(item));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Text helpers

/// The lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut in_fence = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            return false;
        }
        !in_fence
    })
}

/// Sentences of the prose in `text`: split at line ends and at `.`, `!` or `?` followed by a
/// space. Each keeps its closing punctuation.
fn sentences(text: &str) -> impl Iterator<Item = &str> {
    prose_lines(text).flat_map(|line| {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1).is_none_or(|n| *n == b' ') {
                out.push(&line[start..=i]);
                start = i + 1;
            }
        }
        out.push(&line[start..]);
        out.into_iter()
            .map(|s| s.trim().trim_start_matches(['-', '*', '>', ' ']).trim())
            .filter(|s| s.len() > 3)
    })
}

/// Whether `cue` occurs in `lower` as whole words.
fn contains_word(lower: &str, cue: &str) -> bool {
    lower.match_indices(cue).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + cue.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// `text` on one line (whitespace collapsed), clipped to [`MAX_ITEM_CHARS`].
fn clip_line(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if out.len() > MAX_ITEM_CHARS * 4 {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    clip(&out, MAX_ITEM_CHARS)
}

/// `text` cut to `max` characters with `…` when longer.
fn clip(text: &str, max: usize) -> String {
    super::error::excerpt(text, max)
}

/// `text` inside a code fence longer than any backtick run in it, so it stays verbatim.
fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}\n{text}\n{fence}")
}

// ---------------------------------------------------------------------------------------------
// Layouts

fn history(req: &SummaryRequest, facts: &Facts) -> String {
    let mut merged = Sections::default();
    for carried in &facts.carried {
        merge_previous(&mut merged, &Sections::parse(carried));
    }
    if let Some(previous) = req.previous_summary.as_deref() {
        merge_previous(&mut merged, &Sections::parse(previous));
    }
    let new = current_sections(req, facts);
    merged.goal.extend(&new.goal);
    merged.constraints.extend(&new.constraints);
    // Work finished since the previous summary is no longer in progress.
    let done_keys: HashSet<String> = new.done.iter().map(|d| dedupe_key(d)).collect();
    let mut in_progress = Items::new(Keep::Newest);
    for item in merged.in_progress.iter().chain(new.in_progress.iter()) {
        if !done_keys.contains(&dedupe_key(item)) {
            in_progress.push(item.clone());
        }
    }
    merged.in_progress = in_progress;
    merged.done.extend(&new.done);
    merged.blocked.extend(&new.blocked);
    merged.decisions.extend(&new.decisions);
    if !new.next_steps.is_empty() {
        merged.next_steps = new.next_steps.clone();
    }
    if new.critical.iter().any(|c| c.starts_with(PENDING_QUESTION)) || !facts.requests.is_empty() {
        // A newer question or request replaces the one the previous summary recorded.
        let mut critical = Items::new(Keep::Newest);
        for item in merged.critical.iter() {
            if !item.starts_with(PENDING_QUESTION) && !item.starts_with(LATEST_REQUEST) {
                critical.push(item.clone());
            }
        }
        merged.critical = critical;
    }
    merged.critical.extend(&new.critical);
    merged.notes.extend(&new.notes);
    render_full(&merged, true)
}

fn merge_previous(into: &mut Sections, previous: &Sections) {
    into.goal.extend(&previous.goal);
    into.constraints.extend(&previous.constraints);
    into.done.extend(&previous.done);
    into.in_progress.extend(&previous.in_progress);
    into.blocked.extend(&previous.blocked);
    into.decisions.extend(&previous.decisions);
    into.next_steps.extend(&previous.next_steps);
    into.critical.extend(&previous.critical);
    into.notes.extend(&previous.notes);
}

const PENDING_QUESTION: &str = "Question awaiting the user's answer, verbatim:";
const LATEST_REQUEST: &str = "Latest user request, verbatim:";

/// The sections drawn from the messages of this request alone.
fn current_sections(req: &SummaryRequest, facts: &Facts) -> Sections {
    let mut s = facts.sections.clone();
    if let Some(first) = facts.requests.first() {
        s.goal.push(clip_line(first));
    }
    if let Some(latest) = facts.requests.last() {
        s.goal.push(clip_line(latest));
        if !facts.completed_after_request {
            s.in_progress.push(clip_line(latest));
        }
    }
    for call in &facts.pending_calls {
        s.in_progress
            .push(format!("{call} (started, no result yet)"));
    }
    if let Some(question) = facts.pending_question() {
        s.critical
            .push(format!("{PENDING_QUESTION}\n{}", fenced(&question)));
    }
    if let Some(latest) = facts.requests.last() {
        let verbatim = clip(latest.trim(), MAX_VERBATIM_CHARS);
        s.critical
            .push(format!("{LATEST_REQUEST}\n{}", fenced(&verbatim)));
    }
    let (read, modified) = file_lists(req, facts);
    if !modified.is_empty() {
        s.critical
            .push(format!("Files modified: {}", list_paths(&modified)));
    }
    if !read.is_empty() {
        s.critical
            .push(format!("Files read: {}", list_paths(&read)));
    }
    if let Some(custom) = req
        .custom_instructions
        .as_deref()
        .filter(|c| !c.trim().is_empty())
    {
        s.notes
            .push(clip_line(&format!("Requested focus: {custom}")));
    }
    s.notes.push(EXTRACTIVE_NOTE.to_owned());
    s
}

/// Read and modified files: the request's lists when given (cumulative, from the engine),
/// else what the tool calls show.
fn file_lists(req: &SummaryRequest, facts: &Facts) -> (Vec<String>, Vec<String>) {
    if req.read_files.is_empty() && req.modified_files.is_empty() {
        (
            facts.read.iter().cloned().collect(),
            facts.modified.iter().cloned().collect(),
        )
    } else {
        (req.read_files.clone(), req.modified_files.clone())
    }
}

fn list_paths(paths: &[String]) -> String {
    let mut out: Vec<String> = paths
        .iter()
        .take(MAX_FILES)
        .map(|p| format!("`{p}`"))
        .collect();
    if paths.len() > MAX_FILES {
        out.push(format!("and {} more", paths.len() - MAX_FILES));
    }
    out.join(", ")
}

fn push_list(out: &mut String, heading: &str, items: &Items, marker: &str) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "{heading}");
    for (i, item) in items.iter().enumerate() {
        let prefix = if marker == "1." {
            format!("{}. ", i + 1)
        } else {
            marker.to_owned()
        };
        let _ = writeln!(out, "{prefix}{item}");
    }
}

fn render_progress(out: &mut String, s: &Sections, branch_style: bool) {
    if s.done.is_empty() && s.in_progress.is_empty() && s.blocked.is_empty() {
        if branch_style {
            out.push_str("## Progress\n(none)\n\n");
        }
        return;
    }
    out.push_str("## Progress\n");
    push_list(out, "### Done", &s.done, "- [x] ");
    push_list(out, "### In Progress", &s.in_progress, "- [ ] ");
    push_list(out, "### Blocked", &s.blocked, "- ");
    out.push('\n');
}

fn render_full(s: &Sections, with_context: bool) -> String {
    let mut out = String::new();
    let section = |out: &mut String, heading: &str, items: &Items, marker: &str| {
        if !items.is_empty() {
            push_list(out, heading, items, marker);
            out.push('\n');
        }
    };
    if s.goal.is_empty() {
        out.push_str("## Goal\n- (no user request in the summarised messages)\n\n");
    } else {
        section(&mut out, "## Goal", &s.goal, "- ");
    }
    section(
        &mut out,
        "## Constraints & Preferences",
        &s.constraints,
        "- ",
    );
    render_progress(&mut out, s, false);
    section(&mut out, "## Key Decisions", &s.decisions, "- ");
    section(&mut out, "## Next Steps", &s.next_steps, "1.");
    if with_context {
        section(&mut out, "## Critical Context", &s.critical, "- ");
        section(&mut out, "## Additional Notes", &s.notes, "- ");
    }
    out.trim_end().to_owned()
}

fn branch(req: &SummaryRequest, facts: &Facts) -> String {
    let s = current_sections(req, facts);
    let mut out = String::new();
    let list = |out: &mut String, heading: &str, items: &Items, marker: &str, none: bool| {
        if items.is_empty() {
            if none {
                let _ = writeln!(out, "{heading}\n(none)\n");
            }
            return;
        }
        push_list(out, heading, items, marker);
        out.push('\n');
    };
    list(&mut out, "## Goal", &s.goal, "- ", true);
    list(
        &mut out,
        "## Constraints & Preferences",
        &s.constraints,
        "- ",
        true,
    );
    render_progress(&mut out, &s, true);
    list(&mut out, "## Key Decisions", &s.decisions, "- ", false);
    list(&mut out, "## Next Steps", &s.next_steps, "1.", false);
    let (read, modified) = file_lists(req, facts);
    let mut context = Items::new(Keep::Newest);
    if let Some(question) = facts.pending_question() {
        context.push(format!("{PENDING_QUESTION}\n{}", fenced(&question)));
    }
    if !modified.is_empty() {
        context.push(format!("Files modified: {}", list_paths(&modified)));
    }
    if !read.is_empty() {
        context.push(format!("Files read: {}", list_paths(&read)));
    }
    list(&mut out, "## Critical Context", &context, "- ", false);
    out.trim_end().to_owned()
}

fn turn_prefix(req: &SummaryRequest, facts: &Facts) -> String {
    let mut out = String::from("## Original Request\n");
    match facts.requests.first() {
        Some(request) => {
            let _ = writeln!(
                out,
                "{}\n",
                fenced(&clip(request.trim(), MAX_VERBATIM_CHARS))
            );
        }
        None => out.push_str("(the request is before this part of the turn)\n\n"),
    }
    let mut progress = facts.actions.clone();
    progress.extend(&facts.sections.done);
    progress.extend(&facts.sections.blocked);
    if !progress.is_empty() {
        push_list(&mut out, "## Early Progress", &progress, "- ");
        out.push('\n');
    }
    let mut context = Items::new(Keep::Newest);
    let (read, modified) = file_lists(req, facts);
    if !modified.is_empty() {
        context.push(format!("Files modified: {}", list_paths(&modified)));
    }
    if !read.is_empty() {
        context.push(format!("Files read: {}", list_paths(&read)));
    }
    context.extend(&facts.sections.decisions);
    for call in &facts.pending_calls {
        context.push(format!(
            "{call} was started; its result is in the kept part"
        ));
    }
    if let Some(last) = &facts.last_assistant {
        context.push(clip_line(&format!("Last assistant note: {last}")));
    }
    push_list(&mut out, "## Context for Suffix", &context, "- ");
    out.trim_end().to_owned()
}

/// Two or three first-person sentences about what changed.
fn short(req: &SummaryRequest, facts: &Facts) -> String {
    let summary = req
        .previous_summary
        .as_deref()
        .map(Sections::parse)
        .unwrap_or_default();
    let (_, mut modified) = file_lists(req, facts);
    if modified.is_empty() {
        modified = facts.modified.iter().cloned().collect();
    }
    let mut sentences = Vec::new();
    if !modified.is_empty() {
        let shown: Vec<String> = modified.iter().take(3).map(|p| format!("`{p}`")).collect();
        let more = modified.len().saturating_sub(3);
        let tail = if more > 0 {
            format!(" and {more} other files")
        } else {
            String::new()
        };
        sentences.push(format!("I modified {}{tail}.", shown.join(", ")));
    }
    let done: Vec<&String> = summary
        .done
        .iter()
        .chain(facts.sections.done.iter())
        .filter(|d| !d.starts_with("Modified `"))
        .take(2)
        .collect();
    if !done.is_empty() {
        let items: Vec<String> = done
            .iter()
            .map(|d| clip_line(d).trim_end_matches('.').to_owned())
            .collect();
        sentences.push(format!("I completed: {}.", items.join("; ")));
    }
    if let Some(blocked) = facts
        .sections
        .blocked
        .iter()
        .next_back()
        .or(summary.blocked.iter().next())
    {
        sentences.push(format!(
            "I have not yet resolved: {}.",
            blocked.trim_end_matches('.')
        ));
    }
    if sentences.len() < 2 {
        let goal = facts
            .requests
            .last()
            .map(|r| clip_line(r))
            .or_else(|| summary.goal.iter().next().cloned());
        match goal {
            Some(goal) => sentences.push(format!("I worked on: {}.", goal.trim_end_matches('.'))),
            None => sentences.push("I made no changes to files.".to_owned()),
        }
    }
    sentences.truncate(3);
    sentences.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bullets_and_keys() {
        assert_eq!(strip_bullet("- [x] Fixed it"), Some("Fixed it"));
        assert_eq!(strip_bullet("12. Run it"), Some("Run it"));
        assert_eq!(strip_bullet("plain"), None);
        assert_eq!(dedupe_key("**Fixed** `a.rs`."), dedupe_key("fixed a.rs"));
    }

    #[test]
    fn words_match_whole() {
        assert!(contains_word("we must not", "must"));
        assert!(!contains_word("nevertheless", "never"));
        assert!(contains_word("don't do it", "don't"));
    }

    #[test]
    fn fences_outgrow_backticks_inside() {
        assert_eq!(fenced("a"), "```\na\n```");
        assert_eq!(fenced("x ```` y"), "`````\nx ```` y\n`````");
    }

    #[test]
    fn parse_reads_sections_and_fences() {
        let text = "## Goal\n- Build it\n\n## Progress\n### Done\n- [x] Wrote `a.rs`\n\
                    ### In Progress\n- [ ] Tests\n\n## Critical Context\n- Q:\n```\n- not a bullet\n```\n\
                    - Other\n\n<read-files>\nz.rs\n</read-files>";
        let s = Sections::parse(text);
        assert_eq!(s.goal.iter().collect::<Vec<_>>(), ["Build it"]);
        assert_eq!(s.done.iter().collect::<Vec<_>>(), ["Wrote `a.rs`"]);
        assert_eq!(s.in_progress.iter().collect::<Vec<_>>(), ["Tests"]);
        assert_eq!(
            s.critical.iter().collect::<Vec<_>>(),
            ["Q:\n```\n- not a bullet\n```", "Other"]
        );
        assert!(s.notes.is_empty());
    }
}
