//! Whether a model's answer is about the session at all.
//!
//! A small model can write something shaped like a summary that says nothing of the session: a
//! heading and one checkbox (`Format:` / `- [x] "Date format" in README.md.`), a generic line.
//! Such an answer passes the echo and repetition checks, yet a reader learns nothing from it of
//! what was asked. A summary's first job is to say what the user asked for, so what is kept of
//! an answer cut at the output limit (`super::check`) must name the goal of what it summarises:
//! * the goal is the first line of the previous summary's `## Goal` section when there is one
//!   (an update carries the goal over; a short summary accompanies the summary it is given),
//!   else the first user request of the summarised messages that says something;
//! * the answer names it when it contains one of the goal's specific terms (a path, an
//!   identifier, a number, an acronym: `src/date.rs`, `parse_date`, `3339`, `RFC`), or two of its
//!   ordinary words (`date`, `parser`), or the goal's only ordinary word;
//! * with no goal to name (no request says anything), one of the session's files will do; with
//!   no files either there is nothing to hold the answer to.
//!
//! A rejected answer is replaced by the offline summarizer, which carries the requests, files
//! and errors; the rejection reason is in the result.

use std::collections::HashSet;

use super::SummaryRequest;
use crate::session::message::join_text;
use crate::session::{AgentMessage, LlmMessages};

/// Words too common to say what a request is about.
const COMMON: &[&str] = &[
    "about", "after", "again", "also", "always", "before", "being", "could", "does", "done",
    "each", "from", "good", "have", "here", "into", "just", "like", "look", "make", "more", "must",
    "need", "never", "only", "other", "over", "please", "really", "should", "some", "still",
    "sure", "thank", "thanks", "that", "their", "them", "then", "there", "these", "they", "thing",
    "this", "those", "very", "want", "were", "what", "when", "where", "which", "while", "will",
    "with", "would", "your", "okay", "able", "sorry", "hello", "great",
];

/// Why `answer` is not about the session `req` summarises, if it is not.
pub fn ungrounded(req: &SummaryRequest, answer: &str) -> Option<String> {
    let said = Terms::of(answer);
    match goal(req) {
        Some(goal) => {
            let wanted = Terms::of(&goal);
            (!wanted.named_by(&said)).then(|| {
                format!(
                    "it does not say what the user asked for: none of the specific terms or words \
                     of the goal \"{}\" are in it",
                    super::error::excerpt(&goal, 120)
                )
            })
        }
        None => {
            let files: Vec<&String> = req.read_files.iter().chain(&req.modified_files).collect();
            let lower = answer.to_lowercase();
            let named = files.is_empty()
                || files
                    .iter()
                    .any(|f| lower.contains(&file_name(f).to_lowercase()));
            (!named).then(|| format!("it names none of the session's {} files", files.len()))
        }
    }
}

/// The goal the answer must name, if the request has one that says something.
fn goal(req: &SummaryRequest) -> Option<String> {
    let from_summary = req
        .previous_summary
        .as_deref()
        .and_then(goal_of_summary)
        .filter(|g| !Terms::of(g).is_empty());
    // The short summary's `previous_summary` is the summary it accompanies; otherwise it is the
    // previous summary of an update: either way its goal is the session's.
    from_summary.or_else(|| first_request(&req.messages))
}

/// The first item of a summary's `## Goal` section.
fn goal_of_summary(summary: &str) -> Option<String> {
    let mut lines = summary.lines().map(str::trim);
    lines.find(|l| l.eq_ignore_ascii_case("## goal"))?;
    lines
        .take_while(|l| !l.starts_with("## "))
        .map(|l| l.trim_start_matches(['-', '*', ' ']).trim())
        // `(no user request in the summarised messages)` is the offline summarizer's blank.
        .find(|l| !l.is_empty() && !l.starts_with('('))
        .map(str::to_owned)
}

/// The first user request that has something to name.
fn first_request(messages: &LlmMessages) -> Option<String> {
    messages.iter().find_map(|m| match &*m {
        AgentMessage::User(user) => {
            let text = join_text(&user.content.blocks(), "\n");
            (!Terms::of(&text).is_empty()).then_some(text)
        }
        _ => None,
    })
}

/// The last component of a path (`src/date.rs` → `date.rs`).
fn file_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// The terms of a text: specific ones (paths, identifiers, numbers, acronyms), compared
/// whole, and ordinary words, compared by their stem.
#[derive(Debug, Default)]
struct Terms {
    specific: HashSet<String>,
    words: HashSet<String>,
}

