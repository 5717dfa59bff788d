//! The progress ledger (DESIGN §8, "derive, don't ask"): where the agent stands, computed from
//! the branch itself, byte for byte the same for the same session. The user's requests and
//! their state, every file read and modified, failed commands and whether a later run of the
//! same command succeeded, the client's pins, and the assistant's latest stated plan.
//!
//! Each compaction stores the ledger of the path before it in `details.ledger`; deriving the
//! ledger of a path starts from the newest compaction's snapshot and walks only the entries
//! after it, so the ledger is extended from one compaction to the next, never re-read from a
//! summary, and costs no more than planning (which reads those entries anyway). A compaction
//! without a snapshot (the reference's, an older compactd's) starts the ledger afresh from its
//! `readFiles` / `modifiedFiles` and its kept region. The rendering for the context
//! ([`render_block`]) is a fixed block appended to the compaction summary, within a budget.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::compaction::facts::{
    Outcome, call_command, error_line, execution_outcome, prose_sentences, starts_with_words,
    tool_outcome,
};
use crate::session::message::{ToolCall, join_text};
use crate::session::{AgentMessage, Entry, EntryKind};
use crate::tokens::TokenCounter;

/// `customType` of a pin entry: `data: {text}`; the pin's id is the entry's id.
pub const PIN_CUSTOM_TYPE: &str = "compactd.pin";
/// `customType` of an unpin entry: `data: {pinId}`.
pub const UNPIN_CUSTOM_TYPE: &str = "compactd.unpin";
/// The key of the ledger snapshot in a compaction's `details`.
pub const DETAILS_KEY: &str = "ledger";
/// The tags of the block rendered into the summary.
pub const BLOCK_OPEN: &str = "<progress-ledger>";
pub const BLOCK_CLOSE: &str = "</progress-ledger>";
/// Longest one-line rendering of an earlier request, an error line or the next step.
pub const MAX_LINE_CHARS: usize = 200;
/// Resolved errors kept in the ledger (the latest); unresolved ones are all kept.
pub const MAX_RESOLVED_ERRORS: usize = 20;

/// Where the agent stands on a branch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// Every user request on the branch, oldest first.
    pub requests: Vec<LedgerRequest>,
    pub files: LedgerFiles,
    /// Failed commands and tool calls, oldest first; one per command (the latest failure).
    pub errors: Vec<LedgerError>,
    /// Pinned facts, in pinning order.
    pub pins: Vec<LedgerPin>,
    /// The latest plan the assistant stated since the last request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_step: Option<String>,
}

/// One user request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerRequest {
    pub entry_id: String,
    /// Verbatim for the current request, one line for the others.
    pub text: String,
    pub status: RequestStatus,
}

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RequestStatus {
    /// The newest request, still being worked on.
    Current,
    /// The assistant ended its turn with an answer after it.
    Answered,
    /// A newer request came before the assistant answered it.
    Superseded,
}

impl RequestStatus {
    pub fn name(self) -> &'static str {
        match self {
            RequestStatus::Current => "current",
            RequestStatus::Answered => "answered",
            RequestStatus::Superseded => "superseded",
        }
    }
}

/// Files read and modified, each with its last operation, sorted by path. A file that was
/// ever written or edited is in `modified` only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerFiles {
    pub read: Vec<LedgerFile>,
    pub modified: Vec<LedgerFile>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerFile {
    pub path: String,
    pub last_op: FileOp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FileOp {
    Read,
    Write,
    Edit,
}

impl FileOp {
    pub fn name(self) -> &'static str {
        match self {
            FileOp::Read => "read",
            FileOp::Write => "write",
            FileOp::Edit => "edit",
        }
    }
}

/// A failed command or tool call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerError {
    /// The failing tool result or command entry.
    pub entry_id: String,
    /// What failed: `bash: cargo build`, `edit: src/a.rs`, `read`.
    pub command: String,
    /// The key error line.
    pub text: String,
    /// A later run of the same command succeeded.
    pub resolved: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerPin {
    pub pin_id: String,
    pub text: String,
}

