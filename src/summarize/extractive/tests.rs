//! Unit tests of the extractive summarizer.

use super::cues::{passed_count, verification};
use super::sections::{Sections, dedupe_key, first_code_span, strip_bullet};
use super::text::{code, condense, contains_word, fenced, unfence};
use super::*;
use crate::session::Session;
use crate::session::context::{build_session_context, convert_to_llm};
use crate::session::message::AgentMessage;
use serde_json::Value;
use serde_json::json;

fn msg(value: Value) -> AgentMessage {
    AgentMessage::from_value(value).expect("valid message")
}

fn user(text: &str) -> AgentMessage {
    msg(json!({"role": "user", "content": text}))
}

fn assistant(text: &str, calls: Value) -> AgentMessage {
    let mut content = vec![json!({"type": "text", "text": text})];
    if let Value::Array(calls) = calls {
        content.extend(calls);
    }
    msg(json!({"role": "assistant", "content": content}))
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"type": "toolCall", "id": id, "name": name, "arguments": args})
}

fn result(id: &str, name: &str, text: &str, is_error: bool) -> AgentMessage {
    msg(
        json!({"role": "toolResult", "toolCallId": id, "toolName": name,
               "content": [{"type": "text", "text": text}], "isError": is_error}),
    )
}

fn request(purpose: Purpose, messages: Vec<AgentMessage>) -> SummaryRequest {
    let mut req = SummaryRequest::new(purpose, "", "", 1_000);
    req.messages = messages.into();
    req
}

/// The demo session's messages, as the engine hands them to a summarizer.
fn demo() -> Vec<AgentMessage> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo-session.jsonl");
    let (session, _) = Session::open(path).expect("the demo session loads");
    let ctx = build_session_context(session.entries(), session.leaf_id());
    convert_to_llm(&ctx.messages)
}

/// The lines of `section` (a `## ` heading) in `text`.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("{heading} missing in:\n{text}"));
    let body = &text[start + heading.len()..];
    let end = body.find("\n## ").unwrap_or(body.len());
    &body[..end]
}

#[test]
fn bullets_and_keys() {
    assert_eq!(strip_bullet("- [x] Fixed it"), Some("Fixed it"));
    assert_eq!(strip_bullet("12. Run it"), Some("Run it"));
    assert_eq!(strip_bullet("plain"), None);
    assert_eq!(dedupe_key("**Fixed** `a.rs`."), dedupe_key("fixed a.rs"));
    assert_eq!(
        first_code_span("`cargo test` failed: x"),
        Some("cargo test")
    );
}

#[test]
fn words_match_whole() {
    assert!(contains_word("we must not", "must"));
    assert!(!contains_word("nevertheless", "never"));
    assert!(contains_word("don't do it", "don't"));
}

#[test]
fn fences_outgrow_backticks_inside() {
    assert_eq!(fenced("a"), "```\na\n```");
    assert_eq!(fenced("x ```` y"), "`````\nx ```` y\n`````");
    assert_eq!(unfence(&fenced("x ```` y")), "x ```` y");
    assert_eq!(code("a`b"), "`` a`b ``");
}

#[test]
fn parse_reads_sections_and_fences() {
    let text = "## Goal\n- Build it\n\n## Progress\n### Done\n- [x] Wrote `a.rs`\n\
                ### In Progress\n- [ ] Tests\n\n## Critical Context\n- Q:\n```\n- not a bullet\n```\n\
                - Other\n\n<read-files>\nz.rs\n</read-files>";
    let s = Sections::parse(text);
    assert_eq!(s.goal.iter().collect::<Vec<_>>(), ["Build it"]);
    assert_eq!(s.done.iter().collect::<Vec<_>>(), ["Wrote `a.rs`"]);
    assert_eq!(s.in_progress.iter().collect::<Vec<_>>(), ["Tests"]);
    assert_eq!(
        s.critical.other.iter().collect::<Vec<_>>(),
        ["Q:\n```\n- not a bullet\n```", "Other"]
    );
    assert!(s.notes.is_empty());
}

