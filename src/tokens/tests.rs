use std::sync::Arc;

use serde_json::json;

use super::chars4::utf16_len;
use super::tiktoken::{IMAGE_TOKENS, MESSAGE_OVERHEAD_TOKENS};
use super::*;
use crate::session::{AgentMessage, Entry};

fn msg(v: serde_json::Value) -> AgentMessage {
    AgentMessage::from_value(v).expect("test message parses")
}

fn image() -> serde_json::Value {
    json!({"type":"image","data":"AAAA","mimeType":"image/png"})
}

#[test]
fn chars4_counts_utf16_code_units_so_non_bmp_characters_count_two() {
    // 5 emoji: 5 chars, 20 UTF-8 bytes, 10 UTF-16 units -> ceil(10/4) = 3.
    let five = "😀".repeat(5);
    assert_eq!(Chars4.count_text(&five), 3);
    assert_eq!(Chars4.count_message(&AgentMessage::user_text(five, 0)), 3);
    assert_eq!(utf16_len("é😀"), 3);
}

proptest::proptest! {
    /// The byte count is JavaScript's `String.length` for any text, every UTF-8 length mixed.
    #[test]
    fn utf16_len_counts_what_encode_utf16_yields(s in "(\\PC|[\u{80}-\u{7ff}\u{800}-\u{ffff}\u{10000}-\u{10ffff}]){0,64}") {
        proptest::prop_assert_eq!(utf16_len(&s), s.encode_utf16().count() as u64);
    }

    /// Tool-call arguments are counted as they are written, equal to counting the string.
    #[test]
    fn json_is_counted_as_written(
        keys in proptest::collection::vec("(\\PC|[\"\\\\\u{1}\u{10000}-\u{10ffff}]){0,12}", 0..6),
        texts in proptest::collection::vec("(\\PC|[\"\\\\\n\t\u{7f}\u{10000}-\u{10ffff}]){0,40}", 6),
        number in proptest::num::f64::NORMAL,
        int in proptest::num::i64::ANY,
    ) {
        let mut object = serde_json::Map::new();
        for (i, key) in keys.iter().enumerate() {
            object.insert(key.clone(), serde_json::Value::from(texts[i].clone()));
        }
        object.insert("n".into(), json!(number));
        object.insert("i".into(), json!(int));
        object.insert("nested".into(), json!([texts[5].clone(), null, true, {"k": 1.5}]));
        let value = serde_json::Value::Object(object);
        proptest::prop_assert_eq!(
            chars4::json_utf16_len(&value),
            utf16_len(&value.to_string())
        );
    }
}