impl Ledger {
    /// The ledger of `path` (root to leaf), extended from the newest compaction on it: from
    /// its snapshot when it has one; else from its file lists and its kept region, which is
    /// what planning a compaction reads anyway (the requests and errors before a compaction
    /// without a ledger, the reference's, are in its summary). No compaction: the whole path.
    pub fn derive(path: &[&Entry]) -> Ledger {
        let newest = path.iter().enumerate().rev().find_map(|(i, e)| {
            match (e.type_name() == "compaction").then(|| e.kind()) {
                Some(EntryKind::Compaction(c)) => Some((i, c)),
                _ => None,
            }
        });
        let mut walk = Walk::default();
        let from = match newest {
            None => 0,
            Some((i, c)) => match c.details.as_ref().and_then(Ledger::from_details) {
                Some(snapshot) => {
                    walk.load(snapshot);
                    i + 1
                }
                None => path[..i]
                    .iter()
                    .position(|e| e.id == c.first_kept_entry_id)
                    .unwrap_or(i),
            },
        };
        // Entries parsed for the walk stay parsed only while that is a few MB of lines; on a
        // longer path each is parsed for its look and dropped (issue 35 item 7: keeping a
        // million parsed bodies costs about ten times the file).
        let rest = &path[from..];
        if Entry::worth_keeping_parsed(rest) {
            rest.iter().for_each(|e| walk.entry(e));
        } else {
            rest.iter().for_each(|e| walk.entry(&e.peek()));
        }
        walk.finish()
    }

    /// The ledger stored in a compaction's `details`, if it has one.
    pub fn from_details(details: &Value) -> Option<Ledger> {
        serde_json::from_value(details.get(DETAILS_KEY)?.clone()).ok()
    }

    /// The current request, if one is being worked on.
    pub fn current_request(&self) -> Option<&LedgerRequest> {
        self.requests
            .iter()
            .rfind(|r| r.status == RequestStatus::Current)
    }
}

/// Stores `ledger` in `details` (an object; other values are left alone).
pub fn record_in_details(details: &mut Value, ledger: &Ledger) {
    if let (Value::Object(map), Ok(value)) = (details, serde_json::to_value(ledger)) {
        map.insert(DETAILS_KEY.to_owned(), value);
    }
}

/// The walk over entries: the ledger being built and what it needs to extend it.
#[derive(Default)]
struct Walk {
    ledger: Ledger,
    files: BTreeMap<String, (FileOp, bool)>,
    /// Tool call id → what it ran (the error key, and the shell command if any), for the
    /// results that follow.
    calls: HashMap<String, (String, Option<String>)>,
}

impl Walk {
    fn load(&mut self, ledger: Ledger) {
        for f in &ledger.files.read {
            self.files.insert(f.path.clone(), (f.last_op, false));
        }
        for f in &ledger.files.modified {
            self.files.insert(f.path.clone(), (f.last_op, true));
        }
        self.ledger = ledger;
    }

    fn entry(&mut self, entry: &Entry) {
        match entry.kind() {
            EntryKind::Message(m) => self.message(&entry.id, m),
            EntryKind::Compaction(c) if c.from_extension != Some(true) => {
                if let Some(d) = &c.details {
                    self.file_lists(d);
                }
            }
            EntryKind::BranchSummary(b) if b.from_extension != Some(true) => {
                if let Some(d) = &b.details {
                    self.file_lists(d);
                }
            }
            EntryKind::Custom { custom_type, data } => self.custom(&entry.id, custom_type, data),
            _ => {}
        }
    }

    fn file_lists(&mut self, details: &Value) {
        for (key, op) in [("readFiles", FileOp::Read), ("modifiedFiles", FileOp::Edit)] {
            let paths = details.get(key).and_then(Value::as_array);
            for path in paths.into_iter().flatten().filter_map(Value::as_str) {
                self.file(path, op);
            }
        }
    }

    fn file(&mut self, path: &str, op: FileOp) {
        let modified = op != FileOp::Read;
        let slot = self.files.entry(path.to_owned()).or_insert((op, modified));
        slot.0 = op;
        slot.1 |= modified;
    }

