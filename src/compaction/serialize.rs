//! The conversation as plain text for a summarizer (spec §4.11), so it is read as a transcript
//! rather than continued as a dialogue.

use std::borrow::Borrow;

use serde_json::Value;

use crate::session::message::{AgentMessage, ContentBlock, join_text};

/// Characters of one tool result kept in the transcript (DESIGN §3 deviation 8; the
/// reference is unbounded, upstream clips at 2000).
pub const TOOL_RESULT_MAX_CHARS: usize = 2000;

/// `[User]: …`, `[Assistant thinking]: …`, `[Assistant]: …`, `[Assistant tool calls]: …` and
/// `[Tool result]: …` parts joined by blank lines. Input is the output of `convert_to_llm`
/// (user, assistant, tool result); any other role is rendered as user text from its textual
/// fields, and unknown roles are skipped. Images are dropped.
pub fn serialize_conversation(llm_messages: &[AgentMessage]) -> String {
    serialize_messages(llm_messages)
}

/// [`serialize_conversation`] of messages as they are read (e.g. from their entries).
pub fn serialize_messages<M: Borrow<AgentMessage>>(
    llm_messages: impl IntoIterator<Item = M>,
) -> String {
    // Written into one string: parts joined at the end were the transcript twice.
    let mut parts = String::new();
    for msg in llm_messages {
        match msg.borrow() {
            AgentMessage::User(u) => push_part(&mut parts, "User", &u.content.joined_text("")),
            AgentMessage::Assistant(a) => {
                let thinking: Vec<&str> = a
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Thinking(t) => Some(t.thinking.as_str()),
                        _ => None,
                    })
                    .collect();
                push_part(&mut parts, "Assistant thinking", &thinking.join("\n"));
                push_part(&mut parts, "Assistant", &join_text(&a.content, "\n"));
                let calls: Vec<String> = a
                    .tool_calls()
                    .map(|c| format!("{}({})", c.name, format_arguments(&c.arguments)))
                    .collect();
                push_part(&mut parts, "Assistant tool calls", &calls.join("; "));
            }
            AgentMessage::ToolResult(r) => {
                let text = join_text(&r.content, "");
                push_part(
                    &mut parts,
                    "Tool result",
                    &clip(&text, TOOL_RESULT_MAX_CHARS),
                );
            }
            other => push_part(&mut parts, "User", &fallback_text(other)),
        }
    }
    parts
}

fn push_part(parts: &mut String, label: &str, text: &str) {
    if !text.is_empty() {
        if !parts.is_empty() {
            parts.push_str("\n\n");
        }
        parts.push('[');
        parts.push_str(label);
        parts.push_str("]: ");
        parts.push_str(text);
    }
}

/// `k1=<JSON v1>, k2=<JSON v2>` for an object; the JSON of anything else.
fn format_arguments(arguments: &Value) -> String {
    match arguments {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `text` cut to `max` characters with a note of how many were cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let omitted = text[cut..].chars().count();
            format!("{}\n[… {omitted} more characters truncated]", &text[..cut])
        }
    }
}

/// Text of roles `convert_to_llm` should already have turned into user messages.
fn fallback_text(msg: &AgentMessage) -> String {
    match msg {
        AgentMessage::BashExecution(e) | AgentMessage::PythonExecution(e) => {
            format!("Ran `{}`\n{}", e.source(), e.output)
        }
        AgentMessage::Custom(c) => c.content.joined_text(""),
        AgentMessage::BranchSummary(s) => s.summary.clone(),
        AgentMessage::CompactionSummary(s) => s.summary.clone(),
        AgentMessage::FileMention(f) => f
            .files
            .iter()
            .map(|file| format!("<file path=\"{}\">\n{}\n</file>", file.path, file.content))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(v: Value) -> AgentMessage {
        AgentMessage::from_value(v).unwrap()
    }

    #[test]
    fn serialises_each_role_in_order() {
        let messages = vec![
            msg(
                json!({"role":"user","content":[{"type":"text","text":"fix "},{"type":"text","text":"it"},
                {"type":"image","data":"A","mimeType":"image/png"}]}),
            ),
            msg(json!({"role":"assistant","content":[
                {"type":"thinking","thinking":"plan a"},{"type":"thinking","thinking":"plan b"},
                {"type":"text","text":"on it"},
                {"type":"toolCall","id":"1","name":"read","arguments":{"path":"a.rs","limit":5}},
                {"type":"toolCall","id":"2","name":"bash","arguments":{"command":"ls"}}]})),
            msg(
                json!({"role":"toolResult","toolCallId":"1","toolName":"read",
                "content":[{"type":"text","text":"fn a()"}],"isError":false}),
            ),
            msg(json!({"role":"user","content":""})),
        ];
        assert_eq!(
            serialize_conversation(&messages),
            "[User]: fix it\n\n[Assistant thinking]: plan a\nplan b\n\n[Assistant]: on it\n\n\
             [Assistant tool calls]: read(path=\"a.rs\", limit=5); bash(command=\"ls\")\n\n\
             [Tool result]: fn a()"
        );
    }

    #[test]
    fn clips_long_tool_results_with_a_marker() {
        let long = "é".repeat(2500);
        let out = serialize_conversation(&[msg(json!({"role":"toolResult","toolCallId":"1",
            "toolName":"bash","content":[{"type":"text","text":long}],"isError":false}))]);
        assert!(out.starts_with(&format!("[Tool result]: {}\n", "é".repeat(2000))));
        assert!(out.ends_with("[… 500 more characters truncated]"));
    }

    #[test]
    fn other_roles_are_rendered_defensively() {
        let out = serialize_conversation(&[
            msg(json!({"role":"bashExecution","command":"ls","output":"a"})),
            msg(json!({"role":"telepathy","x":1})),
        ]);
        assert_eq!(out, "[User]: Ran `ls`\na");
    }
}
