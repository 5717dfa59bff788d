//! The raw line of an entry loaded from a current file: kept as a span of where it was read
//! (the file buffer, or the open session file itself for a large file, read again by offset),
//! its header fields read at once, its body parsed on first use, and written back byte for
//! byte while nothing changed it.

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::io;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::Value;

use super::head::{self, Head};
use super::{Body, Entry, EntryKind, Fields};
use crate::session::message::Extra;

/// Where loaded lines live.
pub(crate) enum LineSource {
    /// Bytes read into memory: a small file, lines other writers appended, a rewritten line.
    Memory(Vec<u8>),
    /// The session file itself, kept open: a large file is never copied into memory; each
    /// line is read again by offset when its body is parsed or written back. The descriptor
    /// stays on the file that was read even after another writer renames a rewrite over it.
    File(std::fs::File),
}

impl LineSource {
    /// Lines held in memory.
    pub(crate) fn memory(bytes: Vec<u8>) -> Arc<LineSource> {
        Arc::new(LineSource::Memory(bytes))
    }

    /// The in-memory bytes (empty for a file source).
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            LineSource::Memory(bytes) => bytes,
            LineSource::File(_) => &[],
        }
    }
}

impl std::fmt::Debug for LineSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineSource::Memory(b) => write!(f, "Memory({} bytes)", b.len()),
            LineSource::File(_) => f.write_str("File"),
        }
    }
}

/// A line of a [`LineSource`] whose header fields were read at load.
#[derive(Clone)]
pub(crate) struct RawSpan {
    src: Arc<LineSource>,
    start: usize,
    end: usize,
    /// Shared, not allocated, for the types compactd knows (see [`shared_type_name`]).
    pub(super) type_name: Cow<'static, str>,
    /// [`head_hash`] of the `id`, `parentId` and `timestamp` the line holds.
    head: u64,
}

impl PartialEq for RawSpan {
    fn eq(&self, other: &Self) -> bool {
        match (self.bytes(), other.bytes()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl std::fmt::Debug for RawSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.bytes() {
            Ok(b) => f
                .debug_tuple("RawSpan")
                .field(&String::from_utf8_lossy(&b))
                .finish(),
            Err(e) => write!(f, "RawSpan({}..{}: {e})", self.start, self.end),
        }
    }
}

/// A fingerprint of an entry's header fields, to tell whether a loaded line still holds them.
/// Computed for every line at open, so foldhash's quality variant rather than SipHash (a
/// fifth of the cost); it is never stored, so its values may change between versions.
fn head_hash(id: &str, parent_id: Option<&str>, timestamp: &str) -> u64 {
    foldhash::quality::FixedState::default().hash_one((id, parent_id, timestamp))
}

/// `name`, borrowed from [`KNOWN_TYPE_NAMES`](super::KNOWN_TYPE_NAMES) when it is one of them.
fn shared_type_name(name: Cow<'_, str>) -> Cow<'static, str> {
    match super::KNOWN_TYPE_NAMES.iter().find(|&&known| known == name) {
        Some(&known) => Cow::Borrowed(known),
        None => Cow::Owned(name.into_owned()),
    }
}

impl RawSpan {
    /// The line's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether `entry`'s header fields are still the ones this line holds, so the line can be
    /// written back verbatim.
    pub(super) fn head_matches(&self, entry: &Entry) -> bool {
        self.head == head_hash(&entry.id, entry.parent_id.as_deref(), &entry.timestamp)
    }

    /// The line's bytes: borrowed from memory, or read again from the session file. A file
    /// that shrank or changed under the line (another program wrote it in place) is an error,
    /// never other bytes.
    pub(crate) fn bytes(&self) -> io::Result<Cow<'_, [u8]>> {
        match &*self.src {
            LineSource::Memory(bytes) => Ok(Cow::Borrowed(&bytes[self.start..self.end])),
            LineSource::File(file) => {
                let line = read_line_at(file, self.start, self.end)?;
                let same = head::scan_line(&line).is_some_and(|h| {
                    *h.type_name == *self.type_name
                        && self.head
                            == head_hash(
                                h.id.as_deref().unwrap_or_default(),
                                h.parent_id.as_deref(),
                                h.timestamp.as_deref().unwrap_or_default(),
                            )
                });
                if !same {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the line at byte {} of the session file changed on disk since it was read",
                            self.start
                        ),
                    ));
                }
                Ok(Cow::Owned(line))
            }
        }
    }

    /// The full parse the eager loader used to do. A line the head scan accepted but
    /// `serde_json::Value` refuses (a number beyond `f64`, a lone surrogate escape, a syntax
    /// error or invalid UTF-8 in the body, which the scan does not read), or whose body
    /// repeats a header field with another value, becomes an unknown entry that keeps its
    /// line, so a rewrite writes it back unchanged. The failure is logged when it is found.
    pub(super) fn parse(&self) -> Fields {
        match self.parse_entry() {
            Ok(entry) => entry.into_fields(),
            Err(reason) => {
                tracing::warn!(
                    %reason,
                    type_name = %self.type_name,
                    offset = self.start,
                    "entry body does not parse; kept as written"
                );
                Fields {
                    kind: EntryKind::Unknown {
                        type_name: self.type_name.to_string(),
                    },
                    extra: Extra::new(),
                    unparsed: Some(self.clone()),
                }
            }
        }
    }

    fn parse_entry(&self) -> Result<Entry, String> {
        let bytes = self.bytes().map_err(|e| e.to_string())?;
        let value = serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string())?;
        let entry = Entry::from_value(value).map_err(|e| e.to_string())?;
        let head = head_hash(&entry.id, entry.parent_id.as_deref(), &entry.timestamp);
        if head != self.head || entry.kind().type_name() != &*self.type_name {
            return Err("the line repeats a header field (type, id, parentId, timestamp) with another value".into());
        }
        Ok(entry)
    }
}

