//! The facts a summary draws on, gathered in one pass over the messages: the user's tasks and
//! instructions, the assistant's statements, tool calls and their outcomes, real failures,
//! files.
//!
//! What counts is decided once, in this pass, so every layout agrees: a user message is a task
//! only when it asks for work in words (not a slash command, an "ok", or a short answer to the
//! assistant's question); a tool call failed only when it really did (`compaction::facts`: a
//! search with no match and an aborted command did not); an assistant sentence is progress, a
//! decision or a finding only when it states one plainly (no hedging, no narration, no table
//! row, no lead-in left without its list). How words are read for that is [`super::cues`].

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use crate::compaction::facts::{
    Outcome, error_line, execution_outcome, instructions, is_search_command, tool_outcome,
};
use crate::session::LlmMessages;
use crate::session::message::{AgentMessage, ToolCall, join_text};

use super::cues::{
    Statement, changes_direction, is_short_reply, is_task, repository_change, statement_kind,
    verification,
};
use super::text::{
    clip, clip_line, code, one_line, plain_sentence, sentences, short_command, shown_command,
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
            .any(|k| name.contains(k))
            || command.as_deref().is_some_and(is_search_command);
        let target = match (&pattern, &path, &command) {
            (Some(p), Some(dir), _) if searches => Some(format!("{} in `{dir}`", code(p))),
            (Some(p), None, None) => Some(code(p)),
            (_, Some(path), _) => Some(format!("`{path}`")),
            (_, None, Some(c)) => Some(shown_command(c)),
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

    /// A command run by the user (`bashExecution`) as a call.
    fn command(command: &str) -> CallInfo {
        CallInfo {
            name: "bash".to_owned(),
            usage: FileUse::Other,
            path: None,
            command: Some(command.to_owned()),
            target: Some(shown_command(command)),
            looks_only: is_search_command(command),
            writes_whole: false,
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
            (Some(c), _) if self.path.is_none() => shown_command(c),
            (_, Some(target)) => format!("{} {target}", self.name),
            _ => format!("`{}`", self.name),
        }
    }
}

/// The program and subcommand of a command's last step (`npm test`, `git commit`): two runs
/// with the same one are the same check, even with other flags, paths or steps before it.
fn command_family(command: &str) -> String {
    let short = short_command(command);
    let last = short.rsplit("&&").next().unwrap_or(&short).to_owned();
    last.split_whitespace()
        .filter(|w| !w.starts_with('-'))
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
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

impl Action {
    fn single(label: String) -> Action {
        Action {
            label,
            targets: Vec::new(),
            seen: HashSet::new(),
            more: 0,
            outcome: None,
        }
    }
}

/// A real failure, and whether a later run of the same command (or family of commands, or a
/// later successful call on the same file) resolved it.
pub(super) struct Failure {
    pub(super) key: String,
    pub(super) label: String,
    /// The error line, and a location line right after it when there is one.
    pub(super) error: String,
    pub(super) resolved: bool,
    /// Which user message it followed (an index into [`Facts::messages_from_user`]).
    pub(super) after_user: usize,
    /// Which task it followed (an index into [`Facts::tasks`]).
    pub(super) after_task: usize,
}

/// A Done item, in the order the work happened.
pub(super) enum Done {
    Text(String),
    /// The files changed while working on one task, listed when the item is rendered.
    Files(usize),
}

/// What the user asked for in one message.
#[derive(Clone)]
pub(super) struct Task {
    pub(super) text: String,
    /// It turns away from what came before ("actually…", "instead…", "undo that").
    pub(super) changes_direction: bool,
}

/// Everything the summary layouts draw on, gathered in one pass over the messages.
#[derive(Default)]
pub(super) struct Facts {
    /// Every message the user typed, in order (synthetic prompts, command output and carried
    /// summaries left out): the latest is kept verbatim.
    pub(super) messages_from_user: Vec<String>,
    /// The messages that ask for work (see the module docs), in order.
    pub(super) tasks: Vec<Task>,
    /// Summaries carried in the messages (e.g. a compaction summary turned into user text).
    pub(super) carried: Vec<String>,
    pub(super) constraints: Vec<String>,
    pub(super) decisions: Vec<String>,
    pub(super) findings: Vec<String>,
    /// The assistant's statements of completion, for the short summary.
    pub(super) statements: Vec<String>,
    /// Done items by key (command, file, statement); the latest event for a key wins.
    pub(super) done: Vec<Option<Done>>,
    done_index: HashMap<String, usize>,
    /// Files changed per task (index into `tasks`, or `usize::MAX` before the first task).
    pub(super) changed: HashMap<usize, BTreeSet<String>>,
    pub(super) failures: Vec<Failure>,
    open_failures: HashMap<String, Vec<usize>>,
    /// Commands and paths that succeeded at least once.
    pub(super) succeeded: HashSet<String>,
    /// The assistant's last text, whether it came after the latest user message, and whether
    /// it was cut off (an aborted reply ends mid-sentence).
    pub(super) last_assistant: Option<String>,
    pub(super) ends_with_assistant: bool,
    /// When the latest user message is only a short reply ("ok", "yes, do it"): the end of
    /// the assistant's message it answers (its question, else its last paragraph), verbatim.
    pub(super) reply_to: Option<String>,
    pub(super) last_assistant_cut: bool,
    /// The assistant's last text came with tool calls: it narrates them ("Now I'll run the
    /// tests"), so its plans were carried out, not left for later.
    pub(super) last_text_narrates_calls: bool,
    /// Completion was claimed after the latest task.
    pub(super) completed_after_task: bool,
    /// Files were changed since the latest task, and a check (tests, build) passed after the
    /// last change: the task is visibly done even if nobody said so.
    pub(super) changed_since_task: bool,
    pub(super) verified_since_change: bool,
    /// Completion was claimed before the first task of these messages (the work a previous
    /// summary left in progress was finished).
    pub(super) completed_before_task: bool,
    pub(super) read: BTreeSet<String>,
    pub(super) modified: BTreeSet<String>,
    /// Files written whole without having been read or changed before: new files.
    pub(super) created: BTreeSet<String>,
    pub(super) actions: Vec<Action>,
    /// What was looked at since the latest task (files read, searches), for a task that has
    /// no other progress yet; and whether it has any.
    pub(super) read_since_task: Vec<String>,
    pub(super) searched_since_task: Vec<String>,
    pub(super) done_since_task: bool,
    /// The last assistant text ended with a question (so a short reply answers it).
    asked: bool,
}

impl Facts {
    pub(super) fn extract(messages: &LlmMessages) -> Facts {
        let mut facts = Facts::default();
        let mut calls: HashMap<String, (CallInfo, usize)> = HashMap::new();
        let mut grouped: HashMap<String, usize> = HashMap::new();
        for message in messages.iter() {
            match &*message {
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
                            let error = clip(error.trim(), MAX_ITEM_CHARS);
                            facts.fail(MODEL_KEY, MODEL_KEY, "The model request", &error);
                        }
                    } else if !assistant.is_aborted() {
                        facts.succeed(MODEL_KEY, MODEL_KEY);
                    }
                    for call in assistant.tool_calls() {
                        let info = CallInfo::of(call);
                        let action = facts.record_call(&info, &mut grouped);
                        calls.insert(call.id.clone(), (info, action));
                    }
                    let mut text = join_text(&assistant.content, "\n");
                    let cut = assistant.is_aborted()
                        || assistant.stop_reason.as_deref() == Some("length");
                    if cut {
                        // The reply stops mid-sentence: its last line is unfinished.
                        let keep = text.trim_end().rfind('\n').unwrap_or(0);
                        text.truncate(keep);
                    }
                    if !text.trim().is_empty() {
                        facts.assistant_text(&text);
                        facts.asked = prose_question_at(&text).is_some();
                        facts.last_assistant = Some(text);
                        facts.ends_with_assistant = true;
                        facts.last_assistant_cut = cut;
                        facts.last_text_narrates_calls = assistant.tool_calls().next().is_some();
                    }
                }
                AgentMessage::ToolResult(result) => {
                    let call = calls.get(result.tool_call_id.as_str());
                    let text = join_text(&result.content, "\n");
                    facts.tool_result(&result.tool_name, call, &text, result.is_error);
                }
                AgentMessage::BashExecution(exec) | AgentMessage::PythonExecution(exec) => {
                    let outcome = execution_outcome(exec);
                    facts.command_outcome(exec.source(), &exec.output, outcome);
                }
                AgentMessage::FileMention(mention) => {
                    for file in &mention.files {
                        facts.read.insert(file.path.clone());
                    }
                }
                AgentMessage::Unknown(_) => {}
            }
        }
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
            let outcome = if failed {
                Outcome::Failed
            } else {
                Outcome::Succeeded
            };
            self.command_outcome(&command, &output, outcome);
            return;
        }
        if text.trim_start().starts_with("<system-reminder>") {
            for path in mentioned_paths(text) {
                self.read.insert(path.to_owned());
            }
            return;
        }
        self.messages_from_user.push(text.to_owned());
        self.reply_to = self
            .last_assistant
            .as_deref()
            .filter(|_| self.ends_with_assistant && is_short_reply(text))
            .map(answered_part);
        self.ends_with_assistant = false;
        self.constraints
            .extend(instructions(text).iter().map(|s| constraint_item(s)));
        if is_task(text, self.asked) {
            self.tasks.push(Task {
                text: text.to_owned(),
                changes_direction: changes_direction(text),
            });
            self.completed_after_task = false;
            self.changed_since_task = false;
            self.verified_since_change = false;
            self.read_since_task.clear();
            self.searched_since_task.clear();
            self.done_since_task = false;
        }
        self.asked = false;
    }

    fn assistant_text(&mut self, text: &str) {
        for sentence in sentences(text) {
            let Some(kind) = statement_kind(sentence) else {
                continue;
            };
            let Some(item) = plain_sentence(sentence).map(|s| clip_line(&s)) else {
                continue;
            };
            match kind {
                Statement::Decision => self.decisions.push(item),
                Statement::Finding => self.findings.push(item),
                Statement::Done => {
                    self.statements.push(item.clone());
                    self.set_done(&format!("said: {item}"), Done::Text(item));
                    self.completed_after_task = true;
                    if self.tasks.is_empty() {
                        self.completed_before_task = true;
                    }
                }
            }
        }
    }

    /// The index of the latest task, or `usize::MAX` before the first.
    fn task_index(&self) -> usize {
        self.tasks.len().checked_sub(1).unwrap_or(usize::MAX)
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
            let looked = match (info.usage, &info.path) {
                (FileUse::Read, Some(path)) => Some((&mut self.read_since_task, path.clone())),
                _ if !target.is_empty() => Some((&mut self.searched_since_task, target.clone())),
                _ => None,
            };
            if let Some((list, item)) = looked
                && !list.contains(&item)
            {
                list.push(item);
            }
            let key = if info.command.is_some() {
                "search".to_owned()
            } else {
                info.name.clone()
            };
            if let Some(&i) = grouped.get(&key) {
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
            grouped.insert(key.clone(), self.actions.len());
            let mut action = Action::single(if info.command.is_some() {
                "searched".to_owned()
            } else {
                info.name.clone()
            });
            if !target.is_empty() {
                action.targets.push(target.clone());
            }
            action.seen.insert(target);
            self.actions.push(action);
        } else {
            let mut label = info.label();
            if info.path.as_ref().is_some_and(|p| self.created.contains(p)) {
                label.push_str(NEW_FILE);
            }
            self.actions.push(Action::single(label));
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
        let command = call.and_then(|(info, _)| info.command.as_deref());
        let outcome = tool_outcome(command, tool_name, text, is_error);
        let Some((info, action)) = call else {
            // The call is outside these messages: only a failure says anything useful.
            if outcome == Outcome::Failed {
                let key = format!("{tool_name} ");
                self.fail(&key, &key, &format!("`{tool_name}`"), &error_excerpt(text));
            }
            return;
        };
        let key = info.key();
        match outcome {
            Outcome::Aborted => {
                if self.actions[*action].targets.is_empty() {
                    self.actions[*action].outcome = Some("aborted".to_owned());
                }
                return;
            }
            Outcome::NoMatch => {
                if self.actions[*action].targets.is_empty() {
                    self.actions[*action].outcome = Some("no match".to_owned());
                }
                return;
            }
            Outcome::Failed => {
                let error = error_excerpt(text);
                let family = info.command.as_deref().map_or(key.clone(), command_family);
                self.fail(&key, &family, &info.label(), &error);
                if self.actions[*action].targets.is_empty() {
                    let first = error.lines().next().unwrap_or("");
                    self.actions[*action].outcome = Some(format!("failed: {first}"));
                }
                return;
            }
            Outcome::Succeeded => {}
        }
        let family = info.command.as_deref().map_or(key.clone(), command_family);
        self.succeed(&key, &family);
        if let (FileUse::Modified, Some(path)) = (info.usage, &info.path) {
            let task = self.task_index();
            if !self.changed.contains_key(&task) {
                self.set_done(&format!("files of task {task}"), Done::Files(task));
            }
            self.changed.entry(task).or_default().insert(path.clone());
            self.changed_since_task = true;
            self.verified_since_change = false;
        }
        if let Some(command) = &info.command {
            if let Some((done, outcome)) = verification(command, text) {
                self.actions[*action].outcome = Some(outcome);
                self.set_done(command, Done::Text(done));
                self.verified_since_change |= self.changed_since_task;
            } else if let Some(done) = repository_change(command) {
                self.set_done(command, Done::Text(done));
            }
        }
    }

    /// A command run by the user or a tool outside a call, with its output and outcome.
    fn command_outcome(&mut self, command: &str, output: &str, outcome: Outcome) {
        let info = CallInfo::command(command);
        let mut label = info.label();
        let family = command_family(command);
        match outcome {
            Outcome::Failed => {
                let error = error_excerpt(output);
                self.fail(command, &family, &label, &error);
                label = format!("{label} — failed: {}", error.lines().next().unwrap_or(""));
            }
            Outcome::Aborted => label.push_str(" — aborted"),
            Outcome::NoMatch => label.push_str(" — no match"),
            Outcome::Succeeded => {
                self.succeed(command, &family);
                if let Some((done, outcome)) = verification(command, output) {
                    self.set_done(command, Done::Text(done));
                    self.verified_since_change |= self.changed_since_task;
                    label = format!("{label} — {outcome}");
                }
            }
        }
        self.actions.push(Action::single(label));
    }

    fn fail(&mut self, key: &str, family: &str, label: &str, error: &str) {
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
        if family != key {
            self.open_failures
                .entry(family.to_owned())
                .or_default()
                .push(self.failures.len());
        }
        self.failures.push(Failure {
            key: key.to_owned(),
            label: label.to_owned(),
            error: error.to_owned(),
            resolved: false,
            after_user: self.messages_from_user.len(),
            after_task: self.tasks.len(),
        });
    }

    fn succeed(&mut self, key: &str, family: &str) {
        for k in [key, family] {
            if let Some(open) = self.open_failures.remove(k) {
                for i in open {
                    self.failures[i].resolved = true;
                }
            }
        }
        self.succeeded.insert(key.to_owned());
        self.succeeded.insert(family.to_owned());
    }

    fn set_done(&mut self, key: &str, item: Done) {
        self.done_since_task = true;
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
        question_part(text)
    }

    /// Whether the latest task is visibly done: completion was claimed, or files were changed
    /// and a check passed after the last change with nothing left failing.
    pub(super) fn task_done(&self) -> bool {
        self.completed_after_task
            || (self.verified_since_change && self.blocking().next().is_none())
    }

    /// Failures no later success resolved, in order.
    pub(super) fn unresolved(&self) -> impl Iterator<Item = &Failure> {
        self.failures.iter().filter(|f| !f.resolved)
    }

    /// What blocks the current task: its unresolved failures (earlier tasks' failures were
    /// worked around or left behind when the user moved on).
    pub(super) fn blocking(&self) -> impl Iterator<Item = &Failure> {
        let task = self.tasks.len();
        self.unresolved().filter(move |f| f.after_task == task)
    }

    /// The failures since the latest user message: the exact errors the next turn needs.
    pub(super) fn final_turn_failures(&self) -> impl Iterator<Item = &Failure> {
        let turn = self.messages_from_user.len();
        self.failures.iter().filter(move |f| f.after_user == turn)
    }
}

