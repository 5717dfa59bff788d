//! From bytes to entries: the header, each line (kept raw and parsed lazily in a current
//! file), malformed lines and a torn tail reported and kept, duplicate ids noted. A session
//! is made by [`from_bytes`] (the whole file in memory, or a store's bytes) or [`streamed`]
//! (a large file, see `stream.rs`); reading more of it later (another writer's lines) goes
//! through the same [`LineReader`].

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use super::cursor::{DiskState, FileId, Loaded, TailMode, TailRepair};
use super::migrate::migrate;
use super::{
    DuplicateId, LoadReport, LoadStep, RawLine, Result, Session, SessionError, SkippedLine,
    file_leaf_of, next_revision, stream,
};
use crate::session::entry::{
    CURRENT_SESSION_VERSION, Entry, LineSource, SessionHeader, TitleLine, read_exact_at,
};

/// How much of a streamed file is read to find its header line; a longer header (a huge
/// title) makes the file be read whole instead.
const HEADER_READ_BYTES: usize = 64 << 10;

/// A session from the whole file's bytes, `data`, telling `progress` each [`LoadStep`] as it
/// starts.
pub(super) fn from_bytes(
    path: PathBuf,
    file: PathBuf,
    data: Arc<LineSource>,
    id: Option<FileId>,
    report: &mut LoadReport,
    progress: &dyn Fn(LoadStep),
) -> Result<Session> {
    let bytes = data.bytes();
    let mut session = with_header(path, file, bytes, id)?;
    let head_complete = !session.disk.missing_newline;
    let mut parsed = Loaded::default();
    let from = session.disk.consumed as usize;
    progress(LoadStep::Parsing {
        bytes: bytes.len() as u64,
    });
    session
        .reader()
        .read_lines(&data, from, TailMode::Open, report, &mut parsed);
    debug_assert!(head_complete || parsed.is_empty());
    finish_load(&mut session, parsed, report, progress);
    Ok(session)
}

/// A session read from `src`, the open file of `len` bytes, without copying it (see
/// `stream.rs`). `None` when the file is better read whole: its header line is long or
/// unterminated, or it is not a current file (older versions are parsed at once anyway).
pub(super) fn streamed(
    path: PathBuf,
    file: PathBuf,
    src: Arc<LineSource>,
    len: u64,
    id: Option<FileId>,
    report: &mut LoadReport,
    progress: &dyn Fn(LoadStep),
) -> std::io::Result<Option<Result<Session>>> {
    let LineSource::File(f) = &*src else {
        return Ok(None);
    };
    let mut first = vec![0u8; (len as usize).min(HEADER_READ_BYTES)];
    read_exact_at(f, &mut first, 0)?;
    let Some(head_end) = complete_head_end(&first) else {
        return Ok(None);
    };
    let mut session = match with_header(path, file, &first[..=head_end], id) {
        Ok(s) if s.lazy => s,
        Ok(_) => return Ok(None),
        Err(e) => return Ok(Some(Err(e))),
    };
    progress(LoadStep::Parsing { bytes: len });
    let (parts, end) = stream::scan_file(&src, session.disk.consumed, len)?;
    let mut tail = vec![0u8; (len - end) as usize];
    read_exact_at(f, &mut tail, end)?;
    let mut parsed = Loaded::default();
    let mut reader = session.reader();
    for part in parts {
        reader.take_part(part, report, &mut parsed);
    }
    reader.disk.consumed = end;
    reader.read_lines(
        &LineSource::memory(tail),
        0,
        TailMode::Open,
        report,
        &mut parsed,
    );
    finish_load(&mut session, parsed, report, progress);
    Ok(Some(Ok(session)))
}

