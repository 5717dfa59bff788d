//! The sections drawn from one span of messages, and the item-wise merge with the summary so
//! far.

use std::collections::BTreeSet;

use crate::summarize::SummaryRequest;

use super::cues::collect_plans;
use super::facts::{Done, Facts, Failure};
use super::sections::{Items, Keep, Sections, first_code_span, scaled};
use super::text::{clip, clip_line, condense, few_paths, first_line};
use super::{
    ANSWER_QUESTION, CHANGED_DIRECTION, CURRENT_REQUEST, EARLIER_WORK, ERROR_FROM, FINDING,
    MAX_NEXT_STEPS, MAX_VERBATIM_CHARS, MODEL_KEY, NO_TASK_RECOGNISED, THEN,
};

/// The sections drawn from the messages of this request alone.
pub(super) fn current_sections(req: &SummaryRequest, facts: &Facts) -> Sections {
    let mut s = Sections::scaled(req.detail_scale);
    // Goal: the first task in the user's words, the latest changes of direction, and the
    // task the user asked for last.
    if let Some((first, rest)) = facts.tasks.split_first() {
        s.goal.push(condense(&first.text));
        let (latest, middle) = match rest.split_last() {
            Some((latest, middle)) => (Some(latest), middle),
            None => (None, rest),
        };
        let turns: Vec<_> = middle.iter().filter(|t| t.changes_direction).collect();
        for task in turns.iter().rev().take(2).rev() {
            s.goal
                .push(format!("{CHANGED_DIRECTION} {}", condense(&task.text)));
        }
        if let Some(latest) = latest {
            s.goal
                .push(format!("{CURRENT_REQUEST} {}", condense(&latest.text)));
        }
    }
    // User messages none of which reads as a request for work ("step 1", "next one") still
    // say what the user was after: their first words, marked as such.
    if facts.tasks.is_empty()
        && let Some(first) = facts.messages_from_user.first()
    {
        s.goal
            .push(format!("{NO_TASK_RECOGNISED} {}", condense(first)));
    }
    for constraint in &facts.constraints {
        s.constraints.push(constraint.clone());
    }
    // Done: what was said to be done, files changed (per task), checks passed and commits, in
    // the order they happened; the latest state per command.
    for item in facts.done.iter().flatten() {
        match item {
            Done::Text(text) => s.done.push(text.clone()),
            Done::Files(task) => {
                if let Some(files) = facts.changed.get(task) {
                    s.done.push(files_item(files, facts));
                }
            }
        }
    }
    // A task with nothing done yet still has progress: what was looked into for it.
    if !facts.done_since_task
        && let Some(item) = looked_item(facts)
    {
        s.done.push(item);
    }
    if let Some(latest) = facts.tasks.last()
        && !facts.task_done()
    {
        s.in_progress.push(condense(&latest.text));
    }
    for failure in facts.blocking() {
        s.blocked.push(blocked_item(failure));
    }
    for decision in &facts.decisions {
        s.decisions.push(decision.clone());
    }
    s.next_steps = next_steps(facts, &s);
    // Critical Context.
    s.critical.question = facts.pending_question();
    s.critical.request = facts
        .messages_from_user
        .last()
        .map(|r| clip(r.trim(), MAX_VERBATIM_CHARS));
    s.critical.reply_to = facts.reply_to.clone();
    for finding in &facts.findings {
        s.critical.findings.push(format!("{FINDING} {finding}"));
    }
    // The exact errors of the last turn, else what still blocks the current task.
    let mut errors: Vec<&Failure> = facts.final_turn_failures().collect();
    if errors.is_empty() {
        errors = facts.blocking().collect();
    }
    for failure in errors {
        s.critical.errors.push(error_item(failure));
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

/// The files changed for one task: "Changed `a` and `b`; created `c`."
fn files_item(files: &BTreeSet<String>, facts: &Facts) -> String {
    let (created, changed): (Vec<String>, Vec<String>) = files
        .iter()
        .cloned()
        .partition(|p| facts.created.contains(p));
    let item = match (changed.is_empty(), created.is_empty()) {
        (false, false) => format!(
            "Changed {}; created {}.",
            few_paths(&changed),
            few_paths(&created)
        ),
        (false, true) => format!("Changed {}.", few_paths(&changed)),
        (true, _) => format!("Created {}.", few_paths(&created)),
    };
    clip_line(&item)
}

/// "Read `a`, `b` and 3 other files; searched for `as i32` in `src`."
fn looked_item(facts: &Facts) -> Option<String> {
    let read: Vec<String> = facts.read_since_task.to_vec();
    let searched = &facts.searched_since_task;
    let searches = || {
        let mut shown: Vec<String> = searched.iter().take(3).cloned().collect();
        if searched.len() > 3 {
            shown.push(format!("{} other patterns", searched.len() - 3));
        }
        super::text::and_list(&shown)
    };
    let item = match (read.is_empty(), searched.is_empty()) {
        (true, true) => return None,
        (false, true) => format!("Read {}.", few_paths(&read)),
        (true, false) => format!("Searched for {}.", searches()),
        (false, false) => format!("Read {}; searched for {}.", few_paths(&read), searches()),
    };
    Some(clip_line(&item))
}

/// A failure as it blocks: "`cargo test` failed: error[E0308]: mismatched types".
fn blocked_item(failure: &Failure) -> String {
    clip_line(&format!(
        "{} failed: {}",
        failure.label,
        first_line(&failure.error)
    ))
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
    format!(
        "{ERROR_FROM}{label}{state}:\n{}",
        super::text::fenced(&failure.error)
    )
}

/// Next Steps, most urgent first: the user's answer to a pending question, then the plans
/// in the assistant's last text (when nothing the user said came after it and it was not
/// cut off); else the failure that blocks. The task in progress is not repeated here.
fn next_steps(facts: &Facts, s: &Sections) -> Items {
    let mut steps = Items::with_cap(Keep::Oldest, scaled(MAX_NEXT_STEPS, s.scale));
    if let Some(question) = facts.pending_question() {
        let line = question
            .lines()
            .find(|l| l.contains('?'))
            .unwrap_or(&question);
        steps.push(clip_line(&format!("{ANSWER_QUESTION} {}", line.trim())));
    }
    if let Some(last) = facts.last_assistant.as_deref().filter(|_| {
        facts.ends_with_assistant && !facts.last_text_narrates_calls && !facts.last_assistant_cut
    }) {
        collect_plans(last, &mut steps);
    }
    if steps.is_empty()
        && let Some(blocked) = s.blocked.iter().next_back()
    {
        steps.push(clip_line(&format!("Fix: {blocked}")));
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

/// Whether a goal item names the current request of its summary (ours, in either version).
fn is_current(goal: &str) -> bool {
    goal.starts_with(CURRENT_REQUEST) || goal.starts_with("Latest request:")
}

/// Merges the sections of a later span (`new`, with its `facts`) into those of the summary so
/// far, item by item.
pub(super) fn merge(old: &Sections, new: &Sections, facts: &Facts) -> Sections {
    let mut out = Sections::scaled(old.scale);
    // Goals: the old ones (less an old current request the new span replaces), then the new
    // span's, its first task marked as coming later.
    let replaced = new.goal.iter().any(|g| is_current(g)) || !facts.tasks.is_empty();
    out.goal
        .extend(old.goal.iter().filter(|g| !(replaced && is_current(g))));
    for (i, goal) in new.goal.iter().enumerate() {
        let later = i == 0 && !old.goal.is_empty() && !is_current(goal);
        let labelled = goal.starts_with(CHANGED_DIRECTION) || goal.starts_with(THEN);
        if later && !labelled {
            // The span's only task is also its current one.
            let label = if facts.tasks.len() == 1 {
                CURRENT_REQUEST
            } else {
                THEN
            };
            out.goal.push(format!("{label} {goal}"));
        } else {
            out.goal.push(goal.clone());
        }
    }
    out.constraints.extend(old.constraints.iter());
    out.constraints.extend(new.constraints.iter());

    // Work left in progress is done when the new span claims completion before the user asked
    // for anything else. What is in progress now comes first.
    // Once the user has asked for other work since, what the old summary had in progress is
    // history whose outcome these messages do not tell: a note, not work in progress.
    let moved_on = !facts.tasks.is_empty();
    let mut finished = Vec::new();
    let mut still = Vec::new();
    let mut earlier = Vec::new();
    for item in old.in_progress.iter() {
        let still_asked = new.in_progress.contains(item);
        if !still_asked && (facts.completed_before_task || new.done.contains(item)) {
            finished.push(item.clone());
        } else if moved_on && !still_asked {
            earlier.push(format!("{EARLIER_WORK} {item}"));
        } else {
            still.push(item.clone());
        }
    }
    out.in_progress
        .extend(new.in_progress.iter().filter(|i| !new.done.contains(i)));
    out.in_progress.extend(still.iter());
    out.done.extend(old.done.iter());
    out.done.extend(finished.iter());
    out.done.extend(new.done.iter());

    // A failure is no longer blocking once the same command or file succeeded.
    let resolved = |item: &str| first_code_span(item).is_some_and(|k| facts.succeeded.contains(k));
    out.blocked = old.blocked.filtered(resolved);
    out.blocked.extend(new.blocked.iter());
    out.decisions.extend(old.decisions.iter());
    out.decisions.extend(new.decisions.iter());

    // The old next steps stand until the user asks for something else.
    let answered = !facts.messages_from_user.is_empty();
    out.next_steps = if !new.next_steps.is_empty() || moved_on {
        new.next_steps.clone()
    } else {
        old.next_steps
            .filtered(|s| answered && s.starts_with(ANSWER_QUESTION))
    };

    let critical = &mut out.critical;
    critical.question = new
        .critical
        .question
        .clone()
        .or_else(|| old.critical.question.clone().filter(|_| !answered));
    // What a short reply answers goes with that reply, never with a later message.
    (critical.request, critical.reply_to) = match &new.critical.request {
        Some(request) => (Some(request.clone()), new.critical.reply_to.clone()),
        None => (old.critical.request.clone(), old.critical.reply_to.clone()),
    };
    critical.findings.extend(old.critical.findings.iter());
    critical.findings.extend(new.critical.findings.iter());
    critical
        .errors
        .extend(old.critical.errors.iter().filter(|e| !resolved(e)));
    critical.errors.extend(new.critical.errors.iter());
    critical.other.extend(old.critical.other.iter());
    critical.other.extend(new.critical.other.iter());

    out.notes.extend(old.notes.iter());
    out.notes.extend(earlier.iter());
    out.notes.extend(new.notes.iter());
    out
}
