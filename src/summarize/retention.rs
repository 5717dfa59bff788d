//! The retention guard (peers.md §4 #4): before a summary is persisted, the facts that must
//! survive are extracted deterministically from the span being summarised — the last user
//! request, a pending question to the user, modified file paths, the error messages of the
//! span's final turn, and explicit user constraints ("always", "never", "must", an imperative
//! "don't") — and every one the summary does not carry is appended in a short "Retained facts"
//! section. What was added is recorded in the entry's `details.retainedFacts`. Errors and
//! constraints are read by `compaction::facts`, as the extractive summarizer reads them: a search
//! that found nothing or an aborted command is not an error, a question is not a constraint.
//!
//! Containment is checked on normalised text (whitespace collapsed, lower case), so a summary
//! that quotes a fact with other line breaks still counts as carrying it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use crate::compaction::facts::{
    Outcome, call_command, error_line, execution_outcome, instructions, tool_outcome,
};
use crate::session::message::join_text;
use crate::session::{AgentMessage, ContentBlock};

/// Longest fact kept, in characters (a pending question is kept whole).
pub const MAX_FACT_CHARS: usize = 300;
/// Most constraints and errors kept each (the latest ones).
pub const MAX_FACTS_PER_KIND: usize = crate::compaction::facts::LATEST_KEPT;
/// The heading of the appended section.
pub const SECTION_HEADING: &str = "## Retained Facts";

/// What kind of fact must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FactKind {
    LastUserRequest,
    PendingQuestion,
    ModifiedFile,
    Error,
    UserConstraint,
}

impl FactKind {
    /// Stable name, as stored in `details.retainedFacts[].kind`.
    pub fn name(self) -> &'static str {
        match self {
            FactKind::LastUserRequest => "lastUserRequest",
            FactKind::PendingQuestion => "pendingQuestion",
            FactKind::ModifiedFile => "modifiedFile",
            FactKind::Error => "error",
            FactKind::UserConstraint => "userConstraint",
        }
    }

    fn label(self) -> &'static str {
        match self {
            FactKind::LastUserRequest => "Last user request",
            FactKind::PendingQuestion => "Pending question to the user",
            FactKind::ModifiedFile => "Modified file",
            FactKind::Error => "Error",
            FactKind::UserConstraint => "User constraint",
        }
    }
}

/// One fact that must survive the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub kind: FactKind,
    pub text: String,
}

/// Extracts the facts of `span` (the messages being summarised, chronological). `modified_files`
/// are the paths the span's tool calls wrote or edited.
pub fn extract_facts(span: &[AgentMessage], modified_files: &[String]) -> Vec<Fact> {
    extract_facts_from(|| span.iter().map(Cow::Borrowed), modified_files)
}

