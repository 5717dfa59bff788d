use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const TS: &str = "2025-01-01T00:00:00Z";

fn entry(v: Value) -> Entry {
    Entry::from_value(v).unwrap()
}

fn msg(id: &str, parent: Option<&str>, role: &str, text: &str) -> Entry {
    let message = if role == "user" {
        json!({"role": "user", "content": text, "timestamp": 1})
    } else {
        json!({"role": "assistant", "content": [{"type": "text", "text": text}],
               "api": "anthropic-messages", "provider": "anthropic", "model": "claude-test",
               "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2},
               "stopReason": "stop", "timestamp": 1})
    };
    entry(
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": TS, "message": message}),
    )
}

fn compaction(id: &str, parent: &str, summary: &str, first_kept: &str) -> Entry {
    entry(
        json!({"type": "compaction", "id": id, "parentId": parent, "timestamp": TS,
                 "summary": summary, "firstKeptEntryId": first_kept, "tokensBefore": 1000}),
    )
}

fn branch_summary(id: &str, parent: &str, summary: &str, from: &str) -> Entry {
    entry(
        json!({"type": "branch_summary", "id": id, "parentId": parent, "timestamp": TS,
                 "summary": summary, "fromId": from}),
    )
}

/// A short description of each message: the user text, the assistant text, or the summary.
fn texts(ctx: &SessionContext) -> Vec<String> {
    ctx.messages
        .iter()
        .map(|m| match m {
            AgentMessage::User(u) => u.content.joined_text(""),
            AgentMessage::Assistant(a) => join_text(&a.content, ""),
            AgentMessage::CompactionSummary(c) => format!("C:{}", c.summary),
            AgentMessage::BranchSummary(b) => format!("B:{}", b.summary),
            AgentMessage::Custom(c) => format!("X:{}", c.content.joined_text("")),
            other => other.role().to_owned(),
        })
        .collect()
}

#[test]
fn trivial_cases() {
    let ctx = build_session_context(&[], ContextLeaf::LastEntry);
    assert!(ctx.messages.is_empty());
    assert_eq!(ctx.thinking_level, "off");
    assert!(ctx.models.is_empty());
    assert_eq!(ctx.mode, "none");

    let one = [msg("1", None, "user", "hello")];
    assert_eq!(
        texts(&build_session_context(&one, ContextLeaf::LastEntry)),
        ["hello"]
    );
    // A null leaf (after resetLeaf) means an empty context even with entries.
    assert!(
        build_session_context(&one, ContextLeaf::Null)
            .messages
            .is_empty()
    );

    let conv = [
        msg("1", None, "user", "hello"),
        msg("2", Some("1"), "assistant", "hi there"),
        msg("3", Some("2"), "user", "how are you"),
        msg("4", Some("3"), "assistant", "great"),
    ];
    let ctx = build_session_context(&conv, ContextLeaf::LastEntry);
    let roles: Vec<&str> = ctx.messages.iter().map(AgentMessage::role).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert_eq!(ctx.entry_ids, ["1", "2", "3", "4"]);
}

#[test]
fn tracks_thinking_level_models_ttsr_and_mode() {
    let entries = [
        msg("1", None, "user", "hello"),
        entry(
            json!({"type": "thinking_level_change", "id": "2", "parentId": "1", "timestamp": TS, "thinkingLevel": "high"}),
        ),
        entry(
            json!({"type": "model_change", "id": "3", "parentId": "2", "timestamp": TS, "model": "openai/gpt-4"}),
        ),
        entry(
            json!({"type": "model_change", "id": "4", "parentId": "3", "timestamp": TS, "model": "openai/mini", "role": "smol"}),
        ),
        entry(
            json!({"type": "ttsr_injection", "id": "5", "parentId": "4", "timestamp": TS, "injectedRules": ["a", "b"]}),
        ),
        entry(
            json!({"type": "ttsr_injection", "id": "6", "parentId": "5", "timestamp": TS, "injectedRules": ["b", "c"]}),
        ),
        entry(
            json!({"type": "mode_change", "id": "7", "parentId": "6", "timestamp": TS, "mode": "plan", "data": {"step": 1}}),
        ),
    ];
    let ctx = build_session_context(&entries, ContextLeaf::LastEntry);
    assert_eq!(ctx.thinking_level, "high");
    assert_eq!(ctx.models["default"], "openai/gpt-4");
    assert_eq!(ctx.models["smol"], "openai/mini");
    assert_eq!(ctx.injected_ttsr_rules, ["a", "b", "c"]);
    assert_eq!(ctx.mode, "plan");
    assert_eq!(ctx.mode_data, Some(json!({"step": 1})));
    assert_eq!(ctx.messages.len(), 1, "state entries are not messages");

    // The reference at 2e45297: every assistant message overrides the default model,
    // even one set by an earlier model_change (a test asserts this).
    let mut with_reply = entries.to_vec();
    with_reply.push(msg("8", Some("7"), "assistant", "hi"));
    let ctx = build_session_context(&with_reply, ContextLeaf::LastEntry);
    assert_eq!(ctx.models["default"], "anthropic/claude-test");
    assert_eq!(ctx.models["smol"], "openai/mini");
}

