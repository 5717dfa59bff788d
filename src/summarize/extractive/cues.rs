//! How the extractive summarizer reads words: whether a user message asks for work or only
//! answers, whether it changes direction, what an assistant sentence states (progress, a
//! decision, a finding, a plan, or nothing worth keeping), and what a command did (a check
//! that passed, a commit, a push). The word lists are the summarizer's judgement in one place;
//! [`super::facts`] applies them in its one pass over the messages.

use crate::compaction::facts::{is_search_command, starts_with_words, strip_fillers};

use super::MAX_ITEM_CHARS;
use super::sections::Items;
use super::text::{
    clip_line, code, contains_word, lower, one_line, plain_sentence, prose_lines, sentences,
    short_command, shown_command,
};

/// A message that only answers: a few words ("ok", "yes, do it", "sounds good") and no
/// slash command. Alone it tells a reader nothing; with what it answers, it does.
pub(super) fn is_short_reply(text: &str) -> bool {
    let text = text.trim();
    !text.starts_with('/') && !text.contains('\n') && text.split_whitespace().count() <= 6
}

/// Replies that carry no task: "ok", "continue", "do it all", "sounds good".
const REPLIES: &[&str] = &[
    "ok",
    "okay",
    "yes",
    "no",
    "continue",
    "go on",
    "go ahead",
    "proceed",
    "keep going",
    "do it",
    "do it all",
    "do that",
    "sounds good",
    "looks good",
    "makes sense",
    "that's it",
    "thanks",
    "thank you",
    "try again",
];

/// Whether a user message asks for work: not a slash command (`/mode`), not a bare reply
/// ("ok", "continue", praise), not a short answer to the assistant's question, not only a
/// question about what happened; and it says what to do (an imperative, "can you", "we need
/// to", "should", "must"), or what is wrong ("doesn't", "crash", "still"), or is long enough
/// to be a brief of its own.
pub(super) fn is_task(text: &str, answers_a_question: bool) -> bool {
    let trimmed = text.trim();
    let first = trimmed.split_whitespace().next().unwrap_or("");
    if first.starts_with('/') && first[1..].chars().all(|c| c.is_alphanumeric() || c == '-') {
        return false;
    }
    let prose: Vec<String> = sentences(trimmed)
        .map(|s| lower(strip_fillers(&lower(s))))
        .collect();
    let words: Vec<&str> = prose
        .iter()
        .flat_map(|s| s.split_whitespace())
        .filter(|w| w.chars().any(char::is_alphabetic))
        .collect();
    let body = words.join(" ");
    let body = body.trim_matches(|c: char| !c.is_alphanumeric());
    if body.is_empty() || REPLIES.contains(&body) {
        return false;
    }
    let content_words = words.len();
    let imperative = prose
        .iter()
        .flat_map(|s| clause_openings(s))
        .any(|clause| IMPERATIVES.iter().any(|v| starts_with_words(clause, v)));
    if content_words < 2
        || (content_words < 4 && !imperative)
        || (answers_a_question && content_words <= 6 && !imperative)
    {
        return false;
    }
    let asks = |cues: &[&str]| cues.iter().any(|c| contains_word(body, c));
    let asks_for_work = asks(REQUEST_CUES);
    // Only questions, and none asks for work: "what did i just execute?"
    let all_questions = prose.iter().all(|s| s.ends_with('?'));
    if all_questions {
        return asks_for_work || content_words >= 15;
    }
    imperative || asks_for_work || asks(PROBLEM_CUES) || content_words >= 25
}

/// The starts of a sentence's clauses: the sentence, and what follows `, ` `; ` ` and `
/// ` then `.
fn clause_openings(sentence: &str) -> impl Iterator<Item = &str> {
    let mut starts = vec![sentence];
    for sep in [", ", "; ", " and ", " then "] {
        starts.extend(
            sentence
                .match_indices(sep)
                .map(|(i, _)| &sentence[i + sep.len()..]),
        );
    }
    starts.into_iter().map(|s| strip_fillers(s.trim_start()))
}

/// Verbs that open a request ("delete the file", "…, then read it in full").
const IMPERATIVES: &[&str] = &[
    "add",
    "adjust",
    "build",
    "change",
    "check",
    "commit",
    "copy",
    "create",
    "delete",
    "explain",
    "find",
    "fix",
    "give",
    "implement",
    "install",
    "investigate",
    "kill",
    "look",
    "make",
    "move",
    "open",
    "push",
    "read",
    "release",
    "remember",
    "remove",
    "rename",
    "revert",
    "rewrite",
    "run",
    "see",
    "show",
    "start",
    "suggest",
    "tell",
    "test",
    "try",
    "undo",
    "update",
    "use",
    "write",
];
/// Words that ask for work, anywhere in a message.
const REQUEST_CUES: &[&str] = &[
    "can you",
    "could you",
    "would you",
    "can we",
    "could we",
    "can't we",
    "should we",
    "how about",
    "why don't",
    "please",
    "let's",
    "we need",
    "need to",
    "needs to",
    "want",
    "i'd like",
    "you can",
    "should",
    "must",
    "make sure",
    "don't",
    "never",
    "always",
    "instead",
];
/// Words that report what is wrong: a task to fix it.
const PROBLEM_CUES: &[&str] = &[
    "doesn't",
    "does not",
    "isn't",
    "is not",
    "not working",
    "broken",
    "crash",
    "crashes",
    "error",
    "exploded",
    "wrong",
    "bug",
    "fails",
    "failed",
    "still",
    "correctly",
];

