//! Write-time size controls (spec §1.4, DESIGN §2 "Size controls"), without losing data.
//!
//! Applied to every entry compactd writes, before its line is written:
//!
//! * an image block in the `content` array of a `message` or `custom_message` entry whose
//!   base64 `data` has at least [`IMAGE_BLOB_MIN_CHARS`] characters is written as
//!   `blob:sha256:<hex>`, the raw bytes going to the blob store as a file named by the SHA-256
//!   of those bytes (the reference's layout), written and fsynced before the line;
//! * a string longer than [`MAX_STRING_CHARS`] (UTF-16 units, as the reference counts) is
//!   written in the reference's truncated form, its head then [`TRUNCATION_NOTICE`], so the
//!   whole string is at most [`MAX_STRING_CHARS`] long; the full text goes to the blob store and
//!   the entry gets a top-level [`FULL_TEXT_FIELD`] object mapping the string's JSON pointer
//!   to `blob:sha256:<hex>`. The reference ignores that field; compactd's context reads the
//!   full text back;
//! * the transient keys `partialJson` and `jsonlEvents` are dropped, and `lineCount` is
//!   recomputed where an object has a string `content`.
//!
//! An entry none of this applies to is left untouched (its line is written as before, byte for
//! byte). Blobs are never deleted here; `compactd blobs --gc` removes unreferenced ones on
//! request.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::entry::Entry;

/// Base64 length from which an image goes to the blob store.
pub const IMAGE_BLOB_MIN_CHARS: usize = 1024;
/// Longest string written as it is, in UTF-16 units.
pub const MAX_STRING_CHARS: usize = 500_000;
/// The reference's notice after a truncated string.
pub const TRUNCATION_NOTICE: &str = "\n\n[Session persistence truncated large content]";
/// Top-level entry field: JSON pointer of each truncated string → `blob:sha256:<hex>` of its
/// full UTF-8 text.
pub const FULL_TEXT_FIELD: &str = "compactdFullText";
/// Prefix of a blob reference.
pub const BLOB_PREFIX: &str = "blob:sha256:";
const TRANSIENT_KEYS: [&str; 2] = ["partialJson", "jsonlEvents"];

/// A content-addressed blob store: one file per blob, named by the SHA-256 (hex) of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobStore {
    dir: PathBuf,
}

impl BlobStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BlobStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `bytes` (fsynced, then the directory) and returns the hex SHA-256 naming them.
    /// An existing blob of that name is kept as it is.
    pub fn put(&self, bytes: &[u8]) -> std::io::Result<String> {
        let hex = sha256_hex(bytes);
        let path = self.dir.join(&hex);
        // A regular file only: a symlink planted under the blob's name is replaced by the
        // rename below, never taken for the blob.
        if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file()) {
            // Best effort: a store the writer may not touch (another user's, read-only) still
            // holds the blob.
            let _ = touch(&path);
            return Ok(hex);
        }
        fs::create_dir_all(&self.dir)?;
        // Our own temp file rather than `tempfile`'s, whose errors wrap the system's with the
        // temp path and so lose the errno a client is told (`osError`).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".{hex}.{}.{n}.tmp", std::process::id()));
        let written = (|| {
            let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        if let Ok(dir) = OpenOptions::new().read(true).open(&self.dir) {
            // Best effort: not every platform can fsync a directory.
            let _ = dir.sync_all();
        }
        Ok(hex)
    }

    /// The bytes of blob `hex`; only a plain hex name is looked up, never a path. The store's
    /// file is opened without following a symlink and must be a regular file: a link named
    /// like a blob is an error naming the link (`… is a symbolic link, not a regular file`),
    /// never its target's bytes.
    pub fn read(&self, hex: &str) -> std::io::Result<Vec<u8>> {
        if !is_blob_name(hex) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{hex:?} is not a blob name"),
            ));
        }
        let path = self.dir.join(hex);
        crate::files::read_regular_nofollow(&path)
            .map_err(|e| std::io::Error::new(e.kind(), BlobReadError { path, source: e }))
    }

    /// [`BlobStore::read`], any failure as `None`.
    pub fn get(&self, hex: &str) -> Option<Vec<u8>> {
        self.read(hex).ok()
    }
}