/// `file[start..end]`, which must still be a whole line: followed by `\n`.
fn read_line_at(file: &std::fs::File, start: usize, end: usize) -> io::Result<Vec<u8>> {
    let mut line = vec![0u8; end - start + 1];
    read_exact_at(file, &mut line, start as u64).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the session file shrank under the line at byte {start} since it was read"),
            )
        } else {
            e
        }
    })?;
    if line.pop() != Some(b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the line at byte {start} of the session file changed on disk since it was read"
            ),
        ));
    }
    Ok(line)
}

/// `pread` of `buf.len()` bytes at `offset`.
pub(crate) fn read_exact_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match file.seek_read(&mut buf[done..], offset + done as u64)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        Ok(())
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = (file, buf, offset);
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// `line` (a JSON object) with its `id`, `parentId` and `timestamp` members set to the given
/// values, in place or, when missing, after `type`; every other member is copied as written,
/// so values `serde_json::Value` cannot hold (`1e400`, a lone surrogate) survive. `None` when
/// the line is not an object with string keys.
fn reheaded(line: &str, id: &str, parent_id: Option<&str>, timestamp: &str) -> Option<String> {
    use serde_json::value::RawValue;

    struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);
    impl<'de> Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Members<'de>, A::Error> {
                    let mut out = Vec::new();
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        out.push((key, map.next_value::<&'de RawValue>()?));
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(Visit)
        }
    }

    let Members(members) = serde_json::from_str(line).ok()?;
    let head = [
        ("id", Value::from(id)),
        ("parentId", parent_id.map_or(Value::Null, Value::from)),
        ("timestamp", Value::from(timestamp)),
    ];
    let mut parts: Vec<String> = Vec::with_capacity(members.len() + 3);
    let mut placed = [false; 3];
    for (key, value) in &members {
        let slot = head.iter().position(|(k, _)| *k == key.as_ref());
        let value = match slot {
            Some(i) if placed[i] => continue,
            Some(i) => {
                placed[i] = true;
                head[i].1.to_string()
            }
            None => value.get().to_owned(),
        };
        parts.push(format!("{}:{value}", Value::from(key.as_ref())));
        if key == "type" {
            for (i, (k, v)) in head.iter().enumerate() {
                if !members.iter().any(|(m, _)| m == k) {
                    placed[i] = true;
                    parts.push(format!("{}:{v}", Value::from(*k)));
                }
            }
        }
    }
    Some(format!("{{{}}}", parts.join(",")))
}