/// Words that, early in a task, turn away from what came before.
const DIRECTION_CUES: &[&str] = &[
    "actually",
    "instead",
    "forget",
    "scratch that",
    "never mind",
    "nevermind",
    "change of plan",
    "new task",
    "undo",
    "revert",
    "roll back",
    "different approach",
];

/// Whether a task turns away from what came before: it opens with a cue ("actually, …",
/// "you can undo that", "i actually want"); a cue later on ("md link is actually 666666")
/// corrects a detail.
pub(super) fn changes_direction(request: &str) -> bool {
    let first = sentences(request).next().unwrap_or("");
    let lower = lower(first);
    let body = strip_fillers(&lower);
    // Only a subject and a modal may come before the cue: "you can undo that", "i actually
    // want".
    const LEADS: &[&str] = &["i", "you", "we", "can", "could", "please", "just", "let's"];
    let mut rest = body;
    loop {
        let rest_words = rest.trim_start_matches([',', ' ']);
        if DIRECTION_CUES
            .iter()
            .any(|c| starts_with_words(rest_words, c))
            || starts_with_words(rest_words, "stop")
        {
            return true;
        }
        match LEADS.iter().find(|l| starts_with_words(rest_words, l)) {
            Some(lead) => rest = &rest_words[lead.len()..],
            None => return false,
        }
    }
}

/// What an assistant sentence states, when it states something plainly.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Statement {
    Decision,
    Finding,
    Done,
}

/// Openings of sentences that narrate, guess or address the user rather than report.
const NARRATION: &[&str] = &[
    "let me",
    "let's",
    "now let me",
    "now i'll",
    "now i need",
    "i'll",
    "i will",
    "i need",
    "i think",
    "i bet",
    "i see",
    "i guess",
    "i suspect",
    "i wonder",
    "hmm",
    "hm",
    "wait",
    "ok so",
    "looks like",
    "it looks like",
    "it seems",
    "seems",
    "maybe",
    "perhaps",
    "you",
    "if",
    "when",
    "but",
    "first",
    "next",
    "then",
    "great",
    "perfect",
    "good",
    "now",
];

/// Words that make a statement a guess.
const HEDGES: &[&str] = &[
    "might",
    "maybe",
    "probably",
    "likely",
    "possibly",
    "perhaps",
    "could",
    "would",
    "should",
    "seems",
    "appears",
    "i bet",
    "i think",
    "i suspect",
    "not sure",
];

const DECISION_CUES: &[&str] = &[
    "decided",
    "decide to",
    "chose",
    "opted",
    "going with",
    "i'll use",
    "i will use",
    "we'll use",
    "switched to",
    "the fix is to",
    "the approach is",
];
const SOFT_DECISION_CUES: &[&str] = &["instead of", "rather than"];
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
    "moved",
    "replaced",
    "committed",
    "the fix is in",
];
const FUTURE_CUES: &[&str] = &[
    "will", "i'll", "let me", "going to", "next", "need to", "should", "plan", "todo", "could",
    "would", "if", "can",
];

/// Classifies an assistant sentence (see the module docs); `None` for anything else.
pub(super) fn statement_kind(sentence: &str) -> Option<Statement> {
    if sentence.ends_with('?') || sentence.split_whitespace().nth(3).is_none() {
        return None;
    }
    let lower = lower(sentence.trim_start_matches(['*', '_', '`', ' ']));
    let decided = DECISION_CUES.iter().any(|c| contains_word(&lower, c));
    let hedged = HEDGES.iter().any(|c| contains_word(&lower, c));
    if decided && !hedged {
        return Some(Statement::Decision);
    }
    let narrates = NARRATION.iter().any(|n| starts_with_words(&lower, n));
    if narrates || hedged {
        return None;
    }
    if let Some(cue) = FINDING_CUES.iter().find(|c| lower.contains(*c)) {
        let at = lower.find(cue).unwrap_or(0) + cue.len();
        let after = lower[at..].split_whitespace().count();
        return (after >= 3 && !lower.ends_with(':')).then_some(Statement::Finding);
    }
    let done = DONE_CUES.iter().any(|c| contains_word(&lower, c))
        && !FUTURE_CUES.iter().any(|c| contains_word(&lower, c))
        && !lower.contains("you've")
        && !lower.contains("you have");
    if done {
        return Some(Statement::Done);
    }
    // "instead of" in a description of what something has is an observation, not a choice.
    let observes = [" has ", " had ", " have "]
        .iter()
        .any(|w| lower.contains(w));
    (SOFT_DECISION_CUES.iter().any(|c| lower.contains(c)) && !observes)
        .then_some(Statement::Decision)
}