/// Sets the mtime of the store file `path` to now, so `compactd blobs --gc` sees a blob just
/// reused by a writer as recent (its grace period) even when nothing referred to it before.
fn touch(path: &Path) -> std::io::Result<()> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    file.set_modified(std::time::SystemTime::now())
}

/// A blob store file that could not be read: its path and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct BlobReadError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// A plain hex name of at most 128 characters: what a blob reference may name.
pub fn is_blob_name(hex: &str) -> bool {
    !hex.is_empty() && hex.len() <= 128 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// A full text or image the context could not read back from the blob store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MissingBlob {
    /// The entry that refers to it (empty until the context fills it in).
    pub entry_id: String,
    /// The blob's hex name, when the reference had one.
    pub blob: Option<String>,
    /// Where in the entry (a JSON pointer into the entry for a full text, `image` for an image).
    pub pointer: String,
    /// Why: not in the store, not a regular file, an I/O error.
    pub reason: String,
}

impl BlobStore {}

/// The reference agent's blob store, `~/.omp/agent/blobs`.
pub fn default_blob_dir() -> Option<PathBuf> {
    directories::BaseDirs::new().map(|d| d.home_dir().join(".omp/agent/blobs"))
}

/// The reference agent's store, `~/.omp/agent/blobs`.
pub fn default_store() -> Option<BlobStore> {
    default_blob_dir().map(BlobStore::new)
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The entry as it must be written, or `None` when the controls change nothing. Blobs are in
/// the store (synced) when this returns.
pub fn control_entry(entry: &Entry, store: &BlobStore) -> std::io::Result<Option<Entry>> {
    // A line whose body does not parse is always written back byte for byte.
    if entry.is_unmodified_line() || !needs_control(entry) {
        return Ok(None);
    }
    let mut value = entry.to_value();
    let before = value.clone();
    let type_name = entry.type_name().to_owned();
    let mut full_text = Map::new();
    if let Value::Object(map) = &mut value {
        let content = match type_name.as_str() {
            "message" => map
                .get_mut("message")
                .and_then(|m| m.get_mut("content"))
                .map(|c| (c, "/message/content")),
            "custom_message" => map.get_mut("content").map(|c| (c, "/content")),
            _ => None,
        };
        if let Some((Value::Array(blocks), _)) = content {
            for block in blocks {
                blob_image(block, store)?;
            }
        }
        shape(&mut value, "", store, &mut full_text)?;
    }
    if !full_text.is_empty()
        && let Value::Object(map) = &mut value
    {
        let mut merged = match map.remove(FULL_TEXT_FIELD) {
            Some(Value::Object(old)) => old,
            _ => Map::new(),
        };
        merged.extend(full_text);
        map.insert(FULL_TEXT_FIELD.into(), Value::Object(merged));
    }
    if value == before {
        return Ok(None);
    }
    // Cannot fail: the value came from an entry and only its fields' contents changed.
    Ok(Entry::from_value(value).ok())
}

/// A cheap pre-check on the serialized entry, so entries that need nothing are never copied.
fn needs_control(entry: &Entry) -> bool {
    let line = entry.to_line();
    longest_string(line.as_bytes()) > MAX_STRING_CHARS
        || TRANSIENT_KEYS
            .iter()
            .any(|k| line.contains(&format!("\"{k}\"")))
        || line.contains("\"lineCount\"")
        || (line.len() >= IMAGE_BLOB_MIN_CHARS && line.contains("\"image\""))
}

/// Bytes of the longest JSON string in `line` as written, escapes included: never fewer than
/// the string's UTF-16 units, so a line with no string over [`MAX_STRING_CHARS`] bytes has
/// nothing to truncate. A long line of short strings (a compaction's ledger) is not converted
/// and compared for nothing.
fn longest_string(line: &[u8]) -> usize {
    let (mut longest, mut at) = (0, 0);
    while let Some(open) = memchr::memchr(b'"', &line[at..]) {
        let start = at + open + 1;
        let mut i = start;
        loop {
            match memchr::memchr2(b'"', b'\\', &line[i..]) {
                None => return longest.max(line.len() - start),
                Some(k) if line[i + k] == b'\\' => i = (i + k + 2).min(line.len()),
                Some(k) => {
                    longest = longest.max(i + k - start);
                    at = i + k + 1;
                    break;
                }
            }
        }
    }
    longest
}

fn blob_image(block: &mut Value, store: &BlobStore) -> std::io::Result<()> {
    let Value::Object(b) = block else {
        return Ok(());
    };
    if b.get("type").and_then(Value::as_str) != Some("image") {
        return Ok(());
    }
    let Some(Value::String(data)) = b.get("data") else {
        return Ok(());
    };
    if data.len() < IMAGE_BLOB_MIN_CHARS || data.starts_with(BLOB_PREFIX) {
        return Ok(());
    }
    // Data that is not valid base64 is written as it is: it cannot be stored as bytes.
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.as_bytes()) else {
        return Ok(());
    };
    let hex = store.put(&bytes)?;
    b.insert("data".into(), Value::from(format!("{BLOB_PREFIX}{hex}")));
    Ok(())
}

