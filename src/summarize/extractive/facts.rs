//! The facts a summary draws on, gathered in one pass over the messages: requests, the
//! assistant's statements, tool calls and their outcomes, failures, files.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::Value;

use crate::session::message::{AgentMessage, ToolCall, join_text};

use super::sections::Items;
use super::text::{
    clip, clip_line, code, contains_word, first_line, normalize_quotes, one_line, prose_lines,
    sentences,
};
use super::{MAX_ACTION_TARGETS, MAX_ITEM_CHARS, MAX_VERBATIM_CHARS, MODEL_KEY, NEW_FILE};

/// How a tool touched a file.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum FileUse {
    Read,
    Modified,
    Other,
}

/// What a tool call is about, read from its name and arguments (never from its result).
#[derive(Clone)]
pub(super) struct CallInfo {
    pub(super) name: String,
    pub(super) usage: FileUse,
    pub(super) path: Option<String>,
    pub(super) command: Option<String>,
    /// What the call acts on, for display: `` `src/a.rs` ``, `` `as i32` in `src` ``.
    pub(super) target: Option<String>,
    /// Whether it only looks (reads, searches); such calls are grouped in a turn prefix.
    pub(super) looks_only: bool,
    /// Whether it writes a whole file (as opposed to editing part of one).
    pub(super) writes_whole: bool,
}

