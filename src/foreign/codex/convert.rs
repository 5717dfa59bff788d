//! A rollout's lines, their pi-format view, and the lines a compaction appends.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// What Codex puts before a summary in `compacted.message` and in the user message that
/// carries it (Codex 0.169.0's own text, so the model reads an outside summary as its own).
pub const SUMMARY_PREFIX: &str = "Another language model started to solve this problem and produced a summary of its thinking process. You also have access to the state of the tools that were used by that language model. Use this to build on the work that has already been done and avoid duplicating work. Here is the summary produced by the other language model, use the information in this summary to assist with your own analysis:\n";

/// Why a rollout cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("line {line}: not a rollout line: {reason}")]
    BadLine { line: usize, reason: String },
    #[error("the last line is not finished (no newline): Codex may be writing it")]
    Unfinished,
    #[error("no session_meta line: not a Codex rollout")]
    NoMeta,
}

/// Whether `first_line` opens a Codex rollout: `{timestamp, type: "session_meta", payload}`.
pub fn is_rollout(first_line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(first_line).is_ok_and(|v| {
        v.get("type").and_then(Value::as_str) == Some("session_meta")
            && v.get("payload").is_some_and(Value::is_object)
            && v.get("timestamp").is_some()
    })
}

/// A rollout as read: every line, parsed.
#[derive(Debug)]
pub struct Rollout {
    /// The thread id (`session_meta.payload.id`).
    pub thread_id: String,
    cwd: String,
    started: String,
    lines: Vec<Value>,
    /// Bytes read: the appended lines go after exactly these.
    pub len: u64,
}

/// An item's id in the pi-format view: `L` and its line number (1-based).
fn entry_id(index: usize) -> String {
    format!("L{}", index + 1)
}

/// The line index of an entry id made by [`entry_id`].
fn line_of(id: &str) -> Option<usize> {
    id.strip_prefix('L')?.parse::<usize>().ok()?.checked_sub(1)
}

