use serde_json::json;

use super::*;
use crate::compaction::test_support::PathBuilder;
use crate::tokens::Chars4;

fn failed(b: &mut PathBuilder, call_id: &str, tool: &str, text: &str) -> String {
    b.message(
        json!({"role":"toolResult","toolCallId":call_id,"toolName":tool,
        "content":[{"type":"text","text":text}],"isError":true}),
    )
}

/// Two requests, a compile error fixed, a test error left failing, files read and edited.
fn session() -> PathBuilder {
    let mut b = PathBuilder::new();
    b.user("Fix the build.\nIt broke after the merge.");
    b.calls(&[("c1", "read", json!({"path":"src/lib.rs"}))]);
    b.result("c1", "read", "fn main() {}");
    b.calls(&[("c2", "bash", json!({"command":"cargo build"}))]);
    failed(
        &mut b,
        "c2",
        "bash",
        "error[E0308]: mismatched types\n --> src/lib.rs:3",
    );
    b.calls(&[("c3", "edit", json!({"path":"src/lib.rs"}))]);
    b.result("c3", "edit", "ok");
    b.calls(&[("c4", "bash", json!({"command":"cargo build"}))]);
    b.result("c4", "bash", "Finished");
    b.assistant("The build passes again.");
    b.user("Now make the tests pass.");
    b.calls(&[("c5", "bash", json!({"command":"cargo test"}))]);
    failed(
        &mut b,
        "c5",
        "bash",
        "test a ... FAILED\nthread 'a' panicked at src/a.rs:9",
    );
    b.calls(&[("c6", "read", json!({"path":"src/a.rs"}))]);
    b.result("c6", "read", "…");
    b
}

#[test]
fn derives_requests_files_errors_and_plan() {
    let mut b = session();
    b.calls(&[("c7", "read", json!({"path":"tests/a.rs"}))]);
    let ledger = Ledger::derive(&b.refs());
    let statuses: Vec<_> = ledger.requests.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [RequestStatus::Answered, RequestStatus::Current],
        "{ledger:#?}"
    );
    // The earlier request on one line, the current one verbatim.
    assert_eq!(
        ledger.requests[0].text,
        "Fix the build. It broke after the merge."
    );
    assert_eq!(ledger.requests[1].text, "Now make the tests pass.");
    let paths = |l: &[LedgerFile]| l.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&ledger.files.modified), ["src/lib.rs"]);
    assert_eq!(ledger.files.modified[0].last_op, FileOp::Edit);
    assert_eq!(paths(&ledger.files.read), ["src/a.rs", "tests/a.rs"]);
    let errors: Vec<_> = ledger
        .errors
        .iter()
        .map(|e| (e.command.as_str(), e.resolved))
        .collect();
    assert_eq!(
        errors,
        [("bash: cargo build", true), ("bash: cargo test", false)]
    );
    assert_eq!(ledger.errors[0].text, "error[E0308]: mismatched types");
}

#[test]
fn a_new_request_supersedes_an_unanswered_one_and_clears_the_plan() {
    let mut b = PathBuilder::new();
    b.user("Rename the crate.");
    b.message(json!({"role":"assistant","content":[
        {"type":"text","text":"I'll start with Cargo.toml. Next, I will update the imports."},
        {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"Cargo.toml"}}],
        "stopReason":"toolUse"}));
    assert_eq!(
        Ledger::derive(&b.refs()).next_step.as_deref(),
        Some("Next, I will update the imports.")
    );
    b.user("Stop, update the README instead.");
    let ledger = Ledger::derive(&b.refs());
    assert_eq!(ledger.requests[0].status, RequestStatus::Superseded);
    assert_eq!(ledger.requests[1].status, RequestStatus::Current);
    assert_eq!(ledger.next_step, None);
}

#[test]
fn pins_come_and_go() {
    let mut b = PathBuilder::new();
    let pin = b.push(
        "custom",
        json!({"customType": PIN_CUSTOM_TYPE, "data": {"text": "Deploy is frozen"}}),
    );
    b.push(
        "custom",
        json!({"customType": PIN_CUSTOM_TYPE, "data": {"text": "Use tabs"}}),
    );
    assert_eq!(Ledger::derive(&b.refs()).pins.len(), 2);
    b.push(
        "custom",
        json!({"customType": UNPIN_CUSTOM_TYPE, "data": {"pinId": pin}}),
    );
    let pins = Ledger::derive(&b.refs()).pins;
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].text, "Use tabs");
}

