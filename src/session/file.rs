//! The JSONL session file (spec §1): loading (versions 1 to 3, migrated in memory), appending,
//! atomic rewrites, the persisted leaf, and sharing one file between processes.
//!
//! # Loading
//! Line 1 must be a `type:"session"` header with a string `id`, otherwise the file is refused
//! ([`SessionError::InvalidHeader`]) and never written to. Every other line is lenient, like the
//! reference: a malformed line (bad JSON, invalid UTF-8, not an entry) is skipped and reported
//! in [`LoadReport`], but kept verbatim, so a later rewrite puts it back where it was. A torn
//! last line (no trailing `\n` and not parseable: a crash mid-append) is skipped and cut away
//! before the next append; an unterminated last line that does parse is kept and gets its `\n`
//! with the next append. Opening never writes; a migrated file is rewritten as version 3 by the
//! first write.
//!
//! A version 3 file is read once into one buffer; each line keeps a span of it and only its
//! `type`, `id`, `parentId` and `timestamp` are parsed at open. The typed body is parsed on
//! first use ([`Entry::kind`]), so opening costs about a header parse per line and memory
//! about the file size. Versions 1 and 2, and lines whose header fields have an unusual shape,
//! are parsed whole at open, as before.
//!
//! # The leaf
//! The reference derives the leaf from the last line of the file, so a navigation that appends
//! nothing is lost on restart (spec §13 #10). compactd appends a `compactd_leaf` marker after
//! such a navigation; its `parentId` is the new leaf (`null` after a reset). On load a marker
//! on the last line means "the leaf is my parent". The reference reads the marker as its leaf
//! and skips the unknown type when it builds context, so both agents see the same context.
//! Markers are never tree nodes or path entries, and new entries attach to the real leaf.
//!
//! # Two processes on one file
//! Any tool that writes a session file should follow this protocol:
//! 1. Take an exclusive advisory lock (`flock`-style, `std::fs::File::lock`) on the sidecar
//!    `.<file name>.lock` in the same directory (created if missing, never renamed or
//!    deleted, so rewrites of the session file do not invalidate it).
//! 2. Under the lock, compare the session file with what you have read: if its inode changed
//!    (another process rewrote it) or it shrank, reload it; if it grew, read the new lines.
//!    An unterminated last line is now known to be torn: cut it away if it does not parse,
//!    otherwise terminate it before appending.
//! 3. Write: an append is a single `write` of whole lines ending in `\n`; a rewrite goes to a
//!    temp file `.<file name>.<random>.tmp` in the same directory, is fsynced, renamed over the
//!    session file, and the directory is fsynced.
//! 4. Release the lock.
//!
//! Readers need no lock: appends only add complete lines (a reader ignores a trailing partial
//! line until it is complete) and rewrites are atomic renames. [`Session::refresh`] picks up
//! other writers' lines. After ingesting them the leaf follows the file, unless this process
//! moved its own leaf since it last synced with the file.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::context::{ContextOptions, SessionContext, context_of_path};
use super::entry::{BranchSummaryEntry, CURRENT_SESSION_VERSION, Entry, EntryKind, SessionHeader};
use super::ids;
use super::message::Extra;
use super::tree::{self, Tree};

/// Whether appends are fsynced. Rewrites are always fsynced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Leave flushing to the OS (the reference's behaviour).
    #[default]
    Os,
    /// `fsync` the data after every append.
    Fsync,
}

/// Options for [`Session::create`].
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// The session id; a fresh 16-hex snowflake when `None`.
    pub id: Option<String>,
    pub title: Option<String>,
    /// Lineage marker (an id or a path; opaque).
    pub parent_session: Option<String>,
    pub sync: SyncPolicy,
}

/// Why a session file could not be used. Messages name the file (and the line, when there is one).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session file {} not found", path.display())]
    NotFound { path: PathBuf },
    #[error("session file {} already exists", path.display())]
    AlreadyExists { path: PathBuf },
    /// The file is not a session; compactd never overwrites it.
    #[error("{}:{line}: invalid session header: {reason}", path.display())]
    InvalidHeader {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// The reference's exact text: clients match on it.
    #[error("Entry {0} not found")]
    EntryNotFound(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

pub type Result<T, E = SessionError> = std::result::Result<T, E>;

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SessionError + '_ {
    move |source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A line that was read but not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedLine {
    /// 1-based line number in the file.
    pub line: usize,
    pub reason: String,
}

/// An entry whose id an earlier entry already has; the earlier one is the one `get` finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateId {
    pub id: String,
    pub line: usize,
}

/// What loading a file found besides its entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Malformed lines: skipped, kept verbatim for rewrites.
    pub skipped: Vec<SkippedLine>,
    pub duplicate_ids: Vec<DuplicateId>,
    /// An unparseable unterminated last line, cut away by the next write.
    pub torn_tail: Option<SkippedLine>,
    /// The version the file had when it was migrated in memory (1 or 2).
    pub migrated_from: Option<u64>,
}