#[test]
fn condense_keeps_the_first_sentence_or_two() {
    assert_eq!(
        condense("Fix the bug. Then add tests. Also update docs."),
        "Fix the bug. Then add tests."
    );
    let long = condense(&"word ".repeat(200));
    assert!(long.chars().count() <= MAX_GOAL_CHARS * 5 / 4 + 1, "{long}");
    assert!(long.ends_with("word…"), "cut between words: {long}");
    // A leading interjection goes; pasted logs are not the goal.
    assert_eq!(
        condense(
            "my dude, this exploded. invalid themes must NEVER explode\n\n➜  x git:(main) npx tsx cli.ts\nError: Invalid hex color"
        ),
        "this exploded. invalid themes must NEVER explode"
    );
}

#[test]
fn pass_counts_sum_cargo_binaries_or_take_the_last_report() {
    let cargo = "test result: ok. 48 passed; 0 failed\n\ntest result: ok. 2 passed; 0 failed";
    assert_eq!(passed_count(cargo), Some(50));
    assert_eq!(
        passed_count("==== 7 passed, 1 warning in 0.2s ===="),
        Some(7)
    );
    assert_eq!(passed_count("all good"), None);
    assert_eq!(
        verification("cargo test", cargo).map(|v| v.0),
        Some("`cargo test` passed (50 tests).".to_owned())
    );
    assert_eq!(verification("ls -la", "x"), None);
}

#[test]
fn demo_history_summary_is_resumable() {
    let text = ExtractiveSummarizer.summarize_text(&request(Purpose::History, demo()));
    let goal = section(&text, "## Goal");
    assert!(
        goal.contains("'attempt to subtract with overflow'"),
        "{text}"
    );
    assert!(
        goal.contains("Current request: Also add a regression test"),
        "{text}"
    );
    let constraints = section(&text, "## Constraints & Preferences");
    assert!(
        constraints.contains("never use unwrap() in library code"),
        "{text}"
    );
    let progress = section(&text, "## Progress");
    // The work of each request, in the order it happened.
    let done = [
        "- [x] Changed `src/posting.rs` and `src/report.rs`.\n",
        "- [x] `cargo test` passed (48 tests).\n",
        "- [x] Created `tests/overflow.rs`.\n",
        "- [x] `cargo test --test overflow` passed (1 test).\n",
        "- [x] The fix is in and the regression test passes.\n",
    ];
    let mut at = 0;
    for item in done {
        let found = progress[at..]
            .find(item)
            .unwrap_or_else(|| panic!("{item:?} after {at}:\n{text}"));
        at += found + item.len();
    }
    // The failed `cargo test` later passed: it is not blocking, and the request is done.
    assert!(!progress.contains("### Blocked"), "{text}");
    assert!(!progress.contains("### In Progress"), "{text}");
    let decisions = section(&text, "## Key Decisions");
    assert!(
        decisions.contains("widen the accumulator to i128"),
        "{text}"
    );
    // The question the user must answer comes first.
    let next = section(&text, "## Next Steps");
    assert!(
        next.starts_with("\n1. Get the user's answer to: Should I change the CSV importer"),
        "{text}"
    );
    assert!(
        next.contains("2. Next I could also harden the CSV importer"),
        "{text}"
    );
    let critical = section(&text, "## Critical Context");
    let question = "Should I change the CSV importer to parse amounts as i64 as well, or \
                    leave it as it is for this change?";
    assert!(
        critical.contains(&format!("{PENDING_QUESTION}\n```\n{question}\n```")),
        "{text}"
    );
    // The type error of the first request was fixed there: history, not context.
    assert!(!critical.contains("E0308"), "{text}");
    assert!(
        critical.contains("Finding: Found it: `Posting::cents`"),
        "{text}"
    );
    // File lists are the caller's tags, not repeated here.
    assert!(!critical.contains("Files modified:"), "{text}");
    // Nothing from the bodies of tool results: no code, no grep hits.
    for line in text.lines() {
        for banned in ["checked_mul", "fn ", "let cents", "BTreeMap", "case_0"] {
            assert!(!line.contains(banned), "{banned:?} in {line:?}:\n{text}");
        }
    }
    assert!(text.len() < 6_000, "{}", text.len());
}

