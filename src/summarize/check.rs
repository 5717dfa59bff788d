//! Checks on a model's answer before it is kept as a summary.
//!
//! A model can answer without failing and still write nothing worth keeping: a small base
//! model continues the transcript, copies the prompt's instructions back, or loops on one
//! line; a server may report such an answer as a normal stop. Every model-written answer passes
//! [`check_answer`] first. It is rejected, with the reason, when it
//! * repeats the prompt's markup (`<conversation>`, `<previous-summary>`, ...) or continues the
//!   transcript (`[User]: ...` lines),
//! * copies the instructions or the conversation instead of summarising them,
//! * degenerates into repetition (one line over and over, a looping phrase, a run of one
//!   character).
//!
//! An answer cut at the output limit is kept by its complete sections (the `## ` headings the
//! prompts ask for; for the short summary, its complete sentences) when what remains passes the
//! same checks and says what the user asked for (`super::grounded`: its goal, by a path, a
//! name or two of its words); with nothing complete, or nothing of the goal, it is rejected.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{Purpose, SummarizeError, SummaryRequest};

/// Lines shorter than this (headings, `- [x]`, blank) say nothing about copying.
const MIN_COPIED_LINE_CHARS: usize = 24;
/// An answer whose long lines come from the instructions at this share is an echo.
const INSTRUCTION_ECHO_SHARE: f64 = 0.4;
/// An answer whose long lines come from the conversation at this share is a copy.
const CONVERSATION_COPY_SHARE: f64 = 0.6;
/// A line at least this long that comes three times in a short answer is a loop.
const MIN_LOOPED_LINE_CHARS: usize = 12;
/// Words looked at together when measuring repetition.
const PHRASE_WORDS: usize = 5;
/// Below this share of distinct phrases, the answer is looping.
const MIN_DISTINCT_PHRASES: f64 = 0.35;
/// A run of one character this long is not prose.
const MAX_CHAR_RUN: usize = 200;
/// Transcript labels the serialised conversation uses; a summary never starts lines with them.
const TRANSCRIPT_LABELS: &[&str] = &[
    "[User]:",
    "[Assistant]:",
    "[Assistant thinking]:",
    "[Assistant tool calls]:",
    "[Tool result]:",
];
/// Tags of our prompt layout.
const PROMPT_TAGS: &[&str] = &[
    "<conversation>",
    "</conversation>",
    "<previous-summary>",
    "</previous-summary>",
    "<additional-context>",
    "</additional-context>",
];

/// What the checks found in a kept answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Complete, and every check passed.
    Passed,
    /// Cut at the output limit: `kept` complete parts (sections, or sentences of the short
    /// summary) are kept, the unfinished rest dropped; the kept part passed every check.
    CutKept { kept: usize },
}

impl Verdict {
    /// A few words for reports: `checks passed`, `cut at the output limit; 3 complete
    /// sections kept`.
    pub fn describe(&self, purpose: Purpose) -> String {
        match self {
            Verdict::Passed => "checks passed".to_owned(),
            Verdict::CutKept { kept } => {
                let unit = if purpose == Purpose::Short {
                    "sentence"
                } else {
                    "section"
                };
                let plural = if *kept == 1 { "" } else { "s" };
                format!(
                    "cut at the output limit; {kept} complete {unit}{plural} kept, checks passed"
                )
            }
        }
    }
}

/// The answer to keep and what the checks found.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub text: String,
    pub verdict: Verdict,
}

/// Checks `text`, the answer to `req`; `cut` when the answer stopped at the output limit.
/// Errors: [`SummarizeError::Empty`] for no text, [`SummarizeError::Rejected`] with the reason
/// otherwise.
pub fn check_answer(
    req: &SummaryRequest,
    text: &str,
    cut: bool,
) -> Result<Checked, SummarizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SummarizeError::Empty);
    }
    let (text, verdict) = if cut {
        let (kept, count) = complete_part(req.purpose, text).ok_or_else(|| {
            rejected(format!(
                "it was cut at the output limit of {} tokens before its first {} ended",
                req.max_tokens,
                if req.purpose == Purpose::Short {
                    "sentence"
                } else {
                    "section"
                }
            ))
        })?;
        (kept, Verdict::CutKept { kept: count })
    } else {
        (text.to_owned(), Verdict::Passed)
    };
    if let Some(reason) = junk(&req.prompt, &text) {
        return Err(rejected(reason));
    }
    // What is left of a cut answer is a fragment the model did not choose to end with: it is
    // kept only when it says what the user asked for.
    if cut && let Some(reason) = super::grounded::ungrounded(req, &text) {
        return Err(rejected(reason));
    }
    Ok(Checked { text, verdict })
}

