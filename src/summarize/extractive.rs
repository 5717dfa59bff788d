//! The extractive summarizer: offline, deterministic, no network.
//!
//! It builds the same structured summary the prompts ask a model for (Goal, Constraints &
//! Preferences, Progress, Key Decisions, Next Steps, Critical Context) from the conversation
//! itself. Only four sources feed it, so that what it writes reads as a record of the work and
//! never as a dump of tool output:
//!
//! * the user's own words (requests and rule-like sentences),
//! * the assistant's own text (statements of completion, decisions, findings, plans, a pending
//!   question),
//! * tool calls, by name and target (path, command or search pattern), and whether they
//!   succeeded (with the pass count of a test run),
//! * the first error line of a failed tool result or command.
//!
//! The bodies of successful tool results (file contents, search hits, logs) are never copied.
//!
//! With a previous summary (ours or a model's) it parses that summary's sections and merges item
//! by item: old items stay, finished work moves from In Progress to Done, failures that have
//! since succeeded leave Blocked, a newer question or request replaces the older one, and every
//! section stays within its cap. It is compactd's default when no model is configured and the
//! last rung when every model fails, so it must never fail, always end quickly (linear in its
//! input) and stay bounded in size.
//!
//! What is kept exactly: a question the assistant left for the user and the latest user request
//! (both fenced and verbatim, up to [`MAX_VERBATIM_CHARS`]), file paths, commands and error
//! lines.

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
/// Most goal items: the original goal and the latest requests.
const MAX_GOALS: usize = 6;
/// Most exact error messages kept in Critical Context (the latest ones).
const MAX_ERRORS: usize = 4;
/// Most findings ("the cause is …") kept in Critical Context (the latest ones).
const MAX_FINDINGS: usize = 4;
/// Most targets listed for one grouped read-only action (`read a, b, c`).
const MAX_ACTION_TARGETS: usize = 8;
/// Most actions listed in a turn prefix: the first few and the latest.
const MAX_ACTIONS_HEAD: usize = 4;
const MAX_ACTIONS_TAIL: usize = 10;
/// Longest condensed request (Goal, In Progress), in characters.
const MAX_GOAL_CHARS: usize = 240;
/// Longest sentence of the short summary, in characters.
const MAX_SHORT_SENTENCE_CHARS: usize = 240;

/// The note that tells a reader this summary was not written by a model.
const EXTRACTIVE_NOTE: &str = "This summary was extracted mechanically from the conversation; no summarization model was used.";

const PENDING_QUESTION: &str = "Question awaiting the user's answer, verbatim:";
const LATEST_REQUEST: &str = "Latest user request, verbatim:";
const FILES_MODIFIED: &str = "Files modified:";
const FILES_READ: &str = "Files read:";
const ERROR_FROM: &str = "Error from ";
const FINDING: &str = "Finding:";
const STARTED_NO_RESULT: &str = "(started, no result yet)";
const ANSWER_QUESTION: &str = "Get the user's answer to:";
/// Marks a turn prefix's action that created a file, so a later short summary knows it.
const NEW_FILE: &str = " (new file)";
/// The failure key of a model request that ended in an error.
const MODEL_KEY: &str = "(model)";

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

/// Which items of a full section give way to new ones.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    /// The first items stay (constraints: the original rules matter most).
    Oldest,
    /// The latest items stay (progress, errors, decisions).
    Newest,
    /// The first item and the latest stay (goals: the original goal and where it went since).
    Ends,
}

/// An ordered, deduplicated, bounded list of items.
#[derive(Clone)]
struct Items {
    items: VecDeque<String>,
    keys: HashSet<String>,
    keep: Keep,
    cap: usize,
}

impl Items {
    fn new(keep: Keep) -> Self {
        Items::with_cap(keep, MAX_ITEMS)
    }

    fn with_cap(keep: Keep, cap: usize) -> Self {
        Items {
            items: VecDeque::new(),
            keys: HashSet::new(),
            keep,
            cap: cap.max(2),
        }
    }

    fn push(&mut self, item: String) {
        let key = dedupe_key(&item);
        if key.is_empty() || self.keys.contains(&key) {
            return;
        }
        if self.items.len() >= self.cap {
            let dropped = match self.keep {
                Keep::Oldest => return,
                Keep::Newest => self.items.pop_front(),
                Keep::Ends => self.items.remove(1),
            };
            if let Some(dropped) = dropped {
                self.keys.remove(&dedupe_key(&dropped));
            }
        }
        self.keys.insert(key);
        self.items.push_back(item);
    }

    fn extend<'a>(&mut self, items: impl IntoIterator<Item = &'a String>) {
        for item in items {
            self.push(item.clone());
        }
    }

    fn contains(&self, item: &str) -> bool {
        self.keys.contains(&dedupe_key(item))
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn iter(&self) -> std::collections::vec_deque::Iter<'_, String> {
        self.items.iter()
    }

    /// A copy without the items `drop` rejects.
    fn filtered(&self, drop: impl Fn(&str) -> bool) -> Items {
        let mut out = Items::with_cap(self.keep, self.cap);
        out.extend(self.iter().filter(|i| !drop(i)));
        out
    }
}

/// Critical Context, by kind, so an update can replace each kind on its own terms.
#[derive(Clone)]
struct Critical {
    question: Option<String>,
    request: Option<String>,
    findings: Items,
    errors: Items,
    modified: Option<String>,
    read: Option<String>,
    other: Items,
}

impl Default for Critical {
    fn default() -> Self {
        Critical {
            question: None,
            request: None,
            findings: Items::with_cap(Keep::Newest, MAX_FINDINGS),
            errors: Items::with_cap(Keep::Newest, MAX_ERRORS),
            modified: None,
            read: None,
            other: Items::new(Keep::Newest),
        }
    }
}

impl Critical {
    /// Files an item under its kind, by the label it starts with.
    fn push(&mut self, item: String) {
        if let Some(body) = item.strip_prefix(PENDING_QUESTION) {
            self.question = Some(unfence(body));
        } else if let Some(body) = item.strip_prefix(LATEST_REQUEST) {
            self.request = Some(unfence(body));
        } else if item.starts_with(FILES_MODIFIED) {
            self.modified = Some(item);
        } else if item.starts_with(FILES_READ) {
            self.read = Some(item);
        } else if item.starts_with(ERROR_FROM) {
            self.errors.push(item);
        } else if item.starts_with(FINDING) {
            self.findings.push(item);
        } else {
            self.other.push(item);
        }
    }