/// [`extract_facts`] of messages read as they are needed: `span` gives them from the start each
/// time it is called. One look at each message, a second only when the final turn has a failed
/// tool result (its call's command tells a failure from a search that found nothing, and the
/// call may be anywhere in the span).
pub fn extract_facts_from<'m, I>(span: impl Fn() -> I, modified_files: &[String]) -> Vec<Fact>
where
    I: Iterator<Item = Cow<'m, AgentMessage>>,
{
    let mut last_request = None;
    let mut question = Question::default();
    // The final turn (from the last real user message on, or everything)'s errors, in order.
    let mut errors: Vec<ErrorSource> = Vec::new();
    let mut constraints = Vec::new();
    for m in span() {
        if is_real_user(&m) {
            let text = message_text(&m);
            constraints.extend(instructions(&text).iter().map(|s| clip(s)));
            last_request = Some(text);
            question = Question::default();
            errors.clear();
            continue;
        }
        question.after(&m);
        match &*m {
            AgentMessage::ToolResult(t) if t.is_error => errors.push(ErrorSource::ToolResult {
                call_id: t.tool_call_id.clone(),
                tool_name: t.tool_name.clone(),
                output: join_text(&t.content, "\n"),
            }),
            other => errors.extend(error_text(other).map(ErrorSource::Known)),
        }
    }
    let mut facts = Vec::new();
    if let Some(text) = last_request.filter(|t| !t.trim().is_empty()) {
        facts.push(fact(FactKind::LastUserRequest, clip(text.trim())));
    }
    if let Some(text) = question.pending() {
        facts.push(fact(FactKind::PendingQuestion, text));
    }
    for path in modified_files {
        facts.push(fact(FactKind::ModifiedFile, path.clone()));
    }
    let commands = call_commands(&span, &errors);
    let errors = errors.into_iter().filter_map(|e| match e {
        ErrorSource::Known(text) => Some(text),
        ErrorSource::ToolResult {
            call_id,
            tool_name,
            output,
        } => {
            let command = commands.get(&call_id).and_then(Option::as_deref);
            tool_error(command, &tool_name, &output)
        }
    });
    for error in latest(errors.collect()) {
        facts.push(fact(FactKind::Error, error));
    }
    for constraint in latest(dedup(constraints)) {
        facts.push(fact(FactKind::UserConstraint, constraint));
    }
    facts
}

/// An error of the final turn, or a failed tool result whose call is still to be found.
enum ErrorSource {
    Known(String),
    ToolResult {
        call_id: String,
        tool_name: String,
        output: String,
    },
}

/// The commands of the calls whose failed results `errors` holds (the last call of an id wins).
fn call_commands<'m, I>(
    span: &impl Fn() -> I,
    errors: &[ErrorSource],
) -> HashMap<String, Option<String>>
where
    I: Iterator<Item = Cow<'m, AgentMessage>>,
{
    let wanted: HashSet<&str> = errors
        .iter()
        .filter_map(|e| match e {
            ErrorSource::ToolResult { call_id, .. } => Some(call_id.as_str()),
            ErrorSource::Known(_) => None,
        })
        .collect();
    let mut commands = HashMap::new();
    if wanted.is_empty() {
        return commands;
    }
    for m in span() {
        let Some(a) = m.as_assistant() else { continue };
        for call in a.tool_calls().filter(|c| wanted.contains(c.id.as_str())) {
            commands.insert(call.id.clone(), call_command(call).map(str::to_owned));
        }
    }
    commands
}

/// The question the span ends on: the last assistant text after the last user message, when it
/// asks something, and nothing (no tool call, no user reply, no tool result) came after it.
/// Kept verbatim. Fed every message after the last real user message.
#[derive(Default)]
struct Question {
    /// The last assistant message's question, if it has no calls and asks one.
    asked: Option<String>,
    /// A user message or tool result came after it.
    answered: bool,
}

impl Question {
    fn after(&mut self, m: &AgentMessage) {
        match m {
            AgentMessage::Assistant(a) => {
                let has_calls = a
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolCall(_)));
                self.asked = (!has_calls)
                    .then(|| question_paragraph(&join_text(&a.content, "\n")))
                    .flatten();
                self.answered = false;
            }
            AgentMessage::User(_) | AgentMessage::ToolResult(_) => self.answered = true,
            _ => {}
        }
    }

    fn pending(self) -> Option<String> {
        self.asked.filter(|_| !self.answered)
    }
}

fn question_paragraph(text: &str) -> Option<String> {
    text.split("\n\n")
        .map(str::trim)
        .filter(|p| p.contains('?'))
        .last()
        .map(str::to_owned)
}

/// `summary` guarded for the span it summarises: [`extract_facts`] then [`apply_guard`]; the
/// guarded text and the facts that were added.
pub fn guard(
    summary: &str,
    span: &[AgentMessage],
    modified_files: &[String],
    also_present: &str,
) -> (String, Vec<Fact>) {
    apply_guard(summary, also_present, &extract_facts(span, modified_files))
}

