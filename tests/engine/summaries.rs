//! The offline (extractive) summaries of the real sessions — the reference's two
//! `pi-sessions` fixtures and the bundled demo — made by the real binary (`compact --preview`,
//! `navigate --summarize`), checked for what makes them a handover note a colleague could work
//! from: the goal in the user's words, progress and decisions as sentences, only real
//! failures, nothing cut mid-sentence or mid-code, constraints that are instructions, short
//! sections, and every must-keep fact already in the summary (the retention guard adds none).
//! `docs/summaries.md` shows these summaries before and after this was built.

use std::path::Path;

use devtools::fixtures::{copy_to_temp, demo_session, pi_session, run_cli};
use serde_json::Value;

/// A compaction preview with the extractive summarizer: the result's JSON.
fn compact_preview(session: &Path) -> Value {
    let (_dir, copy) = copy_to_temp(session);
    let out = run_cli(&[
        "compact",
        copy.to_str().unwrap(),
        "--preview",
        "--json",
        "--summarizer",
        "extractive",
    ]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("compact prints JSON")
}

/// The branch summary written when leaving the session's leaf for the entry whose tree
/// preview starts with `target`: the appended entry's JSON. The session is forked first, so
/// a v1 file has ids that stay the same from one command to the next.
fn branch_summary(session: &Path, target: &str) -> Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("session.jsonl");
    let copy = copy.to_str().unwrap();
    let out = run_cli(&["fork", session.to_str().unwrap(), copy]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_cli(&["tree", copy, "--json"]);
    let tree: Value = serde_json::from_slice(&out.stdout).expect("tree prints JSON");
    let id = tree["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["preview"].as_str().is_some_and(|p| p.starts_with(target)))
        .and_then(|n| n["id"].as_str())
        .unwrap_or_else(|| panic!("no entry previews as {target:?}"))
        .to_owned();
    let out = run_cli(&["navigate", copy, &id, "--summarize", "--json"]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("navigate prints JSON");
    result["summaryEntry"].clone()
}

/// The list items under `heading` (`## Goal`, `### Done`) in every part of `text` that has
/// it (a split turn's summary has two parts), without their markers; continuation lines
/// (a fenced verbatim block) are joined to their item.
fn items(text: &str, heading: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut inside = false;
    let mut fence = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        }
        if !fence && line.starts_with('#') {
            inside = line == heading;
            continue;
        }
        if !inside || line.starts_with('<') || (line.is_empty() && !fence) {
            continue;
        }
        if let Some(item) = marker_free(line).filter(|_| !fence && !line.starts_with("```")) {
            out.push(item.to_owned());
        } else if let Some(last) = out.last_mut() {
            last.push('\n');
            last.push_str(line);
        }
    }
    out
}

fn marker_free(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("- ").or_else(|| {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        (digits > 0)
            .then(|| &line[digits..])
            .and_then(|r| r.strip_prefix(". "))
    })?;
    Some(
        rest.strip_prefix("[x] ")
            .or_else(|| rest.strip_prefix("[ ] "))
            .unwrap_or(rest),
    )
}

/// Every list item of `text`, under any heading.
fn all_items(text: &str) -> Vec<String> {
    let headings: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("## ") || l.starts_with("### "))
        .collect();
    let mut out = Vec::new();
    for heading in headings.iter().collect::<std::collections::BTreeSet<_>>() {
        out.extend(items(text, heading));
    }
    out
}

/// The goal is the user's task in their words: its first item is `first`, the current request
/// is `current` (when there is more than one task), and no item is a slash command or a bare
/// reply.
fn assert_goal(text: &str, first: &str, current: Option<&str>) {
    let goals = items(text, "## Goal");
    assert!(
        goals.first().is_some_and(|g| g.starts_with(first)),
        "the goal should open with {first:?}:\n{text}"
    );
    if let Some(current) = current {
        assert!(
            goals.iter().any(|g| g.starts_with(current)),
            "the goal should have {current:?}:\n{text}"
        );
    }
    for goal in &goals {
        let bare = goal
            .split_once(": ")
            .filter(|(label, _)| !label.contains(' ') || label.ends_with("request"))
            .map_or(goal.as_str(), |(_, rest)| rest);
        let words = bare.split_whitespace().count();
        assert!(
            !bare.starts_with('/') && words >= 3,
            "a slash command or bare reply as a goal: {goal:?}\n{text}"
        );
    }
}

/// No item is cut inside a sentence or a code span, and none is a markdown-table fragment or
/// a lead-in left without its list.
fn assert_items_whole(text: &str) {
    for item in all_items(text) {
        let first = item.lines().next().unwrap_or("");
        let ticks = first.matches('`').count();
        assert!(
            ticks % 2 == 0 || first.contains("```"),
            "cut inside code: {item:?}\n{text}"
        );
        assert_eq!(first.matches("**").count() % 2, 0, "cut in bold: {item:?}");
        assert!(
            !first.starts_with('|') && !first.contains(" | "),
            "a table fragment: {item:?}\n{text}"
        );
        let end = first.trim_end();
        // A label such as "Error from `x`:" is followed by its fenced block.
        let lead_in_alone = end.ends_with(':') && !item.contains('\n');
        assert!(
            !end.ends_with(['(', ',']) && !lead_in_alone,
            "an item that stops mid-way: {item:?}\n{text}"
        );
    }
}