impl Entry {
    /// The line `src[start..end]` (in memory) as an entry whose body is parsed on first use.
    /// The header fields are found by the scanner of `head.rs`; a line it gives up on is read
    /// with serde, which also checks the whole line. `Err` when the line is not UTF-8 JSON with
    /// the header fields in their usual shape (a string `type`, string-or-absent ids): the
    /// caller then parses it eagerly with [`Entry::from_value`], which decides exactly as
    /// before.
    pub(crate) fn from_shared_line(
        src: &Arc<LineSource>,
        start: usize,
        end: usize,
    ) -> Result<Entry, ()> {
        let line = &src.bytes()[start..end];
        match head::scan_line(line) {
            Some(head) => Ok(Entry::lazy(src, start, end, head)),
            None => Entry::from_shared_line_checked(src, start, end),
        }
    }

    /// [`Entry::from_shared_line`] with the whole line checked by serde first: for files of
    /// older versions, whose lines are parsed at once anyway.
    pub(crate) fn from_shared_line_checked(
        src: &Arc<LineSource>,
        start: usize,
        end: usize,
    ) -> Result<Entry, ()> {
        let text = std::str::from_utf8(&src.bytes()[start..end]).map_err(|_| ())?;
        let head: Head<'_> = serde_json::from_str(text).map_err(|_| ())?;
        Ok(Entry::lazy(src, start, end, head))
    }

    /// The line `src[start..end]` with header `head` as an entry parsed on first use.
    pub(crate) fn lazy(src: &Arc<LineSource>, start: usize, end: usize, head: Head<'_>) -> Entry {
        let id = head.id.map(Cow::into_owned).unwrap_or_default();
        let parent_id = head.parent_id.map(Cow::into_owned);
        let timestamp = head.timestamp.map(Cow::into_owned).unwrap_or_default();
        let hash = head_hash(&id, parent_id.as_deref(), &timestamp);
        Entry {
            id,
            parent_id,
            timestamp,
            body: Body::Raw {
                line: RawSpan {
                    src: Arc::clone(src),
                    start,
                    end,
                    type_name: shared_type_name(head.type_name),
                    head: hash,
                },
                parsed: OnceLock::new(),
            },
        }
    }

    /// The address of the open file a lazy entry reads its line from.
    #[cfg(test)]
    pub(crate) fn file_source(&self) -> Option<*const LineSource> {
        match &self.body {
            Body::Raw { line, .. } if matches!(*line.src, LineSource::File(_)) => {
                Some(Arc::as_ptr(&line.src))
            }
            _ => None,
        }
    }

    /// A lazy entry whose line was read through `from` now reads it through `to`: another
    /// handle on the same file.
    pub(crate) fn rebind(&mut self, from: &Arc<LineSource>, to: &Arc<LineSource>) {
        if let Body::Raw { line, .. } = &mut self.body
            && Arc::ptr_eq(&line.src, from)
        {
            line.src = Arc::clone(to);
        }
    }

    /// For an entry whose body could not be parsed: rewrites its kept line so its `id`,
    /// `parentId` and `timestamp` are the entry's current ones (after a migration gave it new
    /// ids), every other member kept as written. Does nothing for other entries.
    pub(crate) fn rehead_unparsed(&mut self) {
        let (id, parent_id, timestamp) = (
            self.id.clone(),
            self.parent_id.clone(),
            self.timestamp.clone(),
        );
        let fields = self.fields_mut();
        let Some(line) = &fields.unparsed else {
            return;
        };
        let Ok(bytes) = line.bytes() else {
            return;
        };
        let Some(text) = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|line| reheaded(line, &id, parent_id.as_deref(), &timestamp))
        else {
            return;
        };
        let end = text.len();
        fields.unparsed = Some(RawSpan {
            src: LineSource::memory(text.into_bytes()),
            start: 0,
            end,
            type_name: line.type_name.clone(),
            head: head_hash(&id, parent_id.as_deref(), &timestamp),
        });
    }
}
