//! Recall (DESIGN §8 "Nothing is gone"): search every entry of a session, those behind
//! compactions and pruned outputs included, and read one back as it was written with its full
//! texts restored.
//!
//! What is searched is the text of an entry's string values (not its keys, ids, timestamps
//! or image data), with three replacements: a pruned tool result's `originalContent` is
//! searched with the rest of the line, and a string the size controls truncated is searched
//! in its full text from the blob store. Blob references are looked up only as plain hex
//! names inside the store ([`BlobStore::get`]), never as paths.
//!
//! A plain-text query is first looked for in the raw line bytes: a line that does not contain
//! it (case folded as the query is) cannot contain it in any of its strings, unless an escape
//! hides one of its characters; lines with such escapes are always parsed. So a search of a
//! large session parses only the lines that may match.

use std::collections::HashSet;

use regex::bytes::{Regex as BytesRegex, RegexBuilder as BytesRegexBuilder};
use regex::{Regex, RegexBuilder};
use serde_json::Value;

use super::entry::Entry;
use super::file::Session;
use super::message::ORIGINAL_CONTENT_FIELD;
use super::size_controls::{BLOB_PREFIX, BlobStore, FULL_TEXT_FIELD};
use super::tree::is_marker;

/// Longest snippet, in characters (the match and what is around it).
pub const SNIPPET_CHARS: usize = 160;
/// Hits per page when the caller gives no limit, and the most a page holds.
pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 200;
/// Most compiled size of a regex query, so a hostile pattern cannot take the memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Which entries a search walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchScope {
    /// The root→leaf path (what the agent's branch went through).
    #[default]
    Branch,
    /// Every entry of the tree, in file order.
    Session,
}

/// A search: literal text (case-insensitive unless `case_sensitive`) or a regex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    pub text: String,
    pub regex: bool,
    pub case_sensitive: bool,
    pub scope: SearchScope,
    /// Hits per page (clamped to 1..=[`MAX_LIMIT`]).
    pub limit: usize,
    /// Resume after this entry (the previous page's last hit).
    pub after: Option<String>,
}

impl SearchQuery {
    /// A literal, case-insensitive search of the branch.
    pub fn text(text: impl Into<String>) -> Self {
        SearchQuery {
            text: text.into(),
            regex: false,
            case_sensitive: false,
            scope: SearchScope::Branch,
            limit: DEFAULT_LIMIT,
            after: None,
        }
    }
}

/// One matching entry (its first match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub entry_id: String,
    /// The message's role (`user`, `assistant`, `toolResult`, ...), else the entry's type.
    pub role: String,
    /// The match with some text around it, on one line, at most [`SNIPPET_CHARS`] long.
    pub snippet: String,
    /// Whether the model no longer sees this text as written: the entry is behind the
    /// branch's latest compaction or off the branch, or the match is in a pruned output.
    pub compacted: bool,
    pub timestamp: String,
}

/// One page of hits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchPage {
    pub hits: Vec<SearchHit>,
    /// The entry to resume after for the next page; `None` when the search is complete.
    pub next_after: Option<String>,
    /// Blobs referenced by searched entries but not in the store (hex names): their full
    /// texts could not be searched, only the truncated head in the line.
    pub missing_blobs: Vec<String>,
}

/// An entry read back: the object as written, with truncated strings replaced by their full
/// text and a pruned output's content by its original.
#[derive(Debug, Clone, PartialEq)]
pub struct RecalledEntry {
    pub entry: Value,
    /// JSON pointers of the strings whose full text came from the blob store.
    pub restored_full_texts: Vec<String>,
    /// Whether the content was a prune notice, replaced here by the original.
    pub restored_pruned: bool,
    pub compacted: bool,
}

/// Why a recall failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecallError {
    #[error("invalid search pattern: {0}")]
    InvalidPattern(String),
    #[error("the search query is empty")]
    EmptyQuery,
    #[error("cursor {0} names no entry of the searched scope")]
    BadCursor(String),
    #[error("Entry {0} not found")]
    EntryNotFound(String),
    /// The full text of `pointer` in entry `entry_id` is blob `blob`, absent from the store
    /// (or a reference that is not a blob name).
    #[error(
        "entry {entry_id}: the full text of {pointer} is blob {blob}, missing from the blob store {store}"
    )]
    BlobMissing {
        entry_id: String,
        pointer: String,
        blob: String,
        store: String,
    },
}