/// A malformed line, kept to be written back in place: it stood before `entries[before_entry]`.
#[derive(Clone, Debug)]
struct RawLine {
    before_entry: usize,
    bytes: Vec<u8>,
}

/// Identity of the file on disk, to notice another process's rename-based rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

fn file_id(meta: &fs::Metadata) -> Option<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// What this process knows of the file's bytes.
#[derive(Clone, Debug, Default)]
struct DiskState {
    /// Bytes read and used; ends at a line boundary, or at the end of an accepted
    /// unterminated last line (`missing_newline`).
    consumed: u64,
    missing_newline: bool,
    /// Lines read so far, for line numbers in reports.
    lines: usize,
    id: Option<FileId>,
}

/// How to treat a trailing line with no `\n`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TailMode {
    /// At open: keep it if it parses, else report it as torn.
    Open,
    /// Another writer may be mid-append: leave it for later.
    Wait,
    /// Under the write lock nobody is mid-append: it is torn for good.
    Locked,
}

/// What the next write must do about the end of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TailRepair {
    None,
    AddNewline,
    Truncate(u64),
}

/// An open session file: header, entries in file order, and the current leaf.
#[derive(Debug)]
pub struct Session {
    path: PathBuf,
    header: SessionHeader,
    /// Every entry in file order, `compactd_leaf` markers and duplicate ids included.
    entries: Vec<Entry>,
    /// id -> index of the first entry with that id.
    index: HashMap<String, usize>,
    leaf: Option<String>,
    /// The leaf the file implies as of the last read or write.
    file_leaf: Option<String>,
    raw_lines: Vec<RawLine>,
    /// Migrated in memory (or the file vanished): the next write rewrites the whole file.
    needs_rewrite: bool,
    disk: DiskState,
    sync: SyncPolicy,
    /// Lines are kept raw and parsed on first use (a version 3 file).
    lazy: bool,
    /// See [`Session::revision`].
    revision: u64,
    /// Entries of a large file parsed ahead on two threads, by line start offset, taken in
    /// order while the file is read; empty outside [`Session::parse`].
    preparsed: VecDeque<(usize, Entry)>,
    /// The last root→entry path walked, reused and extended by later walks.
    path_cache: std::sync::Mutex<PathCache>,
}

/// A root→`end` path as entry indices (markers excluded). Entries are only ever added after
/// existing ones, and a parent never changes, so the path of an entry stays valid until the
/// entries are replaced (a prune, a reload), which clears it.
#[derive(Debug, Default)]
struct PathCache {
    end: Option<usize>,
    indices: Arc<Vec<usize>>,
}

/// How far above a new end a walk looks for the cached one before walking to the root: an
/// append adds one or a few entries below the leaf.
const PATH_EXTENSION_STEPS: usize = 64;

