//! The extractive summarizer (offline, no model): deterministic, structured output that keeps
//! pending questions, file lists and earlier summaries, and stays bounded on megabytes.

use compactd::session::AgentMessage;
use compactd::summarize::{Purpose, SummaryRequest};
use compactd::testkit::ExtractiveSummarizer;
use serde_json::json;

use super::summarizers::{msg, run};

fn conversation() -> Vec<AgentMessage> {
    vec![
        msg(
            json!({"role": "user", "content": "Add retry support to src/net/client.rs. Never use unwrap in library code."}),
        ),
        msg(json!({"role": "assistant", "content": [
            {"type": "text", "text": "I'll read the client first."},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "src/net/client.rs"}}]})),
        msg(
            json!({"role": "toolResult", "toolCallId": "c1", "toolName": "read", "content": [{"type": "text", "text": "pub fn get() {}"}], "isError": false}),
        ),
        msg(json!({"role": "assistant", "content": [
            {"type": "text", "text": "I decided to use exponential back-off instead of a fixed delay."},
            {"type": "toolCall", "id": "c2", "name": "edit", "arguments": {"path": "src/net/client.rs", "oldText": "a", "newText": "b"}}]})),
        msg(
            json!({"role": "toolResult", "toolCallId": "c2", "toolName": "edit", "content": [{"type": "text", "text": "ok"}], "isError": false}),
        ),
        msg(json!({"role": "assistant", "content": [
            {"type": "text", "text": "Next I will run the test suite."},
            {"type": "toolCall", "id": "c3", "name": "bash", "arguments": {"command": "cargo test"}}]})),
        msg(
            json!({"role": "toolResult", "toolCallId": "c3", "toolName": "bash", "content": [{"type": "text", "text": "error[E0308]: mismatched types\n  --> src/net/client.rs:10:5"}], "isError": true}),
        ),
        msg(
            json!({"role": "assistant", "content": [{"type": "text", "text":
            "The build fails with a type mismatch.\n\nShould the retry count be configurable, or is a fixed 3 fine?\n1. Configurable\n2. Fixed"}]}),
        ),
    ]
}

fn extractive_request(purpose: Purpose, messages: Vec<AgentMessage>) -> SummaryRequest {
    let mut req = SummaryRequest::new(purpose, "", "", 1_000);
    req.messages = messages.into();
    req
}

