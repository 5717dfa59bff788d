//! File-operation tracking (spec §4.13): which files the assistant read, wrote and edited,
//! carried from one compaction to the next, and the `<read-files>` / `<modified-files>` text
//! appended to summaries.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::session::AgentMessage;
use crate::session::entry::{BranchSummaryEntry, CompactionEntry};

/// Paths listed per block before the rest is summarised as a count (spec §12).
pub const MAX_LISTED_FILES: usize = 20;

/// Files touched by `read`, `write` and `edit` tool calls.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileOps {
    pub read: BTreeSet<String>,
    pub written: BTreeSet<String>,
    pub edited: BTreeSet<String>,
}

impl FileOps {
    /// Adds the file operations of `msg`: only assistant tool calls named `read`, `write` or
    /// `edit` whose `arguments.path` is a string count.
    pub fn add_message(&mut self, msg: &AgentMessage) {
        let Some(assistant) = msg.as_assistant() else {
            return;
        };
        for call in assistant.tool_calls() {
            let Some(path) = call.arguments.get("path").and_then(Value::as_str) else {
                continue;
            };
            let set = match call.name.as_str() {
                "read" => &mut self.read,
                "write" => &mut self.written,
                "edit" => &mut self.edited,
                _ => continue,
            };
            set.insert(path.to_owned());
        }
    }