impl Rollout {
    /// Reads a rollout's bytes; a last line without its newline is refused (being written).
    pub fn parse(bytes: &[u8]) -> Result<Rollout, RolloutError> {
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            return Err(RolloutError::Unfinished);
        }
        let mut lines = Vec::new();
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: Value = serde_json::from_slice(line).map_err(|e| RolloutError::BadLine {
                line: i + 1,
                reason: e.to_string(),
            })?;
            lines.push(value);
        }
        let meta = lines
            .iter()
            .find(|l| kind(l) == "session_meta")
            .ok_or(RolloutError::NoMeta)?;
        let text = |k: &str| meta["payload"][k].as_str().unwrap_or_default().to_owned();
        Ok(Rollout {
            thread_id: text("id"),
            cwd: text("cwd"),
            started: meta["timestamp"].as_str().unwrap_or_default().to_owned(),
            lines,
            len: bytes.len() as u64,
        })
    }

    /// The rollout as a pi-format session (version 3): one entry per user message, assistant
    /// message, tool call and tool output, and a compaction per `compacted` line. Entry ids
    /// are `L<line number>`.
    pub fn to_session_jsonl(&self) -> String {
        let header = json!({"type": "session", "version": 3, "id": self.thread_id,
            "timestamp": self.started, "cwd": self.cwd});
        let mut out = vec![header.to_string()];
        let mut parent = Value::Null;
        let mut tool_names: HashMap<String, String> = HashMap::new();
        let mut model = String::from("codex");
        for (i, line) in self.lines.iter().enumerate() {
            let timestamp = line["timestamp"].clone();
            let id = entry_id(i);
            let entry = match kind(line) {
                "turn_context" => {
                    if let Some(m) = line["payload"]["model"].as_str() {
                        model = m.to_owned();
                    }
                    None
                }
                "compacted" => Some(json!({"type": "compaction", "id": id, "parentId": parent,
                    "timestamp": timestamp,
                    "summary": summary_of(&line["payload"]),
                    "firstKeptEntryId": id, "tokensBefore": 0})),
                "response_item" => message(&line["payload"], &mut tool_names, &model).map(|m| {
                    json!({"type": "message", "id": id, "parentId": parent,
                        "timestamp": timestamp, "message": m})
                }),
                _ => None,
            };
            if let Some(entry) = entry {
                parent = Value::String(entry_id(i));
                out.push(entry.to_string());
            }
        }
        let mut text = out.join("\n");
        text.push('\n');
        text
    }

    /// The lines that compact this rollout: a `compacted` record whose `replacement_history`
    /// is the current context items (developer and environment messages), the summary as a
    /// user message, and the items from `first_kept_id` on verbatim; then a `token_count`
    /// event whose last usage is the new history's estimated size (characters / 4).
    /// `now` is the ISO-8601 timestamp the lines carry.
    pub fn compaction_lines(
        &self,
        summary: &str,
        first_kept_id: Option<&str>,
        now: &str,
    ) -> String {
        let message = format!("{SUMMARY_PREFIX}{}", summary.trim_end());
        let kept_from = first_kept_id.and_then(line_of).unwrap_or(self.lines.len());
        let mut history = self.context_items();
        history.push(json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": message}]}));
        history.extend(
            self.lines
                .iter()
                .skip(kept_from)
                .filter(|l| kind(l) == "response_item" && !is_context_item(&l["payload"]))
                .map(|l| l["payload"].clone()),
        );
        let tokens_after = (Value::Array(history.clone()).to_string().len() / 4) as u64;
        let mut ordinal = self
            .lines
            .iter()
            .filter_map(|l| l["ordinal"].as_u64())
            .max()
            .map_or(0, |o| o + 1);
        let mut next = |kind: &str, payload: Value| {
            let line =
                json!({"timestamp": now, "ordinal": ordinal, "type": kind, "payload": payload});
            ordinal += 1;
            line.to_string() + "\n"
        };
        let compacted = next(
            "compacted",
            json!({"message": message, "replacement_history": history}),
        );
        let usage = next("event_msg", self.token_count(tokens_after));
        compacted + &usage
    }

    /// The developer and environment messages the next request starts from: those after
    /// the last compaction, else the ones that compaction's history carried.
    fn context_items(&self) -> Vec<Value> {
        let last = self.lines.iter().rposition(|l| kind(l) == "compacted");
        let after = last.map_or(0, |k| k + 1);
        let mut items: Vec<Value> = self.lines[after..]
            .iter()
            .filter(|l| kind(l) == "response_item" && is_context_item(&l["payload"]))
            .map(|l| l["payload"].clone())
            .collect();
        if items.is_empty()
            && let Some(k) = last
            && let Some(history) = self.lines[k]["payload"]["replacement_history"].as_array()
        {
            items = history
                .iter()
                .filter(|i| is_context_item(i))
                .cloned()
                .collect();
        }
        // The newest of each kind of context message wins (Codex re-sends them when they change).
        let mut seen = std::collections::HashSet::new();
        let mut newest: Vec<Value> = items
            .into_iter()
            .rev()
            .filter(|i| seen.insert(context_key(i)))
            .collect();
        newest.reverse();
        newest
    }

    /// A `token_count` event as Codex writes one after its own compaction: the thread's
    /// totals unchanged, the last usage only a total (the new history's size).
    fn token_count(&self, tokens_after: u64) -> Value {
        let last = self.lines.iter().rev().find(|l| {
            kind(l) == "event_msg"
                && l["payload"]["type"] == "token_count"
                && l["payload"]["info"].is_object()
        });
        let info = last.map(|l| &l["payload"]["info"]);
        let zero = json!({"input_tokens": 0, "cached_input_tokens": 0,
            "cache_write_input_tokens": 0, "output_tokens": 0, "reasoning_output_tokens": 0,
            "total_tokens": 0});
        let mut last_usage = zero.clone();
        last_usage["total_tokens"] = json!(tokens_after);
        json!({"type": "token_count", "info": {
            "total_token_usage": info.map_or(zero, |i| i["total_token_usage"].clone()),
            "last_token_usage": last_usage,
            "last_usage_includes_reasoning": true,
            "model_context_window": info.map_or(Value::Null, |i| i["model_context_window"].clone()),
        }, "rate_limits": Value::Null})
    }
}