    fn custom(&mut self, id: &str, custom_type: &str, data: &Option<Value>) {
        let field = |k: &str| {
            data.as_ref()
                .and_then(|d| d.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match custom_type {
            PIN_CUSTOM_TYPE => {
                if let Some(text) = field("text") {
                    self.ledger.pins.push(LedgerPin {
                        pin_id: id.to_owned(),
                        text,
                    });
                }
            }
            UNPIN_CUSTOM_TYPE => {
                if let Some(pin) = field("pinId") {
                    self.ledger.pins.retain(|p| p.pin_id != pin);
                }
            }
            _ => {}
        }
    }

    fn message(&mut self, id: &str, m: &AgentMessage) {
        match m {
            AgentMessage::User(u) if u.synthetic != Some(true) => {
                let text = u.content.joined_text("\n");
                if !text.trim().is_empty() {
                    self.request(id, text.trim());
                }
            }
            AgentMessage::Assistant(a) if !a.is_error() && !a.is_aborted() => {
                let mut has_calls = false;
                for call in a.tool_calls() {
                    has_calls = true;
                    self.tool_call(call);
                }
                let text = join_text(&a.content, "\n");
                if let Some(plan) = stated_plan(&text) {
                    self.ledger.next_step = Some(plan);
                }
                if !has_calls && !text.trim().is_empty() {
                    self.answered();
                }
            }
            AgentMessage::ToolResult(t) => {
                let (command, raw) = self
                    .calls
                    .remove(&t.tool_call_id)
                    .unwrap_or_else(|| (t.tool_name.clone(), None));
                let output = join_text(&t.content, "\n");
                let outcome = tool_outcome(raw.as_deref(), &t.tool_name, &output, t.is_error);
                self.outcome(id, command, outcome, &output);
            }
            AgentMessage::BashExecution(e) | AgentMessage::PythonExecution(e) => {
                let tool = if matches!(m, AgentMessage::BashExecution(_)) {
                    "bash"
                } else {
                    "python"
                };
                let command = format!("{tool}: {}", one_line(e.source(), usize::MAX));
                self.outcome(id, command, execution_outcome(e), &e.output);
            }
            _ => {}
        }
    }

    fn request(&mut self, id: &str, text: &str) {
        if let Some(last) = self.ledger.requests.last_mut() {
            if last.status == RequestStatus::Current {
                last.status = RequestStatus::Superseded;
            }
            last.text = gist(&last.text);
        }
        self.ledger.requests.push(LedgerRequest {
            entry_id: id.to_owned(),
            text: text.to_owned(),
            status: RequestStatus::Current,
        });
        // A plan made for the request before is not the next step of this one.
        self.ledger.next_step = None;
    }

    fn answered(&mut self) {
        if let Some(last) = self.ledger.requests.last_mut()
            && last.status == RequestStatus::Current
        {
            last.status = RequestStatus::Answered;
        }
    }

    fn tool_call(&mut self, call: &ToolCall) {
        let path = call.arguments.get("path").and_then(Value::as_str);
        let op = match call.name.as_str() {
            "read" => Some(FileOp::Read),
            "write" => Some(FileOp::Write),
            "edit" => Some(FileOp::Edit),
            _ => None,
        };
        if let (Some(op), Some(path)) = (op, path) {
            self.file(path, op);
        }
        let command = match (call_command(call), path) {
            (Some(cmd), _) => format!("{}: {}", call.name, one_line(cmd, usize::MAX)),
            (None, Some(path)) => format!("{}: {path}", call.name),
            (None, None) => call.name.clone(),
        };
        let raw = call_command(call).map(str::to_owned);
        self.calls.insert(call.id.clone(), (command, raw));
    }

    fn outcome(&mut self, id: &str, command: String, outcome: Outcome, output: &str) {
        let errors = &mut self.ledger.errors;
        match outcome {
            Outcome::Succeeded => {
                for e in errors.iter_mut().filter(|e| e.command == command) {
                    e.resolved = true;
                }
            }
            Outcome::Failed => {
                errors.retain(|e| e.command != command || e.resolved);
                let text = error_line(output).unwrap_or_else(|| "(no output)".to_owned());
                errors.push(LedgerError {
                    entry_id: id.to_owned(),
                    command,
                    text: one_line(&text, MAX_LINE_CHARS),
                    resolved: false,
                });
            }
            Outcome::NoMatch | Outcome::Aborted => {}
        }
    }

    fn finish(mut self) -> Ledger {
        let mut read = Vec::new();
        let mut modified = Vec::new();
        for (path, (last_op, was_modified)) in self.files {
            let file = LedgerFile { path, last_op };
            if was_modified {
                modified.push(file);
            } else {
                read.push(file);
            }
        }
        self.ledger.files = LedgerFiles { read, modified };
        let resolved = self.ledger.errors.iter().filter(|e| e.resolved).count();
        let mut drop = resolved.saturating_sub(MAX_RESOLVED_ERRORS);
        self.ledger.errors.retain(|e| {
            let gone = e.resolved && drop > 0;
            drop -= usize::from(gone);
            !gone
        });
        self.ledger
    }
}

/// Words that open a sentence stating what the assistant will do next.
const PLAN_OPENERS: &[&str] = &[
    "next step",
    "next,",
    "next i",
    "next i'll",
    "i'll",
    "i will",
    "let me",
    "now i'll",
    "now i will",
    "now let me",
    "i'm going to",
    "i am going to",
    "then i'll",
    "my plan",
    "plan:",
    "the plan is",
];

/// The last sentence of `text` that states a plan, on one line.
fn stated_plan(text: &str) -> Option<String> {
    prose_sentences(text)
        .into_iter()
        .rfind(|s| {
            let lower = s.to_lowercase();
            PLAN_OPENERS.iter().any(|p| starts_with_words(&lower, p))
        })
        .map(|s| one_line(s, MAX_LINE_CHARS))
}

/// `text` on one line (whitespace collapsed), cut to `max` characters with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(max) {
        None => text,
        Some((cut, _)) => format!("{}…", text[..cut].trim_end()),
    }
}

