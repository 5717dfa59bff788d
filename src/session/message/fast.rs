//! The three roles that make up almost every session line (`user`, `assistant`,
//! `toolResult`) moved out of a parsed JSON object field by field, instead of through serde's
//! derived code: with `#[serde(flatten)]` that code buffers every member of every message and
//! block and rebuilds each map twice, which made parsing a compaction window several times
//! slower than parsing its JSON.
//!
//! The result must be exactly what the derived code gives, so the fast path only takes
//! objects it can check in advance: [`accepts`] looks at every modelled field by reference
//! and says no to anything the derived code might treat differently (a missing required
//! field, a wrong JSON type, a struct written as an array, another role). Those objects take
//! the derived path as before. [`convert`] then only moves values. The unit tests compare the
//! two paths on every shape they can think of and on random objects.

use serde_json::{Map, Value};

use super::{
    AgentMessage, AssistantMessage, Content, ContentBlock, Extra, ImageBlock, TextBlock,
    ThinkingBlock, ToolCall, ToolResultMessage, Usage, UserMessage, leftover,
};

/// A field's expected JSON shape, as the derived code accepts it.
#[derive(Clone, Copy)]
enum Shape {
    /// `String` without a default: present and a string.
    Text,
    /// `String` or `bool` with `#[serde(default)]`: absent, or of that type.
    TextOrAbsent,
    BoolOrAbsent,
    /// `u64` with a default: absent, or a non-negative integer.
    CountOrAbsent,
    /// `Option<String>` / `Option<bool>`: absent, null, or of that type.
    OptText,
    OptBool,
    /// `Value` or `Option<Value>`: anything.
    Any,
}

fn fits(map: &Map<String, Value>, key: &str, shape: Shape) -> bool {
    let value = map.get(key);
    match shape {
        Shape::Text => matches!(value, Some(Value::String(_))),
        Shape::TextOrAbsent => matches!(value, None | Some(Value::String(_))),
        Shape::BoolOrAbsent => matches!(value, None | Some(Value::Bool(_))),
        Shape::CountOrAbsent => match value {
            None => true,
            Some(Value::Number(n)) => n.as_u64().is_some(),
            Some(_) => false,
        },
        Shape::OptText => matches!(value, None | Some(Value::Null | Value::String(_))),
        Shape::OptBool => matches!(value, None | Some(Value::Null | Value::Bool(_))),
        Shape::Any => true,
    }
}

fn all_fit(map: &Map<String, Value>, fields: &[(&str, Shape)]) -> bool {
    fields.iter().all(|&(key, shape)| fits(map, key, shape))
}

const USER: &[(&str, Shape)] = &[("synthetic", Shape::OptBool), ("timestamp", Shape::Any)];
const ASSISTANT: &[(&str, Shape)] = &[
    ("api", Shape::OptText),
    ("provider", Shape::OptText),
    ("model", Shape::OptText),
    ("stopReason", Shape::OptText),
    ("errorMessage", Shape::OptText),
    ("timestamp", Shape::Any),
];
const TOOL_RESULT: &[(&str, Shape)] = &[
    ("toolCallId", Shape::TextOrAbsent),
    ("toolName", Shape::TextOrAbsent),
    ("details", Shape::Any),
    ("isError", Shape::BoolOrAbsent),
    ("prunedAt", Shape::Any),
    ("timestamp", Shape::Any),
];
const USAGE: &[(&str, Shape)] = &[
    ("input", Shape::CountOrAbsent),
    ("output", Shape::CountOrAbsent),
    ("cacheRead", Shape::CountOrAbsent),
    ("cacheWrite", Shape::CountOrAbsent),
    ("totalTokens", Shape::CountOrAbsent),
    ("cost", Shape::Any),
];
const TEXT: &[(&str, Shape)] = &[("text", Shape::Text), ("textSignature", Shape::OptText)];
const THINKING: &[(&str, Shape)] = &[
    ("thinking", Shape::Text),
    ("thinkingSignature", Shape::OptText),
];
const IMAGE: &[(&str, Shape)] = &[("data", Shape::Text), ("mimeType", Shape::Text)];
const TOOL_CALL: &[(&str, Shape)] = &[
    ("id", Shape::Text),
    ("name", Shape::Text),
    ("arguments", Shape::Any),
    ("thoughtSignature", Shape::OptText),
];

/// Whether [`convert`] takes `value`: a message of a role it knows whose every modelled
/// field has a shape the derived code reads the same way.
pub(super) fn accepts(value: &Value) -> bool {
    let Value::Object(map) = value else {
        return false;
    };
    match map.get("role").and_then(Value::as_str) {
        Some("user") => all_fit(map, USER) && content_fits(map.get("content")),
        Some("assistant") => {
            all_fit(map, ASSISTANT)
                && blocks_fit(map.get("content"))
                && match map.get("usage") {
                    None | Some(Value::Null) => true,
                    Some(Value::Object(usage)) => all_fit(usage, USAGE),
                    Some(_) => false,
                }
        }
        Some("toolResult") => all_fit(map, TOOL_RESULT) && blocks_fit(map.get("content")),
        _ => false,
    }
}