    /// Adds `readFiles` to the read set and `modifiedFiles` to the edited set from a summary's
    /// `details` (the shape [`file_lists_details`] writes). Other shapes add nothing.
    pub fn add_details(&mut self, details: &Value) {
        let paths = |key: &str| -> Vec<String> {
            details
                .get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        self.read.extend(paths("readFiles"));
        self.edited.extend(paths("modifiedFiles"));
    }

    /// Carries the lists of a previous compaction forward, unless an extension wrote it (its
    /// details are not ours to read).
    pub fn add_compaction(&mut self, compaction: &CompactionEntry) {
        if compaction.from_extension != Some(true)
            && let Some(details) = &compaction.details
        {
            self.add_details(details);
        }
    }

    /// As [`FileOps::add_compaction`], for a branch summary.
    pub fn add_branch_summary(&mut self, summary: &BranchSummaryEntry) {
        if summary.from_extension != Some(true)
            && let Some(details) = &summary.details
        {
            self.add_details(details);
        }
    }
}

fn sort_utf16(paths: &mut [String]) {
    // JavaScript's default sort compares UTF-16 code units; keep the reference's order.
    paths.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
}

/// `(read_files, modified_files)`: modified = edited ∪ written; read = read minus modified;
/// both sorted by UTF-16 code unit as the reference sorts them.
pub fn compute_file_lists(ops: &FileOps) -> (Vec<String>, Vec<String>) {
    let modified_set: BTreeSet<&String> = ops.edited.iter().chain(&ops.written).collect();
    let mut modified: Vec<String> = modified_set.iter().map(|s| (*s).clone()).collect();
    let mut read: Vec<String> = ops
        .read
        .iter()
        .filter(|p| !modified_set.contains(p))
        .cloned()
        .collect();
    sort_utf16(&mut read);
    sort_utf16(&mut modified);
    (read, modified)
}

/// The `details` a compaction or branch summary stores: `{readFiles, modifiedFiles}`.
pub fn file_lists_details(read: &[String], modified: &[String]) -> Value {
    json!({ "readFiles": read, "modifiedFiles": modified })
}

fn block(tag: &str, paths: &[String]) -> String {
    let mut lines: Vec<String> = paths.iter().take(MAX_LISTED_FILES).cloned().collect();
    if paths.len() > MAX_LISTED_FILES {
        lines.push(format!("… and {} more", paths.len() - MAX_LISTED_FILES));
    }
    format!("<{tag}>\n{}\n</{tag}>", lines.join("\n"))
}

/// The text appended to a summary: a blank line, then `<read-files>` and `<modified-files>`
/// blocks (each only when non-empty) separated by a blank line, one path per line, at most
/// [`MAX_LISTED_FILES`] paths each. Empty when both lists are empty. The reference glues the
/// blocks to the summary and writes a literal `\n` between paths (DESIGN §3 deviation 6).
pub fn format_file_operations(read: &[String], modified: &[String]) -> String {
    let mut out = String::new();
    for (tag, paths) in [("read-files", read), ("modified-files", modified)] {
        if !paths.is_empty() {
            out.push_str("\n\n");
            out.push_str(&block(tag, paths));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> Value {
        json!({"type":"toolCall","id":"c","name":name,"arguments":args})
    }

    #[test]
    fn only_read_write_edit_with_string_paths_count() {
        let msg = AgentMessage::from_value(json!({"role":"assistant","content":[
            call("read", json!({"path":"a.rs"})),
            call("write", json!({"path":"b.rs","content":"x"})),
            call("edit", json!({"path":"c.rs"})),
            call("bash", json!({"path":"d.rs"})),
            call("read", json!({"path":42})),
            call("read", json!({"file":"e.rs"}))]}))
        .unwrap();
        let mut ops = FileOps::default();
        ops.add_message(&msg);
        // A user message with the same shape is ignored.
        ops.add_message(&AgentMessage::user_text("read a.rs", 0));
        assert_eq!(ops.read, BTreeSet::from(["a.rs".to_owned()]));
        assert_eq!(ops.written, BTreeSet::from(["b.rs".to_owned()]));
        assert_eq!(ops.edited, BTreeSet::from(["c.rs".to_owned()]));
    }

    #[test]
    fn lists_subtract_modified_from_read_and_sort_by_utf16() {
        let ops = FileOps {
            read: ["z", "a", "b", "\u{FF5E}", "😀"].map(String::from).into(),
            written: ["b"].map(String::from).into(),
            edited: ["c"].map(String::from).into(),
        };
        let (read, modified) = compute_file_lists(&ops);
        // U+1F600 is a surrogate pair (0xD83D...), which sorts before U+FF5E in UTF-16.
        assert_eq!(read, ["a", "z", "😀", "\u{FF5E}"]);
        assert_eq!(modified, ["b", "c"]);
    }

    #[test]
    fn details_are_carried_unless_from_an_extension() {
        let mut compaction: CompactionEntry = serde_json::from_value(json!({
            "summary":"s","firstKeptEntryId":"x","tokensBefore":1,
            "details":{"readFiles":["r"],"modifiedFiles":["m"]}}))
        .unwrap();
        let mut ops = FileOps::default();
        ops.add_compaction(&compaction);
        assert!(ops.read.contains("r") && ops.edited.contains("m"));
        compaction.from_extension = Some(true);
        let mut ops = FileOps::default();
        ops.add_compaction(&compaction);
        assert_eq!(ops, FileOps::default());
    }

    #[test]
    fn formats_blocks_with_separators() {
        assert_eq!(format_file_operations(&[], &[]), "");
        let read = vec!["a".to_owned(), "b".to_owned()];
        let modified = vec!["c".to_owned()];
        assert_eq!(
            format_file_operations(&read, &modified),
            "\n\n<read-files>\na\nb\n</read-files>\n\n<modified-files>\nc\n</modified-files>"
        );
        assert_eq!(
            format_file_operations(&[], &modified),
            "\n\n<modified-files>\nc\n</modified-files>"
        );
    }

    #[test]
    fn caps_each_list_at_twenty() {
        let read: Vec<String> = (0..23).map(|i| format!("f{i:02}")).collect();
        let text = format_file_operations(&read, &[]);
        assert!(text.contains("f19\n… and 3 more\n</read-files>"));
        assert!(!text.contains("f20"));
    }

    #[test]
    fn serialises_sets_as_sorted_arrays() {
        let ops = FileOps {
            read: ["b", "a"].map(String::from).into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&ops).unwrap(),
            json!({"read":["a","b"],"written":[],"edited":[]})
        );
    }
}
