//! Text helpers: sentences, clipping, inline code and fences.

use super::facts::DIRECTION_CUES;
use super::{MAX_FILES, MAX_GOAL_CHARS, MAX_ITEM_CHARS};

/// The lines of `text` outside fenced code blocks.
pub(super) fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut in_fence = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            return false;
        }
        !in_fence
    })
}

/// Sentences of the prose in `text`: split at line ends and at `.`, `!` or `?` followed by a
/// space. Each keeps its closing punctuation.
pub(super) fn sentences(text: &str) -> impl Iterator<Item = &str> {
    prose_lines(text).flat_map(|line| {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1).is_none_or(|n| *n == b' ') {
                out.push(&line[start..=i]);
                start = i + 1;
            }
        }
        out.push(&line[start..]);
        out.into_iter()
            .map(|s| s.trim().trim_start_matches(['-', '*', '>', ' ']).trim())
            .filter(|s| s.len() > 3)
    })
}

/// Whether `cue` occurs in `lower` as whole words.
pub(super) fn contains_word(lower: &str, cue: &str) -> bool {
    lower.match_indices(cue).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + cue.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// Typographic apostrophes as plain ones, so "don’t" matches "don't".
pub(super) fn normalize_quotes(text: String) -> String {
    if text.contains('\u{2019}') {
        text.replace('\u{2019}', "'")
    } else {
        text
    }
}

/// `text` on one line (whitespace collapsed), clipped to `max` characters.
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
    clip(&out, max)
}

/// `text` on one line, clipped to [`MAX_ITEM_CHARS`].
pub(super) fn clip_line(text: &str) -> String {
    one_line(text, MAX_ITEM_CHARS)
}

/// `text` cut to `max` characters with `…` when longer.
pub(super) fn clip(text: &str, max: usize) -> String {
    crate::summarize::error::excerpt(text, max)
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

/// The first sentence or two of a request, on one line: what a Goal item needs.
pub(super) fn condense(request: &str) -> String {
    let mut out = String::new();
    // A leading "Great." or "Thanks!" says nothing about the goal.
    let mut all = sentences(request).peekable();
    while all
        .peek()
        .is_some_and(|s| s.split_whitespace().nth(2).is_none())
    {
        all.next();
    }
    for (i, sentence) in all.enumerate() {
        if i == 2 || (i == 1 && out.len() > MAX_GOAL_CHARS / 2) {
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
    one_line(&out, MAX_GOAL_CHARS)
}

/// Whether a later request turns away from what came before.
pub(super) fn changes_direction(request: &str) -> bool {
    let first = sentences(request).next().unwrap_or("");
    let lower = normalize_quotes(first.to_lowercase());
    DIRECTION_CUES.iter().any(|c| contains_word(&lower, c))
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