/// How a query matches text.
struct Matcher {
    text: Regex,
    /// Over raw line bytes; `None` when the query may hide behind an escape (regexes, and
    /// literals with characters JSON escapes).
    line: Option<BytesRegex>,
}

impl Matcher {
    fn new(query: &SearchQuery) -> Result<Matcher, RecallError> {
        if query.text.is_empty() {
            return Err(RecallError::EmptyQuery);
        }
        let pattern = if query.regex {
            query.text.clone()
        } else {
            regex::escape(&query.text)
        };
        let text = RegexBuilder::new(&pattern)
            .case_insensitive(!query.case_sensitive)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| RecallError::InvalidPattern(e.to_string()))?;
        let plain = !query.regex
            && query
                .text
                .chars()
                .all(|c| !c.is_control() && !matches!(c, '"' | '\\' | '/'));
        let line = if plain {
            BytesRegexBuilder::new(&pattern)
                .case_insensitive(!query.case_sensitive)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .ok()
        } else {
            None
        };
        Ok(Matcher { text, line })
    }

    /// Whether the raw line may hold a match in one of its strings.
    fn line_may_match(&self, line: &[u8]) -> bool {
        let Some(line_regex) = &self.line else {
            return true;
        };
        // `\uXXXX` and `\/` may spell any character of the query: such lines are parsed.
        line_regex.is_match(line)
            || memchr::memmem::find(line, b"\\u").is_some()
            || memchr::memmem::find(line, b"\\/").is_some()
    }
}

/// The entries of `scope` in order, markers excluded.
fn scope_entries(session: &Session, scope: SearchScope) -> Vec<&Entry> {
    match scope {
        SearchScope::Branch => session.path_to_leaf(),
        SearchScope::Session => session.entries().iter().filter(|e| !is_marker(e)).collect(),
    }
}

/// The ids of the entries the model sees as written at the leaf: on the branch, from the
/// latest compaction's first kept entry (or the compaction itself) on.
fn live_ids(session: &Session) -> HashSet<String> {
    let path = session.path_to_leaf();
    let latest = path.iter().rposition(|e| e.type_name() == "compaction");
    let start = match latest {
        None => 0,
        Some(k) => {
            let kept = match path[k].kind() {
                super::EntryKind::Compaction(c) => {
                    path[..k].iter().position(|e| e.id == c.first_kept_entry_id)
                }
                _ => None,
            };
            kept.unwrap_or(k)
        }
    };
    path[start..].iter().map(|e| e.id.clone()).collect()
}

/// Searches `session` (loaded whole) with `query`; full texts come from `store`.
pub fn search(
    session: &Session,
    store: Option<&BlobStore>,
    query: &SearchQuery,
) -> Result<SearchPage, RecallError> {
    let matcher = Matcher::new(query)?;
    let entries = scope_entries(session, query.scope);
    let start = match &query.after {
        None => 0,
        Some(after) => {
            entries
                .iter()
                .position(|e| &e.id == after)
                .ok_or_else(|| RecallError::BadCursor(after.clone()))?
                + 1
        }
    };
    let limit = query.limit.clamp(1, MAX_LIMIT);
    let live = live_ids(session);
    let mut page = SearchPage::default();
    for entry in &entries[start..] {
        let Some((snippet, in_pruned)) = match_entry(entry, &matcher, store, &mut page) else {
            continue;
        };
        if page.hits.len() == limit {
            // One more hit exists: the next page starts after the last one returned.
            page.next_after = page.hits.last().map(|h| h.entry_id.clone());
            break;
        }
        page.hits.push(SearchHit {
            entry_id: entry.id.clone(),
            role: role_of(entry),
            snippet,
            compacted: in_pruned || !live.contains(&entry.id),
            timestamp: entry.timestamp.clone(),
        });
    }
    page.missing_blobs.sort();
    page.missing_blobs.dedup();
    Ok(page)
}