/// Whether a done/failure key names a file (paths) rather than a command.
fn is_path_key(key: &str) -> bool {
    !key.contains(' ') && (key.contains('/') || key.contains('.'))
}

/// The byte offset of the first `?` that ends a prose sentence (not inside code).
pub(super) fn prose_question_at(text: &str) -> Option<usize> {
    let mut offset = 0;
    let mut in_fence = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence
            && let Some(i) = line.find("? ").or_else(|| {
                line.trim_end()
                    .ends_with('?')
                    .then(|| line.trim_end().len() - 1)
            })
        {
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

/// A constraint sentence as an item: whole, on one line, unless it runs past twice the item
/// length.
fn constraint_item(sentence: &str) -> String {
    one_line(sentence, 2 * MAX_ITEM_CHARS)
}

/// The question an assistant message leaves for the user, from the paragraph holding its
/// first question (so its lead-in and any options listed below it stay together).
fn question_part(text: &str) -> Option<String> {
    let first_q = prose_question_at(text)?;
    let start = text[..first_q].rfind("\n\n").map_or(0, |i| i + 2);
    let question = text[start..].trim();
    Some(if question.chars().count() > MAX_VERBATIM_CHARS {
        let lines: Vec<&str> = question.lines().filter(|l| l.contains('?')).collect();
        clip(&lines.join("\n"), MAX_VERBATIM_CHARS)
    } else {
        question.to_owned()
    })
}

/// What a short reply answers in the assistant's message: its question, else its last
/// paragraph.
fn answered_part(text: &str) -> String {
    question_part(text).unwrap_or_else(|| {
        let text = text.trim();
        let last = text.rfind("\n\n").map_or(text, |i| text[i + 2..].trim());
        clip(last, MAX_VERBATIM_CHARS)
    })
}

/// The line a failed result reports, plus the next line when it gives the location
/// (`--> src/a.rs:3:5`, `at …`, `File "…"`).
fn error_excerpt(text: &str) -> String {
    let Some(first) = error_line(text) else {
        return "(no output)".to_owned();
    };
    let shown = clip(&first, 2 * MAX_ITEM_CHARS);
    let location = text
        .lines()
        .skip_while(|l| l.trim() != first)
        .nth(1)
        .map(str::trim_end)
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("--> ") || l.starts_with("at ") || l.starts_with("File \"")
        });
    match location {
        Some(loc) => format!("{shown}\n{}", clip(loc, MAX_ITEM_CHARS)),
        None => shown,
    }
}