#[test]
fn compaction_emits_summary_then_kept_then_later() {
    let entries = [
        msg("1", None, "user", "first"),
        msg("2", Some("1"), "assistant", "response1"),
        msg("3", Some("2"), "user", "second"),
        msg("4", Some("3"), "assistant", "response2"),
        compaction("5", "4", "Summary of first two turns", "3"),
        msg("6", Some("5"), "user", "third"),
        msg("7", Some("6"), "assistant", "response3"),
    ];
    let ctx = build_session_context(&entries, ContextLeaf::LastEntry);
    assert_eq!(
        texts(&ctx),
        [
            "C:Summary of first two turns",
            "second",
            "response2",
            "third",
            "response3"
        ]
    );
    assert_eq!(ctx.entry_ids, ["5", "3", "4", "6", "7"]);
    let AgentMessage::CompactionSummary(c) = &ctx.messages[0] else {
        panic!("not a summary")
    };
    assert_eq!(c.tokens_before, 1000);
    assert_eq!(c.timestamp, Some(json!(1_735_689_600_000i64)));
}

#[test]
fn compaction_keeping_from_the_first_entry_and_several_compactions() {
    let keep_all = [
        msg("1", None, "user", "first"),
        msg("2", Some("1"), "assistant", "response"),
        compaction("3", "2", "Empty summary", "1"),
        msg("4", Some("3"), "user", "second"),
    ];
    let ctx = build_session_context(&keep_all, ContextLeaf::LastEntry);
    assert_eq!(
        texts(&ctx),
        ["C:Empty summary", "first", "response", "second"]
    );

    let several = [
        msg("1", None, "user", "a"),
        msg("2", Some("1"), "assistant", "b"),
        compaction("3", "2", "First summary", "1"),
        msg("4", Some("3"), "user", "c"),
        msg("5", Some("4"), "assistant", "d"),
        compaction("6", "5", "Second summary", "4"),
        msg("7", Some("6"), "user", "e"),
    ];
    let ctx = build_session_context(&several, ContextLeaf::LastEntry);
    assert_eq!(texts(&ctx), ["C:Second summary", "c", "d", "e"]);
}

#[test]
fn unknown_first_kept_id_silently_drops_the_kept_region() {
    let entries = [
        msg("1", None, "user", "a"),
        compaction("2", "1", "S", "nowhere"),
        msg("3", Some("2"), "user", "b"),
    ];
    let ctx = build_session_context(&entries, ContextLeaf::LastEntry);
    assert_eq!(texts(&ctx), ["C:S", "b"]);
}

#[test]
fn follows_the_path_to_the_leaf_and_includes_branch_summaries() {
    let entries = [
        msg("1", None, "user", "start"),
        msg("2", Some("1"), "assistant", "response"),
        msg("3", Some("2"), "user", "branch A"),
        msg("4", Some("2"), "user", "branch B"),
    ];
    assert_eq!(
        texts(&build_session_context(&entries, "3")),
        ["start", "response", "branch A"]
    );
    assert_eq!(
        texts(&build_session_context(&entries, "4")),
        ["start", "response", "branch B"]
    );

    let with_summary = [
        msg("1", None, "user", "start"),
        msg("2", Some("1"), "assistant", "response"),
        msg("3", Some("2"), "user", "abandoned path"),
        branch_summary("4", "2", "Summary of abandoned work", "3"),
        msg("5", Some("4"), "user", "new direction"),
    ];
    assert_eq!(
        texts(&build_session_context(&with_summary, "5")),
        [
            "start",
            "response",
            "B:Summary of abandoned work",
            "new direction"
        ]
    );
    // An empty branch summary is not a message.
    let empty = [
        msg("1", None, "user", "x"),
        branch_summary("2", "1", "", "1"),
    ];
    assert_eq!(
        texts(&build_session_context(&empty, ContextLeaf::LastEntry)),
        ["x"]
    );
}