/// The first match in `entry`: its snippet and whether it is in a pruned original.
fn match_entry(
    entry: &Entry,
    matcher: &Matcher,
    store: Option<&BlobStore>,
    page: &mut SearchPage,
) -> Option<(String, bool)> {
    let line = entry.line_bytes().ok()?;
    let has_full_text = memchr::memmem::find(&line, FULL_TEXT_FIELD.as_bytes()).is_some();
    if !has_full_text && !matcher.line_may_match(&line) {
        return None;
    }
    let mut value: Value = serde_json::from_slice(&line).ok()?;
    if has_full_text {
        let missing = restore_texts(&mut value, store).err().unwrap_or_default();
        page.missing_blobs
            .extend(missing.into_iter().map(|m| m.blob));
    }
    let mut found = None;
    for_each_text(&value, "", &mut |pointer, text| {
        if found.is_some() {
            return;
        }
        if let Some(m) = matcher.text.find(text) {
            let pruned = pointer.contains(&format!("/{ORIGINAL_CONTENT_FIELD}"));
            found = Some((snippet(text, m.start(), m.end()), pruned));
        }
    });
    found
}

/// Calls `visit` with every string value of an entry object that holds text (not the
/// common fields, image data, or blob references) and its JSON pointer.
fn for_each_text(value: &Value, pointer: &str, visit: &mut dyn FnMut(&str, &str)) {
    match value {
        Value::String(s) if !s.starts_with(BLOB_PREFIX) => visit(pointer, s),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                for_each_text(item, &format!("{pointer}/{i}"), visit);
            }
        }
        Value::Object(map) => {
            let is_image = map.get("type").and_then(Value::as_str) == Some("image");
            for (key, child) in map {
                let skip = (pointer.is_empty()
                    && matches!(
                        key.as_str(),
                        "type" | "id" | "parentId" | "timestamp" | FULL_TEXT_FIELD
                    ))
                    || (is_image && key == "data");
                if !skip {
                    let escaped = key.replace('~', "~0").replace('/', "~1");
                    for_each_text(child, &format!("{pointer}/{escaped}"), visit);
                }
            }
        }
        _ => {}
    }
}

/// The texts of an entry object (as [`read_entry`] returns it) with their JSON pointers, in
/// order: what a person or a model reads of it.
pub fn entry_texts(entry: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for_each_text(entry, "", &mut |pointer, text| {
        out.push((pointer.to_owned(), text.to_owned()))
    });
    out
}

/// The message role, or the entry type.
fn role_of(entry: &Entry) -> String {
    match entry.message() {
        Some(message) => message.role().to_owned(),
        None => entry.type_name().to_owned(),
    }
}