impl CallInfo {
    pub(super) fn of(call: &ToolCall) -> CallInfo {
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
    pub(super) fn key(&self) -> String {
        self.command
            .clone()
            .or_else(|| self.path.clone())
            .unwrap_or_else(|| format!("{} {}", self.name, self.target.as_deref().unwrap_or("")))
    }

    /// How the call reads in a list: `` `cargo test` ``, `` edit `src/a.rs` ``.
    pub(super) fn label(&self) -> String {
        match (&self.command, &self.target) {
            (Some(c), _) if self.path.is_none() => code(&one_line(c, MAX_ITEM_CHARS / 2)),
            (_, Some(target)) => format!("{} {target}", self.name),
            _ => format!("`{}`", self.name),
        }
    }
}

/// One step of the work, for a turn prefix's Early Progress.
pub(super) struct Action {
    pub(super) label: String,
    /// For grouped read-only calls: the targets, in first-seen order (the first few).
    pub(super) targets: Vec<String>,
    pub(super) seen: HashSet<String>,
    pub(super) more: usize,
    pub(super) outcome: Option<String>,
}

/// A failed call or command, and whether a later run of the same command (or a later
/// successful call on the same file) resolved it.
pub(super) struct Failure {
    pub(super) key: String,
    pub(super) label: String,
    /// The first error line, and a location line right after it when there is one.
    pub(super) error: String,
    pub(super) resolved: bool,
}

/// Everything the summary layouts draw on, gathered in one pass over the messages.
#[derive(Default)]
pub(super) struct Facts {
    /// Real user requests, in order (synthetic prompts, command output and carried summaries
    /// left out).
    pub(super) requests: Vec<String>,
    /// Summaries carried in the messages (e.g. a compaction summary turned into user text).
    pub(super) carried: Vec<String>,
    pub(super) constraints: Vec<String>,
    /// The assistant's statements of completion, decisions and findings, in order.
    pub(super) statements: Vec<String>,
    pub(super) decisions: Vec<String>,
    pub(super) findings: Vec<String>,
    /// Done items by key (path or command); the latest event for a key wins.
    pub(super) done: Vec<Option<String>>,
    pub(super) done_index: HashMap<String, usize>,
    pub(super) failures: Vec<Failure>,
    pub(super) open_failures: HashMap<String, Vec<usize>>,
    /// Commands and paths that succeeded at least once.
    pub(super) succeeded: HashSet<String>,
    /// The assistant's last text, and whether it came after the latest user request.
    pub(super) last_assistant: Option<String>,
    pub(super) ends_with_assistant: bool,
    /// Completion was claimed after the latest user request.
    pub(super) completed_after_request: bool,
    /// Files were changed since the latest user request, and a check (tests, build) passed
    /// after the last change: the request is visibly done even if nobody said so.
    pub(super) changed_since_request: bool,
    pub(super) verified_since_change: bool,
    /// The assistant's last text came with tool calls: it narrates them ("Now I'll run the
    /// tests"), so its plans were carried out, not left for later.
    pub(super) last_text_narrates_calls: bool,
    /// Completion was claimed before the first user request of these messages (the work a
    /// previous summary left in progress was finished).
    pub(super) completed_before_request: bool,
    pub(super) read: BTreeSet<String>,
    pub(super) modified: BTreeSet<String>,
    /// Files written whole without having been read or changed before: new files.
    pub(super) created: BTreeSet<String>,
    /// Tool calls without a result yet, in order.
    pub(super) pending_calls: Vec<String>,
    pub(super) actions: Vec<Action>,
}

impl Facts {
    pub(super) fn extract(messages: &[AgentMessage]) -> Facts {
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

    pub(super) fn user_text(&mut self, text: &str, synthetic: bool) {
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

    pub(super) fn assistant_text(&mut self, text: &str) {
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
    pub(super) fn record_call(
        &mut self,
        info: &CallInfo,
        grouped: &mut HashMap<String, usize>,
    ) -> usize {
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

    pub(super) fn tool_result(
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
    pub(super) fn command_outcome(&mut self, command: &str, output: &str, failed: bool) {
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

    pub(super) fn fail(&mut self, key: &str, label: &str, error: &str) {
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

    pub(super) fn succeed(&mut self, key: &str) {
        if let Some(open) = self.open_failures.remove(key) {
            for i in open {
                self.failures[i].resolved = true;
            }
        }
        self.succeeded.insert(key.to_owned());
    }

    pub(super) fn set_done(&mut self, key: &str, item: String) {
        if let Some(i) = self.done_index.get(key) {
            self.done[*i] = None;
        }
        self.done_index.insert(key.to_owned(), self.done.len());
        self.done.push(Some(item));
    }

    /// A question the assistant asked and the user has not answered, verbatim.
    pub(super) fn pending_question(&self) -> Option<String> {
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
    pub(super) fn request_done(&self) -> bool {
        self.completed_after_request
            || (self.verified_since_change && self.unresolved().next().is_none())
    }

    /// Failures no later success resolved, in order.
    pub(super) fn unresolved(&self) -> impl Iterator<Item = &Failure> {
        self.failures.iter().filter(|f| !f.resolved)
    }
}

/// Whether a done/failure key names a file (paths) rather than a command.
pub(super) fn is_path_key(key: &str) -> bool {
    !key.contains(' ') && (key.contains('/') || key.contains('.'))
}

/// The byte offset of the first `?` that ends a prose sentence (not inside code).
pub(super) fn prose_question_at(text: &str) -> Option<usize> {
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
pub(super) fn carried_summary(text: &str) -> &str {
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
pub(super) fn parse_ran_command(text: &str) -> Option<(String, String, bool)> {
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
pub(super) fn mentioned_paths(text: &str) -> impl Iterator<Item = &str> {
    text.split("<file path=\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(p, _)| p))
}

pub(super) const CONSTRAINT_CUES: &[&str] = &[
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
pub(super) const DECISION_CUES: &[&str] = &[
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
pub(super) const FINDING_CUES: &[&str] = &[
    "found it",
    "the cause",
    "root cause",
    "the problem is",
    "the issue is",
    "the bug is",
    "turns out",
];
pub(super) const DONE_CUES: &[&str] = &[
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
pub(super) const FUTURE_CUES: &[&str] = &[
    "will", "i'll", "let me", "going to", "next", "need to", "should", "plan", "todo", "could",
    "would", "if",
];
pub(super) const PLAN_CUES: &[&str] = &[
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
pub(super) const DIRECTION_CUES: &[&str] = &[
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
pub(super) const ERROR_CUES: &[&str] = &[
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
pub(super) const VERIFY_CUES: &[&str] = &[
    "test", "tests", "pytest", "jest", "vitest", "build", "check", "clippy", "lint", "tsc", "make",
    "compile", "vet", "mypy",
];

pub(super) fn looks_like_error(line: &str) -> bool {
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
pub(super) fn error_excerpt(text: &str) -> String {
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
pub(super) fn verification(command: &str, output: &str) -> Option<(String, String)> {
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
pub(super) fn passed_count(output: &str) -> Option<u64> {
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

pub(super) fn collect_plans(text: &str, out: &mut Items) {
    for sentence in sentences(text) {
        let lower = normalize_quotes(sentence.to_lowercase());
        if !sentence.ends_with('?') && PLAN_CUES.iter().any(|c| contains_word(&lower, c)) {
            out.push(clip_line(sentence));
        }
    }
}

/// The numbered list items of `text` (outside code blocks), except the options of a question
/// (a list right after a line that ends with `?`).
pub(super) fn collect_numbered(text: &str, out: &mut Items) {
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