/// The summary of a `compacted` record, without the prefix Codex reads it with.
fn summary_of(compacted: &Value) -> &str {
    let message = compacted["message"].as_str().unwrap_or_default();
    message.strip_prefix(SUMMARY_PREFIX).unwrap_or(message)
}

fn kind(line: &Value) -> &str {
    line["type"].as_str().unwrap_or_default()
}

/// The text of a message item's `input_text` / `output_text` parts.
fn message_text(item: &Value) -> String {
    let Some(parts) = item["content"].as_array() else {
        return item["content"].as_str().unwrap_or_default().to_owned();
    };
    parts
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A message Codex injects as context rather than one the user typed: developer messages and
/// user messages that are a single tagged block (`<environment_context>`, AGENTS.md, …).
fn is_context_item(item: &Value) -> bool {
    if item["type"] != "message" {
        return false;
    }
    match item["role"].as_str() {
        Some("developer" | "system") => true,
        Some("user") => {
            let text = message_text(item);
            let text = text.trim_start();
            text.starts_with("<environment_context>")
                || text.starts_with("<user_instructions>")
                || text.starts_with("# AGENTS.md instructions")
        }
        _ => false,
    }
}

/// Which context message this is, for keeping only the newest of each.
fn context_key(item: &Value) -> String {
    let text = message_text(item);
    let tag: String = text
        .chars()
        .take_while(|c| *c != '>' && *c != '\n')
        .collect();
    format!("{}:{tag}", item["role"].as_str().unwrap_or_default())
}

/// A response item as a pi message, when compactd's model has one for it.
fn message(item: &Value, tool_names: &mut HashMap<String, String>, model: &str) -> Option<Value> {
    let assistant = |content: Value, stop: &str| {
        json!({"role": "assistant", "content": content, "api": "openai-responses",
            "provider": "openai", "model": model,
            "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0,
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": stop, "timestamp": 0})
    };
    match item["type"].as_str()? {
        "message" if is_context_item(item) => None,
        "message" => {
            let text = message_text(item);
            match item["role"].as_str()? {
                "user" => Some(json!({"role": "user",
                    "content": [{"type": "text", "text": text}], "timestamp": 0})),
                "assistant" => Some(assistant(json!([{"type": "text", "text": text}]), "stop")),
                _ => None,
            }
        }
        call @ ("function_call" | "custom_tool_call") => {
            let call_id = item["call_id"].as_str()?.to_owned();
            let name = item["name"].as_str().unwrap_or("tool").to_owned();
            let arguments = if call == "function_call" {
                let raw = item["arguments"].as_str().unwrap_or("{}");
                serde_json::from_str::<Map<String, Value>>(raw)
                    .map(Value::Object)
                    .unwrap_or_else(|_| json!({"arguments": raw}))
            } else {
                json!({"input": item["input"]})
            };
            tool_names.insert(call_id.clone(), name.clone());
            Some(assistant(
                json!([{"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}]),
                "toolUse",
            ))
        }
        "function_call_output" | "custom_tool_call_output" => {
            let call_id = item["call_id"].as_str()?;
            let output = &item["output"];
            let text = match output {
                Value::String(s) => s.clone(),
                Value::Object(o) => o
                    .get("content")
                    .and_then(Value::as_str)
                    .map_or_else(|| output.to_string(), str::to_owned),
                Value::Array(_) => message_text(&json!({"content": output})),
                other => other.to_string(),
            };
            Some(json!({"role": "toolResult", "toolCallId": call_id,
                "toolName": tool_names.get(call_id).map_or("tool", String::as_str),
                "content": [{"type": "text", "text": text}], "isError": false, "timestamp": 0}))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLLOUT: &str = concat!(
        r#"{"timestamp":"2026-01-01T00:00:00.000Z","ordinal":0,"type":"session_meta","payload":{"id":"t1","cwd":"/w"}}"#,
        "\n",
        r#"{"timestamp":"2026-01-01T00:00:01.000Z","ordinal":1,"type":"response_item","payload":{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions>x"}]}}"#,
        "\n",
        r#"{"timestamp":"2026-01-01T00:00:01.000Z","ordinal":2,"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]}}"#,
        "\n",
        r#"{"timestamp":"2026-01-01T00:00:02.000Z","ordinal":3,"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"run ls"}]}}"#,
        "\n",
        r#"{"timestamp":"2026-01-01T00:00:03.000Z","ordinal":4,"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"ls\"}","call_id":"c1"}}"#,
        "\n",
        r#"{"timestamp":"2026-01-01T00:00:04.000Z","ordinal":5,"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"a.txt"}}"#,
        "\n",
        r#"{"timestamp":"2026-01-01T00:00:05.000Z","ordinal":6,"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}}"#,
        "\n",
        r#"{"timestamp":"2026-01-01T00:00:05.000Z","ordinal":7,"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"total_tokens":9},"model_context_window":100}}}"#,
        "\n",
    );

    #[test]
    fn recognises_a_rollout_by_its_first_line() {
        assert!(is_rollout(ROLLOUT.lines().next().unwrap().as_bytes()));
        assert!(!is_rollout(br#"{"type":"session","version":3,"id":"s"}"#));
    }

    #[test]
    fn reads_messages_calls_and_outputs_not_context() {
        let rollout = Rollout::parse(ROLLOUT.as_bytes()).unwrap();
        let session = rollout.to_session_jsonl();
        let lines: Vec<Value> = session
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 5, "{session}");
        assert_eq!(lines[1]["id"], "L4");
        assert_eq!(lines[1]["message"]["content"][0]["text"], "run ls");
        assert_eq!(lines[2]["message"]["content"][0]["arguments"]["cmd"], "ls");
        assert_eq!(lines[3]["message"]["toolName"], "exec_command");
        assert_eq!(lines[4]["parentId"], "L6");
    }

    #[test]
    fn a_compaction_carries_context_summary_and_the_kept_tail() {
        let rollout = Rollout::parse(ROLLOUT.as_bytes()).unwrap();
        let appended = rollout.compaction_lines("SUM", Some("L7"), "2026-01-01T00:01:00.000Z");
        let lines: Vec<Value> = appended
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["type"], "compacted");
        assert_eq!(lines[0]["ordinal"], 8);
        let history = lines[0]["payload"]["replacement_history"]
            .as_array()
            .unwrap();
        let roles: Vec<&str> = history
            .iter()
            .map(|i| i["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["developer", "user", "user", "assistant"]);
        assert!(
            history[2]["content"][0]["text"]
                .as_str()
                .unwrap()
                .ends_with("SUM")
        );
        assert_eq!(lines[1]["payload"]["type"], "token_count");
        assert_eq!(
            lines[1]["payload"]["info"]["total_token_usage"]["total_tokens"],
            9
        );
        assert!(
            lines[1]["payload"]["info"]["last_token_usage"]["total_tokens"]
                .as_u64()
                .unwrap()
                > 0
        );
    }

    #[test]
    fn an_unfinished_last_line_is_refused() {
        let cut = &ROLLOUT[..ROLLOUT.len() - 1];
        assert!(matches!(
            Rollout::parse(cut.as_bytes()),
            Err(RolloutError::Unfinished)
        ));
    }
}