/// Only real failures are failures: no search that found nothing, no aborted command.
fn assert_real_failures(text: &str) {
    let failures: Vec<String> = items(text, "### Blocked")
        .into_iter()
        .chain(
            items(text, "## Critical Context")
                .into_iter()
                .filter(|i| i.starts_with("Error from")),
        )
        .collect();
    for failure in &failures {
        for not_a_failure in [
            "(no output)",
            "Command aborted",
            "Command exited with code 1\n",
        ] {
            assert!(
                !failure.contains(not_a_failure),
                "{not_a_failure:?} reported as a failure: {failure:?}\n{text}"
            );
        }
        assert!(
            !failure
                .trim_end()
                .ends_with("Command exited with code 1\n```")
                && !failure.ends_with("failed: Command exited with code 1"),
            "a search without a match as a failure: {failure:?}\n{text}"
        );
    }
}

/// Constraints are the user's instructions: no question, no narration.
fn assert_constraints_are_instructions(text: &str, cues_required: bool) {
    for constraint in items(text, "## Constraints & Preferences") {
        let lower = constraint.to_lowercase();
        assert!(!constraint.ends_with('?'), "a question: {constraint:?}");
        for narration in ["i think", "i don't", "ok, i think", "let me", "i guess"] {
            assert!(
                !lower.starts_with(narration),
                "narration as a constraint: {constraint:?}"
            );
        }
        if cues_required {
            let cue = ["must", "never", "always", "don't", "do not", "make sure"]
                .iter()
                .any(|c| lower.contains(c));
            assert!(cue, "not an instruction: {constraint:?}\n{text}");
        }
    }
}

/// Each section is short.
fn assert_sections_short(text: &str) {
    for (heading, cap) in [
        ("## Goal", 4),
        ("## Constraints & Preferences", 8),
        ("### Done", 8),
        ("### In Progress", 3),
        ("### Blocked", 3),
        ("## Key Decisions", 6),
        ("## Next Steps", 5),
    ] {
        // The history part and a split turn's part each have their own sections.
        let parts = text.split("**Turn Context (split turn):**");
        for part in parts {
            let n = items(part, heading).len();
            assert!(n <= cap, "{heading} has {n} items (at most {cap}):\n{text}");
        }
    }
}

/// Everything every summary must be, whatever the session.
fn assert_handover(text: &str, details: &Value) {
    assert_items_whole(text);
    assert_real_failures(text);
    assert_sections_short(text);
    assert!(!text.contains("(started, no result yet)"), "{text}");
    // The retention guard ran and found every must-keep fact already there.
    assert!(
        details.get("retainedFacts").is_none(),
        "the guard had to add {}:\n{text}",
        details["retainedFacts"]
    );
}

#[test]
fn large_session_summary_reads_like_a_handover() {
    let result = compact_preview(&pi_session("large-session.jsonl"));
    let text = result["summary"].as_str().expect("summary");
    assert_handover(text, &result["details"]);
    assert_goal(
        text,
        "read packages/coding-agent/docs/theme.md in full, then theme.ts, and then \
         oauth-selector or any of the other selectors. we still need to port over \
         user-message-selector.ts",
        Some(
            "Current request: this exploded when i restarted with -r. invalid themes must NEVER explode",
        ),
    );
    assert_constraints_are_instructions(text, true);
    let constraints = items(text, "## Constraints & Preferences");
    assert!(
        constraints.contains(&"invalid themes must NEVER explode".to_owned()),
        "{text}"
    );
    // What the summary used to say: a slash command as the goal, a table row as done work,
    // greps without a match as blockers, a question as a constraint, a step cut in a span.
    for before in [
        "- /mode",
        "| Syntax highlighting |",
        "### Blocked",
        "`grep -n \"console\" packages/coding-agent/src/theme/theme.ts` failed",
        "i don't understand, does it capture the theme variable",
        "During theme switch (`",
        "Finding: The problem is clear.",
    ] {
        assert!(!text.contains(before), "{before:?} is back:\n{text}");
    }
    // The split turn keeps its own request.
    assert!(
        text.contains("## Original Request\n```\nno conosle logs! setTheme should return an error"),
        "{text}"
    );
}