/// A request on one line: its first prose sentences (pasted logs, diffs and code left out; its
/// first line when it is all paste), cut at a word, without markup that a cut could unbalance.
pub fn gist(text: &str) -> String {
    let mut out = String::new();
    for sentence in prose_sentences(text) {
        if !out.is_empty() && out.chars().count() + sentence.chars().count() > MAX_LINE_CHARS {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(sentence);
    }
    if out.is_empty() {
        out = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .to_owned();
    }
    let mut line = one_line(&out.replace("**", ""), usize::MAX);
    if line.chars().count() > MAX_LINE_CHARS {
        let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
        let at_word = cut
            .rfind(' ')
            .filter(|&i| i > MAX_LINE_CHARS / 2)
            .unwrap_or(cut.len());
        line = format!("{}…", cut[..at_word].trim_end_matches([',', ';', ':', ' ']));
    }
    if line.matches('`').count() % 2 == 1 {
        line = line.replace('`', "");
    }
    line
}

/// `summary` without the ledger block a compaction appended to it (the next compaction
/// renders its own; the summarizer should not copy a stale one).
pub fn strip_block(summary: &str) -> String {
    let Some(start) = summary.find(BLOCK_OPEN) else {
        return summary.to_owned();
    };
    let end = summary[start..]
        .find(BLOCK_CLOSE)
        .map_or(summary.len(), |e| start + e + BLOCK_CLOSE.len());
    let mut out = summary[..start].trim_end().to_owned();
    out.push_str(&summary[end..]);
    out
}

/// One of [`Shown`]'s counts.
type ShownField = fn(&mut Shown) -> &mut usize;

/// What the block leaves out: counts of the oldest lines of each kind, and the next step.
#[derive(Clone, Copy, Debug, Default)]
struct Shown {
    /// Earlier (not current) requests left out, oldest first.
    requests: usize,
    /// Resolved errors left out, oldest first.
    resolved: usize,
    read: usize,
    modified: usize,
    next_step: bool,
}

/// The ledger as the context shows it after the summary: a fixed block (documented in
/// docs/summaries.md) of at most `budget` tokens, where it can be. Over budget, the oldest
/// earlier requests go first, then resolved errors, then read files, then modified files,
/// then the next step; the current request, the pins and the unresolved errors always stay.
/// Empty for an empty ledger.
pub fn render_block(ledger: &Ledger, budget: u64, counter: &dyn TokenCounter) -> String {
    if *ledger == Ledger::default() {
        return String::new();
    }
    let earlier = ledger
        .requests
        .iter()
        .filter(|r| r.status != RequestStatus::Current)
        .count();
    let resolved = ledger.errors.iter().filter(|e| e.resolved).count();
    let mut shown = Shown::default();
    let mut text = render(ledger, shown);
    let fits = |shown: Shown| {
        let text = render(ledger, shown);
        (counter.count_text(&text) <= budget, text)
    };
    // One kind at a time, the fewest lines that make the block fit (a binary search, so a
    // ledger of thousands of lines costs a few dozen renderings).
    let steps: [(ShownField, usize); 4] = [
        (|s| &mut s.requests, earlier),
        (|s| &mut s.resolved, resolved),
        (|s| &mut s.read, ledger.files.read.len()),
        (|s| &mut s.modified, ledger.files.modified.len()),
    ];
    for (field, total) in steps {
        if counter.count_text(&text) <= budget {
            return text;
        }
        let mut all = shown;
        *field(&mut all) = total;
        let (all_fit, all_text) = fits(all);
        if !all_fit {
            (shown, text) = (all, all_text);
            continue;
        }
        // `lo` does not fit, `hi` does.
        let (mut lo, mut hi) = (*field(&mut shown), total);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            let mut probe = shown;
            *field(&mut probe) = mid;
            if fits(probe).0 {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        *field(&mut shown) = hi;
        return render(ledger, shown);
    }
    if counter.count_text(&text) > budget && ledger.next_step.is_some() {
        shown.next_step = true;
        text = render(ledger, shown);
    }
    text
}

fn render(ledger: &Ledger, shown: Shown) -> String {
    let mut out = String::new();
    out.push_str(BLOCK_OPEN);
    out.push('\n');
    if ledger.current_request().is_none() {
        out.push_str("Current request: none (the latest request was answered)\n\n");
    }
    let mut section = |title: &str, lines: Vec<String>| {
        if !lines.is_empty() {
            out.push_str(title);
            out.push('\n');
            for line in lines {
                out.push_str(&line);
                out.push('\n');
            }
            out.push('\n');
        }
    };
    if let Some(r) = ledger.current_request() {
        section("Current request (verbatim):", vec![r.text.clone()]);
    }
    section(
        "Pinned:",
        ledger
            .pins
            .iter()
            .map(|p| format!("- {}", p.text))
            .collect(),
    );
    let error = |e: &LedgerError| format!("- {} → {}", one_line(&e.command, 120), e.text);
    section(
        "Unresolved errors:",
        ledger
            .errors
            .iter()
            .filter(|e| !e.resolved)
            .map(error)
            .collect(),
    );
    if !shown.next_step
        && let Some(next) = &ledger.next_step
    {
        section("Next step (as last stated):", vec![next.clone()]);
    }
    let files = |list: &[LedgerFile], skip: usize, what: &str| -> Vec<String> {
        let keep = list.len() - skip.min(list.len());
        let mut lines: Vec<String> = list[..keep]
            .iter()
            .map(|f| match f.last_op {
                FileOp::Read => format!("- {}", f.path),
                op => format!("- {} ({})", f.path, op.name()),
            })
            .collect();
        if keep < list.len() {
            lines.push(format!("- … and {} more {what}", list.len() - keep));
        }
        lines
    };
    section(
        "Files modified (last operation):",
        files(&ledger.files.modified, shown.modified, "modified files"),
    );
    section(
        "Files read:",
        files(&ledger.files.read, shown.read, "read files"),
    );
    let earlier: Vec<&LedgerRequest> = ledger
        .requests
        .iter()
        .filter(|r| r.status != RequestStatus::Current)
        .collect();
    let mut lines: Vec<String> = Vec::new();
    if shown.requests > 0 {
        lines.push(format!("- … {} earlier requests left out", shown.requests));
    }
    lines.extend(
        earlier
            .iter()
            .skip(shown.requests)
            .map(|r| format!("- {}: \"{}\"", r.status.name(), gist(&r.text))),
    );
    section("Earlier requests (oldest first):", lines);
    let resolved: Vec<&LedgerError> = ledger.errors.iter().filter(|e| e.resolved).collect();
    let mut lines: Vec<String> = Vec::new();
    if shown.resolved > 0 {
        lines.push(format!("- … {} resolved errors left out", shown.resolved));
    }
    lines.extend(resolved.iter().skip(shown.resolved).map(|e| error(e)));
    section("Resolved errors:", lines);
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out.push_str(BLOCK_CLOSE);
    out
}

#[cfg(test)]
mod tests;