impl Terms {
    fn of(text: &str) -> Terms {
        let mut terms = Terms::default();
        let tokens = text
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '[' | ']'))
            .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'))
            .filter(|t| !t.is_empty());
        for token in tokens {
            if is_specific(token) {
                terms.specific.insert(token.to_lowercase());
                if token.contains('/') {
                    terms.specific.insert(file_name(token).to_lowercase());
                }
            } else if token.chars().all(char::is_alphabetic) && token.chars().count() >= 4 {
                let lower = token.to_lowercase();
                if !COMMON.contains(&lower.as_str()) {
                    terms.words.insert(stem(&lower));
                }
            }
        }
        terms
    }

    fn is_empty(&self) -> bool {
        self.specific.is_empty() && self.words.is_empty()
    }

    /// Whether `said` names these terms: one specific term, or two words (the only word, when
    /// there is one).
    fn named_by(&self, said: &Terms) -> bool {
        if self.specific.iter().any(|t| said.specific.contains(t)) {
            return true;
        }
        let shared = self.words.intersection(&said.words).count();
        shared >= 2.min(self.words.len()) && shared > 0
    }
}

/// A path, an identifier, a number or an acronym: `src/date.rs`, `parse_date`, `DateError`,
/// `3339`, `RFC`.
fn is_specific(token: &str) -> bool {
    let has = |p: fn(char) -> bool| token.chars().any(p);
    let letters = token.chars().filter(|c| c.is_alphabetic()).count();
    token.contains(['/', '_', '.', ':'])
        || has(|c| c.is_ascii_digit()) && token.chars().count() >= 2
        || (letters >= 3 && token.chars().all(|c| c.is_ascii_uppercase()))
        || token
            .chars()
            .zip(token.chars().skip(1))
            .any(|(a, b)| a.is_lowercase() && b.is_uppercase())
}

/// A word without its common inflection, so `documented` meets `document` and `tests` `test`.
fn stem(word: &str) -> String {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(base) = word.strip_suffix(suffix)
            && base.chars().count() >= 4
        {
            return base.to_owned();
        }
    }
    word.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarize::Purpose;

    const REQUEST: &str = "Please make the date parser in src/date.rs accept RFC 3339 timestamps \
                           with a \"Z\" suffix. Never change the public API.";

    fn short_of(summary: &str) -> SummaryRequest {
        let mut req = SummaryRequest::new(Purpose::Short, "", "", 48);
        req.previous_summary = Some(summary.to_owned());
        req
    }

    fn summary_with_goal(goal: &str) -> String {
        format!("## Goal\n- {goal}\n\n## Progress\n### Done\n- [x] Documented README.md\n")
    }

    #[test]
    fn an_answer_naming_only_a_side_file_is_not_about_the_goal() {
        // Gemma 3 270M's short summary of this session (issue 37).
        let req = short_of(&summary_with_goal(REQUEST));
        let reason = ungrounded(&req, "Format:\n- [x] \"Date format\" in README.md.").unwrap();
        assert!(
            reason.contains("does not say what the user asked for"),
            "{reason}"
        );
        assert!(reason.contains("src/date.rs"), "{reason}");
    }

    #[test]
    fn an_answer_naming_the_goal_by_a_term_or_two_words_is_kept() {
        let req = short_of(&summary_with_goal(REQUEST));
        for answer in [
            "The parser in date.rs now takes a Z suffix.",
            "Made src/date.rs accept Z timestamps.",
            "RFC timestamps are accepted.",
            "The date parser accepts the Z suffix; the formats are documented.",
        ] {
            assert_eq!(ungrounded(&req, answer), None, "{answer}");
        }
    }

    #[test]
    fn without_a_summary_the_first_request_that_says_something_is_the_goal() {
        let mut req = SummaryRequest::new(Purpose::History, "", "", 48);
        req.messages = vec![
            AgentMessage::user_text("hi", 0),
            AgentMessage::user_text("Rename the helper load_config to read_settings", 0),
        ]
        .into();
        assert_eq!(ungrounded(&req, "## Goal\n- rename load_config"), None);
        assert!(ungrounded(&req, "## Goal\n- the user said hi").is_some());
    }

    #[test]
    fn with_no_goal_a_file_of_the_session_will_do_and_with_none_anything_goes() {
        let mut req = SummaryRequest::new(Purpose::TurnPrefix, "", "", 48);
        req.messages = vec![AgentMessage::user_text("ok", 0)].into();
        assert_eq!(ungrounded(&req, "Went on."), None);
        req.modified_files = vec!["src/lib.rs".to_owned()];
        assert!(ungrounded(&req, "Went on.").is_some());
        assert_eq!(ungrounded(&req, "Edited lib.rs."), None);
    }

    #[test]
    fn stems_and_specific_terms() {
        assert_eq!(stem("documented"), "document");
        assert_eq!(stem("tests"), "test");
        assert_eq!(stem("uses"), "uses");
        for t in ["src/a.rs", "parse_date", "3339", "RFC", "DateError", "a::b"] {
            assert!(is_specific(t), "{t}");
        }
        for t in ["date", "Parser", "Z", "a"] {
            assert!(!is_specific(t), "{t}");
        }
    }
}
