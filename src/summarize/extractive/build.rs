//! The sections drawn from one span of messages, and the item-wise merge with the summary so
//! far.

use crate::summarize::SummaryRequest;

use super::facts::{Facts, Failure, collect_numbered, collect_plans};
use super::sections::{Items, Keep, Sections, first_code_span};
use super::text::{changes_direction, clip, clip_line, condense, fenced, first_line, list_paths};
use super::{
    ANSWER_QUESTION, ERROR_FROM, FILES_MODIFIED, FILES_READ, FINDING, MAX_VERBATIM_CHARS,
    MODEL_KEY, STARTED_NO_RESULT,
};

/// The sections drawn from the messages of this request alone.
pub(super) fn current_sections(req: &SummaryRequest, facts: &Facts) -> Sections {
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
pub(super) fn error_item(failure: &Failure) -> String {
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
pub(super) fn next_steps(facts: &Facts, s: &Sections) -> Items {
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
pub(super) fn file_lists(req: &SummaryRequest, facts: &Facts) -> (Vec<String>, Vec<String>) {
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
pub(super) fn merge(old: &Sections, new: &Sections, facts: &Facts) -> Sections {
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