fn rejected(reason: String) -> SummarizeError {
    SummarizeError::Rejected { reason }
}

/// Why `answer` is not a summary of `prompt`, if it is not.
pub fn junk(prompt: &str, answer: &str) -> Option<String> {
    echo(prompt, answer).or_else(|| repetition(answer))
}

/// The complete part of a cut answer and how many parts it has: every `## ` section but the
/// unfinished last one, or (short summary, or an answer without sections) every complete
/// sentence.
fn complete_part(purpose: Purpose, text: &str) -> Option<(String, usize)> {
    let starts: Vec<usize> = line_starts(text)
        .filter(|&at| text[at..].starts_with("## "))
        .collect();
    if purpose != Purpose::Short && !starts.is_empty() {
        // The last section is the one that was cut.
        let complete = starts.len() - 1;
        if complete == 0 {
            return None;
        }
        let end = starts[complete];
        return Some((text[..end].trim_end().to_owned(), complete));
    }
    if purpose != Purpose::Short {
        return None;
    }
    let ends: Vec<usize> = text
        .char_indices()
        .filter(|&(at, c)| {
            matches!(c, '.' | '!' | '?')
                && text[at + 1..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
        })
        .map(|(at, _)| at + 1)
        .collect();
    let end = *ends.last()?;
    Some((text[..end].to_owned(), ends.len()))
}

fn line_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(text.match_indices('\n').map(|(at, _)| at + 1))
}

/// An echo of the prompt: its markup, the transcript continued, its instructions or its
/// conversation copied.
fn echo(prompt: &str, answer: &str) -> Option<String> {
    let lower = answer.to_ascii_lowercase();
    if let Some(tag) = PROMPT_TAGS.iter().find(|tag| lower.contains(*tag)) {
        return Some(format!("it repeats the prompt's markup ({tag})"));
    }
    let labelled = answer
        .lines()
        .filter(|line| {
            TRANSCRIPT_LABELS
                .iter()
                .any(|l| line.trim_start().starts_with(l))
        })
        .count();
    if labelled >= 2 {
        return Some(format!(
            "it continues the transcript ({labelled} lines start with a speaker label) instead of \
             summarising it"
        ));
    }
    let (conversation, instructions) = split_prompt(prompt);
    // Headings are the format the prompt asks for: a summary repeats them.
    let long: Vec<&str> = answer
        .lines()
        .map(str::trim)
        .filter(|l| l.chars().count() >= MIN_COPIED_LINE_CHARS && !l.starts_with('#'))
        .collect();
    if long.is_empty() {
        return None;
    }
    let share = |source: &str| {
        let copied = long.iter().filter(|l| source.contains(**l)).count();
        (copied, copied as f64 / long.len() as f64)
    };
    // No line of a summary comes from the instructions (they describe, they do not report):
    // in a short answer one such line is already an echo.
    let (copied, from_instructions) = share(&instructions);
    if copied >= 1 && from_instructions >= INSTRUCTION_ECHO_SHARE {
        return Some(format!(
            "it repeats the instructions ({copied} of its {} long lines are copied from the prompt)",
            long.len()
        ));
    }
    let (copied, from_conversation) = share(&without_carried_summaries(conversation));
    if copied >= 3 && from_conversation >= CONVERSATION_COPY_SHARE {
        return Some(format!(
            "it copies the conversation instead of summarising it ({copied} of its {} long lines \
             are verbatim)",
            long.len()
        ));
    }
    None
}