/// The next value of [`Session::revision`]; shared by every session of the process so a
/// value is never reused, not even after a reload replaces a session whole.
fn next_revision() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Holds the sidecar lock; closing the file releases it.
struct LockGuard(File);

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl Session {
    /// Creates a new session file with its header (version 3) and no entries.
    ///
    /// The reference defers its first write until the session holds an assistant message, so
    /// an abandoned session leaves no file. compactd writes the header at once: the daemon
    /// hands the path to clients and other processes right away, and they must be able to open
    /// it; a header-only file loads in the reference as a session without entries.
    pub fn create(path: impl AsRef<Path>, cwd: &str, options: CreateOptions) -> Result<Session> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(io_err(&path))?;
        }
        let header = SessionHeader {
            version: Some(CURRENT_SESSION_VERSION),
            id: options.id.unwrap_or_else(ids::new_session_id),
            title: options.title,
            timestamp: ids::now_iso(),
            cwd: cwd.to_owned(),
            parent_session: options.parent_session,
            extra: Default::default(),
        };
        let mut line = header.to_value().to_string().into_bytes();
        line.push(b'\n');
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => SessionError::AlreadyExists { path: path.clone() },
                _ => io_err(&path)(e),
            })?;
        file.write_all(&line).map_err(io_err(&path))?;
        if options.sync == SyncPolicy::Fsync {
            file.sync_all().map_err(io_err(&path))?;
            // The new name must survive a power loss too, not only the bytes.
            sync_parent_dir(&path).map_err(io_err(&path))?;
        }
        let meta = file.metadata().map_err(io_err(&path))?;
        Ok(Session {
            path,
            header,
            entries: Vec::new(),
            index: HashMap::new(),
            leaf: None,
            file_leaf: None,
            raw_lines: Vec::new(),
            needs_rewrite: false,
            disk: DiskState {
                consumed: line.len() as u64,
                missing_newline: false,
                lines: 1,
                id: file_id(&meta),
            },
            sync: options.sync,
            lazy: true,
            revision: next_revision(),
            preparsed: VecDeque::new(),
            path_cache: Default::default(),
        })
    }

    /// Opens a session file without writing to it. Versions 1 and 2 are migrated in memory.
    pub fn open(path: impl AsRef<Path>) -> Result<(Session, LoadReport)> {
        let path = path.as_ref().to_path_buf();
        let (data, id) = read_whole(&path)?;
        let mut report = LoadReport::default();
        let session = Session::parse(path, Arc::new(data), id, &mut report)?;
        Ok((session, report))
    }

    /// Sets whether appends are fsynced.
    pub fn set_sync_policy(&mut self, sync: SyncPolicy) {
        self.sync = sync;
    }

    /// Whether appends are fsynced.
    pub fn sync_policy(&self) -> SyncPolicy {
        self.sync
    }

    fn parse(
        path: PathBuf,
        data: Arc<Vec<u8>>,
        id: Option<FileId>,
        report: &mut LoadReport,
    ) -> Result<Session> {
        let invalid = |reason: String| SessionError::InvalidHeader {
            path: path.clone(),
            line: 1,
            reason,
        };
        if data.is_empty() {
            return Err(invalid("the file is empty".into()));
        }
        let header_end = memchr::memchr(b'\n', &data);
        let header_bytes = &data[..header_end.unwrap_or(data.len())];
        let header_text = std::str::from_utf8(header_bytes)
            .map_err(|e| invalid(format!("invalid UTF-8: {e}")))?;
        let header_value: Value =
            serde_json::from_str(header_text).map_err(|e| invalid(format!("not JSON: {e}")))?;
        let header = SessionHeader::from_value(header_value)
            .ok_or_else(|| invalid("not a `type:\"session\"` object with a string `id`".into()))?;
        let mut session = Session {
            path,
            header,
            entries: Vec::new(),
            index: HashMap::new(),
            leaf: None,
            file_leaf: None,
            raw_lines: Vec::new(),
            needs_rewrite: false,
            disk: DiskState {
                consumed: header_end.map_or(data.len(), |e| e + 1) as u64,
                missing_newline: header_end.is_none(),
                lines: 1,
                id,
            },
            sync: SyncPolicy::default(),
            lazy: false,
            revision: next_revision(),
            preparsed: VecDeque::new(),
            path_cache: Default::default(),
        };
        // Only current-version entries are kept raw: migration rewrites ids and fields.
        session.lazy = session.header.version.unwrap_or(1) >= CURRENT_SESSION_VERSION;
        let mut parsed = Vec::new();
        let from = session.disk.consumed as usize;
        if session.lazy && data.len() >= parallel::PARALLEL_MIN_BYTES {
            session.preparsed = parallel::preparse(&data, from);
        }
        session.read_lines(&data, from, TailMode::Open, report, &mut parsed);
        session.preparsed = VecDeque::new();
        if let Some(from) = migrate(&mut session.header, &mut parsed) {
            report.migrated_from = Some(from);
            session.needs_rewrite = true;
        }
        session.entries.reserve_exact(parsed.len());
        session.index.reserve(parsed.len());
        for (entry, line) in parsed {
            session.push_entry(entry, line, report);
        }
        session.file_leaf = file_leaf_of(&session.entries);
        session.leaf = session.file_leaf.clone();
        Ok(session)
    }

    /// Splits `buf[from..]` (the bytes after `disk.consumed`) into lines and parses them;
    /// advances `disk`. Returns what the next write must do about an unterminated tail.
    fn read_lines(
        &mut self,
        buf: &Arc<Vec<u8>>,
        from: usize,
        mode: TailMode,
        report: &mut LoadReport,
        out: &mut Vec<(Entry, usize)>,
    ) -> TailRepair {
        let data = &buf[from..];
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
        match self.parse_span(buf, from + start, buf.len()) {
            Ok(entry) => {
                self.disk.lines = line;
                self.disk.consumed += tail.len() as u64;
                self.disk.missing_newline = true;
                out.push((entry, line));
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
        buf: &Arc<Vec<u8>>,
        start: usize,
        end: usize,
        report: &mut LoadReport,
        out: &mut Vec<(Entry, usize)>,
    ) {
        let bytes = &buf[start..end];
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let line = self.disk.lines;
        match self.parse_span(buf, start, end) {
            Ok(entry) => out.push((entry, line)),
            Err(reason) => {
                tracing::warn!(path = %self.path.display(), line, %reason, "skipping malformed line");
                report.skipped.push(SkippedLine { line, reason });
                self.raw_lines.push(RawLine {
                    before_entry: self.entries.len() + out.len(),
                    bytes: bytes.to_vec(),
                });
            }
        }
    }

    /// `buf[start..end]` as an entry: kept raw with only its header parsed when the file is
    /// current and the header is ordinary, otherwise parsed whole as before.
    fn parse_span(
        &mut self,
        buf: &Arc<Vec<u8>>,
        start: usize,
        end: usize,
    ) -> Result<Entry, String> {
        while self.preparsed.front().is_some_and(|(at, _)| *at < start) {
            self.preparsed.pop_front();
        }
        if self.lazy
            && self.preparsed.front().is_some_and(|(at, _)| *at == start)
            && let Some((_, entry)) = self.preparsed.pop_front()
        {
            return Ok(entry);
        }
        if self.lazy
            && let Ok(entry) = Entry::from_shared_line(buf, start, end)
        {
            return Ok(entry);
        }
        parse_line(&buf[start..end]).or_else(|reason| {
            // A whole object whose body `serde_json::Value` refuses (`1e400`, a lone surrogate)
            // is an entry, as when it is loaded lazily: unknown, its line kept as written.
            let entry = Entry::from_shared_line(buf, start, end).map_err(|()| reason)?;
            let _ = entry.kind();
            Ok(entry)
        })
    }

    fn push_entry(&mut self, entry: Entry, line: usize, report: &mut LoadReport) {
        self.revision = next_revision();
        if self.index.contains_key(&entry.id) {
            report.duplicate_ids.push(DuplicateId {
                id: entry.id.clone(),
                line,
            });
        } else {
            self.index.insert(entry.id.clone(), self.entries.len());
        }
        self.entries.push(entry);
    }

    /// Changes whenever the entries or the leaf change (an append, a navigation, a prune, other
    /// writers' lines read in, a reload) and never takes a value twice in a process, so a view
    /// computed at one revision stays valid while the revision is the same.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Drops every parsed body that can be parsed again from its line (see
    /// [`Entry::forget_parsed`]), so memory goes back to the file's size plus what is read next.
    pub fn release_parsed_bodies(&mut self) {
        self.entries.iter_mut().for_each(Entry::forget_parsed);
    }

    /// The file this session lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// Every entry in file order, including `compactd_leaf` markers (which clients never see
    /// in trees or paths) and later entries with a duplicate id.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The (first) entry with this id.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.index.get(id).map(|&i| &self.entries[i])
    }

    /// The current leaf; `None` before the first entry or after [`Session::reset_leaf`].
    pub fn leaf_id(&self) -> Option<&str> {
        self.leaf.as_deref()
    }

    /// The root→leaf path, markers excluded.
    pub fn path_to_leaf(&self) -> Vec<&Entry> {
        match &self.leaf {
            Some(leaf) => self.path_to(leaf),
            None => Vec::new(),
        }
    }

    /// The root→`id` path, markers excluded; empty for an unknown id.
    pub fn path_to(&self, id: &str) -> Vec<&Entry> {
        match self.index.get(id) {
            Some(&i) => self.path_from(i),
            None => Vec::new(),
        }
    }

    /// The root→`entries[end]` path. The last path walked is kept: asking for it again costs a
    /// copy of its indices, and asking for an entry a few steps below it (after an append)
    /// walks only those steps.
    fn path_from(&self, end: usize) -> Vec<&Entry> {
        let indices = self.path_indices(end);
        indices.iter().map(|&i| &self.entries[i]).collect()
    }

    fn path_indices(&self, end: usize) -> Arc<Vec<usize>> {
        let mut cache = self
            .path_cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if cache.end == Some(end) {
            return Arc::clone(&cache.indices);
        }
        let lookup = |p: &str| self.index.get(p).copied();
        let indices = match cache.end.and_then(|old| self.extension(old, end, lookup)) {
            Some(below) => {
                let mut path = Vec::with_capacity(cache.indices.len() + below.len());
                path.extend_from_slice(&cache.indices);
                path.extend(below.into_iter().rev());
                path
            }
            None => tree::walk_path_indices(&self.entries, end, lookup),
        };
        *cache = PathCache {
            end: Some(end),
            indices: Arc::new(indices),
        };
        Arc::clone(&cache.indices)
    }

    /// The non-marker entries from `end` up to (not including) `old`, newest first, when `old`
    /// is at most [`PATH_EXTENSION_STEPS`] above `end`.
    fn extension(
        &self,
        old: usize,
        end: usize,
        lookup: impl Fn(&str) -> Option<usize>,
    ) -> Option<Vec<usize>> {
        let mut below = Vec::new();
        let mut current = end;
        for _ in 0..PATH_EXTENSION_STEPS {
            if current == old {
                return Some(below);
            }
            let entry = &self.entries[current];
            if !tree::is_marker(entry) {
                below.push(current);
            }
            current = entry.parent_id.as_deref().and_then(&lookup)?;
        }
        None
    }

    /// Forgets the cached path; for when entries are replaced rather than added.
    fn clear_path_cache(&mut self) {
        *self
            .path_cache
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = PathCache::default();
    }

    /// The tree of all entries (markers hidden).
    pub fn tree(&self) -> Tree<'_> {
        Tree::new(&self.entries)
    }

    /// The LLM context at the current leaf (spec §3.1).
    pub fn context(&self) -> SessionContext {
        if self.leaf.is_none() {
            return SessionContext::default();
        }
        // An unknown leaf falls back to the last entry, as `build_session_context` does.
        let start = self
            .leaf
            .as_deref()
            .and_then(|l| self.index.get(l).copied())
            .or(self.entries.len().checked_sub(1));
        let Some(start) = start else {
            return SessionContext::default();
        };
        let path = self.path_from(start);
        context_of_path(&path, &ContextOptions::default())
    }

    /// Appends an entry at the leaf and moves the leaf to it.
    pub fn append(&mut self, kind: EntryKind) -> Result<&Entry> {
        let n = self.append_many(vec![kind])?.len();
        debug_assert_eq!(n, 1);
        // Cannot fail: append_many just pushed one entry.
        Ok(self.entries.last().expect("an entry was appended"))
    }

    /// Appends a chain of entries at the leaf in one write; the leaf moves to the last.
    pub fn append_many(&mut self, kinds: Vec<EntryKind>) -> Result<&[Entry]> {
        let n = kinds.len();
        self.locked_write(|s| Ok(s.chain_at(s.leaf.clone(), kinds)))?;
        Ok(&self.entries[self.entries.len() - n..])
    }

    /// Appends entries with extra top-level fields (kept as given, e.g. a client's raw
    /// entries), each the child of the previous; the first is the child of the leaf.
    pub fn append_with_extra(&mut self, items: Vec<(EntryKind, Extra)>) -> Result<&[Entry]> {
        let n = items.len();
        self.locked_write(|s| {
            let (kinds, extras): (Vec<EntryKind>, Vec<Extra>) = items.into_iter().unzip();
            let mut chain = s.chain_at(s.leaf.clone(), kinds);
            for (entry, extra) in chain.iter_mut().zip(extras) {
                *entry.extra_mut() = extra;
            }
            Ok(chain)
        })?;
        Ok(&self.entries[self.entries.len() - n..])
    }

    /// New entries linked into a chain starting below `parent`, with fresh ids.
    fn chain_at(&self, mut parent: Option<String>, kinds: Vec<EntryKind>) -> Vec<Entry> {
        let mut fresh: HashSet<String> = HashSet::new();
        let mut out = Vec::with_capacity(kinds.len());
        for kind in kinds {
            let id = ids::new_entry_id(|c| self.index.contains_key(c) || fresh.contains(c));
            fresh.insert(id.clone());
            let is_marker = matches!(kind, EntryKind::LeafMove);
            out.push(Entry::new(id.clone(), parent.clone(), ids::now_iso(), kind));
            if !is_marker {
                parent = Some(id);
            }
        }
        out
    }

    /// Moves the leaf to `target` (`None`: no leaf, the next entry is a new root) and persists
    /// the move with a `compactd_leaf` marker unless the file already implies that leaf.
    pub fn move_leaf(&mut self, target: Option<&str>) -> Result<()> {
        if let Some(t) = target {
            self.visible(t)?;
        }
        let target = target.map(str::to_owned);
        self.locked_write(|s| {
            if s.file_leaf == target {
                return Ok(Vec::new());
            }
            let marker = Entry::new(
                ids::new_entry_id(|c| s.index.contains_key(c)),
                target.clone(),
                ids::now_iso(),
                EntryKind::LeafMove,
            );
            Ok(vec![marker])
        })?;
        self.leaf = target;
        self.revision = next_revision();
        Ok(())
    }

    /// Moves the leaf to an existing entry. Throws `Entry <id> not found` for unknown ids.
    pub fn branch(&mut self, id: &str) -> Result<()> {
        self.move_leaf(Some(id))
    }

    /// Clears the leaf: the next entry becomes a new root.
    pub fn reset_leaf(&mut self) -> Result<()> {
        self.move_leaf(None)
    }

    /// Appends a `branch_summary` as a child of `from` (a new root when `None`, with
    /// `fromId: "root"`) and makes it the leaf (spec §6.4 step 7).
    pub fn branch_with_summary(
        &mut self,
        from: Option<&str>,
        summary: impl Into<String>,
        details: Option<Value>,
        from_extension: Option<bool>,
    ) -> Result<&Entry> {
        if let Some(f) = from {
            self.visible(f)?;
        }
        let kind = EntryKind::BranchSummary(BranchSummaryEntry {
            from_id: from.unwrap_or("root").to_owned(),
            summary: summary.into(),
            details,
            from_extension,
            extra: Default::default(),
        });
        let parent = from.map(str::to_owned);
        self.locked_write(|s| Ok(s.chain_at(parent, vec![kind])))?;
        // Cannot fail: one entry was just appended.
        Ok(self.entries.last().expect("an entry was appended"))
    }

    /// Sets (`Some`, non-empty) or clears (`None` or empty) the label of `target` by appending
    /// a `label` entry. Throws `Entry <id> not found` for unknown targets.
    pub fn set_label(&mut self, target: &str, label: Option<&str>) -> Result<&Entry> {
        self.visible(target)?;
        self.append(EntryKind::Label {
            target_id: target.to_owned(),
            label: label.filter(|l| !l.is_empty()).map(str::to_owned),
        })
    }

    /// `Ok` when `id` names an entry clients can see (not a marker).
    fn visible(&self, id: &str) -> Result<&Entry> {
        match self.get(id) {
            Some(e) if !e.is_leaf_move() => Ok(e),
            _ => Err(SessionError::EntryNotFound(id.to_owned())),
        }
    }

    /// Rewrites the whole file atomically as version 3 (after ingesting other writers' lines).
    pub fn rewrite(&mut self) -> Result<()> {
        self.needs_rewrite = true;
        self.locked_write(|_| Ok(Vec::new()))
    }

    /// Lets `f` change the entries (e.g. pruning), then rewrites the file atomically. The leaf
    /// stays if its entry survives, otherwise it falls back to what the file implies.
    pub fn replace_entries(&mut self, f: impl FnOnce(&mut Vec<Entry>)) -> Result<()> {
        let _lock = self.lock()?;
        self.sync_from_disk(TailMode::Locked)?;
        let before = (self.entries.clone(), self.leaf.clone());
        f(&mut self.entries);
        self.revision = next_revision();
        self.rebuild_index();
        if self
            .leaf
            .as_ref()
            .is_some_and(|l| !self.index.contains_key(l))
        {
            self.leaf = file_leaf_of(&self.entries);
        }
        if let Err(e) = self.write_all_atomically() {
            (self.entries, self.leaf) = before;
            self.revision = next_revision();
            self.rebuild_index();
            return Err(e);
        }
        Ok(())
    }

    fn rebuild_index(&mut self) {
        self.clear_path_cache();
        self.index.clear();
        for (i, e) in self.entries.iter().enumerate() {
            self.index.entry(e.id.clone()).or_insert(i);
        }
    }

    /// Reads what other processes appended (or reloads after their rewrite) without writing.
    /// Returns how many entries arrived.
    pub fn refresh(&mut self) -> Result<usize> {
        let before = self.entries.len();
        let reloaded = self.sync_from_disk(TailMode::Wait)?.1;
        Ok(if reloaded {
            self.entries.len()
        } else {
            self.entries.len() - before
        })
    }

    fn lock(&self) -> Result<LockGuard> {
        let lock_path = sidecar(&self.path, ".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        file.lock().map_err(io_err(&lock_path))?;
        Ok(LockGuard(file))
    }

    /// Under the lock: ingests the file's new lines, builds new entries with `build`, writes
    /// them (an append, or a full rewrite when one is due), then commits them to memory.
    fn locked_write(&mut self, build: impl FnOnce(&Self) -> Result<Vec<Entry>>) -> Result<()> {
        let _lock = self.lock()?;
        let (repair, _) = self.sync_from_disk(TailMode::Locked)?;
        let new = build(self)?;
        if self.needs_rewrite {
            let n = self.entries.len();
            let leaves = (self.leaf.clone(), self.file_leaf.clone());
            self.commit(new);
            if let Err(e) = self.write_all_atomically() {
                self.entries.truncate(n);
                self.revision = next_revision();
                self.rebuild_index();
                (self.leaf, self.file_leaf) = leaves;
                return Err(e);
            }
            return Ok(());
        }
        if new.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        if repair == TailRepair::AddNewline {
            bytes.push(b'\n');
        }
        for e in &new {
            bytes.extend_from_slice(e.to_line().as_bytes());
            bytes.push(b'\n');
        }
        let mut file = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(io_err(&self.path))?;
        if let TailRepair::Truncate(len) = repair {
            file.set_len(len).map_err(io_err(&self.path))?;
        }
        file.seek(SeekFrom::End(0)).map_err(io_err(&self.path))?;
        file.write_all(&bytes).map_err(io_err(&self.path))?;
        if self.sync == SyncPolicy::Fsync {
            file.sync_data().map_err(io_err(&self.path))?;
        }
        self.disk.consumed = file.stream_position().map_err(io_err(&self.path))?;
        self.disk.missing_newline = false;
        self.disk.lines += new.len();
        self.commit(new);
        Ok(())
    }

    /// Adds written entries to memory; the leaf becomes what the file now implies.
    fn commit(&mut self, new: Vec<Entry>) {
        if new.is_empty() {
            return;
        }
        let mut ignored = LoadReport::default();
        for e in new {
            self.push_entry(e, 0, &mut ignored);
        }
        self.file_leaf = file_leaf_of(&self.entries);
        self.leaf = self.file_leaf.clone();
    }

    /// Brings memory up to date with the file. Returns the tail repair a write must do, and
    /// whether the file was reloaded whole.
    fn sync_from_disk(&mut self, mode: TailMode) -> Result<(TailRepair, bool)> {
        let meta = match fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Deleted under us: the next write puts back everything we hold.
                self.needs_rewrite = true;
                return Ok((TailRepair::None, false));
            }
            Err(e) => return Err(io_err(&self.path)(e)),
        };
        let replaced = file_id(&meta) != self.disk.id;
        if replaced || meta.len() < self.disk.consumed {
            self.reload()?;
            let repair = if self.disk.missing_newline {
                TailRepair::AddNewline
            } else {
                TailRepair::None
            };
            return Ok((repair, true));
        }
        let mut data = Vec::new();
        if meta.len() > self.disk.consumed {
            let mut file = File::open(&self.path).map_err(io_err(&self.path))?;
            file.seek(SeekFrom::Start(self.disk.consumed))
                .map_err(io_err(&self.path))?;
            file.read_to_end(&mut data).map_err(io_err(&self.path))?;
        }
        let mut report = LoadReport::default();
        let mut parsed = Vec::new();
        let data = Arc::new(data);
        let repair = self.read_lines(&data, 0, mode, &mut report, &mut parsed);
        if !parsed.is_empty() {
            for (e, line) in parsed {
                self.push_entry(e, line, &mut report);
            }
            self.follow_file();
        }
        Ok((repair, false))
    }

    /// After ingesting: the leaf follows the file unless it was moved here since the last sync.
    fn follow_file(&mut self) {
        let new_file_leaf = file_leaf_of(&self.entries);
        if self.leaf == self.file_leaf {
            self.leaf = new_file_leaf.clone();
        }
        self.file_leaf = new_file_leaf;
    }

    /// Re-reads the whole file after another process replaced it.
    fn reload(&mut self) -> Result<()> {
        let (data, id) = read_whole(&self.path)?;
        let mut report = LoadReport::default();
        let fresh = Session::parse(self.path.clone(), Arc::new(data), id, &mut report)?;
        let moved_here = self.leaf != self.file_leaf;
        let keep_leaf = self.leaf.clone().filter(|l| fresh.index.contains_key(l));
        let sync = self.sync;
        *self = fresh;
        self.sync = sync;
        if moved_here && keep_leaf.is_some() {
            self.leaf = keep_leaf;
        }
        self.revision = next_revision();
        Ok(())
    }

    /// Writes header, entries and kept malformed lines to a temp file and renames it over the
    /// session file. Caller holds the lock.
    fn write_all_atomically(&mut self) -> Result<()> {
        let mut header = self.header.clone();
        if header.version.is_none_or(|v| v < CURRENT_SESSION_VERSION) {
            header.version = Some(CURRENT_SESSION_VERSION);
        }
        let mut out = Vec::new();
        let mut lines = 1;
        out.extend_from_slice(header.to_value().to_string().as_bytes());
        out.push(b'\n');
        let mut raw = self.raw_lines.iter().peekable();
        for (i, e) in self.entries.iter().enumerate() {
            while let Some(r) = raw.next_if(|r| r.before_entry <= i) {
                out.extend_from_slice(&r.bytes);
                out.push(b'\n');
                lines += 1;
            }
            out.extend_from_slice(e.to_line().as_bytes());
            out.push(b'\n');
            lines += 1;
        }
        for r in raw {
            out.extend_from_slice(&r.bytes);
            out.push(b'\n');
            lines += 1;
        }
        remove_stale_temp_files(&self.path);
        let id = atomic_write(&self.path, &out).map_err(io_err(&self.path))?;
        self.header = header;
        self.needs_rewrite = false;
        self.disk = DiskState {
            consumed: out.len() as u64,
            missing_newline: false,
            lines,
            id,
        };
        self.file_leaf = file_leaf_of(&self.entries);
        Ok(())
    }
}