#[tokio::test]
async fn extractive_is_deterministic_and_structured() {
    let req = extractive_request(Purpose::History, conversation());
    let (first, _) = run(&ExtractiveSummarizer, &req).await;
    let first = first.unwrap();
    let second = ExtractiveSummarizer.summarize_text(&req);
    assert_eq!(first.text, second, "same input, same bytes");
    let text = first.text;
    for heading in [
        "## Goal",
        "## Constraints & Preferences",
        "## Progress",
        "### Done",
        "### Blocked",
        "## Key Decisions",
        "## Next Steps",
        "## Critical Context",
    ] {
        assert!(text.contains(heading), "{heading} missing in:\n{text}");
    }
    assert!(text.contains("Never use unwrap in library code."), "{text}");
    assert!(
        text.contains("exponential back-off instead of a fixed delay"),
        "{text}"
    );
    assert!(
        text.contains("- [x] Changed `src/net/client.rs`."),
        "{text}"
    );
    assert!(text.contains("error[E0308]: mismatched types"), "{text}");
    // The plan to run the tests was carried out (and failed); what is next is the answer.
    assert!(
        text.contains(
            "## Next Steps\n1. Get the user's answer to: Should the retry count be configurable, \
             or is a fixed 3 fine?\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("- [ ] Add retry support"),
        "the request is still in progress: {text}"
    );
    // The question's options are not mistaken for plans or finished work.
    assert!(
        !text.contains("1. Configurable\n2. Fixed\n\n## Critical"),
        "{text}"
    );
    assert!(!text.contains("[x] Fixed"), "{text}");
}

#[tokio::test]
async fn extractive_keeps_a_pending_question_verbatim_and_lists_files() {
    let mut req = extractive_request(Purpose::History, conversation());
    let text = ExtractiveSummarizer.summarize_text(&req);
    let question =
        "Should the retry count be configurable, or is a fixed 3 fine?\n1. Configurable\n2. Fixed";
    assert!(text.contains(&format!("```\n{question}\n```")), "{text}");
    // The file lists are the caller's tags (from the request's cumulative lists), not repeated
    // in the summary; the work names the file it changed.
    assert!(text.contains("Changed `src/net/client.rs`."), "{text}");
    req.read_files = vec!["Cargo.toml".into(), "README.md".into()];
    req.modified_files = vec!["src/lib.rs".into()];
    let text = ExtractiveSummarizer.summarize_text(&req);
    assert!(!text.contains("Files read:"), "{text}");

    // Once the user answers, the question is no longer pending.
    let mut answered = conversation();
    answered.push(msg(
        json!({"role": "user", "content": "Make it configurable."}),
    ));
    let text = ExtractiveSummarizer.summarize_text(&extractive_request(Purpose::History, answered));
    assert!(!text.contains("Question awaiting"), "{text}");
    assert!(
        text.contains("Latest user message, verbatim:\n```\nMake it configurable.\n```"),
        "{text}"
    );
}

#[tokio::test]
async fn extractive_merges_into_the_previous_summary() {
    let mut req = extractive_request(Purpose::History, conversation());
    req.previous_summary = Some(
        "## Goal\n- Ship the HTTP client\n\n## Progress\n### Done\n- [x] Wrote `src/net/mod.rs`\n\n\
         ## Key Decisions\n- **Use reqwest**: async\n\n<read-files>\nold.rs\n</read-files>"
            .into(),
    );
    let text = ExtractiveSummarizer.summarize_text(&req);
    assert!(text.contains("- Ship the HTTP client"), "{text}");
    assert!(text.contains("- [x] Wrote `src/net/mod.rs`"), "{text}");
    assert!(text.contains("**Use reqwest**: async"), "{text}");
    assert!(
        !text.contains("<read-files>"),
        "file tags are the caller's to append"
    );
    // Merging the result again adds nothing new.
    req.previous_summary = Some(text.clone());
    let again = ExtractiveSummarizer.summarize_text(&req);
    assert_eq!(again.matches("Ship the HTTP client").count(), 1, "{again}");
    assert_eq!(
        again.matches("Changed `src/net/client.rs`.").count(),
        1,
        "{again}"
    );
}

#[tokio::test]
async fn extractive_short_turn_prefix_and_branch_layouts() {
    let short =
        ExtractiveSummarizer.summarize_text(&extractive_request(Purpose::Short, conversation()));
    assert!(
        short.starts_with(
            "I changed `src/net/client.rs` to use exponential back-off instead of a fixed delay."
        ),
        "{short}"
    );
    let sentences = short.matches(". ").count() + 1;
    assert!((2..=3).contains(&sentences), "{short}");
    assert!(!short.contains('\n'));

    let prefix = ExtractiveSummarizer
        .summarize_text(&extractive_request(Purpose::TurnPrefix, conversation()));
    for heading in [
        "## Original Request",
        "## Early Progress",
        "## Context for Suffix",
    ] {
        assert!(prefix.contains(heading), "{prefix}");
    }
    assert!(
        prefix.contains("Add retry support to src/net/client.rs."),
        "{prefix}"
    );

    let branch =
        ExtractiveSummarizer.summarize_text(&extractive_request(Purpose::Branch, conversation()));
    for heading in [
        "## Goal",
        "## Constraints & Preferences",
        "## Progress",
        "## Key Decisions",
        "## Next Steps",
    ] {
        assert!(branch.contains(heading), "{branch}");
    }
    let empty = ExtractiveSummarizer.summarize_text(&extractive_request(Purpose::Branch, vec![]));
    assert!(
        empty.contains("## Constraints & Preferences\n(none)"),
        "{empty}"
    );
}

#[tokio::test]
async fn extractive_handles_megabytes_with_bounded_output() {
    let mut messages = Vec::new();
    let filler =
        "Never skip the checks. I fixed the cache layer. Next I will tune it. ".repeat(200);
    for i in 0..250 {
        messages.push(msg(
            json!({"role": "user", "content": format!("Request {i}: {filler}")}),
        ));
        messages.push(msg(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}. {filler}")},
            {"type": "toolCall", "id": format!("t{i}"), "name": "write", "arguments": {"path": format!("src/f{i}.rs")}}]})));
        messages.push(msg(json!({"role": "toolResult", "toolCallId": format!("t{i}"), "toolName": "write",
            "content": [{"type": "text", "text": format!("error: disk {i} full\n").repeat(50)}], "isError": false})));
    }
    // One giant line without spaces.
    messages.push(msg(
        json!({"role": "user", "content": "x".repeat(1_000_000)}),
    ));
    let req = extractive_request(Purpose::History, messages);
    let input_bytes: usize = req
        .messages
        .iter()
        .map(|m| m.to_value().to_string().len())
        .sum();
    assert!(input_bytes > 4_000_000, "{input_bytes}");
    let text = ExtractiveSummarizer.summarize_text(&req);
    assert!(text.len() < 40_000, "output stays bounded: {}", text.len());
    // Sections stay short however long the session: the latest work, not all of it.
    let done = text
        .split("### Done\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a Done list");
    assert!(done.lines().count() <= 8, "{done}");
}