/// `Content` with a default: absent, a string, or blocks.
fn content_fits(value: Option<&Value>) -> bool {
    matches!(value, None | Some(Value::String(_))) || blocks_fit(value)
}

/// `Vec<ContentBlock>` with a default: absent, or an array of objects whose known block
/// types have the right fields (a block of another type is kept whole).
fn blocks_fit(value: Option<&Value>) -> bool {
    match value {
        None => true,
        Some(Value::Array(blocks)) => blocks.iter().all(|block| match block {
            Value::Object(map) => match map.get("type").and_then(Value::as_str) {
                Some("text") => all_fit(map, TEXT),
                Some("thinking") => all_fit(map, THINKING),
                Some("image") => all_fit(map, IMAGE),
                Some("toolCall") => all_fit(map, TOOL_CALL),
                _ => true,
            },
            _ => false,
        }),
        Some(_) => false,
    }
}

/// The message `value` holds. Only for a value [`accepts`] took.
pub(super) fn convert(value: Value) -> AgentMessage {
    let Value::Object(mut map) = value else {
        unreachable!("accepts() takes only objects")
    };
    // As the derived path does: the tag goes first (a swap removal, which moves the last
    // member into its place), then every modelled field, in place, leaving the rest in order.
    let role = map.remove("role");
    match role.as_ref().and_then(Value::as_str) {
        Some("user") => AgentMessage::User(UserMessage {
            content: content(&mut map),
            synthetic: take(&mut map, "synthetic").and_then(|v| v.as_bool()),
            timestamp: opt_value(&mut map, "timestamp"),
            extra: leftover(map),
        }),
        Some("assistant") => AgentMessage::Assistant(AssistantMessage {
            content: blocks(&mut map),
            api: opt_text(&mut map, "api"),
            provider: opt_text(&mut map, "provider"),
            model: opt_text(&mut map, "model"),
            usage: match take(&mut map, "usage") {
                Some(Value::Object(usage)) => Some(self::usage(usage)),
                _ => None,
            },
            stop_reason: opt_text(&mut map, "stopReason"),
            error_message: opt_text(&mut map, "errorMessage"),
            timestamp: opt_value(&mut map, "timestamp"),
            extra: leftover(map),
        }),
        _ => AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: text(&mut map, "toolCallId"),
            tool_name: text(&mut map, "toolName"),
            content: blocks(&mut map),
            details: opt_value(&mut map, "details"),
            is_error: take(&mut map, "isError").and_then(|v| v.as_bool()) == Some(true),
            pruned_at: opt_value(&mut map, "prunedAt"),
            timestamp: opt_value(&mut map, "timestamp"),
            extra: leftover(map),
        }),
    }
}

/// Removes `key`, keeping the order of the other members.
fn take(map: &mut Extra, key: &str) -> Option<Value> {
    map.shift_remove(key)
}

fn text(map: &mut Extra, key: &str) -> String {
    match take(map, key) {
        Some(Value::String(s)) => s,
        _ => String::new(),
    }
}