#[test]
fn complex_tree_with_compaction_and_branch_summary_exact_order() {
    // 1 -> 2 -> 3 -> 4 -> compaction(5) -> 6 -> 7   (main path)
    //             \-> 8 -> 9                       (abandoned)
    //             \-> branchSummary(10) -> 11      (resumed from 3)
    let entries = [
        msg("1", None, "user", "start"),
        msg("2", Some("1"), "assistant", "r1"),
        msg("3", Some("2"), "user", "q2"),
        msg("4", Some("3"), "assistant", "r2"),
        compaction("5", "4", "Compacted history", "3"),
        msg("6", Some("5"), "user", "q3"),
        msg("7", Some("6"), "assistant", "r3"),
        msg("8", Some("3"), "user", "wrong path"),
        msg("9", Some("8"), "assistant", "wrong response"),
        branch_summary("10", "3", "Tried wrong approach", "9"),
        msg("11", Some("10"), "user", "better approach"),
    ];
    let main = build_session_context(&entries, "7");
    assert_eq!(
        texts(&main),
        ["C:Compacted history", "q2", "r2", "q3", "r3"]
    );
    let branch = build_session_context(&entries, "11");
    assert_eq!(
        texts(&branch),
        [
            "start",
            "r1",
            "q2",
            "B:Tried wrong approach",
            "better approach"
        ]
    );
    assert_eq!(branch.entry_ids, ["1", "2", "3", "10", "11"]);
}

#[test]
fn unknown_leaf_uses_the_last_entry_and_an_orphan_ends_the_path() {
    let entries = [
        msg("1", None, "user", "hello"),
        msg("2", Some("1"), "assistant", "hi"),
    ];
    assert_eq!(
        build_session_context(&entries, "nonexistent")
            .messages
            .len(),
        2
    );

    let orphan = [
        msg("1", None, "user", "hello"),
        msg("2", Some("missing"), "assistant", "orphan"),
    ];
    assert_eq!(texts(&build_session_context(&orphan, "2")), ["orphan"]);
}

#[test]
fn cycles_and_markers_do_not_hang_or_show() {
    let cycle = [
        msg("a", Some("b"), "user", "A"),
        msg("b", Some("a"), "user", "B"),
    ];
    assert_eq!(texts(&build_session_context(&cycle, "b")), ["A", "B"]);
    let selfish = [msg("a", Some("a"), "user", "A")];
    assert_eq!(texts(&build_session_context(&selfish, "a")), ["A"]);

    // A marker as the last entry: the context is its parent's.
    let marked = [
        msg("1", None, "user", "one"),
        msg("2", Some("1"), "assistant", "two"),
        entry(json!({"type": "compactd_leaf", "id": "m", "parentId": "1", "timestamp": TS})),
    ];
    assert_eq!(
        texts(&build_session_context(&marked, ContextLeaf::LastEntry)),
        ["one"]
    );
}

#[test]
fn custom_messages_become_custom_role_with_ms_timestamps() {
    let entries = [
        msg("1", None, "user", "u"),
        entry(
            json!({"type": "custom_message", "id": "2", "parentId": "1", "timestamp": "2025-01-01T00:00:01.500Z",
                     "customType": "ext", "content": "injected", "display": false}),
        ),
        entry(
            json!({"type": "custom", "id": "3", "parentId": "2", "timestamp": TS, "customType": "state"}),
        ),
        entry(
            json!({"type": "label", "id": "4", "parentId": "3", "timestamp": TS, "targetId": "1", "label": "x"}),
        ),
    ];
    let ctx = build_session_context(&entries, ContextLeaf::LastEntry);
    assert_eq!(texts(&ctx), ["u", "X:injected"]);
    let AgentMessage::Custom(c) = &ctx.messages[1] else {
        panic!("not custom")
    };
    assert_eq!(c.custom_type, "ext");
    assert_eq!(c.timestamp, Some(json!(1_735_689_601_500i64)));
}

