//! A Claude Code transcript read into compactd's session format.
//!
//! Lines are linked by `uuid`/`parentUuid`. `user` and `assistant` lines become messages
//! (a `user` line's `tool_result` blocks become tool results, named after their `tool_use`);
//! a `compact_boundary` system line and the `isCompactSummary` user line after it become one
//! compaction that keeps nothing before it. Everything else (attachments, other system lines,
//! sidechains, bookkeeping lines without a `uuid`) is passed through: a child of a skipped line
//! hangs on the nearest kept ancestor. Entry ids are the lines' uuids, so what `search` and
//! `show` print names the line in Claude Code's file.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use super::{ClaudeError, SUMMARY_PREAMBLE};
use crate::session::ids::ms_from_iso;

/// Line types that only Claude Code transcripts have, among those a compactd session never has.
const CLAUDE_TYPES: [&str; 7] = [
    "user",
    "assistant",
    "attachment",
    "system",
    "queue-operation",
    "last-prompt",
    "summary",
];

/// The field compactd adds to the copy of a line it keeps verbatim after its compaction: the
/// uuid of the line copied.
pub const KEPT_FROM: &str = "compactdKeptFrom";

/// A transcript, read.
#[derive(Debug)]
pub struct Transcript {
    /// Claude Code's session id (the file's name without `.jsonl`).
    pub session_id: String,
    pub cwd: String,
    /// The Claude Code version and git branch of the last line that named them.
    pub version: Option<String>,
    pub git_branch: Option<String>,
    /// The uuid of the last line of the main chain: the next line's parent.
    pub last_uuid: Option<String>,
    /// The file's length when it was read: nothing is appended if it changed since.
    pub len: u64,
    /// The same conversation as a compactd session file.
    pub session_jsonl: String,
    /// Each message entry's id → the uuid of the Claude Code line it came from.
    pub origin: HashMap<String, String>,
    /// The `user` and `assistant` lines by uuid, as written, for a verbatim tail.
    pub lines: HashMap<String, Value>,
}

/// Whether `path` holds a Claude Code transcript: its first JSON line is one of Claude Code's
/// line types and carries a `sessionId`, where a compactd session starts with its header.
pub fn is_transcript(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = String::new();
    let mut reader = std::io::BufReader::new(file);
    for _ in 0..16 {
        first.clear();
        if std::io::BufRead::read_line(&mut reader, &mut first).unwrap_or(0) == 0 {
            return false;
        }
        if !first.trim().is_empty() {
            break;
        }
    }
    let Ok(Value::Object(line)) = serde_json::from_str::<Value>(&first) else {
        return false;
    };
    let kind = line.get("type").and_then(Value::as_str).unwrap_or("");
    CLAUDE_TYPES.contains(&kind) && line.contains_key("sessionId")
        || (kind == "summary" && line.contains_key("leafUuid"))
        || line.contains_key("parentUuid") && line.contains_key("sessionId")
}