/// A session with the header of `bytes` (the file's first line, or all of it) and no entries
/// yet.
fn with_header(path: PathBuf, file: PathBuf, bytes: &[u8], id: Option<FileId>) -> Result<Session> {
    let head = read_head(bytes).map_err(|(line, reason)| SessionError::InvalidHeader {
        path: path.clone(),
        line,
        reason,
    })?;
    let header = head.header;
    // Only current-version entries are kept raw: migration rewrites ids and fields.
    let lazy = header.version.unwrap_or(1) >= CURRENT_SESSION_VERSION;
    let disk = DiskState {
        consumed: head.end as u64,
        missing_newline: head.missing_newline,
        lines: head.lines,
        id,
    };
    let store = Box::new(super::store::NoStore);
    Ok(Session::empty(path, file, header, disk, lazy, store))
}

/// Migrates and indexes the loaded entries; the leaf is what the file implies.
fn finish_load(
    session: &mut Session,
    mut parsed: Loaded,
    report: &mut LoadReport,
    progress: &dyn Fn(LoadStep),
) {
    let version = session.header.version.unwrap_or(1);
    if version < CURRENT_SESSION_VERSION {
        progress(LoadStep::Migrating {
            from_version: version,
        });
    }
    if let Some(from) = migrate(&mut session.header, &mut parsed.entries, &parsed.lines) {
        report.migrated_from = Some(from);
        session.needs_rewrite = true;
    }
    progress(LoadStep::Linking {
        entries: parsed.len() as u64,
    });
    debug_assert!(session.entries.is_empty(), "a load starts from no entries");
    session.index.reserve(parsed.len());
    // The entries stay where they were read: copying them into a new vector cost a page fault
    // per 4 KiB of a large session's entries.
    let Loaded { entries, lines } = parsed;
    session.entries = entries;
    // A streamed load reserved generously (`stream::Part`); give back the address space.
    // Shrinking moves nothing.
    session.entries.shrink_to_fit();
    session.revision = next_revision();
    for (at, line) in lines.into_iter().enumerate() {
        session.index_entry(at, line, report);
    }
    session.file_leaf = file_leaf_of(&session.entries);
    session.leaf = session.file_leaf.clone();
}

/// Reads a session's lines on from where its [`DiskState`] stands: what the loader, the
/// large-file scanner and every store's refresh share. Borrows the parts of the session that
/// reading touches ([`Session::reader`]); the entries read go to a [`Loaded`], which the
/// caller adds.
pub(super) struct LineReader<'s> {
    /// The session's name, for warnings.
    path: &'s std::path::Path,
    disk: &'s mut DiskState,
    /// Lines are kept raw and parsed on first use (a version 3 file).
    lazy: bool,
    /// Malformed lines, kept to be written back in place.
    raw_lines: &'s mut Vec<RawLine>,
    /// Entries the session holds before those read now.
    known: usize,
}

impl Session {
    /// A session read from a store's bytes (a header line, then every line), named `name`: a
    /// stored session has no file, so `name` is also what stands for one.
    pub(in crate::session) fn from_stored(
        name: PathBuf,
        whole: Vec<u8>,
        report: &mut LoadReport,
    ) -> Result<Session> {
        from_bytes(
            name.clone(),
            name,
            LineSource::memory(whole),
            None,
            report,
            &|_| {},
        )
    }

    /// What reading more of this session's lines needs of it (see [`LineReader`]).
    pub(super) fn reader(&mut self) -> LineReader<'_> {
        LineReader {
            path: &self.path,
            disk: &mut self.disk,
            lazy: self.lazy,
            raw_lines: &mut self.raw_lines,
            known: self.entries.len(),
        }
    }

    pub(super) fn push_entry(&mut self, entry: Entry, line: usize, report: &mut LoadReport) {
        /// From this many entries on, a full vector grows by an eighth instead of doubling.
        const GENTLE_GROWTH_FROM: usize = 4096;
        self.revision = next_revision();
        // A loaded session's vector is full, so the first append after an open doubled it: on
        // a session of a million entries, 140 MB more for one entry (issue 35 item 7). Still
        // amortised constant time per append.
        let len = self.entries.len();
        if len == self.entries.capacity() && len >= GENTLE_GROWTH_FROM {
            self.entries.reserve_exact(len / 8);
        }
        self.entries.push(entry);
        self.index_entry(self.entries.len() - 1, line, report);
    }

    /// Adds `entries[at]`, read from `line`, to the id index; a duplicate id is reported.
    fn index_entry(&mut self, at: usize, line: usize, report: &mut LoadReport) {
        let id = &self.entries[at].id;
        if !self.index.insert_new(id, at) {
            self.duplicate_ids = true;
            report.duplicate_ids.push(DuplicateId {
                id: id.clone(),
                line,
            });
        }
    }
}

