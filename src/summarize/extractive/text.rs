//! Text helpers: sentences, clipping at boundaries a reader can follow, inline code, fences,
//! and the condensed form of a request.

use crate::compaction::facts::{prose_sentences, strip_fillers};

use super::{MAX_FILES, MAX_GOAL_CHARS, MAX_ITEM_CHARS};

pub(super) use crate::compaction::facts::prose_lines;

/// Sentences of the prose in `text` (fenced code and pasted material skipped), each with its
/// closing punctuation.
pub(super) fn sentences(text: &str) -> impl Iterator<Item = &str> {
    prose_sentences(text).into_iter()
}

/// Whether `cue` occurs in `lower` as whole words.
pub(super) fn contains_word(lower: &str, cue: &str) -> bool {
    lower.match_indices(cue).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + cue.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// `text` lower-cased, with typographic apostrophes as plain ones ("don’t" → "don't").
pub(super) fn lower(text: &str) -> String {
    text.to_lowercase().replace('\u{2019}', "'")
}

/// `text` on one line (whitespace collapsed), cut to `max` characters at a clause or word
/// boundary outside inline code (see [`clip_at_boundary`]).
pub(super) fn one_line(text: &str, max: usize) -> String {
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
    clip_at_boundary(&out, max)
}

/// `text` on one line, within [`MAX_ITEM_CHARS`].
pub(super) fn clip_line(text: &str) -> String {
    one_line(text, MAX_ITEM_CHARS)
}

/// `text` cut to `max` characters with `…` when longer, at any character: only for verbatim
/// blocks inside fences.
pub(super) fn clip(text: &str, max: usize) -> String {
    crate::summarize::error::excerpt(text, max)
}

/// `text` when it fits `max` characters; else cut after the last clause (`,` `;` `:` ` —`)
/// or, failing that, the last word that ends before `max` outside inline code, with `…`. An
/// item is never cut inside a code span, so its backticks always pair up.
pub(super) fn clip_at_boundary(text: &str, max: usize) -> String {
    let Some((limit, _)) = text.char_indices().nth(max) else {
        return text.to_owned();
    };
    let (mut clause, mut word) = (None, None);
    let mut in_code = false;
    for (i, c) in text[..limit].char_indices() {
        match c {
            '`' => in_code = !in_code,
            ' ' if !in_code => {
                word = Some(i);
                if text[..i].ends_with([',', ';', ':']) || text[..i].ends_with(" —") {
                    clause = Some(i);
                }
            }
            _ => {}
        }
    }
    let cut = clause.filter(|&i| i > limit / 2).or(word);
    match cut {
        Some(cut) => format!(
            "{}…",
            text[..cut].trim_end_matches([',', ';', ':', ' ', '—', '-'])
        ),
        // One unbroken span of code: keep its text, drop the backticks it can no longer close.
        None => format!("{}…", text[..limit].replace('`', "")),
    }
}

/// The first line of `text`.
pub(super) fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// `text` as inline code, with a fence longer than any backtick run inside it.
pub(super) fn code(text: &str) -> String {
    if !text.contains('`') {
        return format!("`{text}`");
    }
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest + 1);
    format!("{ticks} {text} {ticks}")
}

/// `text` inside a code fence longer than any backtick run in it, so it stays verbatim.
pub(super) fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}\n{text}\n{fence}")
}