/// The conversation block and the rest of the prompt without the previous summary (which an
/// update summary legitimately repeats).
fn split_prompt(prompt: &str) -> (&str, String) {
    let (conversation, rest) = match prompt.strip_prefix("<conversation>\n") {
        Some(body) => match body.find("\n</conversation>") {
            Some(end) => (&body[..end], &body[end..]),
            None => (body, ""),
        },
        None => ("", prompt),
    };
    let instructions = match (
        rest.find("<previous-summary>"),
        rest.find("</previous-summary>"),
    ) {
        (Some(open), Some(close)) if open < close => {
            format!(
                "{}{}",
                &rest[..open],
                &rest[close + "</previous-summary>".len()..]
            )
        }
        _ => rest.to_owned(),
    };
    (conversation, instructions)
}

/// The conversation without the summaries it carries (`<summary>` blocks of earlier
/// compactions and branch summaries): a new summary legitimately repeats their lines, as an
/// update repeats its previous summary.
fn without_carried_summaries(conversation: &str) -> Cow<'_, str> {
    const OPEN: &str = "<summary>";
    const CLOSE: &str = "</summary>";
    if !conversation.contains(OPEN) {
        return Cow::Borrowed(conversation);
    }
    let mut out = String::with_capacity(conversation.len());
    let mut rest = conversation;
    while let Some(open) = rest.find(OPEN) {
        out.push_str(&rest[..open]);
        match rest[open..].find(CLOSE) {
            Some(close) => rest = &rest[open + close + CLOSE.len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Degenerate repetition: one line many times, a looping phrase, a long run of one character.
fn repetition(answer: &str) -> Option<String> {
    let lines: Vec<&str> = answer
        .lines()
        .map(str::trim)
        .filter(|l| l.len() >= 3)
        .collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for line in &lines {
        *counts.entry(line).or_default() += 1;
    }
    // Many short lines over and over, or a sentence three times in a short answer (a small
    // model's loop, cut at the limit before the phrase measure below can see it).
    let looping = |line: &str, n: usize| {
        (lines.len() >= 6 && n >= 4 && n * 10 >= lines.len() * 3)
            || (n >= 3 && line.chars().count() >= MIN_LOOPED_LINE_CHARS && n * 5 >= lines.len())
    };
    let mut counted: Vec<(&str, usize)> = counts.into_iter().collect();
    counted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if let Some((line, n)) = counted.into_iter().find(|(line, n)| looping(line, *n)) {
        return Some(format!(
            "it repeats the line {:?} {n} times",
            super::error::excerpt(line, 60)
        ));
    }
    let words: Vec<&str> = answer.split_whitespace().collect();
    if words.len() >= 12 * PHRASE_WORDS {
        let phrases: Vec<&[&str]> = words.windows(PHRASE_WORDS).collect();
        let distinct: std::collections::HashSet<&[&str]> = phrases.iter().copied().collect();
        let share = distinct.len() as f64 / phrases.len() as f64;
        if share < MIN_DISTINCT_PHRASES {
            return Some(format!(
                "it repeats itself (only {:.0}% of its {PHRASE_WORDS}-word phrases are distinct)",
                share * 100.0
            ));
        }
    }
    let mut run = 0;
    let mut previous = None;
    for c in answer.chars() {
        if c.is_whitespace() {
            previous = None;
            run = 0;
            continue;
        }
        run = if previous == Some(c) { run + 1 } else { 1 };
        previous = Some(c);
        if run >= MAX_CHAR_RUN {
            return Some(format!(
                "it repeats the character {c:?} {MAX_CHAR_RUN} times and more"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarize::Prompts;
    use crate::summarize::prompts::HistoryPrompt;

    fn history(conversation: &str) -> SummaryRequest {
        let p = Prompts::embedded();
        let prompt = p.history_prompt(&HistoryPrompt {
            conversation,
            previous_summary: Some("## Goal\n- Keep the parser fast and correct for all inputs"),
            ..Default::default()
        });
        SummaryRequest::new(Purpose::History, p.system, prompt, 256)
    }

    const CONVERSATION: &str = "[User]: fix the parser bug in src/parse.rs, it drops the last token\n\n\
        [Assistant]: I changed the tokenizer loop so the final token is pushed before returning\n\n\
        [Tool result]: test result: ok. 42 passed; 0 failed; finished in 0.31s for the parser";

    const GOOD: &str = "## Goal\n- Fix the parser in src/parse.rs that drops the last token\n\n\
        ## Progress\n### Done\n- [x] Changed the tokenizer loop to push the final token\n\n\
        ## Next Steps\n1. Add a regression test for inputs that end without a newline";

    #[test]
    fn a_real_summary_passes() {
        let checked = check_answer(&history(CONVERSATION), GOOD, false).unwrap();
        assert_eq!(checked.verdict, Verdict::Passed);
        assert_eq!(checked.text, GOOD);
        // Repeating the previous summary is what an update does: not an echo.
        let update = format!("{GOOD}\n- Keep the parser fast and correct for all inputs");
        assert!(check_answer(&history(CONVERSATION), &update, false).is_ok());
    }

    #[test]
    fn empty_is_empty() {
        assert_eq!(
            check_answer(&history(CONVERSATION), "  \n ", false),
            Err(SummarizeError::Empty)
        );
    }

    fn reason(answer: &str) -> String {
        match check_answer(&history(CONVERSATION), answer, false) {
            Err(SummarizeError::Rejected { reason }) => reason,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn markup_and_transcript_continuations_are_rejected() {
        assert!(reason("</conversation>\n\nSummarize.").contains("markup"));
        let continued = "[User]: and now the lexer please\n\n[Assistant]: Sure, I will look at it";
        assert!(reason(continued).contains("continues the transcript"));
    }

    #[test]
    fn copied_instructions_are_rejected() {
        let template = Prompts::embedded().update_summary;
        let copied: String = template
            .lines()
            .filter(|l| !l.contains('<'))
            .take(30)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            reason(&copied).contains("repeats the instructions"),
            "{copied}"
        );
    }

    #[test]
    fn a_copied_conversation_is_rejected() {
        let copied = "fix the parser bug in src/parse.rs, it drops the last token\n\
            I changed the tokenizer loop so the final token is pushed before returning\n\
            test result: ok. 42 passed; 0 failed; finished in 0.31s for the parser";
        assert!(reason(copied).contains("copies the conversation"));
    }

    #[test]
    fn repeating_a_carried_summary_is_not_a_copy() {
        // A branch that passed through a compaction carries its summary as a `<summary>` block
        // (the context's compaction and branch summary messages); the new summary keeps its
        // lines, as the fake model in the oh-my-pi suite does.
        let carried = "## Goal\n- Work through the project's modules one at a time\n\
            ## Progress\n- [x] Read several modules and reported on each of them\n\
            ## Next Steps\n1. Continue with the remaining modules of the project";
        let conversation = format!(
            "[User]: The conversation history before this point was compacted into the \
             following summary:\n\n<summary>\n{carried}\n</summary>\n\n{CONVERSATION}"
        );
        let checked = check_answer(&history(&conversation), carried, false).unwrap();
        assert_eq!(checked.verdict, Verdict::Passed);
        // The conversation outside the carried summary is still checked.
        let copied = "fix the parser bug in src/parse.rs, it drops the last token\n\
            I changed the tokenizer loop so the final token is pushed before returning\n\
            test result: ok. 42 passed; 0 failed; finished in 0.31s for the parser";
        assert!(matches!(
            check_answer(&history(&conversation), copied, false),
            Err(SummarizeError::Rejected { reason }) if reason.contains("copies the conversation")
        ));
    }

    #[test]
    fn degenerate_repetition_is_rejected() {
        let lines = "## Goal\n".to_owned() + &"- Fix the parser.\n".repeat(8);
        assert!(reason(&lines).contains("repeats the line"));
        let phrase = "the parser is fixed and ".repeat(40);
        assert!(reason(&phrase).contains("repeats itself"));
        let run = format!("## Goal\n{}", "!".repeat(300));
        assert!(reason(&run).contains("character"));
    }

    #[test]
    fn a_short_loop_is_rejected_before_the_phrase_measure_sees_it() {
        // Gemma 3 270M (base), cut at 48 tokens: five lines, 35 words.
        let looped = "* The user has read the source code.\n".repeat(5);
        assert!(reason(&looped).contains("repeats the line"), "{looped}");
        let sections = "## Progress\n- What the assistant did in this first part\n\n".repeat(3);
        assert!(reason(&sections).contains("repeats the line"), "{sections}");
        // A real summary may say a short thing twice.
        let twice = format!("{GOOD}\n\n## Critical Context\n- Tests pass.\n- Tests pass.");
        assert!(check_answer(&history(CONVERSATION), &twice, false).is_ok());
    }

    #[test]
    fn one_copied_instruction_in_a_short_answer_is_an_echo_and_headings_are_not() {
        // Gemma 3 270M (base): a made-up heading, a placeholder, then the length line copied.
        let mut req = history(CONVERSATION);
        req.prompt
            .push_str(&crate::summarize::prompts::length_instruction(
                Purpose::History,
                48,
            ));
        let answer = "## Description\n- What the user wants to do.\n\nLength: keep the whole \
            summary under about 36 words; the answer is cut off after 48 tokens.";
        let err = check_answer(&req, answer, false).unwrap_err();
        assert!(
            err.to_string().contains("repeats the instructions"),
            "{err}"
        );
        // The headings the prompt asks for are the format, not an echo.
        let short = "## Constraints & Preferences\n- Never change the public API of the parser";
        assert!(check_answer(&req, short, false).is_ok());
    }

    #[test]
    fn a_cut_answer_keeps_its_complete_sections() {
        let cut = format!("{GOOD}\n\n## Critical Context\n- The test command is car");
        let checked = check_answer(&history(CONVERSATION), &cut, true).unwrap();
        assert_eq!(checked.verdict, Verdict::CutKept { kept: 3 });
        assert_eq!(checked.text, GOOD);
        assert!(
            checked
                .verdict
                .describe(Purpose::History)
                .contains("3 complete sections")
        );
    }

    #[test]
    fn a_cut_answer_with_nothing_complete_is_rejected() {
        let err = check_answer(&history(CONVERSATION), "## Goal\n- Fix the pars", true);
        assert!(
            matches!(&err, Err(SummarizeError::Rejected { reason }) if reason.contains("before its first section ended")),
            "{err:?}"
        );
        let prose = check_answer(&history(CONVERSATION), "The user wanted to fix the", true);
        assert!(prose.is_err());
    }

    #[test]
    fn a_cut_short_summary_keeps_its_sentences() {
        let p = Prompts::embedded();
        let req = SummaryRequest::new(
            Purpose::Short,
            p.system.clone(),
            p.short_summary_prompt(CONVERSATION, GOOD, &[]),
            64,
        );
        let checked = check_answer(
            &req,
            "I fixed the parser. I added a test for the last token. I also start",
            true,
        )
        .unwrap();
        assert_eq!(
            checked.text,
            "I fixed the parser. I added a test for the last token."
        );
        assert_eq!(checked.verdict, Verdict::CutKept { kept: 2 });
        assert!(check_answer(&req, "I fixed the", true).is_err());
    }

    #[test]
    fn a_cut_answer_that_does_not_name_the_goal_is_rejected() {
        // Gemma 3 270M's kept short summary of issue 37: one line about a side file.
        let p = Prompts::embedded();
        let goal = "## Goal\n- Please make the date parser in src/date.rs accept RFC 3339 \
                    timestamps with a \"Z\" suffix.\n\n## Progress\n- [x] README.md documents it";
        let mut req = SummaryRequest::new(
            Purpose::Short,
            p.system.clone(),
            p.short_summary_prompt(CONVERSATION, goal, &[]),
            48,
        );
        req.previous_summary = Some(goal.to_owned());
        let answer = "Format:\n- [x] \"Date format\" in README.md.\n- [x] \"Z\" in";
        let err = check_answer(&req, answer, true).unwrap_err();
        assert!(
            err.to_string()
                .contains("does not say what the user asked for"),
            "{err}"
        );
        // Naming the goal, the same cut answer is kept by its complete sentences.
        let named = "The date parser in src/date.rs accepts \"Z\".\n- [x] \"Date format\" in";
        let checked = check_answer(&req, named, true).unwrap();
        assert_eq!(
            checked.text,
            "The date parser in src/date.rs accepts \"Z\"."
        );
    }

    #[test]
    fn junk_reported_as_a_normal_stop_is_still_rejected() {
        // A server that says "stop" for a cut answer: the checks do not rely on it.
        let echoed = Prompts::embedded()
            .update_summary
            .replace("<previous-summary>", "it");
        let err = check_answer(&history(CONVERSATION), &echoed, false).unwrap_err();
        assert!(
            err.to_string().contains("repeats the instructions"),
            "{err}"
        );
    }
}