#[test]
fn a_snapshot_is_extended_as_the_whole_walk_would_be() {
    let b = session();
    let whole = Ledger::derive(&b.refs());
    // A compaction in the middle carrying the ledger of what came before it; then the rest.
    let mut c = PathBuilder::new();
    let mut first = PathBuilder::new();
    let cut = 9;
    for e in &b.entries[..cut] {
        first.entries.push(e.clone());
        c.entries.push(e.clone());
    }
    let mut details = json!({"readFiles": [], "modifiedFiles": []});
    record_in_details(&mut details, &Ledger::derive(&first.refs()));
    c.compaction("e5", "bland", details);
    for e in &b.entries[cut..] {
        c.entries.push(e.clone());
    }
    assert_eq!(Ledger::derive(&c.refs()), whole);
    // And the snapshot, not the entries before it, is what counts: a path whose early
    // entries are gone (a partly loaded session) still knows them.
    let tail: Vec<&Entry> = c.entries[cut..].iter().collect();
    assert_eq!(Ledger::derive(&tail), whole);
}

#[test]
fn compactions_without_a_ledger_lend_their_file_lists() {
    let mut b = PathBuilder::new();
    b.user("go on");
    b.compaction(
        "e0",
        "s",
        json!({"readFiles":["old/read.rs"],"modifiedFiles":["old/edit.rs"]}),
    );
    let ledger = Ledger::derive(&b.refs());
    assert_eq!(ledger.files.read[0].path, "old/read.rs");
    assert_eq!(ledger.files.modified[0].path, "old/edit.rs");
}

#[test]
fn the_same_path_gives_the_same_bytes() {
    let b = session();
    let one = serde_json::to_string(&Ledger::derive(&b.refs())).unwrap();
    let two = serde_json::to_string(&Ledger::derive(&b.refs())).unwrap();
    assert_eq!(one, two);
}

#[test]
fn the_block_drops_old_requests_and_resolved_errors_first() {
    let mut b = PathBuilder::new();
    for i in 0..40 {
        b.user(&format!("request number {i} with some words to take room"));
        b.calls(&[(
            &format!("c{i}"),
            "bash",
            json!({"command": format!("make t{i}")}),
        )]);
        failed(
            &mut b,
            &format!("c{i}"),
            "bash",
            &format!("error: t{i} failed"),
        );
        b.calls(&[(
            &format!("d{i}"),
            "bash",
            json!({"command": format!("make t{i}")}),
        )]);
        b.result(&format!("d{i}"), "bash", "ok");
        b.assistant("Done.");
    }
    b.push(
        "custom",
        json!({"customType": PIN_CUSTOM_TYPE, "data": {"text": "Never push to main"}}),
    );
    b.user("The final request, kept verbatim.");
    b.calls(&[("z", "bash", json!({"command": "make all"}))]);
    failed(&mut b, "z", "bash", "error: all failed");
    let ledger = Ledger::derive(&b.refs());
    let counter = Chars4;
    let full = render_block(&ledger, u64::MAX, &counter);
    assert!(full.contains("request number 0 "));
    let small = render_block(&ledger, 400, &counter);
    assert!(counter.count_text(&small) <= 400, "{small}");
    assert!(small.starts_with(BLOCK_OPEN) && small.ends_with(BLOCK_CLOSE));
    assert!(small.contains("The final request, kept verbatim."));
    assert!(small.contains("Never push to main"));
    assert!(small.contains("bash: make all → error: all failed"));
    assert!(!small.contains("request number 0 "), "{small}");
    assert!(small.contains("request number 39 "), "{small}");
    // Tighter, the resolved errors go too, the oldest first.
    let smaller = render_block(&ledger, 150, &counter);
    assert!(counter.count_text(&smaller) <= 150, "{smaller}");
    assert!(
        !smaller.contains("make t20 ") && smaller.contains("make t39 "),
        "{smaller}"
    );
    // Below what must stay, the block keeps it anyway.
    let tiny = render_block(&ledger, 1, &counter);
    assert!(tiny.contains("The final request, kept verbatim.") && tiny.contains("make all"));
}

#[test]
fn strip_block_removes_only_the_ledger() {
    let text =
        format!("Summary.\n\n<read-files>\na\n</read-files>\n\n{BLOCK_OPEN}\nx\n{BLOCK_CLOSE}");
    assert_eq!(
        strip_block(&text),
        "Summary.\n\n<read-files>\na\n</read-files>"
    );
    assert_eq!(strip_block("plain"), "plain");
}