/// `summary` plus a "Retained facts" section listing each fact that neither `summary` nor
/// `also_present` (e.g. the file-operations block that will follow it) carries, and the facts
/// that were added. The summary is returned unchanged when nothing is missing.
pub fn apply_guard(summary: &str, also_present: &str, facts: &[Fact]) -> (String, Vec<Fact>) {
    let haystack = normalize(&format!("{summary}\n{also_present}"));
    let missing: Vec<Fact> = facts
        .iter()
        .filter(|f| !haystack.contains(&normalize(&f.text)))
        .cloned()
        .collect();
    if missing.is_empty() {
        return (summary.to_owned(), missing);
    }
    let mut out = summary.trim_end().to_owned();
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(SECTION_HEADING);
    out.push('\n');
    for f in &missing {
        out.push_str(&format!("\n- {}: {}", f.kind.label(), f.text));
    }
    (out, missing)
}

/// The `details.retainedFacts` value for the facts added.
pub fn details_value(added: &[Fact]) -> Value {
    Value::Array(
        added
            .iter()
            .map(|f| json!({"kind": f.kind.name(), "text": f.text}))
            .collect(),
    )
}

/// Adds `retainedFacts` to `details` (an object) when anything was added.
pub fn record_in_details(details: &mut Value, added: &[Fact]) {
    if added.is_empty() {
        return;
    }
    if !details.is_object() {
        *details = json!({});
    }
    if let Some(map) = details.as_object_mut() {
        map.insert("retainedFacts".into(), details_value(added));
    }
}

fn fact(kind: FactKind, text: String) -> Fact {
    Fact { kind, text }
}

/// A user message typed by the user (not the synthetic "continue" prompt).
fn is_real_user(m: &AgentMessage) -> bool {
    matches!(m, AgentMessage::User(u) if u.synthetic != Some(true))
}

fn message_text(m: &AgentMessage) -> String {
    match m {
        AgentMessage::User(u) => u.content.joined_text("\n"),
        AgentMessage::Assistant(a) => join_text(&a.content, "\n"),
        AgentMessage::ToolResult(t) => join_text(&t.content, "\n"),
        _ => String::new(),
    }
}

/// The error a message other than a failed tool result reports, read as the extractive
/// summarizer reads it: a failed command's error line (an aborted run is no error), or an
/// assistant's error message.
fn error_text(m: &AgentMessage) -> Option<String> {
    let text = match m {
        AgentMessage::BashExecution(e) | AgentMessage::PythonExecution(e)
            if execution_outcome(e) == Outcome::Failed =>
        {
            error_line(&e.output)
        }
        AgentMessage::Assistant(a) if a.is_error() => a.error_message.clone(),
        _ => None,
    }?;
    fact_text(&text)
}

/// A failed tool result's error line, unless it is no failure (a search without a match).
fn tool_error(command: Option<&str>, tool_name: &str, output: &str) -> Option<String> {
    let outcome = tool_outcome(command, tool_name, output, true);
    (outcome == Outcome::Failed)
        .then(|| error_line(output))
        .flatten()
        .and_then(|text| fact_text(&text))
}

fn fact_text(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| clip(text))
}