#[test]
fn before_compaction_summary_updates_the_previous_one() {
    let result = compact_preview(&pi_session("before-compaction.jsonl"));
    let text = result["summary"].as_str().expect("summary");
    assert_handover(text, &result["details"]);
    // The goal of the model-written summary it updates, then the user's latest task (the
    // session ends on "ok", which is no task).
    assert_goal(
        text,
        "Refactor `coding-agent` to eliminate code duplication",
        Some("Current request: we want to put it in pendingMessageContainer"),
    );
    // It ends on "ok": shown with what it acknowledges, not alone.
    assert!(
        text.contains(
            "- Latest user message, verbatim:\n```\nok\n```\n- It replies to the assistant's \
             message, which ended:\n```\nIf you had typed `!ls`, it would have been a direct bash"
        ),
        "{text}"
    );
    // The previous summary's preferences carry over as constraints.
    assert_constraints_are_instructions(text, false);
    let constraints = items(text, "## Constraints & Preferences");
    assert!(
        constraints.iter().any(|c| c.contains("E2E tests only")),
        "{text}"
    );
    let done = items(text, "### Done");
    assert!(
        done.iter().any(|d| d.starts_with(
            "Committed: `Show pending bash executions in pending area, move to chat on user submit`"
        )),
        "{text}"
    );
    for before in [
        "Latest request: ok",
        "Continue with: ok",
        "- [ ] ok",
        "failed: (no output)",
        "Command aborted",
        "Finding: ## Root Cause Analysis",
        // The previous summary's plan, finished long since.
        "Move files as per structure above",
    ] {
        assert!(!text.contains(before), "{before:?} is back:\n{text}");
    }
    // The short summary says what changed, not a heading.
    let short = result["shortSummary"].as_str().expect("short summary");
    assert!(short.starts_with("I changed "), "{short}");
    assert!(!short.contains('#'), "{short}");
}

#[test]
fn demo_session_of_one_long_turn_gets_its_goal_and_progress() {
    let result = compact_preview(&demo_session());
    let text = result["summary"].as_str().expect("summary");
    assert_handover(text, &result["details"]);
    assert!(text.starts_with("## Goal\n"), "{text}");
    assert!(!text.contains("No prior history."), "{text}");
    assert_goal(
        text,
        "The `ledger balance` command panics with 'attempt to subtract with overflow' when an \
         account has more than 2^31 cents. Find the cause and fix it.",
        None,
    );
    assert_constraints_are_instructions(text, true);
    assert_eq!(
        items(text, "### Done"),
        [
            "Read `src/ledger.rs`, `src/commands/balance.rs`, `src/accounts.rs` and 2 other \
             files; searched for `as i32` in `src`."
        ],
        "{text}"
    );
    assert_eq!(items(text, "### In Progress").len(), 1, "{text}");
}

#[test]
fn summaries_are_deterministic() {
    let first = compact_preview(&pi_session("large-session.jsonl"));
    let second = compact_preview(&pi_session("large-session.jsonl"));
    assert_eq!(first["summary"], second["summary"]);
    assert_eq!(first["shortSummary"], second["shortSummary"]);
}

#[test]
fn branch_summaries_know_what_commands_did() {
    // Leaving the demo's whole second request behind.
    let entry = branch_summary(&demo_session(), "The `ledger balance` command panics");
    let text = entry["summary"].as_str().expect("branch summary");
    assert_handover(text, &entry["details"]);
    assert_goal(
        text,
        "Also add a regression test with a balance of 3,000,000,000 cents",
        None,
    );
    let done = items(text, "### Done");
    for item in [
        "`cargo test` passed (48 tests).",
        "Created `tests/overflow.rs`.",
        "`cargo test --test overflow` passed (1 test).",
    ] {
        assert!(done.contains(&item.to_owned()), "{item:?} missing:\n{text}");
    }
    // The question the user must answer is the first next step.
    let next = items(text, "## Next Steps");
    assert!(
        next.first().is_some_and(
            |n| n.starts_with("Get the user's answer to: Should I change the CSV importer")
        ),
        "{text}"
    );

    let entry = branch_summary(
        &pi_session("large-session.jsonl"),
        "ok, create a new theme for me",
    );
    let text = entry["summary"].as_str().expect("branch summary");
    assert_handover(text, &entry["details"]);
    assert_goal(
        text,
        "the theme selector needs to push the theme update to the next tick",
        Some("Current request: read README.md that details everything"),
    );
    assert_constraints_are_instructions(text, true);
    let done = items(text, "### Done");
    for item in ["Committed: `Release v0.8.0`", "Tagged `v0.8.0`."] {
        assert!(
            done.iter().any(|d| d.starts_with(item)),
            "{item:?}:\n{text}"
        );
    }
    // The release commit failed on a type error, then passed: not blocking any more.
    assert!(!text.contains("### Blocked"), "{text}");

    let entry = branch_summary(
        &pi_session("before-compaction.jsonl"),
        "then we need to tackle this bash issue",
    );
    let text = entry["summary"].as_str().expect("branch summary");
    assert_handover(text, &entry["details"]);
    assert_goal(
        text,
        "continue investigate give me a root cause analysis and a plan on how to fix this",
        Some("Current request: we want to put it in pendingMessageContainer"),
    );
}