#[test]
fn blob_references_resolve_for_context_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ab12"), b"hi!").unwrap();
    let entries = [entry(
        json!({"type": "message", "id": "1", "parentId": null, "timestamp": TS,
        "message": {"role": "user", "content": [
            {"type": "image", "data": "blob:sha256:ab12", "mimeType": "image/png"},
            {"type": "image", "data": "blob:sha256:ffff", "mimeType": "image/png"},
            {"type": "image", "data": "blob:sha256:../x", "mimeType": "image/png"}]}}),
    )];
    let opts = ContextOptions {
        blob_dir: Some(dir.path().to_path_buf()),
    };
    let ctx = build_session_context_with(&entries, ContextLeaf::LastEntry, &opts);
    let AgentMessage::User(u) = &ctx.messages[0] else {
        panic!("not user")
    };
    let data: Vec<&str> = u
        .content
        .blocks()
        .iter()
        .map(|b| match b {
            ContentBlock::Image(i) => i.data.clone().leak() as &str,
            _ => "",
        })
        .collect();
    assert_eq!(data, ["aGkh", "blob:sha256:ffff", "blob:sha256:../x"]);
    // The entry keeps its reference.
    assert!(entries[0].to_line().contains("blob:sha256:ab12"));
}

fn user_text(m: &AgentMessage) -> String {
    match m {
        AgentMessage::User(u) => u.content.joined_text("|"),
        other => panic!("expected user, got {}", other.role()),
    }
}

#[test]
fn convert_to_llm_outputs_only_llm_roles() {
    let raw = json!([
        {"role": "user", "content": "u", "timestamp": 1},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {"role": "toolResult", "toolCallId": "c", "toolName": "read", "content": [{"type": "text", "text": "out"}], "isError": false},
        {"role": "bashExecution", "command": "ls", "output": "a\nb\n", "exitCode": 0, "cancelled": false, "truncated": false},
        {"role": "bashExecution", "command": "false", "output": "", "exitCode": 1, "cancelled": false, "truncated": false},
        {"role": "bashExecution", "command": "sleep 9", "output": "", "cancelled": true, "truncated": false},
        {"role": "bashExecution", "command": "secret", "output": "x", "exitCode": 0, "cancelled": false, "truncated": false, "excludeFromContext": true},
        {"role": "pythonExecution", "code": "print(1)", "output": "1", "exitCode": 0, "cancelled": false, "truncated": true},
        {"role": "custom", "customType": "t", "content": "injected", "display": true, "timestamp": 7},
        {"role": "hookMessage", "customType": "t", "content": [{"type": "text", "text": "legacy"}], "display": true},
        {"role": "branchSummary", "summary": "BS", "fromId": "x", "timestamp": 8},
        {"role": "compactionSummary", "summary": "CS", "tokensBefore": 5},
        {"role": "developer", "content": [{"type": "text", "text": "Continue if you have next steps."}], "timestamp": 9},
        {"role": "telepathy", "thought": "dropped"}
    ]);
    let msgs: Vec<AgentMessage> = serde_json::from_value(raw).unwrap();
    let out = convert_to_llm(&msgs);
    let roles: Vec<&str> = out.iter().map(AgentMessage::role).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "toolResult",
            "user",
            "user",
            "user",
            "user",
            "user",
            "user",
            "user",
            "user",
            "developer"
        ]
    );
    assert_eq!(user_text(&out[3]), "Ran `ls`\n```\na\nb\n```");
    assert_eq!(
        user_text(&out[4]),
        "Ran `false`\n(no output)\n\nCommand exited with code 1"
    );
    assert_eq!(
        user_text(&out[5]),
        "Ran `sleep 9`\n(no output)\n\n(command cancelled)"
    );
    assert_eq!(
        user_text(&out[6]),
        "Ran Python code:\n```python\nprint(1)\n```\nOutput:\n```\n1\n```\n\n(output truncated)"
    );
    assert_eq!(user_text(&out[7]), "injected");
    assert_eq!(user_text(&out[8]), "legacy");
    let AgentMessage::User(custom) = &out[7] else {
        unreachable!()
    };
    assert_eq!(custom.timestamp, Some(json!(7)));
    assert!(matches!(&custom.content, Content::Blocks(b) if b.len() == 1));
    let bs = user_text(&out[9]);
    assert!(bs.ends_with("<summary>\nBS\n</summary>"), "{bs}");
    assert_eq!(bs, branch_summary_text("BS"));
    let cs = user_text(&out[10]);
    assert!(cs.ends_with("<summary>\nCS\n</summary>"), "{cs}");
    assert!(cs.to_lowercase().contains("another model"), "{cs}");
}