/// Drops transient keys, recomputes `lineCount`, truncates long strings (recording their
/// full text under their JSON pointer).
fn shape(
    value: &mut Value,
    pointer: &str,
    store: &BlobStore,
    full_text: &mut Map<String, Value>,
) -> std::io::Result<()> {
    match value {
        Value::Object(map) => {
            for key in TRANSIENT_KEYS {
                map.remove(key);
            }
            if let (Some(Value::String(content)), Some(Value::Number(_))) =
                (map.get("content"), map.get("lineCount"))
            {
                let lines = content.split('\n').count();
                map.insert("lineCount".into(), Value::from(lines));
            }
            for (key, child) in map.iter_mut() {
                if pointer.is_empty() && key == FULL_TEXT_FIELD {
                    continue;
                }
                let escaped = key.replace('~', "~0").replace('/', "~1");
                shape(child, &format!("{pointer}/{escaped}"), store, full_text)?;
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                shape(child, &format!("{pointer}/{i}"), store, full_text)?;
            }
        }
        Value::String(s) => {
            if let Some(cut) = truncated(s) {
                let hex = store.put(s.as_bytes())?;
                full_text.insert(
                    pointer.to_owned(),
                    Value::from(format!("{BLOB_PREFIX}{hex}")),
                );
                *s = cut;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The reference's truncated form of `s` when it is longer than [`MAX_STRING_CHARS`] UTF-16
/// units: the longest head (whole characters) that leaves room for the notice, then the notice.
pub fn truncated(s: &str) -> Option<String> {
    if s.len() <= MAX_STRING_CHARS {
        // UTF-16 units never exceed UTF-8 bytes.
        return None;
    }
    let units: usize = s.chars().map(char::len_utf16).sum();
    if units <= MAX_STRING_CHARS {
        return None;
    }
    let room = MAX_STRING_CHARS - TRUNCATION_NOTICE.len();
    let mut used = 0;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        if used + c.len_utf16() > room {
            break;
        }
        used += c.len_utf16();
        end = i + c.len_utf8();
    }
    Some(format!("{}{TRUNCATION_NOTICE}", &s[..end]))
}

/// Puts the full text of every string truncated in `value` (an entry object) back, from the
/// blob store; `Err` lists the pointers whose blob is missing (those strings stay truncated).
pub fn restore_full_text(value: &mut Value, store: &BlobStore) -> Result<bool, Vec<MissingBlob>> {
    let Some(Value::Object(refs)) = value.get(FULL_TEXT_FIELD).cloned() else {
        return Ok(false);
    };
    let mut missing = Vec::new();
    for (pointer, reference) in refs {
        let hex = reference.as_str().and_then(|r| r.strip_prefix(BLOB_PREFIX));
        let text = match hex {
            None => Err("not a blob reference".to_owned()),
            Some(hex) => match store.read(hex) {
                Ok(bytes) => String::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned()),
                Err(e) => Err(blob_error_text(&e)),
            },
        };
        match (text, value.pointer_mut(&pointer)) {
            (Ok(text), Some(slot @ Value::String(_))) => *slot = Value::from(text),
            (Ok(_), _) => missing.push(MissingBlob {
                entry_id: String::new(),
                blob: hex.map(str::to_owned),
                pointer,
                reason: "the entry has no string there".to_owned(),
            }),
            (Err(reason), _) => missing.push(MissingBlob {
                entry_id: String::new(),
                blob: hex.map(str::to_owned),
                pointer,
                reason,
            }),
        }
    }
    if let Value::Object(map) = value {
        map.remove(FULL_TEXT_FIELD);
    }
    if missing.is_empty() {
        Ok(true)
    } else {
        Err(missing)
    }
}

/// What a failed [`BlobStore::read`] says to a person: the store file's path and the reason
/// (`… not found` for a blob that is not there).
pub fn blob_error_text(error: &std::io::Error) -> String {
    let inner = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<BlobReadError>());
    match inner {
        Some(e) if e.source.kind() == std::io::ErrorKind::NotFound => {
            format!("{}: not in the blob store", e.path.display())
        }
        Some(e) => e.to_string(),
        None => error.to_string(),
    }
}

/// Blob references (`hex`) in one session line: images and full texts.
pub fn blob_refs_in_line(line: &str, out: &mut std::collections::BTreeSet<String>) {
    let mut rest = line;
    while let Some(at) = rest.find(BLOB_PREFIX) {
        rest = &rest[at + BLOB_PREFIX.len()..];
        let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
        if !hex.is_empty() {
            out.insert(hex);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(v: Value) -> Entry {
        Entry::from_value(v).unwrap()
    }

    #[test]
    fn the_longest_string_is_measured_as_written_and_never_under_its_utf16_units() {
        let line = |v: Value| serde_json::to_string(&v).unwrap();
        assert_eq!(
            longest_string(line(json!({"a": "xyz", "bb": 1})).as_bytes()),
            3
        );
        // Escapes count as written: a quote, a backslash, a newline, a control character.
        let escaped = line(json!({"k": "a\"b\\c\nd\u{1}"}));
        assert_eq!(
            longest_string(escaped.as_bytes()),
            r#"a\"b\\c\nd\u0001"#.len()
        );
        assert_eq!(
            longest_string(br#"{"open": "never closed"#),
            "never closed".len()
        );
        assert_eq!(longest_string(br#"{"e": "\"#), 1);
        for text in ["é".repeat(1000), "😀".repeat(1000), "\u{7}".repeat(1000)] {
            let units: usize = text.chars().map(char::len_utf16).sum();
            assert!(longest_string(line(json!({"t": text})).as_bytes()) >= units);
        }
        // A compaction's ledger: a long line of short strings needs no control.
        let requests: Vec<String> = (0..40_000).map(|i| format!("request {i}")).collect();
        let ledger = entry(json!({"type": "compaction", "id": "c", "parentId": null,
            "timestamp": "t", "summary": "s", "firstKeptEntryId": "e", "tokensBefore": 1,
            "details": {"ledger": {"requests": requests}}}));
        assert!(ledger.to_line().len() > MAX_STRING_CHARS);
        assert!(!needs_control(&ledger));
        let long = entry(json!({"type": "custom", "id": "c", "parentId": null,
            "timestamp": "t", "data": "x".repeat(MAX_STRING_CHARS + 1)}));
        assert!(needs_control(&long));
    }

    #[test]
    fn truncation_counts_utf16_and_keeps_whole_characters() {
        assert_eq!(truncated(&"a".repeat(MAX_STRING_CHARS)), None);
        let cut = truncated(&"a".repeat(MAX_STRING_CHARS + 1)).unwrap();
        assert_eq!(cut.len(), MAX_STRING_CHARS);
        assert!(cut.ends_with(TRUNCATION_NOTICE));
        // 'é' is 2 bytes but 1 UTF-16 unit: 300,000 of them are not too long.
        assert_eq!(truncated(&"é".repeat(300_000)), None);
        // '😀' is 2 UTF-16 units: never split.
        let cut = truncated(&"😀".repeat(300_000)).unwrap();
        let head = cut.strip_suffix(TRUNCATION_NOTICE).unwrap();
        assert!(head.chars().all(|c| c == '😀'));
        let units: usize = cut.chars().map(char::len_utf16).sum();
        assert!(units <= MAX_STRING_CHARS);
    }

    #[test]
    fn small_entries_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path().join("blobs"));
        let e = entry(
            json!({"type": "message", "id": "a", "parentId": null, "timestamp": "t",
            "message": {"role": "user", "content": [{"type": "image", "data": "aGkh", "mimeType": "image/png"}]}}),
        );
        assert!(control_entry(&e, &store).unwrap().is_none());
        assert!(!store.dir().exists());
    }

    #[test]
    fn transient_keys_go_and_line_count_is_recomputed() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path());
        let e = entry(
            json!({"type": "message", "id": "a", "parentId": null, "timestamp": "t",
            "message": {"role": "assistant", "content": [
                {"type": "toolCall", "id": "c", "name": "write", "partialJson": "{\"pa",
                 "arguments": {"content": "a\nb\nc", "lineCount": 9}}],
                "jsonlEvents": [1, 2]}}),
        );
        let out = control_entry(&e, &store).unwrap().unwrap().to_value();
        let msg = &out["message"];
        assert!(msg.get("jsonlEvents").is_none());
        assert!(msg["content"][0].get("partialJson").is_none());
        assert_eq!(msg["content"][0]["arguments"]["lineCount"], 3);
        assert!(out.get(FULL_TEXT_FIELD).is_none());
    }

    #[test]
    fn restore_puts_the_full_text_back_and_reports_missing_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path());
        let long = "z".repeat(MAX_STRING_CHARS + 10);
        let e = entry(
            json!({"type": "custom_message", "id": "a", "parentId": null,
            "timestamp": "t", "customType": "x", "content": long.clone(), "display": true}),
        );
        let written = control_entry(&e, &store).unwrap().unwrap().to_value();
        assert!(
            written["content"]
                .as_str()
                .unwrap()
                .ends_with(TRUNCATION_NOTICE)
        );
        assert!(written[FULL_TEXT_FIELD]["/content"].is_string());
        let mut read = written.clone();
        assert_eq!(restore_full_text(&mut read, &store), Ok(true));
        assert_eq!(read["content"], long.as_str());
        assert!(read.get(FULL_TEXT_FIELD).is_none());

        let empty = BlobStore::new(dir.path().join("none"));
        let mut read = written;
        let missing = restore_full_text(&mut read, &empty).unwrap_err();
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].pointer, "/content");
        assert_eq!(
            missing[0].blob.as_deref(),
            Some(sha256_hex(long.as_bytes()).as_str())
        );
        assert!(
            missing[0].reason.ends_with("not in the blob store"),
            "{}",
            missing[0].reason
        );
        assert!(
            read["content"]
                .as_str()
                .unwrap()
                .ends_with(TRUNCATION_NOTICE)
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_named_like_a_blob_is_an_error_naming_it_not_its_targets_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path().join("blobs"));
        let secret = dir.path().join("secret.txt");
        fs::write(&secret, "the target's bytes").unwrap();
        let real = store.put(b"real blob").unwrap();
        // A link named like a blob (the hash of what the link's target holds, so the name is
        // what a reference to that text would use).
        let hex = sha256_hex(b"the target's bytes");
        let link = store.dir().join(&hex);
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let err = store.read(&hex).unwrap_err();
        let text = blob_error_text(&err);
        assert!(text.contains(&hex), "{text}");
        assert!(text.contains("symbolic link"), "{text}");
        assert!(!text.contains("target's bytes"), "{text}");
        assert!(store.get(&hex).is_none());
        // A link to another blob of the store is refused the same way.
        let hex2 = sha256_hex(b"other");
        std::os::unix::fs::symlink(store.dir().join(&real), store.dir().join(&hex2)).unwrap();
        assert!(store.get(&hex2).is_none());
        // A directory named like a blob is not a blob either.
        let hex3 = sha256_hex(b"dir");
        fs::create_dir(store.dir().join(&hex3)).unwrap();
        assert!(blob_error_text(&store.read(&hex3).unwrap_err()).contains("directory"));
        // Writing the link's text stores a regular file in place of the link.
        assert_eq!(store.put(b"the target's bytes").unwrap(), hex);
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_file());
        assert_eq!(fs::read(&secret).unwrap(), b"the target's bytes");
        assert_eq!(store.get(&hex).unwrap(), b"the target's bytes");
        assert_eq!(store.get(&real).unwrap(), b"real blob");
    }

    /// A blob a writer stores again gets a fresh mtime, so `compactd blobs --gc` (grace by
    /// mtime) does not take an old orphan that an append in flight now refers to.
    #[test]
    fn reusing_a_blob_refreshes_its_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::new(dir.path());
        let hex = store.put(b"same bytes").unwrap();
        let path = dir.path().join(&hex);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(store.put(b"same bytes").unwrap(), hex);
        let age = fs::metadata(&path)
            .unwrap()
            .modified()
            .unwrap()
            .elapsed()
            .unwrap();
        assert!(age < std::time::Duration::from_secs(60), "{age:?}");
    }
}