fn dedup(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .rev()
        .filter(|i| seen.insert(normalize(i)))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// The last [`MAX_FACTS_PER_KIND`] items, in order.
fn latest(mut items: Vec<String>) -> Vec<String> {
    let skip = items.len().saturating_sub(MAX_FACTS_PER_KIND);
    items.drain(..skip);
    items
}

/// `text` cut to [`MAX_FACT_CHARS`] characters, with an ellipsis when cut.
fn clip(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(MAX_FACT_CHARS) {
        None => text,
        Some((cut, _)) => format!("{}…", text[..cut].trim_end()),
    }
}

/// Whitespace collapsed, lower case; an ellipsis-clipped fact matches on its kept part.
fn normalize(text: &str) -> String {
    text.trim_end_matches('…')
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::message::ToolCall;
    use serde_json::json;

    fn msg(v: Value) -> AgentMessage {
        AgentMessage::from_value(v).expect("valid message")
    }

    fn user(text: &str) -> AgentMessage {
        msg(json!({"role": "user", "content": text}))
    }

    fn assistant(text: &str) -> AgentMessage {
        msg(json!({"role": "assistant", "content": [{"type": "text", "text": text}]}))
    }

    #[test]
    fn extracts_request_question_errors_and_constraints() {
        let span = vec![
            user("Never touch the lockfile. Fix the build please."),
            msg(
                json!({"role": "toolResult", "toolCallId": "1", "toolName": "bash", "isError": true,
                "content": [{"type": "text", "text": "error[E0308]: mismatched types\n  --> src/a.rs"}]}),
            ),
            user("Always run cargo fmt.\nNow rename the crate."),
            msg(
                json!({"role": "toolResult", "toolCallId": "2", "toolName": "bash", "isError": true,
                "content": [{"type": "text", "text": "permission denied"}]}),
            ),
            assistant("I renamed it.\n\nShould I also update the README?"),
        ];
        let facts = extract_facts(&span, &["src/lib.rs".into()]);
        let by = |k: FactKind| -> Vec<&str> {
            facts
                .iter()
                .filter(|f| f.kind == k)
                .map(|f| f.text.as_str())
                .collect()
        };
        assert_eq!(
            by(FactKind::LastUserRequest),
            ["Always run cargo fmt. Now rename the crate."]
        );
        assert_eq!(
            by(FactKind::PendingQuestion),
            ["Should I also update the README?"]
        );
        assert_eq!(by(FactKind::ModifiedFile), ["src/lib.rs"]);
        // Only the final turn's errors.
        assert_eq!(by(FactKind::Error), ["permission denied"]);
        assert_eq!(
            by(FactKind::UserConstraint),
            ["Never touch the lockfile.", "Always run cargo fmt."]
        );
    }

    #[test]
    fn searches_without_a_match_aborts_and_questions_are_not_facts() {
        let grep = |id: &str| {
            json!({"type": "toolCall", "id": id, "name": "bash",
                   "arguments": {"command": "grep -n console src/theme.ts"}})
        };
        let result = |id: &str, text: &str| {
            msg(
                json!({"role": "toolResult", "toolCallId": id, "toolName": "bash",
                       "isError": true, "content": [{"type": "text", "text": text}]}),
            )
        };
        let span = vec![
            user("i don't understand, does it capture the theme at creation time? Never log."),
            msg(json!({"role": "assistant", "content": [grep("1"), grep("2"), grep("3")]})),
            result("1", "Command exited with code 1"),
            result("2", "Command aborted"),
            result(
                "3",
                "Debugger attached.\ngrep: src/theme.ts: No such file or directory",
            ),
        ];
        let facts = extract_facts(&span, &[]);
        let texts = |k: FactKind| -> Vec<&str> {
            facts
                .iter()
                .filter(|f| f.kind == k)
                .map(|f| f.text.as_str())
                .collect()
        };
        assert_eq!(
            texts(FactKind::Error),
            ["grep: src/theme.ts: No such file or directory"]
        );
        assert_eq!(texts(FactKind::UserConstraint), ["Never log."]);
    }

    #[test]
    fn no_pending_question_when_a_tool_call_follows() {
        let span = vec![
            user("go"),
            msg(json!({"role": "assistant", "content": [
                {"type": "text", "text": "Shall I?"},
                {"type": "toolCall", "id": "1", "name": "read", "arguments": {"path": "a"}}]})),
        ];
        let facts = extract_facts(&span, &[]);
        assert!(facts.iter().all(|f| f.kind != FactKind::PendingQuestion));
    }

    #[test]
    fn guard_appends_only_missing_facts_and_ignores_case_and_spacing() {
        let facts = vec![
            fact(FactKind::ModifiedFile, "src/lib.rs".into()),
            fact(
                FactKind::PendingQuestion,
                "Should I  also\nupdate the README?".into(),
            ),
            fact(FactKind::UserConstraint, "Never touch the lockfile.".into()),
        ];
        let summary = "## Goal\nRename. NEVER touch   the lockfile.";
        let (out, added) = apply_guard(
            summary,
            "<modified-files>\nsrc/lib.rs\n</modified-files>",
            &facts,
        );
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].kind, FactKind::PendingQuestion);
        assert!(out.starts_with(summary));
        assert!(out.contains(
            "\n\n## Retained Facts\n\n- Pending question to the user: Should I  also\nupdate the README?"
        ));
        let (same, none) = apply_guard(&out, "", &facts[1..]);
        assert!(none.is_empty());
        assert_eq!(same, out);
    }

    #[test]
    fn long_facts_are_clipped_with_an_ellipsis_but_questions_are_not() {
        let long = "word ".repeat(200);
        let question = format!("{}?", "why ".repeat(100));
        let span = vec![user(&long), assistant(&question)];
        let facts = extract_facts(&span, &[]);
        let request = &facts[0];
        assert!(request.text.ends_with('…'));
        assert!(request.text.chars().count() <= MAX_FACT_CHARS + 1);
        assert_eq!(facts[1].text, question.trim());
        let mut details = json!({"readFiles": []});
        record_in_details(&mut details, &facts);
        assert_eq!(details["retainedFacts"][0]["kind"], "lastUserRequest");
    }

    // The guard as it read a held span (before messages were read from their entries): the
    // oracle of the streamed reading.
    fn held_facts(span: &[AgentMessage], modified_files: &[String]) -> Vec<Fact> {
        let mut facts = Vec::new();
        let last_user = span.iter().rposition(is_real_user);
        if let Some(i) = last_user {
            let text = message_text(&span[i]);
            if !text.trim().is_empty() {
                facts.push(fact(FactKind::LastUserRequest, clip(text.trim())));
            }
        }
        if let Some(question) = held_question(span, last_user) {
            facts.push(Fact {
                kind: FactKind::PendingQuestion,
                text: question,
            });
        }
        for path in modified_files {
            facts.push(fact(FactKind::ModifiedFile, path.clone()));
        }
        let calls: HashMap<&str, &ToolCall> = span
            .iter()
            .filter_map(AgentMessage::as_assistant)
            .flat_map(|a| a.tool_calls())
            .map(|c| (c.id.as_str(), c))
            .collect();
        let final_turn = &span[last_user.unwrap_or(0)..];
        let errors = final_turn.iter().filter_map(|m| held_error(m, &calls));
        for error in latest(errors.collect()) {
            facts.push(fact(FactKind::Error, error));
        }
        let constraints: Vec<String> = span
            .iter()
            .filter(|m| is_real_user(m))
            .flat_map(|m| instructions(&message_text(m)))
            .map(|s| clip(&s))
            .collect();
        for constraint in latest(dedup(constraints)) {
            facts.push(fact(FactKind::UserConstraint, constraint));
        }
        facts
    }
    fn held_question(span: &[AgentMessage], last_user: Option<usize>) -> Option<String> {
        let from = last_user.map_or(0, |i| i + 1);
        let (pos, assistant) = span
            .iter()
            .enumerate()
            .skip(from)
            .rev()
            .find_map(|(i, m)| m.as_assistant().map(|a| (i, a)))?;
        let tail_is_quiet = span[pos + 1..]
            .iter()
            .all(|m| !matches!(m, AgentMessage::User(_) | AgentMessage::ToolResult(_)));
        let has_calls = assistant
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolCall(_)));
        if !tail_is_quiet || has_calls {
            return None;
        }
        let text = join_text(&assistant.content, "\n");
        let paragraph = text
            .split("\n\n")
            .map(str::trim)
            .filter(|p| p.contains('?'))
            .last()?;
        Some(paragraph.to_owned())
    }
    fn held_error(m: &AgentMessage, calls: &HashMap<&str, &ToolCall>) -> Option<String> {
        let text = match m {
            AgentMessage::ToolResult(t) if t.is_error => {
                let output = join_text(&t.content, "\n");
                let command = calls
                    .get(t.tool_call_id.as_str())
                    .and_then(|c| call_command(c));
                let outcome = tool_outcome(command, &t.tool_name, &output, true);
                (outcome == Outcome::Failed)
                    .then(|| error_line(&output))
                    .flatten()
            }
            AgentMessage::BashExecution(e) | AgentMessage::PythonExecution(e)
                if execution_outcome(e) == Outcome::Failed =>
            {
                error_line(&e.output)
            }
            AgentMessage::Assistant(a) if a.is_error() => a.error_message.clone(),
            _ => None,
        }?;
        let text = text.trim();
        (!text.is_empty()).then(|| clip(text))
    }

    /// Spans of random turns: real and synthetic user messages, assistant replies with and
    /// without calls, questions and errors, failed and passing tool results (a search that
    /// found nothing among them), commands, results whose call comes later or never.
    fn random_span(seed: u64) -> Vec<AgentMessage> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            (state >> 33) % n
        };
        let texts = [
            "Fix the build please.",
            "Never touch the lockfile.",
            "Always run cargo fmt.\nNow rename the crate.",
            "Don't push yet?",
            "",
        ];
        let replies = [
            "Done.",
            "I renamed it.\n\nShould I also update the README?",
            "Which one?\n\nThe first or the second?",
            "error: it failed",
        ];
        let outputs = [
            "error[E0308]: mismatched types\n  --> src/a.rs",
            "permission denied",
            "",
            "ok",
        ];
        let commands = ["grep -rn foo src", "cargo build", "rg bar"];
        (0..next(24) + 1)
            .map(|_| {
                let call = format!("c{}", next(6));
                match next(9) {
                    0 => user(texts[next(5) as usize]),
                    1 => msg(json!({"role": "user", "content": texts[next(5) as usize],
                                    "synthetic": true})),
                    2 => assistant(replies[next(4) as usize]),
                    3 => msg(json!({"role": "assistant", "content": [
                        {"type": "text", "text": replies[next(4) as usize]},
                        {"type": "toolCall", "id": call, "name": "bash",
                         "arguments": {"command": commands[next(3) as usize]}}]})),
                    4 => msg(json!({"role": "assistant", "content": [],
                                    "stopReason": "error", "errorMessage": "overloaded"})),
                    5 | 6 => msg(json!({"role": "toolResult", "toolCallId": call,
                        "toolName": "bash", "isError": next(2) == 0,
                        "content": [{"type": "text", "text": outputs[next(4) as usize]}]})),
                    7 => msg(json!({"role": "bashExecution", "command": commands[next(3) as usize],
                        "output": outputs[next(4) as usize], "exitCode": next(2)})),
                    _ => msg(json!({"role": "toolResult", "toolCallId": call, "toolName": "grep",
                        "isError": true, "content": [{"type": "text", "text": "No matches found"}]})),
                }
            })
            .collect()
    }

    #[test]
    fn facts_read_once_over_the_messages_are_the_facts_of_the_held_span() {
        let mut seen = HashSet::new();
        for seed in 0..3_000 {
            let span = random_span(seed);
            let modified = ["src/lib.rs".to_owned()];
            let facts = extract_facts(&span, &modified);
            assert_eq!(
                facts,
                held_facts(&span, &modified),
                "seed {seed}: {span:#?}"
            );
            seen.extend(facts.iter().map(|f| f.kind));
        }
        assert_eq!(seen.len(), 5, "every kind of fact came up: {seen:?}");
    }
}