#[test]
fn demo_turn_prefix_lists_actions_not_outputs() {
    let messages = demo();
    // The first turn up to the failed test run, as a split turn's prefix would be.
    let cut = messages
        .iter()
        .position(|m| matches!(m, AgentMessage::ToolResult(t) if t.is_error))
        .expect("the demo has a failed run")
        + 1;
    let text = ExtractiveSummarizer
        .summarize_text(&request(Purpose::TurnPrefix, messages[..cut].to_vec()));
    assert!(
        text.starts_with("## Original Request\n```\nThe `ledger balance` command panics"),
        "{text}"
    );
    let progress = section(&text, "## Early Progress");
    assert!(
        progress.contains("- read `src/ledger.rs`, `src/commands/balance.rs`, `src/accounts.rs`"),
        "{text}"
    );
    assert!(progress.contains("- grep `as i32` in `src`\n"), "{text}");
    assert!(progress.contains("- edit `src/posting.rs`\n"), "{text}");
    assert!(
        progress.contains("- `cargo test` — failed: error[E0308]: mismatched types"),
        "{text}"
    );
    let context = section(&text, "## Context for Suffix");
    assert!(
        context.contains("Files modified: `src/posting.rs`"),
        "{text}"
    );
    assert!(
        context.contains("Decision: I decided to widen the accumulator"),
        "{text}"
    );
    assert!(context.contains("Still failing: `cargo test`"), "{text}");
    assert!(
        context.contains("Last assistant note: Now I'll run the tests."),
        "{text}"
    );
    for line in text.lines() {
        assert!(
            !line.contains("checked_mul") && !line.contains("fn "),
            "{line}"
        );
    }
}

#[test]
fn demo_short_summary_names_the_changes() {
    let messages = demo();
    let mut req = request(Purpose::History, messages.clone());
    let summary = ExtractiveSummarizer.summarize_text(&req);
    req.purpose = Purpose::Short;
    req.previous_summary = Some(summary);
    let short = ExtractiveSummarizer.summarize_text(&req);
    assert_eq!(
        short,
        "I changed `src/posting.rs` and `src/report.rs` to widen the accumulator to i128 and \
         use checked arithmetic instead of narrowing; added `tests/overflow.rs`. \
         The cause: `Posting::cents` is stored as i64 but `sum_postings` narrows to i32 with \
         `as i32` before subtracting."
    );
}