/// Reads the transcript at `path`. Lines that are not JSON (a torn last line) are skipped.
pub fn read(path: &Path) -> Result<Transcript, ClaudeError> {
    let bytes = std::fs::read(path).map_err(|source| ClaudeError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let mut reader = Reader::default();
    for line in text.lines() {
        if let Ok(line @ Value::Object(_)) = serde_json::from_str::<Value>(line) {
            reader.line(line);
        }
    }
    if reader.entries.is_empty() && reader.session_id.is_empty() {
        return Err(ClaudeError::NotATranscript {
            path: path.display().to_string(),
            why: "no user or assistant line".to_owned(),
        });
    }
    let session_id = if reader.session_id.is_empty() {
        file_stem(path)
    } else {
        reader.session_id.clone()
    };
    let header = json!({"type": "session", "version": 3, "id": session_id,
        "timestamp": reader.first_timestamp.clone().unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_owned()),
        "cwd": reader.cwd});
    let mut session_jsonl = format!("{header}\n");
    for entry in &reader.entries {
        session_jsonl.push_str(&entry.to_string());
        session_jsonl.push('\n');
    }
    Ok(Transcript {
        session_id,
        cwd: reader.cwd,
        version: reader.version,
        git_branch: reader.git_branch,
        last_uuid: reader.last_uuid,
        len: bytes.len() as u64,
        session_jsonl,
        origin: reader.origin,
        lines: reader.lines,
    })
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[derive(Default)]
struct Reader {
    session_id: String,
    cwd: String,
    version: Option<String>,
    git_branch: Option<String>,
    first_timestamp: Option<String>,
    last_uuid: Option<String>,
    /// A line's uuid → the entry id its children hang on (None: the root).
    parent_of: HashMap<String, Option<String>>,
    /// Tool call id → tool name, for the results.
    tool_names: HashMap<String, String>,
    /// A `compact_boundary` waiting for its summary line: (uuid, parent entry, tokens, time).
    boundary: Option<(String, Option<String>, u64, String)>,
    entries: Vec<Value>,
    /// Where in `entries` the latest compaction is.
    last_compaction: Option<usize>,
    origin: HashMap<String, String>,
    lines: HashMap<String, Value>,
}

impl Reader {
    fn line(&mut self, line: Value) {
        let text = |key: &str| line.get(key).and_then(Value::as_str).map(str::to_owned);
        if let Some(id) = text("sessionId")
            && self.session_id.is_empty()
        {
            self.session_id = id;
        }
        if let Some(cwd) = text("cwd") {
            self.cwd = cwd;
        }
        if let Some(version) = text("version") {
            self.version = Some(version);
        }
        if let Some(branch) = text("gitBranch") {
            self.git_branch = Some(branch);
        }
        let Some(uuid) = text("uuid") else {
            return;
        };
        let timestamp = text("timestamp").unwrap_or_default();
        if self.first_timestamp.is_none() && !timestamp.is_empty() {
            self.first_timestamp = Some(timestamp.clone());
        }
        let parent = match text("parentUuid") {
            // A parent never seen (a torn or missing line) leaves the line a root.
            Some(p) => self.parent_of.get(&p).cloned().flatten(),
            None => None,
        };
        if line.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            self.parent_of.insert(uuid, parent);
            return;
        }
        self.last_uuid = Some(uuid.clone());
        if let Some(original) = text(KEPT_FROM) {
            self.kept_copy(uuid, original);
            return;
        }
        let kind = text("type").unwrap_or_default();
        let hangs_on = match kind.as_str() {
            "system" if text("subtype").as_deref() == Some("compact_boundary") => {
                let logical = text("logicalParentUuid")
                    .and_then(|p| self.parent_of.get(&p).cloned().flatten());
                let tokens = line
                    .pointer("/compactMetadata/preTokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.boundary = Some((uuid.clone(), logical.clone(), tokens, timestamp));
                logical
            }
            "user" if line.get("isCompactSummary").and_then(Value::as_bool) == Some(true) => {
                self.compaction(&line, parent)
            }
            "user" => self.user(&uuid, &line, parent, &timestamp),
            "assistant" => self.assistant(&uuid, &line, parent, &timestamp),
            _ => parent,
        };
        if matches!(kind.as_str(), "user" | "assistant") {
            self.lines.insert(uuid.clone(), line);
        }
        self.parent_of.insert(uuid, hangs_on);
    }

    /// A copy compactd appended after its compaction of a line it kept verbatim: the
    /// original is the kept message (the first copy says where the kept part starts), the copy
    /// hangs on the compaction like the summary line.
    fn kept_copy(&mut self, uuid: String, original: String) {
        let Some(index) = self.last_compaction else {
            self.parent_of.insert(uuid, None);
            return;
        };
        let compaction = &mut self.entries[index];
        let id = compaction["id"].clone();
        if compaction["firstKeptEntryId"] == id {
            compaction["firstKeptEntryId"] = json!(original);
        }
        self.parent_of.insert(uuid, id.as_str().map(str::to_owned));
    }

    /// The compaction of the pending boundary, with this line's text as its summary.
    fn compaction(&mut self, line: &Value, parent: Option<String>) -> Option<String> {
        let text = message_text(line.pointer("/message/content"));
        let summary = text.strip_prefix(SUMMARY_PREAMBLE).unwrap_or(&text);
        let Some((id, parent_id, tokens, timestamp)) = self.boundary.take() else {
            return parent;
        };
        self.last_compaction = Some(self.entries.len());
        self.entries.push(
            json!({"type": "compaction", "id": id, "parentId": parent_id,
            "timestamp": timestamp, "summary": summary,
            // Nothing before the boundary is kept: Claude Code sends only the summary.
            "firstKeptEntryId": id, "tokensBefore": tokens}),
        );
        Some(id)
    }

    fn push_message(
        &mut self,
        id: String,
        uuid: &str,
        parent: Option<String>,
        timestamp: &str,
        message: Value,
    ) -> Option<String> {
        self.origin.insert(id.clone(), uuid.to_owned());
        self.entries
            .push(json!({"type": "message", "id": id, "parentId": parent,
            "timestamp": timestamp, "message": message}));
        Some(id)
    }

    fn user(
        &mut self,
        uuid: &str,
        line: &Value,
        mut parent: Option<String>,
        timestamp: &str,
    ) -> Option<String> {
        let ms = ms_of(timestamp);
        let content = line.pointer("/message/content");
        let Some(Value::Array(blocks)) = content else {
            let text = content.and_then(Value::as_str).unwrap_or_default();
            let message = json!({"role": "user", "content": text, "timestamp": ms});
            return self.push_message(uuid.to_owned(), uuid, parent, timestamp, message);
        };
        let mut texts = Vec::new();
        let mut part = 0;
        for block in blocks.iter() {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => {
                    let call = str_of(block, "tool_use_id");
                    let message = json!({"role": "toolResult", "toolCallId": call,
                        "toolName": self.tool_names.get(&call).cloned().unwrap_or_default(),
                        "isError": block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                        "content": [{"type": "text", "text": message_text(block.get("content"))}],
                        "timestamp": ms});
                    let id = part_id(uuid, part);
                    part += 1;
                    parent = self.push_message(id, uuid, parent, timestamp, message);
                }
                Some("text") => texts.push(json!({"type": "text", "text": str_of(block, "text")})),
                Some("image") => texts.push(json!({"type": "text", "text": "[image]"})),
                _ => {}
            }
        }
        if !texts.is_empty() {
            let message = json!({"role": "user", "content": texts, "timestamp": ms});
            parent = self.push_message(part_id(uuid, part), uuid, parent, timestamp, message);
        }
        parent
    }

    fn assistant(
        &mut self,
        uuid: &str,
        line: &Value,
        parent: Option<String>,
        timestamp: &str,
    ) -> Option<String> {
        let message = line.get("message").cloned().unwrap_or(Value::Null);
        let mut content = Vec::new();
        for block in message
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    content.push(json!({"type": "text", "text": str_of(block, "text")}))
                }
                Some("thinking") => {
                    content.push(json!({"type": "thinking", "thinking": str_of(block, "thinking")}))
                }
                Some("tool_use") => {
                    let (id, name) = (str_of(block, "id"), str_of(block, "name"));
                    self.tool_names.insert(id.clone(), name.clone());
                    content.push(json!({"type": "toolCall", "id": id, "name": name,
                        "arguments": block.get("input").cloned().unwrap_or(json!({}))}));
                }
                _ => {}
            }
        }
        let usage = message.get("usage").cloned().unwrap_or(Value::Null);
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        let (input, output) = (count("input_tokens"), count("output_tokens"));
        let (cache_read, cache_write) = (
            count("cache_read_input_tokens"),
            count("cache_creation_input_tokens"),
        );
        let stop = match message.get("stop_reason").and_then(Value::as_str) {
            Some("tool_use") => "toolUse",
            Some("max_tokens") => "length",
            _ => "stop",
        };
        let converted = json!({"role": "assistant", "content": content,
            "api": "anthropic-messages", "provider": "anthropic",
            "model": message.get("model").cloned().unwrap_or(Value::Null),
            "usage": {"input": input, "output": output, "cacheRead": cache_read,
                "cacheWrite": cache_write,
                "totalTokens": input + output + cache_read + cache_write},
            "stopReason": stop, "timestamp": ms_of(timestamp)});
        self.push_message(uuid.to_owned(), uuid, parent, timestamp, converted)
    }
}

/// The id of the `n`th message made of one line: the uuid, then `uuid#1`, `uuid#2`, ….
fn part_id(uuid: &str, n: usize) -> String {
    if n == 0 {
        uuid.to_owned()
    } else {
        format!("{uuid}#{n}")
    }
}

fn str_of(block: &Value, key: &str) -> String {
    block
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The text of a message's or tool result's content: a string, or its text blocks joined.
fn message_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Milliseconds since the epoch of a line's ISO-8601 time, 0 when it has none.
fn ms_of(iso: &str) -> i64 {
    ms_from_iso(iso).unwrap_or(0)
}