/// Words in a command that make it a check worth reporting (tests, builds, linters).
const VERIFY_CUES: &[&str] = &[
    "test", "tests", "pytest", "jest", "vitest", "build", "check", "clippy", "lint", "tsc", "make",
    "compile", "vet", "mypy",
];

/// For a check (test, build, lint) that succeeded: its Done item and a short outcome, with the
/// pass count when the output reports one.
pub(super) fn verification(command: &str, output: &str) -> Option<(String, String)> {
    let lower = short_command(command).to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| c.is_whitespace() || matches!(c, '|' | '&' | ';'))
        .collect();
    let checks = words.iter().any(|w| {
        VERIFY_CUES
            .iter()
            .any(|c| w == c || w.starts_with(&format!("{c}:")))
    });
    if !checks || is_search_command(command) {
        return None;
    }
    let tests = ["test", "pytest", "jest", "vitest", "spec"]
        .iter()
        .any(|c| lower.contains(c));
    let verb = if tests { "passed" } else { "succeeded" };
    let outcome = match passed_count(output) {
        Some(1) => format!("{verb} (1 test)"),
        Some(n) => format!("{verb} ({n} tests)"),
        None => verb.to_owned(),
    };
    Some((format!("{} {outcome}.", shown_command(command)), outcome))
}

/// A change to the repository worth a Done item: a commit (with its message), a new branch, a
/// tag, a push, a publish.
pub(super) fn repository_change(command: &str) -> Option<String> {
    let short = short_command(command);
    // The last step says what happened: `git add . && git commit -m "…"` is a commit.
    let c = short.rsplit("&& ").next().unwrap_or(&short).trim();
    let words: Vec<&str> = c.split_whitespace().collect();
    match words.as_slice() {
        ["git", "tag", tag, ..] if !tag.starts_with('-') => {
            return Some(format!("Tagged `{tag}`."));
        }
        ["git", "push", rest @ ..] => {
            let target = rest
                .iter()
                .filter(|w| !w.starts_with('-'))
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            return Some(if target.is_empty() {
                "Pushed.".to_owned()
            } else {
                format!("Pushed `{target}`.")
            });
        }
        ["npm", "publish", ..] | ["npm", "run", "publish", ..] | ["cargo", "publish", ..] => {
            return Some(format!("Published: {}.", code(c)));
        }
        _ => {}
    }
    if c.starts_with("git commit") {
        let message = c
            .split_once(" -m ")
            .map(|(_, m)| m.trim().trim_matches(['"', '\'']).to_owned());
        return Some(match message {
            Some(m) => format!("Committed: {}", code(&one_line(&m, MAX_ITEM_CHARS / 2))),
            None => "Committed the changes.".to_owned(),
        });
    }
    let branch = c
        .strip_prefix("git checkout -b ")
        .or_else(|| c.strip_prefix("git switch -c "))?;
    let name = branch.split_whitespace().next()?;
    Some(format!("Created the branch `{name}`."))
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

/// Lead-ins of a list that lays out what is still to do.
const PLAN_LEAD_INS: &[&str] = &[
    "next step",
    "next steps",
    "remaining",
    "todo",
    "to do",
    "plan",
    "i'll",
    "i will",
    "we'll",
    "we will",
    "still need",
    "left to",
    "then i",
    "options",
];
const PLAN_CUES: &[&str] = &[
    "next",
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
    "i could",
    "we could",
];

/// The plans of the assistant's last text: sentences that say what comes next, and the items
/// of a numbered list introduced as a plan ("Next steps:", "I'll:"). A list that describes
/// what was done ("The flow now:") is not a plan.
pub(super) fn collect_plans(text: &str, out: &mut Items) {
    for sentence in sentences(text) {
        let lower = lower(sentence);
        if sentence.ends_with('?') || sentence.trim_end().ends_with(':') {
            continue;
        }
        let hedged = ["might", "maybe", "probably"]
            .iter()
            .any(|h| contains_word(&lower, h));
        if !hedged
            && PLAN_CUES.iter().any(|c| contains_word(&lower, c))
            && let Some(item) = plain_sentence(sentence)
        {
            out.push(clip_line(&item));
        }
    }
    let mut in_plan = false;
    for line in prose_lines(text) {
        let trimmed = line.trim_start();
        let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
        let item = (digits > 0)
            .then(|| &trimmed[digits..])
            .and_then(|rest| rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")));
        match item {
            Some(item) if in_plan => {
                if let Some(item) = plain_sentence(item) {
                    out.push(clip_line(&item));
                }
            }
            Some(_) => {}
            None if trimmed.is_empty() => {}
            None => {
                let lower = lower(trimmed);
                in_plan = trimmed.ends_with(':')
                    && PLAN_LEAD_INS.iter().any(|c| contains_word(&lower, c));
            }
        }
    }
}
