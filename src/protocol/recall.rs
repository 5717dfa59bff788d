//! Recall requests: `session/search` and `session/readEntry` (DESIGN §8 "Nothing is gone").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{EntryId, SessionId, WireEntry};

/// Which entries `session/search` walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SearchScope {
    /// The root→leaf path, oldest first (the default).
    #[default]
    Branch,
    /// Every entry of the tree, other branches included, in file order.
    Session,
}

/// Params of `session/search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSearchParams {
    pub session_id: SessionId,
    /// The text to find: literal, unless `regex`.
    pub query: String,
    /// `query` is a regular expression (Rust `regex` syntax; no look-around or
    /// backreferences). Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<bool>,
    /// Match case exactly. Default `false` (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_sensitive: Option<bool>,
    /// Default `branch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<SearchScope>,
    /// Hits per page: 1 to 200, default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The previous page's `nextCursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// One matching entry: its first match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    pub entry_id: EntryId,
    /// The message's role (`user`, `assistant`, `toolResult`, `bashExecution`, ...), else the
    /// entry's type (`compaction`, `branch_summary`, `custom_message`, ...).
    pub role: String,
    /// The match with some text around it, on one line, at most 160 characters (plus `…`
    /// where it was cut).
    pub snippet: String,
    /// The model no longer sees this text as written: the entry is behind the branch's
    /// latest compaction or off the branch, or the match is in a pruned output's original.
    pub compacted: bool,
    /// The entry's timestamp (ISO-8601).
    pub timestamp: String,
}

/// Result of `session/search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSearchResult {
    /// In scope order (oldest first), one per matching entry.
    pub hits: Vec<SearchHit>,
    /// Pass as `cursor` for the next page; absent when there are no more hits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Blobs (hex names) that searched entries refer to but the store lacks: their full
    /// texts were not searched, only the truncated head in the line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_blobs: Vec<String>,
}

/// Params of `session/readEntry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionReadEntryParams {
    pub session_id: SessionId,
    pub entry_id: EntryId,
}

/// Result of `session/readEntry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionReadEntryResult {
    /// The entry as written, with every string the size controls truncated replaced by its
    /// full text from the blob store (its `compactdFullText` map removed) and a pruned tool
    /// output's `content` replaced by its `originalContent`. Image data stays as written
    /// (`blob:sha256:<hex>` references included).
    pub entry: WireEntry,
    /// JSON pointers of the strings whose full text came from the blob store.
    pub restored_full_texts: Vec<String>,
    /// The content was a prune notice and is here the original.
    pub restored_pruned: bool,
    /// As in `session/search`: the model no longer sees this entry as written.
    pub compacted: bool,
}