/// Reads the whole file once, with its identity.
fn read_whole(path: &Path) -> Result<(Vec<u8>, Option<FileId>)> {
    let mut file = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => SessionError::NotFound {
            path: path.to_path_buf(),
        },
        _ => io_err(path)(e),
    })?;
    let meta = file.metadata().map_err(io_err(path))?;
    let len = usize::try_from(meta.len()).unwrap_or(0);
    if len >= parallel::PARALLEL_MIN_BYTES {
        let data = parallel::read_in_two(&mut file, len).map_err(io_err(path))?;
        return Ok((data, file_id(&meta)));
    }
    let mut data = Vec::with_capacity(len);
    file.read_to_end(&mut data).map_err(io_err(path))?;
    Ok((data, file_id(&meta)))
}

/// One line to an entry, or why not.
fn parse_line(bytes: &[u8]) -> Result<Entry, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    Entry::from_value(value).map_err(|e| e.to_string())
}

/// The leaf the file implies: its last entry, or that entry's parent if it is a marker.
fn file_leaf_of(entries: &[Entry]) -> Option<String> {
    let last = entries.last()?;
    if last.is_leaf_move() {
        last.parent_id.clone()
    } else {
        Some(last.id.clone())
    }
}

/// `.<name><suffix>` next to `path`.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}{suffix}"))
}