#[test]
fn pruned_tool_results_show_their_text_or_a_notice() {
    let msgs: Vec<AgentMessage> = serde_json::from_value(json!([
        {"role": "toolResult", "toolCallId": "a", "toolName": "bash", "isError": false, "prunedAt": 5,
         "content": [{"type": "text", "text": "[Output truncated - 900 tokens]"}, {"type": "image", "data": "x", "mimeType": "image/png"}]},
        {"role": "toolResult", "toolCallId": "b", "toolName": "bash", "isError": false, "prunedAt": 5,
         "content": [{"type": "image", "data": "x", "mimeType": "image/png"}]},
        {"role": "toolResult", "toolCallId": "c", "toolName": "bash", "isError": false,
         "content": [{"type": "image", "data": "x", "mimeType": "image/png"}]}
    ]))
    .unwrap();
    let out = convert_to_llm(&msgs);
    let blocks = |m: &AgentMessage| match m {
        AgentMessage::ToolResult(t) => t.content.clone(),
        _ => panic!(),
    };
    assert_eq!(
        blocks(&out[0]),
        [ContentBlock::text("[Output truncated - 900 tokens]")]
    );
    assert_eq!(blocks(&out[1]), [ContentBlock::text(PRUNED_NO_TEXT)]);
    assert!(
        matches!(blocks(&out[2])[0], ContentBlock::Image(_)),
        "unpruned keeps images"
    );
}

#[test]
fn file_mentions_become_a_system_reminder() {
    let msgs: Vec<AgentMessage> = serde_json::from_value(json!([{"role": "fileMention", "files": [
        {"path": "src/a.rs", "content": "fn a() {}\n"},
        {"path": "big.log", "content": "", "skippedReason": "tooLarge"},
        {"path": "pic.png", "content": "", "image": {"data": "AAAA", "mimeType": "image/png"}}
    ]}]))
    .unwrap();
    let out = convert_to_llm(&msgs);
    let AgentMessage::User(u) = &out[0] else {
        panic!()
    };
    let blocks = u.content.blocks();
    assert_eq!(
        blocks[0].as_text().unwrap(),
        "<system-reminder>\n<file path=\"src/a.rs\">\nfn a() {}\n</file>\n\
         <file path=\"big.log\">\n(not included: the file is too large)\n</file>\n\
         <file path=\"pic.png\">\n(image attached below)\n</file>\n</system-reminder>"
    );
    assert!(matches!(&blocks[1], ContentBlock::Image(i) if i.data == "AAAA"));
}

#[test]
fn templates_leave_the_summary_untouched() {
    // Deviation 6: the reference's layout pass turned two spaces into a tab, stripped
    // trailing spaces and collapsed blank lines inside the summary; compactd does not.
    let summary = "## Goal\n  - indented item\n    code  \n\n\n\nend\r\n{{summary}}";
    let text = compaction_summary_text(summary);
    assert!(
        text.contains(&format!("<summary>\n{summary}\n</summary>")),
        "{text}"
    );
    assert_eq!(
        text.matches("{{summary}}").count(),
        1,
        "substituted once, not re-scanned"
    );
    // The template itself is normalised: CRLF to LF and trimmed.
    assert_eq!(
        render_summary_template("\r\n  A\r\nB {{summary}}\r\n\r\n", "x  "),
        "A\nB x  "
    );
    assert!(!COMPACTION_SUMMARY_CONTEXT.trim().is_empty());
    assert!(BRANCH_SUMMARY_CONTEXT.contains("{{summary}}"));
}