impl LineReader<'_> {
    /// Takes a scanned region's lines into `out`, numbering them on from `disk.lines`. The
    /// first region's vector becomes `out` and the next ones are moved onto its end, so no
    /// entry is copied twice.
    fn take_part(&mut self, part: stream::Part, report: &mut LoadReport, out: &mut Loaded) {
        let base = self.disk.lines;
        let stream::Part {
            mut entries,
            odd,
            lines,
        } = part;
        for line in &mut entries.lines {
            *line += base;
        }
        if odd.is_empty() {
            if out.is_empty() {
                *out = entries;
            } else {
                out.append(&mut entries);
            }
        } else {
            let mut entries = entries.into_iter().peekable();
            for (line, bytes) in odd {
                let line = base + line;
                while let Some((entry, l)) = entries.next_if(|(_, l)| *l < line) {
                    out.push(entry, l);
                }
                self.disk.lines = line;
                let n = bytes.len();
                self.take_line(&LineSource::memory(bytes), 0, n, report, out);
            }
            for (entry, l) in entries {
                out.push(entry, l);
            }
        }
        self.disk.lines = base + lines;
    }

    /// Splits `buf[from..]` (the bytes after `disk.consumed`) into lines and parses them;
    /// advances `disk`. Returns what the next write must do about an unterminated tail.
    pub(super) fn read_lines(
        &mut self,
        buf: &Arc<LineSource>,
        from: usize,
        mode: TailMode,
        report: &mut LoadReport,
        out: &mut Loaded,
    ) -> TailRepair {
        let data = &buf.bytes()[from..];
        let mut start = 0;
        let mut continues_line = self.disk.missing_newline && !data.is_empty();
        for end in memchr::memchr_iter(b'\n', data) {
            if !continues_line {
                self.disk.lines += 1;
            }
            continues_line = false;
            self.take_line(buf, from + start, from + end, report, out);
            start = end + 1;
        }
        if start > 0 {
            self.disk.missing_newline = false;
        }
        self.disk.consumed += start as u64;
        let tail = &data[start..];
        if tail.is_empty() {
            return if self.disk.missing_newline {
                TailRepair::AddNewline
            } else {
                TailRepair::None
            };
        }
        if mode == TailMode::Wait {
            return TailRepair::None;
        }
        let line = self.disk.lines + usize::from(!continues_line);
        match self.parse_span(buf, from + start, buf.bytes().len()) {
            Ok(entry) => {
                self.disk.lines = line;
                self.disk.consumed += tail.len() as u64;
                self.disk.missing_newline = true;
                out.push(entry, line);
                TailRepair::AddNewline
            }
            Err(_) if tail.iter().all(u8::is_ascii_whitespace) => {
                TailRepair::Truncate(self.disk.consumed)
            }
            Err(reason) => {
                tracing::warn!(path = %self.path.display(), line, %reason, "torn last line");
                report.torn_tail = Some(SkippedLine { line, reason });
                TailRepair::Truncate(self.disk.consumed)
            }
        }
    }

    fn take_line(
        &mut self,
        buf: &Arc<LineSource>,
        start: usize,
        end: usize,
        report: &mut LoadReport,
        out: &mut Loaded,
    ) {
        let bytes = &buf.bytes()[start..end];
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let line = self.disk.lines;
        match self.parse_span(buf, start, end) {
            Ok(entry) => out.push(entry, line),
            Err(reason) => {
                tracing::warn!(path = %self.path.display(), line, %reason, "skipping malformed line");
                report.skipped.push(SkippedLine { line, reason });
                self.raw_lines.push(RawLine {
                    before_entry: self.known + out.len(),
                    bytes: bytes.to_vec(),
                });
            }
        }
    }

    /// `buf[start..end]` as an entry: kept raw with only its header read when the file is
    /// current and the header is ordinary, otherwise parsed whole as before.
    fn parse_span(&self, buf: &Arc<LineSource>, start: usize, end: usize) -> Result<Entry, String> {
        if self.lazy
            && let Ok(entry) = Entry::from_shared_line(buf, start, end)
        {
            return Ok(entry);
        }
        parse_line(&buf.bytes()[start..end]).or_else(|reason| {
            // A whole object whose body `serde_json::Value` refuses (`1e400`, a lone surrogate)
            // is an entry, as when it is loaded lazily: unknown, its line kept as written.
            let entry = Entry::from_shared_line_checked(buf, start, end).map_err(|()| reason)?;
            let _ = entry.kind();
            Ok(entry)
        })
    }
}