/// The body of a fenced block (as [`fenced`] writes it), else the trimmed text.
pub(super) fn unfence(text: &str) -> String {
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

/// A sentence as a list item: markdown emphasis and check marks removed, a lead-in's colon
/// turned into a full stop ("Updated the dark theme:" → "Updated the dark theme."). `None`
/// when what is left is a fragment: a lead-in that only makes sense with the list after it
/// ("The fix:", "…the README that covers:"), or unbalanced inline code.
pub(super) fn plain_sentence(sentence: &str) -> Option<String> {
    let mut text = sentence.replace("**", "").replace("__", "");
    for mark in ['✅', '✓', '✔', '❌', '✗', '👍', '🎉'] {
        text = text.replace(mark, "");
    }
    let text = text.trim().trim_end_matches([' ', '-', '—']).trim();
    if text.matches('`').count() % 2 == 1 {
        return None;
    }
    let Some(lead_in) = text.strip_suffix(':') else {
        return Some(text.to_owned());
    };
    let last = lead_in
        .rsplit(|c: char| !c.is_alphanumeric())
        .find(|w| !w.is_empty())
        .unwrap_or("");
    const DANGLING: &[&str] = &[
        "covers",
        "includes",
        "include",
        "following",
        "with",
        "to",
        "are",
        "is",
        "was",
        "were",
        "now",
        "has",
        "have",
        "the",
        "that",
        "of",
        "for",
        "like",
        "as",
        "will",
        "fix",
        "flow",
        "changes",
        "summary",
        "steps",
        "these",
        "this",
        "here",
        "by",
        "be",
        "and",
        "or",
    ];
    (lead_in.split_whitespace().nth(3).is_some() && !DANGLING.contains(&lower(last).as_str()))
        .then(|| format!("{}.", lead_in.trim_end()))
}

/// The goal a request states, in the user's words: its first sentence or two (a leading
/// "Great." or "ok," dropped, pasted logs skipped), on one line, cut only between sentences,
/// or after a clause of an overlong first sentence.
pub(super) fn condense(request: &str) -> String {
    let mut all = sentences(request)
        .filter(|s| s.split_whitespace().nth(1).is_some())
        .peekable();
    let mut out = String::new();
    for (i, sentence) in all.by_ref().enumerate() {
        let sentence = if i == 0 {
            drop_leading_filler(sentence)
        } else {
            sentence
        };
        let longer = out.chars().count() + sentence.chars().count() + 1;
        if i == 2 || (i > 0 && longer > MAX_GOAL_CHARS) {
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
    one_line(&out, MAX_GOAL_CHARS + MAX_GOAL_CHARS / 4)
}

/// `sentence` without a leading interjection followed by a comma ("ok, ", "my dude, ").
fn drop_leading_filler(sentence: &str) -> &str {
    let rest = strip_fillers(sentence);
    let dropped = &sentence[..sentence.len() - rest.len()];
    if !rest.is_empty() && dropped.trim_end().ends_with(',') {
        rest
    } else {
        sentence
    }
}

/// A shell command as it reads in a list: without a leading `cd <dir> &&`, a trailing
/// `2>&1`, or `| head` / `| tail` that only trim the output.
pub(super) fn short_command(command: &str) -> String {
    let mut c = command.trim();
    while let Some(rest) = c.strip_prefix("cd ")
        && let Some((_, after)) = rest.split_once("&&")
    {
        c = after.trim_start();
    }
    let mut c = c.to_owned();
    loop {
        let before = c.len();
        for tail in ["| head", "| tail"] {
            if let Some(at) = c.rfind(tail)
                && c[at + tail.len()..]
                    .trim()
                    .chars()
                    .all(|ch| ch == '-' || ch == 'n' || ch.is_ascii_digit() || ch == ' ')
            {
                c.truncate(at);
            }
        }
        let trimmed = c.trim_end().trim_end_matches("2>&1").trim_end().to_owned();
        c = trimmed;
        if c.len() == before {
            return c;
        }
    }
}

/// A command as inline code, shortened for reading (see [`short_command`]).
pub(super) fn shown_command(command: &str) -> String {
    code(&one_line(&short_command(command), MAX_ITEM_CHARS / 2))
}

pub(super) fn list_paths(paths: &[String]) -> String {
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
pub(super) fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Up to three paths as code, then "N other files".
pub(super) fn few_paths(paths: &[String]) -> String {
    let mut names: Vec<String> = paths.iter().take(3).map(|p| format!("`{p}`")).collect();
    if paths.len() > 3 {
        names.push(format!("{} other files", paths.len() - 3));
    }
    and_list(&names)
}