#[test]
fn chars4_matches_the_reference_table_per_role() {
    let c = Chars4;
    // user: text blocks only, images free: "abcd" -> 1.
    let user = msg(json!({"role":"user","content":[{"type":"text","text":"abcd"}, image()]}));
    assert_eq!(c.count_message(&user), 1);
    // assistant: "hi" + "hmm" + "read" + `{"path":"a.rs","limit":10}` (26) = 35 -> 9.
    let assistant = msg(json!({"role":"assistant","content":[
        {"type":"text","text":"hi"},
        {"type":"thinking","thinking":"hmm","thinkingSignature":"not counted"},
        {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a.rs","limit":10}}]}));
    assert_eq!(c.count_message(&assistant), 9);
    // toolResult: "abcd" + 4800 per image = 4804 -> 1201.
    let result = msg(
        json!({"role":"toolResult","toolCallId":"c1","toolName":"read",
        "content":[{"type":"text","text":"abcd"}, image()],"isError":false}),
    );
    assert_eq!(c.count_message(&result), 1201);
    // bashExecution: command + output = 2 + 3 -> 2.
    let bash = msg(json!({"role":"bashExecution","command":"ls","output":"a\nb"}));
    assert_eq!(c.count_message(&bash), 2);
    let summary = msg(json!({"role":"compactionSummary","summary":"123456789","tokensBefore":1}));
    assert_eq!(c.count_message(&summary), 3);
    let branch = msg(json!({"role":"branchSummary","summary":"12345","fromId":"x"}));
    assert_eq!(c.count_message(&branch), 2);
}

fn blind_spot_messages() -> Vec<AgentMessage> {
    vec![
        msg(
            json!({"role":"custom","customType":"ctx","content":"a lot of injected context","display":false}),
        ),
        msg(json!({"role":"pythonExecution","code":"print(1)","output":"1"})),
        msg(json!({"role":"fileMention","files":[{"path":"src/lib.rs","content":"fn main() {}"}]})),
        msg(json!({"role":"user","content":[image()]})),
    ]
}

#[test]
fn deviation5_chars4_keeps_the_reference_blind_spots() {
    for m in blind_spot_messages() {
        assert_eq!(Chars4.count_message(&m), 0, "{}", m.role());
    }
}

#[test]
fn deviation5_every_role_has_a_cost_with_the_exact_counter() {
    let exact = Tiktoken::new(Bpe::O200k);
    for m in blind_spot_messages() {
        assert!(
            exact.count_message(&m) > MESSAGE_OVERHEAD_TOKENS,
            "{}",
            m.role()
        );
    }
    let image_only = &blind_spot_messages()[3];
    assert_eq!(
        exact.count_message(image_only),
        IMAGE_TOKENS + MESSAGE_OVERHEAD_TOKENS
    );
}

#[test]
fn counters_are_found_by_name() {
    for name in ["chars4", "o200k", "cl100k"] {
        assert_eq!(counter_by_name(name).expect(name).name(), name);
    }
    assert!(counter_by_name("p50k").is_none());
}

fn entry(id: &str, message: serde_json::Value) -> Entry {
    Entry::from_value(json!({"type":"message","id":id,"parentId":null,
        "timestamp":"2026-01-01T00:00:00.000Z","message":message}))
    .expect("test entry parses")
}

#[test]
fn cache_counts_entries_once_and_sees_pruning() {
    let cache = TokenCache::new(Arc::new(Chars4));
    let mut e = entry(
        "t1",
        json!({"role":"toolResult","toolCallId":"c","toolName":"bash",
            "content":[{"type":"text","text":"x".repeat(400)}],"isError":false}),
    );
    assert_eq!(cache.count_entry(&e), 100);
    // Same id, same pruned state: the cached value is returned even if content changed.
    if let crate::session::EntryKind::Message(AgentMessage::ToolResult(r)) = e.kind_mut() {
        r.content = vec![crate::session::ContentBlock::text("short")];
    }
    assert_eq!(cache.count_entry(&e), 100);
    cache.invalidate("t1");
    assert_eq!(cache.count_entry(&e), 2);
    if let crate::session::EntryKind::Message(AgentMessage::ToolResult(r)) = e.kind_mut() {
        r.content = vec![crate::session::ContentBlock::text(
            "[Output truncated - 100 tokens]",
        )];
        r.pruned_at = Some(json!(1));
    }
    assert_eq!(cache.count_entry(&e), 8);
    let meta = Entry::from_value(json!({"type":"label","id":"l","parentId":null,
        "timestamp":"t","targetId":"t1"}))
    .expect("label parses");
    assert_eq!(cache.count_entry(&meta), 0);
    // An id too long to be held inline (another agent's UUID) is cached and forgotten alike.
    let long = "5b1f0c1e-7d1a-4c43-9a0e-2f1d6f3e9a10";
    let mut e = entry(
        long,
        json!({"role":"user","content":"x".repeat(40),"timestamp":1}),
    );
    assert_eq!(cache.count_entry(&e), 10);
    if let crate::session::EntryKind::Message(AgentMessage::User(u)) = e.kind_mut() {
        u.content = crate::session::Content::Text("y".repeat(80));
    }
    assert_eq!(cache.count_entry(&e), 10);
    cache.invalidate(long);
    assert_eq!(cache.count_entry(&e), 20);
}