/// Removes `.<name>.<hex>.tmp` files a crashed rewrite of `path` left behind. Only called
/// under the write lock, so no other writer is between its temp write and its rename.
fn remove_stale_temp_files(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(listing) = fs::read_dir(dir) else {
        return;
    };
    for entry in listing.flatten() {
        let file_name = entry.file_name();
        let file_name = file_name.to_string_lossy();
        let Some(middle) = file_name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".tmp"))
        else {
            continue;
        };
        if middle.len() == 16 && middle.bytes().all(|b| b.is_ascii_hexdigit()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Temp file in the same directory, fsync, rename over `path`, fsync the directory. Keeps the
/// permissions of the file it replaces.
fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<Option<FileId>> {
    let tmp = sidecar(path, &format!(".{:016x}.tmp", ids::random_u64()));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        if let Ok(meta) = fs::metadata(path) {
            file.set_permissions(meta.permissions())?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_parent_dir(path)?;
    Ok(file_id(&fs::metadata(path)?))
}

/// fsyncs the directory holding `path`, so a rename or a new name in it is durable.
fn sync_parent_dir(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Migrates entries of a version 1 or 2 file to version 3 in place (spec §1.5). Returns the
/// version migrated from, `None` when the file is already current.
fn migrate(header: &mut SessionHeader, entries: &mut [(Entry, usize)]) -> Option<u64> {
    let from = header.version.unwrap_or(1);
    if from >= CURRENT_SESSION_VERSION {
        return None;
    }
    if from < 2 {
        migrate_v1_ids(entries);
    }
    for (entry, _) in entries.iter_mut() {
        // Known `hookMessage`s already parse as `custom`; this catches ones kept as unknown.
        let (kind, extra) = entry.parts_mut();
        if let EntryKind::Unknown { type_name } = kind
            && type_name == "message"
            && let Some(Value::Object(msg)) = extra.get_mut("message")
            && msg.get("role").and_then(Value::as_str) == Some("hookMessage")
        {
            msg.insert("role".into(), Value::from("custom"));
        }
    }
    header.version = Some(CURRENT_SESSION_VERSION);
    Some(from)
}

/// v1 → v2: fresh ids, a linear chain in file order, `firstKeptEntryIndex` (an index into the
/// parsed lines *including the header*) → `firstKeptEntryId`.
fn migrate_v1_ids(entries: &mut [(Entry, usize)]) {
    let mut taken = HashSet::new();
    let new_ids: Vec<String> = entries
        .iter()
        .map(|_| {
            let id = ids::new_entry_id(|c| taken.contains(c));
            taken.insert(id.clone());
            id
        })
        .collect();
    let mut previous: Option<String> = None;
    for (i, (entry, _)) in entries.iter_mut().enumerate() {
        entry.id = new_ids[i].clone();
        entry.parent_id = previous.replace(new_ids[i].clone());
        if entry.type_name() != "compaction" {
            continue;
        }
        // A parsed compaction keeps unknown fields in its own `extra`; one kept as unknown
        // (wrong shape) has them in the entry's.
        let (kind, entry_extra) = entry.parts_mut();
        let (extra, kept_id) = match kind {
            EntryKind::Compaction(c) => (&mut c.extra, Some(&mut c.first_kept_entry_id)),
            _ => (entry_extra, None),
        };
        let Some(index) = extra.get("firstKeptEntryIndex").and_then(Value::as_u64) else {
            continue;
        };
        let Some(kept) = usize::try_from(index)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| new_ids.get(i))
        else {
            // Out of range: keep the old field rather than lose it.
            continue;
        };
        extra.remove("firstKeptEntryIndex");
        match kept_id {
            Some(id) => *id = kept.clone(),
            None => {
                extra.insert("firstKeptEntryId".into(), Value::from(kept.clone()));
            }
        }
    }
    // A line kept as written (its body does not parse) takes its new ids into its text.
    for (entry, _) in entries.iter_mut() {
        entry.rehead_unparsed();
    }
}

mod fork;
mod parallel;

#[cfg(test)]
mod tests;
