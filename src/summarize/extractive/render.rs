//! The layouts: the structured summary (history and branch), the turn prefix and the short
//! summary.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::summarize::SummaryRequest;

use super::build::{current_sections, file_lists, merge};
use super::facts::{Action, Facts};
use super::sections::{Items, Keep, Sections, dedupe_key, first_code_span, scaled};
use super::text::{
    clip, clip_line, condense, fenced, few_paths, first_line, list_paths, one_line, plain_sentence,
    sentences,
};
use super::{
    EXTRACTIVE_NOTE, FILES_MODIFIED, FILES_READ, FINDING, MAX_ACTIONS_HEAD, MAX_ACTIONS_TAIL,
    MAX_DECISIONS, MAX_DONE, MAX_FINDINGS, MAX_ITEM_CHARS, MAX_NOTES, MAX_SHORT_SENTENCE_CHARS,
    MAX_VERBATIM_CHARS, NEW_FILE,
};

pub(super) fn push_list<'a>(
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

pub(super) fn render_progress(out: &mut String, s: &Sections, branch_style: bool) {
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
pub(super) fn render(s: &Sections, with_notes: bool, none: bool) -> String {
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

pub(super) fn history(req: &SummaryRequest, facts: &Facts) -> String {
    let mut merged = Sections::scaled(req.detail_scale);
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

pub(super) fn branch(req: &SummaryRequest, facts: &Facts) -> String {
    render(&current_sections(req, facts), false, true)
}

pub(super) fn turn_prefix(req: &SummaryRequest, facts: &Facts) -> String {
    let mut out = String::from("## Original Request\n");
    match facts.messages_from_user.first() {
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
    let scale = req.detail_scale;
    let (head, tail) = (
        scaled(MAX_ACTIONS_HEAD, scale),
        scaled(MAX_ACTIONS_TAIL, scale),
    );
    if total > head + tail {
        progress.extend(facts.actions[..head].iter().map(shown));
        progress.push(format!("… {} more steps …", total - head - tail));
        progress.extend(facts.actions[total - tail..].iter().map(shown));
    } else {
        progress.extend(facts.actions.iter().map(shown));
    }
    let mut statements = Items::with_cap(Keep::Newest, scaled(MAX_DONE, scale));
    statements.extend(facts.statements.iter());
    progress.extend(statements.iter().cloned());
    if !progress.is_empty() {
        push_list(&mut out, "## Early Progress", progress.iter(), "- ");
        out.push('\n');
    }

    // Context for Suffix: what the kept part builds on.
    let mut context = Items::with_cap(Keep::Newest, scaled(4 * MAX_NOTES, scale));
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
    for finding in facts
        .findings
        .iter()
        .rev()
        .take(scaled(MAX_FINDINGS, scale))
        .rev()
    {
        context.push(format!("{FINDING} {finding}"));
    }
    for decision in facts
        .decisions
        .iter()
        .rev()
        .take(scaled(MAX_DECISIONS, scale))
        .rev()
    {
        context.push(format!("Decision: {decision}"));
    }
    // Every real failure of this part of the turn, with its exact error line: the kept part
    // may be where it is fixed.
    for failure in &facts.failures {
        let state = if failure.resolved {
            "Failed, then passed"
        } else {
            "Still failing"
        };
        context.push(clip_line(&format!(
            "{state}: {}: {}",
            failure.label,
            first_line(&failure.error)
        )));
    }
    if let Some(note) = facts.last_assistant.as_deref().and_then(last_note) {
        context.push(format!("Last assistant note: {note}"));
    }
    if !context.is_empty() {
        push_list(&mut out, "## Context for Suffix", context.iter(), "- ");
    }
    out.trim_end().to_owned()
}

/// The first complete sentences of the assistant's last text (a lead-in without its list is
/// left out), within one item.
fn last_note(text: &str) -> Option<String> {
    let mut note = String::new();
    for sentence in sentences(text).filter_map(plain_sentence) {
        if !note.is_empty() && note.chars().count() + sentence.chars().count() > MAX_ITEM_CHARS {
            break;
        }
        if !note.is_empty() {
            note.push(' ');
        }
        note.push_str(&sentence);
    }
    (!note.is_empty()).then(|| clip_line(&note))
}

/// A first-person clause about how a change was made, from a decision sentence:
/// "I decided to widen X, so Y." → "to widen X".
pub(super) fn decision_clause(decision: &str) -> Option<String> {
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
pub(super) fn sentence(text: &str) -> String {
    let text = one_line(text, MAX_SHORT_SENTENCE_CHARS);
    let text = text.trim_end_matches(['.', '!', ',', ';', ':', ' ']);
    format!("{text}.")
}

/// Two or three first-person sentences about what changed: the files changed and added, and
/// how (from the decisions), never how the work went.
pub(super) fn short(req: &SummaryRequest, facts: &Facts) -> String {
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
        if item.ends_with(NEW_FILE)
            && let Some(path) = first_code_span(item)
        {
            created.insert(path.to_owned());
        }
        let after = item
            .strip_prefix("Created ")
            .or_else(|| item.split_once("; created ").map(|(_, rest)| rest));
        created.extend(after.into_iter().flat_map(code_spans).map(str::to_owned));
    }
    let changed: Vec<String> = modified
        .iter()
        .filter(|p| !created.contains(*p))
        .cloned()
        .collect();
    let added: Vec<String> = modified
        .iter()
        .filter(|p| created.contains(*p))
        .cloned()
        .collect();

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
            few_paths(&changed),
            few_paths(&added)
        ))),
        (false, true) => out.push(sentence(&format!("I changed {}{how}", few_paths(&changed)))),
        (true, false) => out.push(sentence(&format!("I added {}{how}", few_paths(&added)))),
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
            .or_else(|| facts.tasks.first().map(|t| condense(&t.text)));
        if let Some(goal) = goal {
            let goal = sentences(&goal).next().unwrap_or_default().to_owned();
            out.push(sentence(&format!("I worked toward this goal: {goal}")));
        }
    }
    out.truncate(3);
    out.join(" ")
}

/// The backtick-quoted spans of `text`, in order.
fn code_spans(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// A finding as the cause of the change: "Found it: X" → "The cause: X".
pub(super) fn cause_sentence(finding: &str) -> String {
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