/// One line to an entry, or why not.
pub(super) fn parse_line(bytes: &[u8]) -> Result<Entry, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    Entry::from_value(value).map_err(|e| e.to_string())
}

/// The head of a session file: the header, and the title line before it when there is one.
struct Head {
    header: SessionHeader,
    /// Bytes up to the first entry line (the head's last `\n` included).
    end: usize,
    /// The header line is the file's last and has no `\n`.
    missing_newline: bool,
    /// Lines the head takes: 1, or 2 with a title line.
    lines: usize,
}

/// Reads the head at the start of `bytes`; an error gives the 1-based line at fault and why.
fn read_head(bytes: &[u8]) -> std::result::Result<Head, (usize, String)> {
    if bytes.is_empty() {
        return Err((1, "the file is empty".into()));
    }
    let (first, first_end) = line_at(bytes, 0);
    let value = json_line(first).map_err(|reason| (1, reason))?;
    let title_line = TitleLine::from_line(first, &value);
    let (value, line, end, missing_newline) = match (&title_line, first_end) {
        (None, end) => (value, 1, end, end == bytes.len() && !bytes.ends_with(b"\n")),
        (Some(_), end) if end >= bytes.len() => {
            return Err((
                2,
                "the title line is not followed by a session header".into(),
            ));
        }
        (Some(_), start) => {
            let (second, end) = line_at(bytes, start);
            let value = json_line(second).map_err(|reason| (2, reason))?;
            (value, 2, end, end == bytes.len() && !bytes.ends_with(b"\n"))
        }
    };
    let mut header = SessionHeader::from_value(value).ok_or_else(|| {
        (
            line,
            "not a `type:\"session\"` object with a string `id`".to_owned(),
        )
    })?;
    header.title_line = title_line;
    Ok(Head {
        header,
        end,
        missing_newline,
        lines: line,
    })
}

/// The index of the head's last `\n` in `bytes`, when the head (a title line and the header,
/// or the header alone) ends inside them.
fn complete_head_end(bytes: &[u8]) -> Option<usize> {
    let first_end = memchr::memchr(b'\n', bytes)?;
    let titled = json_line(&bytes[..first_end])
        .is_ok_and(|value| TitleLine::from_line(&[], &value).is_some());
    if !titled {
        return Some(first_end);
    }
    memchr::memchr(b'\n', &bytes[first_end + 1..]).map(|i| first_end + 1 + i)
}

/// The line starting at `start` (without its `\n`) and where the next one starts.
fn line_at(bytes: &[u8], start: usize) -> (&[u8], usize) {
    match memchr::memchr(b'\n', &bytes[start..]) {
        Some(i) => (&bytes[start..start + i], start + i + 1),
        None => (&bytes[start..], bytes.len()),
    }
}

fn json_line(line: &[u8]) -> std::result::Result<Value, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("invalid UTF-8: {e}"))?;
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}