/// At most [`SNIPPET_CHARS`] characters around `text[start..end]`, whitespace runs folded to
/// one space, `…` where it was cut.
fn snippet(text: &str, start: usize, end: usize) -> String {
    let matched = text[start..end].chars().count();
    let room = SNIPPET_CHARS.saturating_sub(matched.min(SNIPPET_CHARS)) / 2;
    let before: Vec<char> = text[..start].chars().rev().take(room + 1).collect();
    let cut_before = before.len() > room;
    let head: String = before.iter().take(room).rev().collect();
    let body: String = text[start..end].chars().take(SNIPPET_CHARS).collect();
    let mut after_chars = text[end..].chars();
    let tail: String = after_chars.by_ref().take(room).collect();
    let cut_after = after_chars.next().is_some() || matched > SNIPPET_CHARS;
    let joined = format!(
        "{}{head}{body}{tail}{}",
        if cut_before { "…" } else { "" },
        if cut_after { "…" } else { "" }
    );
    joined.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Puts the full text of each truncated string of `value` back from `store` (removing the
/// [`FULL_TEXT_FIELD`] map); `Err` names each one missing (those keep their truncated head).
fn restore_texts(
    value: &mut Value,
    store: Option<&BlobStore>,
) -> Result<Vec<String>, Vec<MissingBlob>> {
    let Some(Value::Object(refs)) = value
        .as_object_mut()
        .and_then(|m| m.remove(FULL_TEXT_FIELD))
    else {
        return Ok(Vec::new());
    };
    let mut restored = Vec::new();
    let mut missing = Vec::new();
    for (pointer, reference) in refs {
        let reference = reference.as_str().unwrap_or_default();
        let name = reference.strip_prefix(BLOB_PREFIX).unwrap_or(reference);
        let text = store
            .and_then(|s| s.get(name))
            .and_then(|bytes| String::from_utf8(bytes).ok());
        match (text, value.pointer_mut(&pointer)) {
            (Some(text), Some(slot @ Value::String(_))) => {
                *slot = Value::from(text);
                restored.push(pointer);
            }
            _ => missing.push(MissingBlob {
                pointer,
                blob: name.to_owned(),
            }),
        }
    }
    if missing.is_empty() {
        Ok(restored)
    } else {
        Err(missing)
    }
}

struct MissingBlob {
    pointer: String,
    blob: String,
}

/// Entry `id` of `session` (loaded whole) as written, full texts restored from `store`. A
/// missing blob is [`RecallError::BlobMissing`], never a silently cut text.
pub fn read_entry(
    session: &Session,
    store: Option<&BlobStore>,
    id: &str,
) -> Result<RecalledEntry, RecallError> {
    let entry = session
        .get(id)
        .filter(|e| !is_marker(e))
        .ok_or_else(|| RecallError::EntryNotFound(id.to_owned()))?;
    let mut value = match entry.line_bytes() {
        Ok(line) => serde_json::from_slice(&line).unwrap_or_else(|_| entry.to_value()),
        Err(_) => entry.to_value(),
    };
    let restored_full_texts = restore_texts(&mut value, store).map_err(|missing| {
        // Cannot be empty: `Err` carries at least one.
        let first = &missing[0];
        RecallError::BlobMissing {
            entry_id: id.to_owned(),
            pointer: first.pointer.clone(),
            blob: first.blob.clone(),
            store: store.map_or_else(
                || "(none configured)".to_owned(),
                |s| s.dir().display().to_string(),
            ),
        }
    })?;
    let restored_pruned = restore_pruned(&mut value);
    let compacted = !live_ids(session).contains(id);
    Ok(RecalledEntry {
        entry: value,
        restored_full_texts,
        restored_pruned,
        compacted,
    })
}

/// Replaces a pruned tool result's notice with its `originalContent`.
fn restore_pruned(value: &mut Value) -> bool {
    let Some(message) = value.get_mut("message").and_then(Value::as_object_mut) else {
        return false;
    };
    match message.remove(ORIGINAL_CONTENT_FIELD) {
        Some(original) => {
            message.insert("content".into(), original);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_short_and_centred_on_the_match() {
        let text = format!("{}needle{}", "a ".repeat(500), " b".repeat(500));
        let start = text.find("needle").unwrap();
        let s = snippet(&text, start, start + 6);
        assert!(s.contains("needle"), "{s}");
        assert!(s.chars().count() <= SNIPPET_CHARS + 2, "{s}");
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert_eq!(snippet("x needle\n\ny", 2, 8), "x needle y");
    }

    #[test]
    fn escaped_lines_are_never_skipped_by_the_line_check() {
        let m = Matcher::new(&SearchQuery::text("Résumé")).unwrap();
        assert!(m.line_may_match(br#"{"t":"R\u00e9sum\u00e9"}"#));
        assert!(!m.line_may_match(br#"{"t":"nothing here"}"#));
        assert!(m.line_may_match(r#"{"t":"RÉSUMÉ"}"#.as_bytes()));
        let regex = Matcher::new(&SearchQuery {
            regex: true,
            ..SearchQuery::text("a\\nb")
        })
        .unwrap();
        assert!(regex.line_may_match(b"{}"));
        assert!(matches!(
            Matcher::new(&SearchQuery {
                regex: true,
                ..SearchQuery::text("(")
            }),
            Err(RecallError::InvalidPattern(_))
        ));
    }
}