#[test]
fn update_merges_item_wise() {
    // First span: a request, an edit, a failing run.
    let first = vec![
        user("Add caching to src/db.rs. Always keep the cache bounded."),
        assistant(
            "I'll edit the module.",
            json!([call("1", "edit", json!({"path": "src/db.rs"}))]),
        ),
        result("1", "edit", "ok", false),
        assistant(
            "Running the tests.",
            json!([call("2", "bash", json!({"command": "cargo test"}))]),
        ),
        result("2", "bash", "error: linking failed", true),
    ];
    let summary = ExtractiveSummarizer.summarize_text(&request(Purpose::History, first));
    assert!(
        summary.contains("- [ ] Add caching to src/db.rs."),
        "{summary}"
    );
    assert!(
        summary.contains("- `cargo test` failed: error: linking failed"),
        "{summary}"
    );

    // Second span: the run passes and the assistant reports completion, then a new ask.
    let second = vec![
        assistant(
            "Retrying.",
            json!([call("3", "bash", json!({"command": "cargo test"}))]),
        ),
        result("3", "bash", "test result: ok. 9 passed; 0 failed", false),
        assistant("The cache is done and the tests pass.", json!([])),
        user("Now document it in README.md. Never mention internal names."),
    ];
    let mut req = request(Purpose::History, second);
    req.previous_summary = Some(summary.clone());
    let updated = ExtractiveSummarizer.summarize_text(&req);
    let progress = section(&updated, "## Progress");
    assert!(progress.contains("- [x] Changed `src/db.rs`."), "{updated}");
    assert!(
        progress.contains("- [x] Add caching to src/db.rs."),
        "moved: {updated}"
    );
    assert!(
        progress.contains("- [x] `cargo test` passed (9 tests)."),
        "{updated}"
    );
    assert!(
        progress.contains("- [ ] Now document it in README.md."),
        "{updated}"
    );
    assert!(!progress.contains("### Blocked"), "resolved: {updated}");
    let constraints = section(&updated, "## Constraints & Preferences");
    assert!(
        constraints.contains("Always keep the cache bounded."),
        "{updated}"
    );
    assert!(
        constraints.contains("Never mention internal names."),
        "{updated}"
    );
    let goal = section(&updated, "## Goal");
    assert!(
        goal.starts_with("\n- Add caching to src/db.rs."),
        "{updated}"
    );
    assert!(
        goal.contains("- Current request: Now document it in README.md."),
        "{updated}"
    );
    // The resolved error leaves Critical Context; the new request replaces the old.
    let critical = section(&updated, "## Critical Context");
    assert!(!critical.contains("linking failed"), "{updated}");
    assert_eq!(updated.matches(LATEST_MESSAGE).count(), 1, "{updated}");
    assert!(
        critical.contains("Now document it in README.md."),
        "{updated}"
    );
    // Merging the same span again changes nothing.
    req.previous_summary = Some(updated.clone());
    assert_eq!(ExtractiveSummarizer.summarize_text(&req), updated);
}

#[test]
fn a_passing_check_after_changes_finishes_the_request() {
    let messages = demo();
    // The first turn ends with the second `cargo test`, which passes; nobody says "done".
    let second_user = messages
        .iter()
        .rposition(|m| matches!(m, AgentMessage::User(_)))
        .expect("the demo has two requests");
    let text = ExtractiveSummarizer
        .summarize_text(&request(Purpose::History, messages[..second_user].to_vec()));
    assert!(!text.contains("### In Progress"), "{text}");
    assert!(!text.contains("### Blocked"), "{text}");
    // "I'll convert at the boundary" narrated an edit that was made: not a next step.
    assert!(!text.contains("## Next Steps"), "{text}");
    assert!(
        text.contains("- [x] `cargo test` passed (48 tests)."),
        "{text}"
    );
}

#[test]
fn a_turn_prefix_reads_back_item_wise() {
    let messages = vec![
        user("Add a CLI flag. Never break the config format."),
        assistant(
            "I decided to use clap instead of hand parsing.",
            json!([
                call("1", "read", json!({"path": "src/main.rs"})),
                call(
                    "2",
                    "write",
                    json!({"path": "src/flags.rs", "content": "fn x() {}"})
                ),
                call("3", "bash", json!({"command": "cargo build"})),
            ]),
        ),
        result("1", "read", "fn main() { let x = 1; }", false),
        result("2", "write", "Wrote src/flags.rs", false),
        result("3", "bash", "error[E0432]: unresolved import `clap`", true),
    ];
    let prefix = ExtractiveSummarizer.summarize_text(&request(Purpose::TurnPrefix, messages));
    assert!(
        prefix.contains("- write `src/flags.rs` (new file)\n"),
        "{prefix}"
    );
    assert!(!prefix.contains("fn main"), "{prefix}");
    let parsed = Sections::parse(&prefix);
    assert_eq!(
        parsed.goal.iter().collect::<Vec<_>>(),
        ["Add a CLI flag. Never break the config format."]
    );
    assert_eq!(
        parsed.done.iter().collect::<Vec<_>>(),
        ["write `src/flags.rs` (new file)"],
        "look-ups are not progress"
    );
    assert_eq!(
        parsed.blocked.iter().collect::<Vec<_>>(),
        ["`cargo build` failed: error[E0432]: unresolved import `clap`"]
    );
    assert_eq!(
        parsed.decisions.iter().collect::<Vec<_>>(),
        ["I decided to use clap instead of hand parsing."]
    );

    // The short summary knows the file is new from the prefix alone.
    let mut short = request(Purpose::Short, vec![]);
    short.previous_summary = Some(format!("No prior history.\n\n---\n\n{prefix}"));
    short.modified_files = vec!["src/flags.rs".into(), "src/main.rs".into()];
    let text = ExtractiveSummarizer.summarize_text(&short);
    assert!(
        text.starts_with(
            "I changed `src/main.rs` to use clap instead of hand parsing; added `src/flags.rs`."
        ),
        "{text}"
    );
}