    fn items(&self) -> Items {
        let mut out = Items::with_cap(Keep::Newest, usize::MAX);
        if let Some(q) = &self.question {
            out.push(format!("{PENDING_QUESTION}\n{}", fenced(q)));
        }
        if let Some(r) = &self.request {
            out.push(format!("{LATEST_REQUEST}\n{}", fenced(r)));
        }
        out.extend(self.findings.iter());
        out.extend(self.errors.iter());
        out.extend(self.modified.iter());
        out.extend(self.read.iter());
        out.extend(self.other.iter());
        out
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
    critical: Critical,
    notes: Items,
}

impl Default for Sections {
    fn default() -> Self {
        Sections {
            goal: Items::with_cap(Keep::Ends, MAX_GOALS),
            constraints: Items::new(Keep::Oldest),
            done: Items::new(Keep::Newest),
            in_progress: Items::new(Keep::Newest),
            blocked: Items::new(Keep::Newest),
            decisions: Items::new(Keep::Newest),
            next_steps: Items::new(Keep::Newest),
            critical: Critical::default(),
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
    /// A turn prefix's verbatim request: condensed into a goal.
    OriginalRequest,
    /// A turn prefix's actions: changes and checks are progress, look-ups are dropped.
    EarlyProgress,
    /// A turn prefix's context: decisions and findings carry over, notes about the then
    /// unseen suffix do not.
    SuffixContext,
    /// The retention guard's section: user constraints carry over, the rest is recomputed.
    Retained,
}

impl Sections {
    fn push(&mut self, slot: Slot, item: String) {
        match slot {
            Slot::Goal => self.goal.push(item),
            Slot::Constraints => self.constraints.push(item),
            Slot::Done => self.done.push(item),
            Slot::InProgress => self.in_progress.push(item),
            Slot::Blocked => self.blocked.push(item),
            Slot::Decisions => self.decisions.push(item),
            Slot::NextSteps => self.next_steps.push(item),
            Slot::Critical => self.critical.push(item),
            Slot::Notes => self.notes.push(item),
            Slot::OriginalRequest => self.goal.push(condense(&unfence(&item))),
            Slot::EarlyProgress => {
                let first = item.split_whitespace().next().unwrap_or("");
                let looks_only = [
                    "read", "grep", "find", "glob", "search", "ls", "list", "view",
                ]
                .contains(&first)
                    || first.starts_with('…');
                if let Some((what, error)) = item.split_once(" — failed: ") {
                    self.blocked.push(format!("{what} failed: {error}"));
                } else if !looks_only {
                    self.done.push(item);
                }
            }
            Slot::SuffixContext => {
                if let Some(decision) = item.strip_prefix("Decision: ") {
                    self.decisions.push(decision.to_owned());
                } else if item.starts_with(FINDING)
                    || item.starts_with(FILES_MODIFIED)
                    || item.starts_with(FILES_READ)
                {
                    self.critical.push(item);
                }
            }
            Slot::Retained => {
                if let Some(constraint) = item.strip_prefix("User constraint: ") {
                    self.constraints.push(constraint.to_owned());
                }
            }
        }
    }

    /// Reads a structured summary (ours or a model's) back into sections. Unknown headings
    /// and text outside any heading become notes; file-operation tags are skipped (they are
    /// recomputed and appended by the caller). The sections of a turn prefix and of the
    /// retention guard are read into the matching lists (see [`Slot`]).
    fn parse(text: &str) -> Sections {
        let mut sections = Sections::default();
        let mut slot = Slot::Notes;
        let mut current: Option<String> = None;
        let mut fence: Option<String> = None;
        let mut in_file_tag = false;
        let flush = |sections: &mut Sections, slot: Slot, current: &mut Option<String>| {
            if let Some(item) = current.take() {
                sections.push(slot, clip(item.trim_end(), MAX_VERBATIM_CHARS));
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
                slot = heading_slot(name);
                continue;
            }
            if trimmed.is_empty()
                || trimmed == "---"
                || trimmed == "No prior history."
                || trimmed.starts_with("**Turn Context")
            {
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

/// The list a heading's items go to.
fn heading_slot(name: &str) -> Slot {
    let lower = name.trim_end_matches(':').to_ascii_lowercase();
    match lower.as_str() {
        "goal" | "goals" => Slot::Goal,
        "original request" => Slot::OriginalRequest,
        "early progress" => Slot::EarlyProgress,
        "context for suffix" => Slot::SuffixContext,
        "retained facts" => Slot::Retained,
        "constraints & preferences" | "constraints and preferences" | "constraints" => {
            Slot::Constraints
        }
        "progress" | "done" => Slot::Done,
        "in progress" => Slot::InProgress,
        "blocked" => Slot::Blocked,
        "key decisions" | "decisions" => Slot::Decisions,
        "next steps" => Slot::NextSteps,
        "critical context" => Slot::Critical,
        "additional notes" | "notes" => Slot::Notes,
        _ if lower.starts_with("progress") => Slot::Done,
        _ => Slot::Notes,
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

/// The first backtick-quoted span of `item`: the command or path a progress item is about.
fn first_code_span(item: &str) -> Option<&str> {
    let start = item.find('`')? + 1;
    let len = item[start..].find('`')?;
    Some(&item[start..start + len])
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

/// What a tool call is about, read from its name and arguments (never from its result).
#[derive(Clone)]
struct CallInfo {
    name: String,
    usage: FileUse,
    path: Option<String>,
    command: Option<String>,
    /// What the call acts on, for display: `` `src/a.rs` ``, `` `as i32` in `src` ``.
    target: Option<String>,
    /// Whether it only looks (reads, searches); such calls are grouped in a turn prefix.
    looks_only: bool,
    /// Whether it writes a whole file (as opposed to editing part of one).
    writes_whole: bool,
}

impl CallInfo {
    fn of(call: &ToolCall) -> CallInfo {
        let arg = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| call.arguments.get(k).and_then(Value::as_str))
                .map(str::to_owned)
        };
        let path = arg(&["path", "file_path", "filePath", "file", "filename"]);
        let command = arg(&["command", "cmd"]);
        let pattern = arg(&["pattern", "query", "regex", "glob"]);
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
        let searches = ["grep", "find", "glob", "search", "list", "ls"]
            .iter()
            .any(|k| name.contains(k));
        let target = match (&pattern, &path, &command) {
            (Some(p), Some(dir), _) if searches => Some(format!("{} in `{dir}`", code(p))),
            (Some(p), None, None) => Some(code(p)),
            (_, Some(path), _) => Some(format!("`{path}`")),
            (_, None, Some(c)) => Some(code(&one_line(c, MAX_ITEM_CHARS / 2))),
            _ => None,
        };
        CallInfo {
            name: call.name.clone(),
            usage,
            path,
            command,
            target,
            looks_only: usage == FileUse::Read || (searches && usage == FileUse::Other),
            writes_whole: name.contains("write") || name.contains("create"),
        }
    }

    /// The key that ties a failure to a later success: the command, else the path, else the
    /// tool and its target.
    fn key(&self) -> String {
        self.command
            .clone()
            .or_else(|| self.path.clone())
            .unwrap_or_else(|| format!("{} {}", self.name, self.target.as_deref().unwrap_or("")))
    }

    /// How the call reads in a list: `` `cargo test` ``, `` edit `src/a.rs` ``.
    fn label(&self) -> String {
        match (&self.command, &self.target) {
            (Some(c), _) if self.path.is_none() => code(&one_line(c, MAX_ITEM_CHARS / 2)),
            (_, Some(target)) => format!("{} {target}", self.name),
            _ => format!("`{}`", self.name),
        }
    }
}

/// One step of the work, for a turn prefix's Early Progress.
struct Action {
    label: String,
    /// For grouped read-only calls: the targets, in first-seen order (the first few).
    targets: Vec<String>,
    seen: HashSet<String>,
    more: usize,
    outcome: Option<String>,
}

/// A failed call or command, and whether a later run of the same command (or a later
/// successful call on the same file) resolved it.
struct Failure {
    key: String,
    label: String,
    /// The first error line, and a location line right after it when there is one.
    error: String,
    resolved: bool,
}

/// Everything the summary layouts draw on, gathered in one pass over the messages.
#[derive(Default)]
struct Facts {
    /// Real user requests, in order (synthetic prompts, command output and carried summaries
    /// left out).
    requests: Vec<String>,
    /// Summaries carried in the messages (e.g. a compaction summary turned into user text).
    carried: Vec<String>,
    constraints: Vec<String>,
    /// The assistant's statements of completion, decisions and findings, in order.
    statements: Vec<String>,
    decisions: Vec<String>,
    findings: Vec<String>,
    /// Done items by key (path or command); the latest event for a key wins.
    done: Vec<Option<String>>,
    done_index: HashMap<String, usize>,
    failures: Vec<Failure>,
    open_failures: HashMap<String, Vec<usize>>,
    /// Commands and paths that succeeded at least once.
    succeeded: HashSet<String>,
    /// The assistant's last text, and whether it came after the latest user request.
    last_assistant: Option<String>,
    ends_with_assistant: bool,
    /// Completion was claimed after the latest user request.
    completed_after_request: bool,
    /// Files were changed since the latest user request, and a check (tests, build) passed
    /// after the last change: the request is visibly done even if nobody said so.
    changed_since_request: bool,
    verified_since_change: bool,
    /// The assistant's last text came with tool calls: it narrates them ("Now I'll run the
    /// tests"), so its plans were carried out, not left for later.
    last_text_narrates_calls: bool,
    /// Completion was claimed before the first user request of these messages (the work a
    /// previous summary left in progress was finished).
    completed_before_request: bool,
    read: BTreeSet<String>,
    modified: BTreeSet<String>,
    /// Files written whole without having been read or changed before: new files.
    created: BTreeSet<String>,
    /// Tool calls without a result yet, in order.
    pending_calls: Vec<String>,
    actions: Vec<Action>,
}

impl Facts {
    fn extract(messages: &[AgentMessage]) -> Facts {
        let mut facts = Facts::default();
        let mut calls: HashMap<&str, (CallInfo, usize)> = HashMap::new();
        let mut call_order: Vec<&str> = Vec::new();
        let mut answered: HashSet<&str> = HashSet::new();
        let mut grouped: HashMap<String, usize> = HashMap::new();
        for message in messages {
            match message {
                AgentMessage::User(user) => {
                    let text = user.content.joined_text("\n");
                    facts.user_text(&text, user.synthetic == Some(true));
                }
                AgentMessage::Custom(custom) => {
                    let text = custom.content.joined_text("\n");
                    if text.contains("<summary>") {
                        facts.carried.push(carried_summary(&text).to_owned());
                    }
                }
                AgentMessage::CompactionSummary(s) => facts.carried.push(s.summary.clone()),
                AgentMessage::BranchSummary(s) => facts.carried.push(s.summary.clone()),
                AgentMessage::Assistant(assistant) => {
                    if assistant.is_error() {
                        if let Some(error) = assistant.error_message.as_deref() {
                            facts.fail(MODEL_KEY, "The model request", error);
                        }
                    } else {
                        facts.succeed(MODEL_KEY);
                    }
                    for call in assistant.tool_calls() {
                        let info = CallInfo::of(call);
                        let action = facts.record_call(&info, &mut grouped);
                        call_order.push(call.id.as_str());
                        calls.insert(call.id.as_str(), (info, action));
                    }
                    let text = join_text(&assistant.content, "\n");
                    if !text.trim().is_empty() {
                        facts.assistant_text(&text);
                        facts.last_assistant = Some(text);
                        facts.ends_with_assistant = true;
                        facts.last_text_narrates_calls = assistant.tool_calls().next().is_some();
                    }
                }
                AgentMessage::ToolResult(result) => {
                    answered.insert(result.tool_call_id.as_str());
                    let call = calls.get(result.tool_call_id.as_str());
                    let text = join_text(&result.content, "\n");
                    facts.tool_result(&result.tool_name, call, &text, result.is_error);
                }
                AgentMessage::BashExecution(exec) | AgentMessage::PythonExecution(exec) => {
                    let failed = exec.exit_code.is_some_and(|c| c != 0);
                    facts.command_outcome(exec.source(), &exec.output, failed);
                }
                AgentMessage::FileMention(mention) => {
                    for file in &mention.files {
                        facts.read.insert(file.path.clone());
                    }
                }
                AgentMessage::Unknown(_) => {}
            }
        }
        facts.pending_calls = call_order
            .iter()
            .filter(|id| !answered.contains(*id))
            .filter_map(|id| calls.get(id))
            .map(|(info, _)| info.label())
            .collect();
        facts.read.retain(|p| !facts.modified.contains(p));
        facts
    }

    fn user_text(&mut self, text: &str, synthetic: bool) {
        if text.contains("<summary>") {
            self.carried.push(carried_summary(text).to_owned());
            return;
        }
        if synthetic || text.trim().is_empty() {
            return;
        }
        // Messages the agent turned into user text: a command the user ran, files they
        // mentioned. They are not requests.
        if let Some((command, output, failed)) = parse_ran_command(text) {
            self.command_outcome(&command, &output, failed);
            return;
        }
        if text.trim_start().starts_with("<system-reminder>") {
            for path in mentioned_paths(text) {
                self.read.insert(path.to_owned());
            }
            return;
        }
        self.requests.push(text.to_owned());
        self.ends_with_assistant = false;
        self.completed_after_request = false;
        self.changed_since_request = false;
        self.verified_since_change = false;
        for sentence in sentences(text) {
            let lower = normalize_quotes(sentence.to_lowercase());
            if !sentence.ends_with('?') && CONSTRAINT_CUES.iter().any(|c| contains_word(&lower, c))
            {
                self.constraints.push(clip_line(sentence));
            }
        }
    }

    fn assistant_text(&mut self, text: &str) {
        for sentence in sentences(text) {
            if sentence.ends_with('?') {
                continue;
            }
            // One- and two-word fragments ("Fixed", a list option) say too little to keep.
            if sentence.split_whitespace().nth(2).is_none() {
                continue;
            }
            let lower = normalize_quotes(sentence.to_lowercase());
            if DECISION_CUES.iter().any(|c| contains_word(&lower, c)) {
                self.decisions.push(clip_line(sentence));
            } else if FINDING_CUES.iter().any(|c| lower.contains(c)) {
                self.findings.push(clip_line(sentence));
            } else if DONE_CUES.iter().any(|c| contains_word(&lower, c))
                && !FUTURE_CUES.iter().any(|c| contains_word(&lower, c))
            {
                self.statements.push(clip_line(sentence));
                self.completed_after_request = true;
                if self.requests.is_empty() {
                    self.completed_before_request = true;
                }
            }
        }
    }

    /// Records a call as an action (grouping look-only calls by tool) and notes the files it
    /// names; returns the action's index.
    fn record_call(&mut self, info: &CallInfo, grouped: &mut HashMap<String, usize>) -> usize {
        if let Some(path) = &info.path {
            match info.usage {
                FileUse::Read => {
                    self.read.insert(path.clone());
                }
                FileUse::Modified => {
                    let new = info.writes_whole
                        && !self.read.contains(path)
                        && !self.modified.contains(path);
                    if new {
                        self.created.insert(path.clone());
                    }
                    self.modified.insert(path.clone());
                }
                FileUse::Other => {}
            }
        }
        if info.looks_only {
            let target = info.target.clone().unwrap_or_default();
            if let Some(&i) = grouped.get(&info.name) {
                let action = &mut self.actions[i];
                if !target.is_empty() && action.seen.insert(target.clone()) {
                    if action.targets.len() < MAX_ACTION_TARGETS {
                        action.targets.push(target);
                    } else {
                        action.more += 1;
                    }
                }
                return i;
            }
            grouped.insert(info.name.clone(), self.actions.len());
            self.actions.push(Action {
                label: info.name.clone(),
                targets: vec![target.clone()]
                    .into_iter()
                    .filter(|t| !t.is_empty())
                    .collect(),
                seen: HashSet::from([target]),
                more: 0,
                outcome: None,
            });
        } else {
            let mut label = info.label();
            if info.path.as_ref().is_some_and(|p| self.created.contains(p)) {
                label.push_str(NEW_FILE);
            }
            self.actions.push(Action {
                label,
                targets: Vec::new(),
                seen: HashSet::new(),
                more: 0,
                outcome: None,
            });
        }
        self.actions.len() - 1
    }

    fn tool_result(
        &mut self,
        tool_name: &str,
        call: Option<&(CallInfo, usize)>,
        text: &str,
        is_error: bool,
    ) {
        let Some((info, action)) = call else {
            // The call is outside these messages: only a failure says anything useful.
            if is_error {
                let key = format!("{tool_name} ");
                self.fail(&key, &format!("`{tool_name}`"), &error_excerpt(text));
            }
            return;
        };
        let key = info.key();
        if is_error {
            let error = error_excerpt(text);
            self.fail(&key, &info.label(), &error);
            if self.actions[*action].targets.is_empty() {
                self.actions[*action].outcome = Some(format!("failed: {}", first_line(&error)));
            }
            return;
        }
        self.succeed(&key);
        if let (FileUse::Modified, Some(path)) = (info.usage, &info.path) {
            let verb = if self.created.contains(path) {
                "Created"
            } else {
                "Modified"
            };
            // The first change to a file names it; later edits add nothing new.
            if !self.done_index.contains_key(path) {
                self.set_done(path, format!("{verb} `{path}`"));
            }
            self.changed_since_request = true;
            self.verified_since_change = false;
        }
        if let Some(command) = &info.command
            && let Some((done, outcome)) = verification(command, text)
        {
            self.actions[*action].outcome = Some(outcome);
            self.set_done(command, done);
            self.verified_since_change |= self.changed_since_request;
        }
    }

    /// A command run by the user or a tool, with its output and whether it failed.
    fn command_outcome(&mut self, command: &str, output: &str, failed: bool) {
        let info = CallInfo {
            name: "bash".to_owned(),
            usage: FileUse::Other,
            path: None,
            command: Some(command.to_owned()),
            target: Some(code(&one_line(command, MAX_ITEM_CHARS / 2))),
            looks_only: false,
            writes_whole: false,
        };
        let mut label = info.label();
        if failed {
            let error = error_excerpt(output);
            self.fail(command, &label, &error);
            let _ = write!(label, " — failed: {}", first_line(&error));
        } else {
            self.succeed(command);
            if let Some((done, outcome)) = verification(command, output) {
                self.set_done(command, done);
                self.verified_since_change |= self.changed_since_request;
                let _ = write!(label, " — {outcome}");
            }
        }
        self.actions.push(Action {
            label,
            targets: Vec::new(),
            seen: HashSet::new(),
            more: 0,
            outcome: None,
        });
    }

    fn fail(&mut self, key: &str, label: &str, error: &str) {
        // A later failure replaces what an earlier success of the same command reported.
        if let Some(i) = self
            .done_index
            .get(key)
            .copied()
            .filter(|_| !is_path_key(key))
        {
            self.done[i] = None;
            self.done_index.remove(key);
        }
        self.open_failures
            .entry(key.to_owned())
            .or_default()
            .push(self.failures.len());
        self.failures.push(Failure {
            key: key.to_owned(),
            label: label.to_owned(),
            error: error.to_owned(),
            resolved: false,
        });
    }

    fn succeed(&mut self, key: &str) {
        if let Some(open) = self.open_failures.remove(key) {
            for i in open {
                self.failures[i].resolved = true;
            }
        }
        self.succeeded.insert(key.to_owned());
    }

    fn set_done(&mut self, key: &str, item: String) {
        if let Some(i) = self.done_index.get(key) {
            self.done[*i] = None;
        }
        self.done_index.insert(key.to_owned(), self.done.len());
        self.done.push(Some(item));
    }

    /// A question the assistant asked and the user has not answered, verbatim.
    fn pending_question(&self) -> Option<String> {
        let text = self
            .last_assistant
            .as_deref()
            .filter(|_| self.ends_with_assistant)?;
        let first_q = prose_question_at(text)?;
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

    /// Whether the latest request is visibly done: completion was claimed, or files were
    /// changed and a check passed after the last change with nothing left failing.
    fn request_done(&self) -> bool {
        self.completed_after_request
            || (self.verified_since_change && self.unresolved().next().is_none())
    }

    /// Failures no later success resolved, in order.
    fn unresolved(&self) -> impl Iterator<Item = &Failure> {
        self.failures.iter().filter(|f| !f.resolved)
    }
}

/// Whether a done/failure key names a file (paths) rather than a command.
fn is_path_key(key: &str) -> bool {
    !key.contains(' ') && (key.contains('/') || key.contains('.'))
}

/// The byte offset of the first `?` that ends a prose sentence (not inside code).
fn prose_question_at(text: &str) -> Option<usize> {
    let mut offset = 0;
    let mut in_fence = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && let Some(i) = line.find('?') {
            return Some(offset + i);
        }
        offset += line.len();
    }
    None
}

/// The summary inside a carried `<summary>` block, without the wrapper's lead-in.
fn carried_summary(text: &str) -> &str {
    let Some(start) = text.find("<summary>") else {
        return text;
    };
    let body = &text[start + "<summary>".len()..];
    body.rfind("</summary>")
        .map_or(body, |end| &body[..end])
        .trim()
}

/// A command the agent turned into user text (`Ran `cmd`` then a fenced output and maybe
/// `Command exited with code N`): the command, its output and whether it failed.
fn parse_ran_command(text: &str) -> Option<(String, String, bool)> {
    let rest = text.strip_prefix("Ran `")?;
    let end = rest
        .find("`\n")
        .or_else(|| rest.strip_suffix('`').map(str::len))?;
    let command = rest[..end].to_owned();
    let after = &rest[end + 1..];
    let failed = after.contains("\n\nCommand exited with code ");
    let output = after
        .split_once("```\n")
        .map(|(_, body)| body.rsplit_once("\n```").map_or(body, |(b, _)| b))
        .unwrap_or("");
    Some((command, output.to_owned(), failed))
}

/// The paths of a file-mention reminder (`<file path="…">`).
fn mentioned_paths(text: &str) -> impl Iterator<Item = &str> {
    text.split("<file path=\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(p, _)| p))
}

const CONSTRAINT_CUES: &[&str] = &[
    "always",
    "never",
    "don't",
    "dont",
    "do not",
    "must",
    "mustn't",
    "must not",
    "should",
    "shouldn't",
    "prefer",
    "avoid",
    "make sure",
];
const DECISION_CUES: &[&str] = &[
    "decided",
    "decide to",
    "instead of",
    "i'll use",
    "i will use",
    "we'll use",
    "because",
    "rather than",
    "chose",
    "opted",
    "going with",
    "switched to",
];
const FINDING_CUES: &[&str] = &[
    "found it",
    "the cause",
    "root cause",
    "the problem is",
    "the issue is",
    "the bug is",
    "turns out",
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
    "passes",
    "pass",
    "passed",
    "successfully",
    "resolved",
    "removed",
    "renamed",
    "refactored",
    "the fix is in",
];
const FUTURE_CUES: &[&str] = &[
    "will", "i'll", "let me", "going to", "next", "need to", "should", "plan", "todo", "could",
    "would", "if",
];
const PLAN_CUES: &[&str] = &[
    "next",
    "then",
    "i'll",
    "i will",
    "we'll",
    "we will",
    "going to",
    "todo",
    "remaining",
    "still need",
    "still needs",
    "needs to",
    "after that",
    "afterwards",
    "i plan",
];
/// Words that mark a later request as a change of direction rather than a follow-up.
const DIRECTION_CUES: &[&str] = &[
    "actually",
    "instead",
    "forget",
    "scratch that",
    "never mind",
    "nevermind",
    "change of plan",
    "stop",
    "rather",
    "different approach",
    "new task",
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
    "no such file",
    "permission denied",
    "undefined reference",
    "segmentation fault",
];
/// Words in a command that make it a check worth reporting (tests, builds, linters).
const VERIFY_CUES: &[&str] = &[
    "test", "tests", "pytest", "jest", "vitest", "build", "check", "clippy", "lint", "tsc", "make",
    "compile", "vet", "mypy",
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

/// The first error line of a failed result (else its first non-empty line), plus the next
/// line when it gives the location (`--> src/a.rs:3:5`, `at …`, `File "…"`).
fn error_excerpt(text: &str) -> String {
    let mut lines = text.lines().map(str::trim_end);
    let Some(first) = lines.by_ref().find(|l| looks_like_error(l)).or_else(|| {
        text.lines()
            .map(str::trim_end)
            .find(|l| !l.trim().is_empty())
    }) else {
        return "(no output)".to_owned();
    };
    let first = clip(first.trim(), MAX_ITEM_CHARS);
    let location = text
        .lines()
        .skip_while(|l| l.trim() != first.trim_end_matches('…'))
        .nth(1)
        .map(str::trim_end)
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("--> ") || l.starts_with("at ") || l.starts_with("File \"")
        });
    match location {
        Some(loc) => format!("{first}\n{}", clip(loc, MAX_ITEM_CHARS)),
        None => first,
    }
}

/// For a check (test, build, lint) that succeeded: its Done item and a short outcome,
/// with the pass count when the output reports one.
fn verification(command: &str, output: &str) -> Option<(String, String)> {
    let lower = command.to_lowercase();
    if !VERIFY_CUES.iter().any(|c| contains_word(&lower, c)) {
        return None;
    }
    let tests = ["test", "pytest", "jest", "vitest", "spec"]
        .iter()
        .any(|c| lower.contains(c));
    let verb = if tests { "passed" } else { "succeeded" };
    let outcome = match passed_count(output) {
        Some(n) => format!("{verb}: {n} passed"),
        None => verb.to_owned(),
    };
    let shown = code(&one_line(command, MAX_ITEM_CHARS / 2));
    Some((format!("{shown} {outcome}"), outcome))
}

/// The number of passed tests an output reports: the sum over cargo's `test result:` lines,
/// else the last `N passed` anywhere (pytest, jest).
fn passed_count(output: &str) -> Option<u64> {
    let mut cargo: Option<u64> = None;
    let mut last: Option<u64> = None;
    for line in output.lines() {
        let Some(at) = line.find(" passed") else {
            continue;
        };
        let digits: String = line[..at]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let Ok(n) = digits.parse::<u64>() else {
            continue;
        };
        if line.contains("test result:") {
            cargo = Some(cargo.unwrap_or(0).saturating_add(n));
        }
        last = Some(n);
    }
    cargo.or(last)
}

fn collect_plans(text: &str, out: &mut Items) {
    for sentence in sentences(text) {
        let lower = normalize_quotes(sentence.to_lowercase());
        if !sentence.ends_with('?') && PLAN_CUES.iter().any(|c| contains_word(&lower, c)) {
            out.push(clip_line(sentence));
        }
    }
}

/// The numbered list items of `text` (outside code blocks), except the options of a question
/// (a list right after a line that ends with `?`).
fn collect_numbered(text: &str, out: &mut Items) {
    let mut after_question = false;
    for line in prose_lines(text) {
        let trimmed = line.trim_start();
        let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
        let item = (digits > 0)
            .then(|| &trimmed[digits..])
            .and_then(|rest| rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")));
        match item {
            Some(item) if !after_question => out.push(clip_line(item)),
            Some(_) => {}
            None if trimmed.is_empty() => {}
            None => after_question = trimmed.ends_with('?'),
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

/// Typographic apostrophes as plain ones, so "don’t" matches "don't".
fn normalize_quotes(text: String) -> String {
    if text.contains('\u{2019}') {
        text.replace('\u{2019}', "'")
    } else {
        text
    }
}

/// `text` on one line (whitespace collapsed), clipped to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if out.len() > max * 4 {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    clip(&out, max)
}

/// `text` on one line, clipped to [`MAX_ITEM_CHARS`].
fn clip_line(text: &str) -> String {
    one_line(text, MAX_ITEM_CHARS)
}

/// `text` cut to `max` characters with `…` when longer.
fn clip(text: &str, max: usize) -> String {
    super::error::excerpt(text, max)
}

/// The first line of `text`.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// `text` as inline code, with a fence longer than any backtick run inside it.
fn code(text: &str) -> String {
    if !text.contains('`') {
        return format!("`{text}`");
    }
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest + 1);
    format!("{ticks} {text} {ticks}")
}

/// `text` inside a code fence longer than any backtick run in it, so it stays verbatim.
fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}\n{text}\n{fence}")
}

/// The body of a fenced block (as [`fenced`] writes it), else the trimmed text.
fn unfence(text: &str) -> String {
    let text = text.trim();
    let ticks = text.chars().take_while(|c| *c == '`').count();
    if ticks >= 3 {
        let fence = &text[..ticks];
        if let Some(body) = text[ticks..]
            .strip_prefix('\n')
            .and_then(|b| b.strip_suffix(fence))
        {
            return body.strip_suffix('\n').unwrap_or(body).to_owned();
        }
    }
    text.to_owned()
}

/// The first sentence or two of a request, on one line: what a Goal item needs.
fn condense(request: &str) -> String {
    let mut out = String::new();
    // A leading "Great." or "Thanks!" says nothing about the goal.
    let mut all = sentences(request).peekable();
    while all
        .peek()
        .is_some_and(|s| s.split_whitespace().nth(2).is_none())
    {
        all.next();
    }
    for (i, sentence) in all.enumerate() {
        if i == 2 || (i == 1 && out.len() > MAX_GOAL_CHARS / 2) {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(sentence);
    }
    if out.is_empty() {
        out = request.trim().lines().next().unwrap_or("").to_owned();
    }
    one_line(&out, MAX_GOAL_CHARS)
}

/// Whether a later request turns away from what came before.
fn changes_direction(request: &str) -> bool {
    let first = sentences(request).next().unwrap_or("");
    let lower = normalize_quotes(first.to_lowercase());
    DIRECTION_CUES.iter().any(|c| contains_word(&lower, c))
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

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

// ---------------------------------------------------------------------------------------------
// Building the sections

/// The sections drawn from the messages of this request alone.
fn current_sections(req: &SummaryRequest, facts: &Facts) -> Sections {
    let mut s = Sections::default();
    // Goal: the first request, any change of direction, and the latest request.
    if let Some((first, rest)) = facts.requests.split_first() {
        s.goal.push(condense(first));
        let (latest, middle) = match rest.split_last() {
            Some((latest, middle)) => (Some(latest), middle),
            None => (None, rest),
        };
        for request in middle.iter().filter(|r| changes_direction(r)) {
            s.goal
                .push(format!("Changed direction: {}", condense(request)));
        }
        if let Some(latest) = latest {
            let label = if changes_direction(latest) {
                "Changed direction"
            } else {
                "Latest request"
            };
            s.goal.push(format!("{label}: {}", condense(latest)));
        }
    }
    for constraint in &facts.constraints {
        s.constraints.push(constraint.clone());
    }
    // Done: files changed and checks passed (latest state per file or command), then the
    // assistant's statements of completion.
    for item in facts.done.iter().flatten() {
        s.done.push(item.clone());
    }
    for statement in &facts.statements {
        s.done.push(statement.clone());
    }
    if let Some(latest) = facts.requests.last()
        && !facts.request_done()
    {
        s.in_progress.push(condense(latest));
    }
    for call in &facts.pending_calls {
        s.in_progress.push(format!("{call} {STARTED_NO_RESULT}"));
    }
    for failure in facts.unresolved() {
        s.blocked.push(clip_line(&format!(
            "{} failed: {}",
            failure.label,
            first_line(&failure.error)
        )));
    }
    for decision in &facts.decisions {
        s.decisions.push(decision.clone());
    }
    s.next_steps = next_steps(facts, &s);
    // Critical Context.
    s.critical.question = facts.pending_question();
    s.critical.request = facts
        .requests
        .last()
        .map(|r| clip(r.trim(), MAX_VERBATIM_CHARS));
    for finding in &facts.findings {
        s.critical.findings.push(format!("{FINDING} {finding}"));
    }
    for failure in &facts.failures {
        s.critical.errors.push(error_item(failure));
    }
    let (read, modified) = file_lists(req, facts);
    if !modified.is_empty() {
        s.critical.modified = Some(format!("{FILES_MODIFIED} {}", list_paths(&modified)));
    }
    if !read.is_empty() {
        s.critical.read = Some(format!("{FILES_READ} {}", list_paths(&read)));
    }
    if let Some(custom) = req
        .custom_instructions
        .as_deref()
        .filter(|c| !c.trim().is_empty())
    {
        s.notes
            .push(clip_line(&format!("Requested focus: {custom}")));
    }
    s
}

/// The exact error of a failure, for Critical Context.
fn error_item(failure: &Failure) -> String {
    let state = if failure.resolved {
        " (a later run succeeded)"
    } else {
        ""
    };
    let label = if failure.key == MODEL_KEY {
        "the model request"
    } else {
        failure.label.as_str()
    };
    format!("{ERROR_FROM}{label}{state}:\n{}", fenced(&failure.error))
}

/// Next Steps: the plans in the assistant's last text (when nothing the user said came after
/// it), then the pending question; else where the work stands.
fn next_steps(facts: &Facts, s: &Sections) -> Items {
    let mut steps = Items::new(Keep::Oldest);
    if let Some(last) = facts
        .last_assistant
        .as_deref()
        .filter(|_| facts.ends_with_assistant && !facts.last_text_narrates_calls)
    {
        collect_plans(last, &mut steps);
        collect_numbered(last, &mut steps);
    }
    if let Some(question) = facts.pending_question() {
        let line = question
            .lines()
            .find(|l| l.contains('?'))
            .unwrap_or(&question);
        steps.push(clip_line(&format!("{ANSWER_QUESTION} {}", line.trim())));
    }
    if steps.is_empty() {
        if let Some(request) = s.in_progress.iter().next() {
            steps.push(clip_line(&format!("Continue with: {request}")));
        }
        if let Some(blocked) = s.blocked.iter().next_back() {
            steps.push(clip_line(&format!("Resolve: {blocked}")));
        }
    }
    steps
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

/// Merges the sections of a later span (`new`, with its `facts`) into those of the summary so
/// far, item by item.
fn merge(old: &Sections, new: &Sections, facts: &Facts) -> Sections {
    let mut out = Sections::default();
    out.goal.extend(old.goal.iter());
    out.goal.extend(new.goal.iter());
    out.constraints.extend(old.constraints.iter());
    out.constraints.extend(new.constraints.iter());

    // Work left in progress is done when the new span claims completion before the user asked
    // for anything else; a call that was started has its result in the new span.
    let mut finished = Vec::new();
    let mut in_progress = Items::new(Keep::Newest);
    for item in old.in_progress.iter() {
        if item.ends_with(STARTED_NO_RESULT) {
            continue;
        }
        let still_asked = new.in_progress.contains(item);
        if !still_asked && (facts.completed_before_request || new.done.contains(item)) {
            finished.push(item.clone());
        } else {
            in_progress.push(item.clone());
        }
    }
    in_progress.extend(new.in_progress.iter().filter(|i| !new.done.contains(i)));
    out.in_progress = in_progress;
    out.done.extend(old.done.iter());
    out.done.extend(finished.iter());
    out.done.extend(new.done.iter());

    // A failure is no longer blocking once the same command or file succeeded.
    let resolved = |item: &str| first_code_span(item).is_some_and(|k| facts.succeeded.contains(k));
    out.blocked = old.blocked.filtered(resolved);
    out.blocked.extend(new.blocked.iter());
    out.decisions.extend(old.decisions.iter());
    out.decisions.extend(new.decisions.iter());

    let answered = !facts.requests.is_empty();
    out.next_steps = if new.next_steps.is_empty() {
        old.next_steps
            .filtered(|s| answered && s.starts_with(ANSWER_QUESTION))
    } else {
        new.next_steps.clone()
    };

    let critical = &mut out.critical;
    critical.question = new
        .critical
        .question
        .clone()
        .or_else(|| old.critical.question.clone().filter(|_| !answered));
    critical.request = new
        .critical
        .request
        .clone()
        .or_else(|| old.critical.request.clone());
    critical.findings.extend(old.critical.findings.iter());
    critical.findings.extend(new.critical.findings.iter());
    critical
        .errors
        .extend(old.critical.errors.iter().filter(|e| !resolved(e)));
    critical.errors.extend(new.critical.errors.iter());
    critical.modified = new
        .critical
        .modified
        .clone()
        .or_else(|| old.critical.modified.clone());
    critical.read = new
        .critical
        .read
        .clone()
        .or_else(|| old.critical.read.clone());
    critical.other.extend(old.critical.other.iter());
    critical.other.extend(new.critical.other.iter());

    out.notes.extend(old.notes.iter());
    out.notes.extend(new.notes.iter());
    out
}

// ---------------------------------------------------------------------------------------------
// Layouts

fn push_list<'a>(
    out: &mut String,
    heading: &str,
    items: impl IntoIterator<Item = &'a String>,
    marker: &str,
) {
    let _ = writeln!(out, "{heading}");
    for (i, item) in items.into_iter().enumerate() {
        if marker == "1." {
            let _ = writeln!(out, "{}. {item}", i + 1);
        } else {
            let _ = writeln!(out, "{marker}{item}");
        }
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
    if !s.done.is_empty() {
        push_list(out, "### Done", s.done.iter(), "- [x] ");
    }
    if !s.in_progress.is_empty() {
        push_list(out, "### In Progress", s.in_progress.iter(), "- [ ] ");
    }
    if !s.blocked.is_empty() {
        push_list(out, "### Blocked", s.blocked.iter(), "- ");
    }
    out.push('\n');
}

/// Renders sections; `none` writes "(none)" under the headings the branch prompt always has.
fn render(s: &Sections, with_notes: bool, none: bool) -> String {
    let mut out = String::new();
    let section = |out: &mut String, heading: &str, items: &Items, marker: &str, always: bool| {
        if !items.is_empty() {
            push_list(out, heading, items.iter(), marker);
            out.push('\n');
        } else if always {
            let _ = writeln!(out, "{heading}\n(none)\n");
        }
    };
    if s.goal.is_empty() && !none {
        out.push_str("## Goal\n- (no user request in the summarised messages)\n\n");
    } else {
        section(&mut out, "## Goal", &s.goal, "- ", none);
    }
    section(
        &mut out,
        "## Constraints & Preferences",
        &s.constraints,
        "- ",
        none,
    );
    render_progress(&mut out, s, none);
    section(&mut out, "## Key Decisions", &s.decisions, "- ", false);
    section(&mut out, "## Next Steps", &s.next_steps, "1.", false);
    section(
        &mut out,
        "## Critical Context",
        &s.critical.items(),
        "- ",
        false,
    );
    if with_notes {
        section(&mut out, "## Additional Notes", &s.notes, "- ", false);
    }
    out.trim_end().to_owned()
}

fn history(req: &SummaryRequest, facts: &Facts) -> String {
    let mut merged = Sections::default();
    let previous = facts
        .carried
        .iter()
        .map(String::as_str)
        .chain(req.previous_summary.as_deref());
    for text in previous {
        let parsed = Sections::parse(text);
        merged = merge(&merged, &parsed, &Facts::default());
    }
    let new = current_sections(req, facts);
    let mut out = merge(&merged, &new, facts);
    out.notes.push(EXTRACTIVE_NOTE.to_owned());
    render(&out, true, false)
}

fn branch(req: &SummaryRequest, facts: &Facts) -> String {
    let mut s = current_sections(req, facts);
    // The branch prompt has no Critical Context beyond the question, files and errors.
    s.critical.request = None;
    render(&s, false, true)
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

    // Early Progress: what was done, by tool and target, never the tools' output.
    let mut progress: Vec<String> = Vec::new();
    let shown = |a: &Action| {
        let mut line = a.label.clone();
        if !a.targets.is_empty() {
            let mut targets = a.targets.clone();
            if a.more > 0 {
                targets.push(format!("{} more", a.more));
            }
            let _ = write!(line, " {}", targets.join(", "));
        }
        if let Some(outcome) = &a.outcome {
            let _ = write!(line, " — {outcome}");
        }
        clip_line(&line)
    };
    let total = facts.actions.len();
    if total > MAX_ACTIONS_HEAD + MAX_ACTIONS_TAIL {
        progress.extend(facts.actions[..MAX_ACTIONS_HEAD].iter().map(shown));
        progress.push(format!(
            "… {} more steps …",
            total - MAX_ACTIONS_HEAD - MAX_ACTIONS_TAIL
        ));
        progress.extend(facts.actions[total - MAX_ACTIONS_TAIL..].iter().map(shown));
    } else {
        progress.extend(facts.actions.iter().map(shown));
    }
    let mut statements = Items::new(Keep::Newest);
    statements.extend(facts.statements.iter());
    progress.extend(statements.iter().cloned());
    if !progress.is_empty() {
        push_list(&mut out, "## Early Progress", progress.iter(), "- ");
        out.push('\n');
    }

    // Context for Suffix: what the kept part builds on.
    let mut context = Items::with_cap(Keep::Newest, 2 * MAX_ITEMS);
    let modified: Vec<String> = facts.modified.iter().cloned().collect();
    let read: Vec<String> = facts.read.iter().cloned().collect();
    if !modified.is_empty() {
        context.push(format!("{FILES_MODIFIED} {}", list_paths(&modified)));
    }
    if !read.is_empty() {
        context.push(format!("{FILES_READ} {}", list_paths(&read)));
    }
    if modified.is_empty() && read.is_empty() {
        let (read, modified) = file_lists(req, facts);
        if !modified.is_empty() {
            context.push(format!("{FILES_MODIFIED} {}", list_paths(&modified)));
        }
        if !read.is_empty() {
            context.push(format!("{FILES_READ} {}", list_paths(&read)));
        }
    }
    for finding in facts.findings.iter().rev().take(MAX_FINDINGS).rev() {
        context.push(format!("{FINDING} {finding}"));
    }
    for decision in facts.decisions.iter().rev().take(MAX_ITEMS / 2).rev() {
        context.push(format!("Decision: {decision}"));
    }
    for failure in facts.unresolved() {
        context.push(clip_line(&format!(
            "Still failing: {}: {}",
            failure.label,
            first_line(&failure.error)
        )));
    }
    for call in &facts.pending_calls {
        context.push(format!(
            "{call} was started; its result is in the kept part"
        ));
    }
    if let Some(last) = &facts.last_assistant {
        context.push(clip_line(&format!("Last assistant note: {last}")));
    }
    if !context.is_empty() {
        push_list(&mut out, "## Context for Suffix", context.iter(), "- ");
    }
    out.trim_end().to_owned()
}

/// A first-person clause about how a change was made, from a decision sentence:
/// "I decided to widen X, so Y." → "to widen X".
fn decision_clause(decision: &str) -> Option<String> {
    let lower = decision.to_lowercase();
    let (at, prefix) = [
        ("decided to ", "to "),
        ("decide to ", "to "),
        ("chose to ", "to "),
        ("opted to ", "to "),
        ("i'll use ", "to use "),
        ("i will use ", "to use "),
        ("we'll use ", "to use "),
        ("going with ", "to use "),
        ("switched to ", "to use "),
    ]
    .iter()
    .find_map(|(cue, prefix)| lower.find(cue).map(|i| (i + cue.len(), *prefix)))?;
    let rest = &decision[at..];
    let end = [", so ", ", because", " because ", ", which", "; ", ". "]
        .iter()
        .filter_map(|stop| rest.find(stop))
        .min()
        .unwrap_or(rest.len());
    let clause = rest[..end].trim().trim_end_matches(['.', '!', ',']);
    (!clause.is_empty()).then(|| one_line(&format!("{prefix}{clause}"), 160))
}

/// A sentence ending in one full stop, clipped.
fn sentence(text: &str) -> String {
    let text = one_line(text, MAX_SHORT_SENTENCE_CHARS);
    let text = text.trim_end_matches(['.', '!', ',', ';', ':', ' ']);
    format!("{text}.")
}

/// Two or three first-person sentences about what changed: the files changed and added, and
/// how (from the decisions), never how the work went.
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
    // New files: written whole here, or reported as created by the summary.
    let mut created: HashSet<String> = facts.created.clone().into_iter().collect();
    for item in summary.done.iter() {
        if (item.starts_with("Created `") || item.ends_with(NEW_FILE))
            && let Some(path) = first_code_span(item)
        {
            created.insert(path.to_owned());
        }
    }
    let shown = |paths: &[&String]| {
        let mut names: Vec<String> = paths.iter().take(3).map(|p| format!("`{p}`")).collect();
        if paths.len() > 3 {
            names.push(format!("{} other files", paths.len() - 3));
        }
        and_list(&names)
    };
    let changed: Vec<&String> = modified.iter().filter(|p| !created.contains(*p)).collect();
    let added: Vec<&String> = modified.iter().filter(|p| created.contains(*p)).collect();

    // Decisions, latest first: those of the kept messages, then the summary's.
    let decisions: Vec<&String> = facts
        .decisions
        .iter()
        .rev()
        .chain(summary.decisions.iter().rev())
        .collect();
    let clause = decisions
        .iter()
        .enumerate()
        .find_map(|(i, d)| decision_clause(d).map(|c| (i, c)));

    let mut out = Vec::new();
    let how = clause
        .as_ref()
        .map(|(_, c)| format!(" {c}"))
        .unwrap_or_default();
    match (changed.is_empty(), added.is_empty()) {
        (false, false) => out.push(sentence(&format!(
            "I changed {}{how}; added {}",
            shown(&changed),
            shown(&added)
        ))),
        (false, true) => out.push(sentence(&format!("I changed {}{how}", shown(&changed)))),
        (true, false) => out.push(sentence(&format!("I added {}{how}", shown(&added)))),
        (true, true) => out.push("I made no changes to files.".to_owned()),
    }
    // Another decision or a statement of what was changed, in the assistant's own first
    // person; never a report of reading, running or checking.
    let used = clause.map(|(i, _)| dedupe_key(decisions[i]));
    let first_person = |s: &&String| {
        let lower = s.to_lowercase();
        (lower.starts_with("i ") || lower.starts_with("i've ") || lower.starts_with("we "))
            && ![" ran ", " run ", " read ", " look", " check", " test"]
                .iter()
                .any(|w| lower.contains(w))
    };
    let extra = decisions
        .iter()
        .copied()
        .filter(|d| used.as_deref() != Some(dedupe_key(d).as_str()))
        .chain(facts.statements.iter().rev())
        .chain(summary.done.iter().rev())
        .find(first_person);
    if let Some(extra) = extra {
        out.push(sentence(extra));
    }
    // Why: the cause the assistant found.
    let finding = facts.findings.last().map(String::as_str).or_else(|| {
        summary
            .critical
            .findings
            .iter()
            .next_back()
            .map(|f| f.trim_start_matches(FINDING).trim())
    });
    if let Some(finding) = finding {
        out.push(sentence(&cause_sentence(finding)));
    }
    if out.len() < 2 {
        let goal = summary
            .goal
            .iter()
            .next()
            .cloned()
            .or_else(|| facts.requests.first().map(|r| condense(r)));
        if let Some(goal) = goal {
            let goal = sentences(&goal).next().unwrap_or_default().to_owned();
            out.push(sentence(&format!("I worked toward this goal: {goal}")));
        }
    }
    out.truncate(3);
    out.join(" ")
}

/// A finding as the cause of the change: "Found it: X" → "The cause: X".
fn cause_sentence(finding: &str) -> String {
    let lower = finding.to_lowercase();
    for lead in [
        "found it:",
        "found it.",
        "found it",
        "turns out",
        "it turns out",
    ] {
        if lower.starts_with(lead) {
            let rest = finding.get(lead.len()..).unwrap_or(finding);
            let rest = rest.trim_start_matches([':', ',', ' ']);
            return format!("The cause: {rest}");
        }
    }
    finding.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Session;
    use crate::session::context::{build_session_context, convert_to_llm};
    use serde_json::json;

    fn msg(value: Value) -> AgentMessage {
        AgentMessage::from_value(value).expect("valid message")
    }

    fn user(text: &str) -> AgentMessage {
        msg(json!({"role": "user", "content": text}))
    }

    fn assistant(text: &str, calls: Value) -> AgentMessage {
        let mut content = vec![json!({"type": "text", "text": text})];
        if let Value::Array(calls) = calls {
            content.extend(calls);
        }
        msg(json!({"role": "assistant", "content": content}))
    }

    fn call(id: &str, name: &str, args: Value) -> Value {
        json!({"type": "toolCall", "id": id, "name": name, "arguments": args})
    }

    fn result(id: &str, name: &str, text: &str, is_error: bool) -> AgentMessage {
        msg(
            json!({"role": "toolResult", "toolCallId": id, "toolName": name,
                   "content": [{"type": "text", "text": text}], "isError": is_error}),
        )
    }

    fn request(purpose: Purpose, messages: Vec<AgentMessage>) -> SummaryRequest {
        let mut req = SummaryRequest::new(purpose, "", "", 1_000);
        req.messages = messages;
        req
    }

    /// The demo session's messages, as the engine hands them to a summarizer.
    fn demo() -> Vec<AgentMessage> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo-session.jsonl");
        let (session, _) = Session::open(path).expect("the demo session loads");
        let ctx = build_session_context(session.entries(), session.leaf_id());
        convert_to_llm(&ctx.messages)
    }

    /// The lines of `section` (a `## ` heading) in `text`.
    fn section<'a>(text: &'a str, heading: &str) -> &'a str {
        let start = text
            .find(heading)
            .unwrap_or_else(|| panic!("{heading} missing in:\n{text}"));
        let body = &text[start + heading.len()..];
        let end = body.find("\n## ").unwrap_or(body.len());
        &body[..end]
    }

    #[test]
    fn bullets_and_keys() {
        assert_eq!(strip_bullet("- [x] Fixed it"), Some("Fixed it"));
        assert_eq!(strip_bullet("12. Run it"), Some("Run it"));
        assert_eq!(strip_bullet("plain"), None);
        assert_eq!(dedupe_key("**Fixed** `a.rs`."), dedupe_key("fixed a.rs"));
        assert_eq!(
            first_code_span("`cargo test` failed: x"),
            Some("cargo test")
        );
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
        assert_eq!(unfence(&fenced("x ```` y")), "x ```` y");
        assert_eq!(code("a`b"), "`` a`b ``");
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
            s.critical.other.iter().collect::<Vec<_>>(),
            ["Q:\n```\n- not a bullet\n```", "Other"]
        );
        assert!(s.notes.is_empty());
    }

    #[test]
    fn condense_keeps_the_first_sentence_or_two() {
        assert_eq!(
            condense("Fix the bug. Then add tests. Also update docs."),
            "Fix the bug. Then add tests."
        );
        assert!(condense(&"word ".repeat(200)).chars().count() <= MAX_GOAL_CHARS + 1);
    }

    #[test]
    fn pass_counts_sum_cargo_binaries_or_take_the_last_report() {
        let cargo = "test result: ok. 48 passed; 0 failed\n\ntest result: ok. 2 passed; 0 failed";
        assert_eq!(passed_count(cargo), Some(50));
        assert_eq!(
            passed_count("==== 7 passed, 1 warning in 0.2s ===="),
            Some(7)
        );
        assert_eq!(passed_count("all good"), None);
        assert_eq!(
            verification("cargo test", cargo).map(|v| v.0),
            Some("`cargo test` passed: 50 passed".to_owned())
        );
        assert_eq!(verification("ls -la", "x"), None);
    }

    #[test]
    fn demo_history_summary_is_resumable() {
        let text = ExtractiveSummarizer.summarize_text(&request(Purpose::History, demo()));
        let goal = section(&text, "## Goal");
        assert!(
            goal.contains("'attempt to subtract with overflow'"),
            "{text}"
        );
        assert!(
            goal.contains("Latest request: Also add a regression test"),
            "{text}"
        );
        let constraints = section(&text, "## Constraints & Preferences");
        assert!(
            constraints.contains("never use unwrap() in library code"),
            "{text}"
        );
        let progress = section(&text, "## Progress");
        assert!(
            progress.contains("- [x] Modified `src/posting.rs`"),
            "{text}"
        );
        assert!(
            progress.contains("- [x] Modified `src/report.rs`"),
            "{text}"
        );
        assert!(
            progress.contains("- [x] Created `tests/overflow.rs`"),
            "{text}"
        );
        assert!(
            progress.contains("- [x] `cargo test` passed: 48 passed"),
            "{text}"
        );
        assert!(
            progress.contains("- [x] `cargo test --test overflow` passed: 1 passed"),
            "{text}"
        );
        // The failed `cargo test` later passed: it is not blocking, and the request is done.
        assert!(!progress.contains("### Blocked"), "{text}");
        assert!(!progress.contains("### In Progress"), "{text}");
        let decisions = section(&text, "## Key Decisions");
        assert!(
            decisions.contains("widen the accumulator to i128"),
            "{text}"
        );
        let next = section(&text, "## Next Steps");
        assert!(next.contains("harden the CSV importer"), "{text}");
        assert!(next.contains("Get the user's answer to: Should I change the CSV importer"));
        let critical = section(&text, "## Critical Context");
        let question = "Should I change the CSV importer to parse amounts as i64 as well, or \
                        leave it as it is for this change?";
        assert!(
            critical.contains(&format!("{PENDING_QUESTION}\n```\n{question}\n```")),
            "{text}"
        );
        assert!(critical.contains("error[E0308]: mismatched types\n  --> src/report.rs:88:24"));
        assert!(
            critical.contains("Finding: Found it: `Posting::cents`"),
            "{text}"
        );
        assert!(
            critical
                .contains("Files modified: `src/posting.rs`, `src/report.rs`, `tests/overflow.rs`")
        );
        assert!(critical.contains("`src/import/csv_4.rs`"), "{text}");
        // Nothing from the bodies of tool results: no code, no grep hits.
        for line in text.lines() {
            for banned in ["checked_mul", "fn ", "let cents", "BTreeMap", "case_0"] {
                assert!(!line.contains(banned), "{banned:?} in {line:?}:\n{text}");
            }
        }
        assert!(text.len() < 6_000, "{}", text.len());
    }

    #[test]
    fn demo_turn_prefix_lists_actions_not_outputs() {
        let messages = demo();
        // The first turn up to the failed test run, as a split turn's prefix would be.
        let cut = messages
            .iter()
            .position(|m| matches!(m, AgentMessage::ToolResult(t) if t.is_error))
            .expect("the demo has a failed run")
            + 1;
        let text = ExtractiveSummarizer
            .summarize_text(&request(Purpose::TurnPrefix, messages[..cut].to_vec()));
        assert!(
            text.starts_with("## Original Request\n```\nThe `ledger balance` command panics"),
            "{text}"
        );
        let progress = section(&text, "## Early Progress");
        assert!(
            progress
                .contains("- read `src/ledger.rs`, `src/commands/balance.rs`, `src/accounts.rs`"),
            "{text}"
        );
        assert!(progress.contains("- grep `as i32` in `src`\n"), "{text}");
        assert!(progress.contains("- edit `src/posting.rs`\n"), "{text}");
        assert!(
            progress.contains("- `cargo test` — failed: error[E0308]: mismatched types"),
            "{text}"
        );
        let context = section(&text, "## Context for Suffix");
        assert!(
            context.contains("Files modified: `src/posting.rs`"),
            "{text}"
        );
        assert!(
            context.contains("Decision: I decided to widen the accumulator"),
            "{text}"
        );
        assert!(context.contains("Still failing: `cargo test`"), "{text}");
        assert!(
            context.contains("Last assistant note: Now I'll run the tests."),
            "{text}"
        );
        for line in text.lines() {
            assert!(
                !line.contains("checked_mul") && !line.contains("fn "),
                "{line}"
            );
        }
    }

    #[test]
    fn demo_short_summary_names_the_changes() {
        let messages = demo();
        let mut req = request(Purpose::History, messages.clone());
        let summary = ExtractiveSummarizer.summarize_text(&req);
        req.purpose = Purpose::Short;
        req.previous_summary = Some(summary);
        let short = ExtractiveSummarizer.summarize_text(&req);
        assert_eq!(
            short,
            "I changed `src/posting.rs` and `src/report.rs` to widen the accumulator to i128 and \
             use checked arithmetic instead of narrowing; added `tests/overflow.rs`. \
             The cause: `Posting::cents` is stored as i64 but `sum_postings` narrows to i32 with \
             `as i32` before subtracting."
        );
    }

    #[test]
    fn update_merges_item_wise() {
        // First span: a request, an edit, a failing run.
        let first = vec![
            user("Add caching to src/db.rs. Always keep the cache bounded."),
            assistant(
                "I'll edit the module.",
                json!([call("1", "edit", json!({"path": "src/db.rs"}))]),
            ),
            result("1", "edit", "ok", false),
            assistant(
                "Running the tests.",
                json!([call("2", "bash", json!({"command": "cargo test"}))]),
            ),
            result("2", "bash", "error: linking failed", true),
        ];
        let summary = ExtractiveSummarizer.summarize_text(&request(Purpose::History, first));
        assert!(
            summary.contains("- [ ] Add caching to src/db.rs."),
            "{summary}"
        );
        assert!(
            summary.contains("- `cargo test` failed: error: linking failed"),
            "{summary}"
        );

        // Second span: the run passes and the assistant reports completion, then a new ask.
        let second = vec![
            assistant(
                "Retrying.",
                json!([call("3", "bash", json!({"command": "cargo test"}))]),
            ),
            result("3", "bash", "test result: ok. 9 passed; 0 failed", false),
            assistant("The cache is done and the tests pass.", json!([])),
            user("Now document it in README.md. Never mention internal names."),
        ];
        let mut req = request(Purpose::History, second);
        req.previous_summary = Some(summary.clone());
        let updated = ExtractiveSummarizer.summarize_text(&req);
        let progress = section(&updated, "## Progress");
        assert!(progress.contains("- [x] Modified `src/db.rs`"), "{updated}");
        assert!(
            progress.contains("- [x] Add caching to src/db.rs."),
            "moved: {updated}"
        );
        assert!(
            progress.contains("- [x] `cargo test` passed: 9 passed"),
            "{updated}"
        );
        assert!(
            progress.contains("- [ ] Now document it in README.md."),
            "{updated}"
        );
        assert!(!progress.contains("### Blocked"), "resolved: {updated}");
        let constraints = section(&updated, "## Constraints & Preferences");
        assert!(
            constraints.contains("Always keep the cache bounded."),
            "{updated}"
        );
        assert!(
            constraints.contains("Never mention internal names."),
            "{updated}"
        );
        let goal = section(&updated, "## Goal");
        assert!(
            goal.starts_with("\n- Add caching to src/db.rs."),
            "{updated}"
        );
        assert!(goal.contains("Now document it in README.md."), "{updated}");
        // The resolved error leaves Critical Context; the new request replaces the old.
        let critical = section(&updated, "## Critical Context");
        assert!(!critical.contains("linking failed"), "{updated}");
        assert_eq!(updated.matches(LATEST_REQUEST).count(), 1, "{updated}");
        assert!(
            critical.contains("Now document it in README.md."),
            "{updated}"
        );
        // Merging the same span again changes nothing.
        req.previous_summary = Some(updated.clone());
        assert_eq!(ExtractiveSummarizer.summarize_text(&req), updated);
    }

    #[test]
    fn a_passing_check_after_changes_finishes_the_request() {
        let messages = demo();
        // The first turn ends with the second `cargo test`, which passes; nobody says "done".
        let second_user = messages
            .iter()
            .rposition(|m| matches!(m, AgentMessage::User(_)))
            .expect("the demo has two requests");
        let text = ExtractiveSummarizer
            .summarize_text(&request(Purpose::History, messages[..second_user].to_vec()));
        assert!(!text.contains("### In Progress"), "{text}");
        assert!(!text.contains("### Blocked"), "{text}");
        // "I'll convert at the boundary" narrated an edit that was made: not a next step.
        assert!(!text.contains("## Next Steps"), "{text}");
        assert!(
            text.contains("- [x] `cargo test` passed: 48 passed"),
            "{text}"
        );
    }

    #[test]
    fn a_turn_prefix_reads_back_item_wise() {
        let messages = vec![
            user("Add a CLI flag. Never break the config format."),
            assistant(
                "I decided to use clap instead of hand parsing.",
                json!([
                    call("1", "read", json!({"path": "src/main.rs"})),
                    call(
                        "2",
                        "write",
                        json!({"path": "src/flags.rs", "content": "fn x() {}"})
                    ),
                    call("3", "bash", json!({"command": "cargo build"})),
                ]),
            ),
            result("1", "read", "fn main() { let x = 1; }", false),
            result("2", "write", "Wrote src/flags.rs", false),
            result("3", "bash", "error[E0432]: unresolved import `clap`", true),
        ];
        let prefix = ExtractiveSummarizer.summarize_text(&request(Purpose::TurnPrefix, messages));
        assert!(
            prefix.contains("- write `src/flags.rs` (new file)\n"),
            "{prefix}"
        );
        assert!(!prefix.contains("fn main"), "{prefix}");
        let parsed = Sections::parse(&prefix);
        assert_eq!(
            parsed.goal.iter().collect::<Vec<_>>(),
            ["Add a CLI flag. Never break the config format."]
        );
        assert_eq!(
            parsed.done.iter().collect::<Vec<_>>(),
            ["write `src/flags.rs` (new file)"],
            "look-ups are not progress"
        );
        assert_eq!(
            parsed.blocked.iter().collect::<Vec<_>>(),
            ["`cargo build` failed: error[E0432]: unresolved import `clap`"]
        );
        assert_eq!(
            parsed.decisions.iter().collect::<Vec<_>>(),
            ["I decided to use clap instead of hand parsing."]
        );

        // The short summary knows the file is new from the prefix alone.
        let mut short = request(Purpose::Short, vec![]);
        short.previous_summary = Some(format!("No prior history.\n\n---\n\n{prefix}"));
        short.modified_files = vec!["src/flags.rs".into(), "src/main.rs".into()];
        let text = ExtractiveSummarizer.summarize_text(&short);
        assert!(
            text.starts_with(
                "I changed `src/main.rs` to use clap instead of hand parsing; added `src/flags.rs`."
            ),
            "{text}"
        );
    }

    #[test]
    fn carried_summary_wrapper_is_not_a_note() {
        let carried =
            user("Another model worked on this.\n\n<summary>\n## Goal\n- Ship it\n</summary>");
        let text = ExtractiveSummarizer.summarize_text(&request(Purpose::History, vec![carried]));
        assert!(text.contains("## Goal\n- Ship it"), "{text}");
        assert!(!text.contains("Another model"), "{text}");
    }

    #[test]
    fn user_run_commands_are_actions_not_requests() {
        let messages = vec![
            user("Fix the build."),
            user(
                "Ran `cargo build`\n```\nerror[E0425]: cannot find value `x`\n```\n\nCommand exited with code 101",
            ),
        ];
        let text = ExtractiveSummarizer.summarize_text(&request(Purpose::History, messages));
        assert!(!text.contains("Latest request: Ran"), "{text}");
        assert!(
            text.contains("- `cargo build` failed: error[E0425]: cannot find value `x`"),
            "{text}"
        );
    }
}