fn opt_text(map: &mut Extra, key: &str) -> Option<String> {
    match take(map, key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// `Option<Value>`: null reads as absent.
fn opt_value(map: &mut Extra, key: &str) -> Option<Value> {
    take(map, key).filter(|v| !v.is_null())
}

fn count(map: &mut Extra, key: &str) -> u64 {
    take(map, key).and_then(|v| v.as_u64()).unwrap_or(0)
}

fn usage(mut map: Extra) -> Usage {
    Usage {
        input: count(&mut map, "input"),
        output: count(&mut map, "output"),
        cache_read: count(&mut map, "cacheRead"),
        cache_write: count(&mut map, "cacheWrite"),
        total_tokens: count(&mut map, "totalTokens"),
        cost: opt_value(&mut map, "cost"),
        extra: leftover(map),
    }
}

fn content(map: &mut Extra) -> Content {
    match take(map, "content") {
        Some(Value::String(s)) => Content::Text(s),
        Some(Value::Array(items)) => Content::Blocks(items.into_iter().map(block).collect()),
        _ => Content::default(),
    }
}

fn blocks(map: &mut Extra) -> Vec<ContentBlock> {
    match take(map, "content") {
        Some(Value::Array(items)) => items.into_iter().map(block).collect(),
        _ => Vec::new(),
    }
}

fn block(value: Value) -> ContentBlock {
    let Value::Object(mut map) = value else {
        unreachable!("accepts() takes only blocks that are objects")
    };
    let kind = match map.get("type").and_then(Value::as_str) {
        Some(kind @ ("text" | "thinking" | "image" | "toolCall")) => kind.to_owned(),
        _ => return ContentBlock::Unknown(map),
    };
    map.remove("type");
    match kind.as_str() {
        "text" => ContentBlock::Text(TextBlock {
            text: text(&mut map, "text"),
            text_signature: opt_text(&mut map, "textSignature"),
            extra: leftover(map),
        }),
        "thinking" => ContentBlock::Thinking(ThinkingBlock {
            thinking: text(&mut map, "thinking"),
            thinking_signature: opt_text(&mut map, "thinkingSignature"),
            extra: leftover(map),
        }),
        "image" => ContentBlock::Image(ImageBlock {
            data: text(&mut map, "data"),
            mime_type: text(&mut map, "mimeType"),
            extra: leftover(map),
        }),
        _ => ContentBlock::ToolCall(ToolCall {
            id: text(&mut map, "id"),
            name: text(&mut map, "name"),
            arguments: take(&mut map, "arguments").unwrap_or(Value::Null),
            thought_signature: opt_text(&mut map, "thoughtSignature"),
            extra: leftover(map),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Both paths agree on `value`: when the fast one takes it, it gives what serde's derived
    /// code gives. Returns whether the fast path took it.
    fn agree(value: &Value) -> bool {
        if !accepts(value) {
            return false;
        }
        let derived: AgentMessage =
            serde_json::from_value(value.clone()).expect("serde takes what the fast path takes");
        let fast = convert(value.clone());
        assert_eq!(fast, derived, "on {value}");
        // Same member order in every `extra`, which `==` on maps does not check.
        assert_eq!(
            serde_json::to_string(&fast).unwrap(),
            serde_json::to_string(&derived).unwrap(),
            "on {value}"
        );
        true
    }

    #[test]
    fn the_usual_messages_take_the_fast_path_and_agree() {
        let taken = [
            json!({"role":"user","content":"hi","timestamp":1}),
            json!({"role":"user","content":[{"type":"text","text":"a"},{"type":"image","data":"AA","mimeType":"image/png"}],"z":1,"synthetic":true}),
            json!({"role":"user"}),
            json!({"role":"user","synthetic":null,"timestamp":null}),
            json!({"zz":0,"role":"assistant","content":[
                {"type":"thinking","thinking":"t","thinkingSignature":"s","x":[1]},
                {"type":"text","text":"a","textSignature":null},
                {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a.rs"},"late":true},
                {"type":"toolCall","id":"c2","name":"ls"},
                {"type":"hologram","pixels":[1,2]},
                {"kind":"no type"},
                {"type":7}],
              "api":"messages","provider":"p","model":"m","stopReason":"toolUse",
              "usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":0,"totalTokens":6,"cost":{"total":0.1},"extra":"x"},
              "timestamp":1700000000000_u64,"newField":{"x":true},"last":null}),
            json!({"role":"assistant","usage":null,"errorMessage":"boom","stopReason":"error"}),
            json!({"role":"assistant","usage":{}}),
            json!({"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":"out"}],"isError":false,"details":{"diff":"-a"},"prunedAt":null,"a":1,"b":2}),
            json!({"role":"toolResult"}),
            // Unknown members after the known ones: the tag's removal moves the last one.
            json!({"role":"user","content":"x","synthetic":true,"x1":1,"x2":2,"x3":3}),
        ];
        for value in &taken {
            assert!(agree(value), "the fast path should take {value}");
        }
    }

    #[test]
    fn anything_unusual_is_left_to_serde() {
        let left = [
            json!({"role":"user","content":5}),
            json!({"role":"user","content":null}),
            json!({"role":"user","content":["text"]}),
            json!({"role":"user","synthetic":"yes"}),
            json!({"role":"assistant","content":"text"}),
            json!({"role":"assistant","content":[{"type":"text"}]}),
            json!({"role":"assistant","content":[{"type":"text","text":1}]}),
            json!({"role":"assistant","content":[{"type":"toolCall","id":"c"}]}),
            json!({"role":"assistant","content":[{"type":"image","data":"AA"}]}),
            json!({"role":"assistant","model":3}),
            json!({"role":"assistant","usage":[1,2,3,4,5]}),
            json!({"role":"assistant","usage":{"input":-1}}),
            json!({"role":"assistant","usage":{"input":1.5}}),
            json!({"role":"assistant","usage":{"input":null}}),
            json!({"role":"toolResult","toolCallId":null}),
            json!({"role":"toolResult","isError":null}),
            json!({"role":"toolResult","content":{}}),
            json!({"role":"bashExecution","command":"ls","output":""}),
            json!({"role":"custom","customType":"x","content":"y"}),
            json!({"role":"telepathy"}),
            json!({"content":"no role"}),
            json!(["role", "user"]),
        ];
        for value in &left {
            assert!(!accepts(value), "the fast path should leave {value}");
        }
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (0u64..10).prop_map(Value::from),
            Just(json!(1.5)),
            "[a-z]{0,3}".prop_map(Value::from),
        ];
        leaf.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::vec(("[a-z]{1,2}", inner), 0..3)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// A member that is usually of the right shape and sometimes of any shape.
    fn field(right: BoxedStrategy<Value>) -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            3 => right.prop_map(Some),
            1 => Just(None),
            1 => any_json().prop_map(Some),
        ]
    }

    fn text_value() -> BoxedStrategy<Value> {
        "[a-z]{0,4}".prop_map(Value::from).boxed()
    }

    fn object(fields: Vec<(&'static str, Option<Value>)>, extra: Vec<(String, Value)>) -> Value {
        let mut map = Map::new();
        // Unknown members before and after the known ones, so order is exercised.
        let (before, after) = extra.split_at(extra.len() / 2);
        map.extend(before.iter().cloned());
        for (k, v) in fields {
            if let Some(v) = v {
                map.insert(k.to_owned(), v);
            }
        }
        map.extend(after.iter().cloned());
        Value::Object(map)
    }

    fn extras() -> impl Strategy<Value = Vec<(String, Value)>> {
        prop::collection::vec(("x[a-z]{0,2}", any_json()), 0..6)
    }

    fn block_value() -> BoxedStrategy<Value> {
        let kind = prop_oneof![
            Just("text"),
            Just("thinking"),
            Just("image"),
            Just("toolCall"),
            Just("other")
        ];
        (
            kind,
            field(text_value()),
            field(text_value()),
            field(text_value()),
            field(any_json().boxed()),
            extras(),
        )
            .prop_map(|(kind, a, b, c, d, extra)| {
                let fields = match kind {
                    "text" => vec![("text", a), ("textSignature", b)],
                    "thinking" => vec![("thinking", a), ("thinkingSignature", b)],
                    "image" => vec![("data", a), ("mimeType", b)],
                    "toolCall" => vec![
                        ("id", a),
                        ("name", b),
                        ("arguments", d),
                        ("thoughtSignature", c),
                    ],
                    _ => vec![("payload", d)],
                };
                let mut all = vec![("type", Some(Value::from(kind)))];
                all.extend(fields);
                object(all, extra)
            })
            .boxed()
    }

    fn blocks_value() -> BoxedStrategy<Value> {
        prop::collection::vec(block_value(), 0..4)
            .prop_map(Value::from)
            .boxed()
    }

    fn count_value() -> BoxedStrategy<Value> {
        (0u64..1000).prop_map(Value::from).boxed()
    }

    fn usage_value() -> BoxedStrategy<Value> {
        (
            field(count_value()),
            field(count_value()),
            field(count_value()),
            field(any_json().boxed()),
            extras(),
        )
            .prop_map(|(input, output, total, cost, extra)| {
                object(
                    vec![
                        ("input", input),
                        ("output", output),
                        ("totalTokens", total),
                        ("cost", cost),
                    ],
                    extra,
                )
            })
            .boxed()
    }

    fn message_value() -> impl Strategy<Value = Value> {
        let role = prop_oneof![Just("user"), Just("assistant"), Just("toolResult")];
        (
            role,
            field(prop_oneof![text_value(), blocks_value()].boxed()),
            field(text_value()),
            field(any::<bool>().prop_map(Value::from).boxed()),
            field(usage_value()),
            field(any_json().boxed()),
            extras(),
        )
            .prop_map(|(role, content, text, flag, usage, any, extra)| {
                let fields = match role {
                    "user" => vec![
                        ("content", content),
                        ("synthetic", flag),
                        ("timestamp", any),
                    ],
                    "assistant" => vec![
                        ("content", content),
                        ("model", text.clone()),
                        ("stopReason", text),
                        ("usage", usage),
                        ("timestamp", any),
                    ],
                    _ => vec![
                        ("toolCallId", text),
                        ("content", content),
                        ("isError", flag),
                        ("details", any),
                    ],
                };
                let mut all = vec![("role", Some(Value::from(role)))];
                all.extend(fields);
                object(all, extra)
            })
    }

    /// The random objects reach the fast path often enough for the comparison to mean something.
    #[test]
    fn random_messages_often_take_the_fast_path() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = message_value();
        let taken = (0..1000)
            .filter(|_| accepts(&strategy.new_tree(&mut runner).unwrap().current()))
            .count();
        assert!(taken >= 100, "only {taken} of 1000 took the fast path");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn random_messages_agree_with_serde(value in message_value()) {
            agree(&value);
        }
    }
}