#[test]
fn carried_summary_wrapper_is_not_a_note() {
    let carried =
        user("Another model worked on this.\n\n<summary>\n## Goal\n- Ship it\n</summary>");
    let text = ExtractiveSummarizer.summarize_text(&request(Purpose::History, vec![carried]));
    assert!(text.contains("## Goal\n- Ship it"), "{text}");
    assert!(!text.contains("Another model"), "{text}");
}

#[test]
fn user_run_commands_are_actions_not_requests() {
    let messages = vec![
        user("Fix the build."),
        user(
            "Ran `cargo build`\n```\nerror[E0425]: cannot find value `x`\n```\n\nCommand exited with code 101",
        ),
    ];
    let text = ExtractiveSummarizer.summarize_text(&request(Purpose::History, messages));
    assert!(!text.contains("Latest request: Ran"), "{text}");
    assert!(
        text.contains("- `cargo build` failed: error[E0425]: cannot find value `x`"),
        "{text}"
    );
}

#[test]
fn a_short_reply_is_shown_with_what_it_answers_and_only_while_it_is_the_latest() {
    let first = vec![
        user("Add caching to src/db.rs and keep it bounded."),
        assistant(
            "I added an LRU cache.\n\nShould I also cache the prepared statements?",
            json!([]),
        ),
        user("yes, do it"),
    ];
    let summary = ExtractiveSummarizer.summarize_text(&request(Purpose::History, first));
    let critical = section(&summary, "## Critical Context");
    assert!(
        critical.contains(&format!(
            "{LATEST_MESSAGE}\n```\nyes, do it\n```\n- {REPLY_TO}\n```\nShould I also cache the prepared statements?\n```"
        )),
        "{summary}"
    );

    // The reply and what it answered survive an update that brings no user message...
    let mut req = request(Purpose::History, vec![assistant("Done.", json!([]))]);
    req.previous_summary = Some(summary.clone());
    let kept = ExtractiveSummarizer.summarize_text(&req);
    assert!(kept.contains(REPLY_TO), "{kept}");
    assert!(kept.contains("prepared statements?"), "{kept}");

    // ...and leave with it when a new message that asks for work takes its place.
    let mut req = request(
        Purpose::History,
        vec![user(
            "Now document the cache in README.md, with its size limit.",
        )],
    );
    req.previous_summary = Some(summary);
    let updated = ExtractiveSummarizer.summarize_text(&req);
    assert!(!updated.contains(REPLY_TO), "{updated}");
    assert!(!updated.contains("prepared statements?"), "{updated}");
}

/// Issue 35 (minor): a session whose user messages are all too short to read as requests for
/// work ("step 1", "next one") had a Goal saying there was no user request at all. The goal
/// then quotes the user's first message and says no request for work was recognised.
#[test]
fn user_messages_that_are_no_task_still_give_the_goal_their_words() {
    let messages = vec![
        user("step 1"),
        assistant("Done with step 1.", json!([])),
        user("next one"),
        assistant("Done with the next one.", json!([])),
    ];
    let text = ExtractiveSummarizer.summarize_text(&request(Purpose::History, messages));
    let goal = section(&text, "## Goal");
    assert!(!goal.contains("no user request"), "{text}");
    assert!(goal.contains("step 1"), "{text}");
    // With no user message at all, the goal still says so.
    let none = ExtractiveSummarizer.summarize_text(&request(
        Purpose::History,
        vec![assistant("Resuming.", json!([]))],
    ));
    assert!(
        section(&none, "## Goal").contains("no user request"),
        "{none}"
    );
}
