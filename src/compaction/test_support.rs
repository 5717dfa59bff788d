//! Builders for test sessions: a linear path of entries with ids `e0`, `e1`, ... each the
//! child of the previous one.

use serde_json::{Value, json};

use crate::session::{Entry, EntryKind};

pub struct PathBuilder {
    pub entries: Vec<Entry>,
}

impl PathBuilder {
    pub fn new() -> Self {
        PathBuilder {
            entries: Vec::new(),
        }
    }

    pub fn refs(&self) -> Vec<&Entry> {
        self.entries.iter().collect()
    }

    /// Appends an entry given as the JSON fields of its type; returns its id.
    pub fn push(&mut self, kind: &str, fields: Value) -> String {
        let id = format!("e{}", self.entries.len());
        let mut v = json!({"type": kind, "id": id, "timestamp": "2026-01-01T00:00:00.000Z",
            "parentId": self.entries.last().map(|e| e.id.clone())});
        if let (Some(obj), Value::Object(fields)) = (v.as_object_mut(), fields) {
            obj.extend(fields);
        }
        let entry = Entry::from_value(v).expect("test entry parses");
        assert!(
            !matches!(entry.kind(), EntryKind::Unknown { .. }),
            "test entry {kind} has a bad shape"
        );
        self.entries.push(entry);
        id
    }

    pub fn message(&mut self, message: Value) -> String {
        self.push("message", json!({ "message": message }))
    }

    pub fn user(&mut self, text: &str) -> String {
        self.message(json!({"role":"user","content":text,"timestamp":1}))
    }

    pub fn assistant(&mut self, text: &str) -> String {
        self.message(
            json!({"role":"assistant","content":[{"type":"text","text":text}],
            "stopReason":"stop","usage":{"input":1,"output":1}}),
        )
    }

    /// An assistant message with tool calls `(call_id, tool_name, arguments)`.
    pub fn calls(&mut self, calls: &[(&str, &str, Value)]) -> String {
        let content: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({"type":"toolCall","id":id,"name":name,"arguments":args}))
            .collect();
        self.message(json!({"role":"assistant","content":content,"stopReason":"toolUse"}))
    }

    pub fn result(&mut self, call_id: &str, tool: &str, text: &str) -> String {
        self.message(
            json!({"role":"toolResult","toolCallId":call_id,"toolName":tool,
            "content":[{"type":"text","text":text}],"isError":false}),
        )
    }

    pub fn assistant_with_usage(&mut self, text: &str, input: u64) -> String {
        self.message(
            json!({"role":"assistant","content":[{"type":"text","text":text}],
            "stopReason":"stop","usage":{"input":input,"output":10}}),
        )
    }

    pub fn custom_message(&mut self, text: &str) -> String {
        self.push(
            "custom_message",
            json!({"customType":"ext","content":text,"display":true}),
        )
    }

    pub fn custom_role(&mut self, text: &str) -> String {
        self.message(json!({"role":"custom","customType":"ext","content":text,"display":false}))
    }

    pub fn file_mention(&mut self, path: &str, content: &str) -> String {
        self.message(json!({"role":"fileMention","files":[{"path":path,"content":content}]}))
    }

    pub fn python(&mut self, code: &str, output: &str) -> String {
        self.message(json!({"role":"pythonExecution","code":code,"output":output}))
    }

    pub fn bash(&mut self, command: &str, output: &str) -> String {
        self.message(json!({"role":"bashExecution","command":command,"output":output}))
    }

    pub fn branch_summary(&mut self, summary: &str) -> String {
        self.push("branch_summary", json!({"fromId":"e0","summary":summary}))
    }

    pub fn model_change(&mut self) -> String {
        self.push(
            "model_change",
            json!({"model":"anthropic/claude-sonnet-4-5"}),
        )
    }

    pub fn compaction(&mut self, first_kept: &str, summary: &str, details: Value) -> String {
        self.push(
            "compaction",
            json!({"summary":summary,"firstKeptEntryId":first_kept,"tokensBefore":1000,
                "details":details}),
        )
    }
}

/// `n` characters of filler text, `n/4` chars4 tokens.
pub fn text(n: usize) -> String {
    "x".repeat(n)
}