/// An entry of kind `k` (0..9) with pseudo-random details from `v`, as a child of
/// `parent`.
fn state_test_entry(i: usize, k: u8, v: u8, parent: Option<&str>) -> Entry {
    let id = format!("e{i}");
    let base = json!({"id": id, "parentId": parent, "timestamp": TS});
    let mut e = base.as_object().unwrap().clone();
    let role = ["default", "smol", "slow"][usize::from(v % 3)];
    let stop = ["stop", "aborted", "error", "toolUse"][usize::from(v % 4)];
    let body = match k {
        0 => json!({"type": "thinking_level_change", "thinkingLevel": format!("t{v}")}),
        1 => json!({"type": "model_change", "model": format!("p/m{v}"),
                    "role": role}),
        2 => json!({"type": "model_change", "model": null}),
        3 => json!({"type": "mode_change", "mode": format!("mode{v}"), "data": {"v": v}}),
        4 => json!({"type": "ttsr_injection",
                    "injectedRules": [format!("r{}", v % 5), format!("r{}", v % 3)]}),
        5 => json!({"type": "message", "message": {"role": "assistant",
                    "content": [{"type": "text", "text": format!("a{v}")}],
                    "provider": if v.is_multiple_of(2) { json!("prov") } else { json!(null) },
                    "model": format!("m{v}"),
                    "usage": if v.is_multiple_of(3) { json!(null) } else {
                        json!({"input": v, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                               "totalTokens": u32::from(v) + 1}) },
                    "stopReason": stop,
                    "timestamp": 1}}),
        6 => json!({"type": "custom", "customType": "note", "data": v}),
        7 => json!({"type": "compaction", "summary": format!("old {v}"),
                    "firstKeptEntryId": format!("e{}", i.saturating_sub(usize::from(v % 4))),
                    "tokensBefore": 5}),
        _ => json!({"type": "message", "message": {"role": "user",
                    "content": format!("u{v}"), "timestamp": 1}}),
    };
    e.extend(body.as_object().unwrap().clone());
    entry(Value::Object(e))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    /// `state_entries(X) ++ Y` stands for `X ++ Y` when `Y` holds the newest compaction
    /// and its kept region: same context (messages, thinking level, models, mode, rules)
    /// and the same compaction plan.
    #[test]
    fn state_entries_stand_for_the_path_before_the_kept_region(
        before in proptest::collection::vec((0u8..9, 0u8..255), 0..40),
        after in proptest::collection::vec((0u8..9, 0u8..255), 1..12),
    ) {
        let mut path: Vec<Entry> = Vec::new();
        for (k, v) in &before {
            let parent = path.last().map(|e| e.id.clone());
            path.push(state_test_entry(path.len(), *k, *v, parent.as_deref()));
        }
        // Y: the kept region (a user message first), a compaction keeping from it, more.
        let kept = path.len();
        let parent = path.last().map(|e| e.id.clone());
        path.push(state_test_entry(kept, 8, 1, parent.as_deref()));
        for (i, (k, v)) in after.iter().enumerate() {
            let parent = path.last().map(|e| e.id.clone());
            let k = if *k == 7 { 6 } else { *k };
            path.push(state_test_entry(path.len(), k, *v, parent.as_deref()));
            if i == after.len() / 2 {
                let parent = path.last().map(|e| e.id.clone());
                path.push(compaction(&format!("e{}", path.len()), parent.as_deref().unwrap(),
                    "newest", &format!("e{kept}")));
            }
        }
        let whole: Vec<&Entry> = path.iter().collect();
        let picked = state_entries(&whole[..kept]);
        let sparse: Vec<&Entry> = picked.iter().map(|&k| whole[k]).chain(whole[kept..].iter().copied()).collect();
        let options = ContextOptions::default();
        proptest::prop_assert_eq!(
            context_of_path(&sparse, &options),
            context_of_path(&whole, &options)
        );
        let plan = |p: &[&Entry]| {
            crate::compaction::prepare_compaction(
                p,
                &crate::compaction::CompactionParams::default(),
                &crate::tokens::Chars4,
            )
            .map(|plan| {
                // What the plan summarises and keeps, not where it is on the path.
                (
                    plan.first_kept_entry_id,
                    plan.summarized.message_ids().map(str::to_owned).collect::<Vec<_>>(),
                    plan.messages_to_summarize.to_vec(),
                    plan.turn_prefix_messages.to_vec(),
                    plan.recent_messages.to_vec(),
                    (plan.is_split_turn, plan.tokens_before, plan.previous_summary),
                    (plan.file_ops, plan.keep_recent_tokens),
                )
            })
        };
        proptest::prop_assert_eq!(plan(&sparse), plan(&whole));
        // And picking again from what was picked changes nothing.
        let sparse_prefix: Vec<&Entry> = picked.iter().map(|&k| whole[k]).collect();
        proptest::prop_assert_eq!(state_entries(&sparse_prefix).len(), picked.len());
    }
}
