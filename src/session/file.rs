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
//! In a version 3 file only each line's `type`, `id`, `parentId` and `timestamp` are read at
//! open, by a scanner that looks at the line's first bytes (`entry/head.rs`); the typed body
//! is parsed on first use ([`Entry::kind`]). A small file is read into one buffer and each
//! line keeps a span of it; a large one (`stream.rs`) is read through a reused buffer and
//! each line keeps its offsets in the open file, read again when its body is needed, so
//! opening costs about what `wc -l` costs and memory about the entries' headers. A body that
//! does not parse is found when it is used: the entry is then kept as an unknown one, its line
//! written back as it was. Versions 1 and 2, and lines whose header fields have an unusual
//! shape or that are cut short, are parsed whole at open, as before.
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
//! Any tool that writes a session file should follow this protocol, on the file itself: the
//! path with every symlink resolved, so that every name of one file shares one lock and a
//! rewrite replaces the file, not a link to it.
//! 1. Take an exclusive advisory lock (`flock`-style, `std::fs::File::lock`) on the sidecar
//!    `.<file name>.lock` in the same directory (created if missing, never renamed or
//!    deleted, so rewrites of the session file do not invalidate it), then on the session
//!    file itself, checking that the path still names the inode locked (else lock the file it
//!    names now). The second lock is on the inode, so hard links of one file share it; a file
//!    with more than one link is never rewritten (a rename would split its names).
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
//!
//! # Where the code is
//! This file holds the types and the in-memory session (entries, leaf, paths, appends and
//! navigation), written once for every backend; `store` is the storage seam (the `Store`
//! trait: refresh, write, replace, load the rest), `load` turns bytes into entries, `cursor`
//! is how far they have been read, `migrate` lifts versions 1 and 2 to 3, `paths` keeps the
//! last path walked, `disk` is the file backend (every file-system call: create, open, the
//! lock, appends, rewrites), `fork` makes new sessions from a session (in a file, or in a
//! [`crate::session::catalog::Catalog`]), `stream` reads large files without copying them and
//! `partial` lets a stored session be opened with only what the context at its leaf needs.
//! The PostgreSQL backend is `session::postgres`, all of it: this folder imports nothing of it.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::context::{ContextOptions, SessionContext, visit_context};
use super::entry::{BranchSummaryEntry, CURRENT_SESSION_VERSION, Entry, EntryKind, SessionHeader};
use super::ids;
use super::message::{AgentMessage, Extra};
use super::tree::Tree;

use cursor::DiskState;

pub use fork::Destination;
pub(crate) use partial::{ContextDigest, SeqLine};
pub(in crate::session) use store::{Build, Edit, Line, Store};

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

impl CreateOptions {
    /// The header of a new session in `cwd` (version 3, created now), with these options' id
    /// (else a new one), title and parent; every backend writes it first.
    pub(in crate::session) fn into_header(self, cwd: &str) -> SessionHeader {
        SessionHeader {
            version: Some(CURRENT_SESSION_VERSION),
            id: self.id.unwrap_or_else(ids::new_session_id),
            title: self.title,
            timestamp: ids::now_iso(),
            cwd: cwd.to_owned(),
            parent_session: self.parent_session,
            extra: Default::default(),
            title_line: None,
        }
    }
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
    /// A FIFO, directory, device or socket: never opened for reading or writing.
    #[error("{} is a {kind}, not a regular file", path.display())]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The session database failed (unreachable, restarting, timed out); the message names it
    /// without its password. Nothing was written.
    #[error("{0}")]
    Storage(String),
    /// A write expected the leaf at `expected` but found it at `actual` once it held the
    /// writers' lock (another writer, maybe another process, appended first). Nothing was
    /// written.
    #[error("the session's leaf moved (expected {}, found {})", expected.as_deref().unwrap_or("none"), actual.as_deref().unwrap_or("none"))]
    LeafMoved {
        expected: Option<String>,
        actual: Option<String>,
    },
}

pub type Result<T, E = SessionError> = std::result::Result<T, E>;

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

/// A step of loading a session, reported while the load runs (see
/// [`Session::open_reporting`]), so a client can be shown progress on a large file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadStep {
    /// Reading the file, `bytes` long.
    Reading { bytes: u64 },
    /// Parsing the lines of `bytes` of file.
    Parsing { bytes: u64 },
    /// Migrating a version 1 or 2 file in memory (nothing is written).
    Migrating { from_version: u64 },
    /// Linking `entries` entries into the tree.
    Linking { entries: u64 },
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

/// An open session file: header, entries in file order, and the current leaf.
#[derive(Debug)]
pub struct Session {
    /// The name the file was opened or created by, as given (what clients see).
    path: PathBuf,
    /// The file itself: `path` with every symlink resolved. Every file-system call uses it,
    /// so two names of one file share one lock and a rewrite replaces the file, not a link.
    file: PathBuf,
    header: SessionHeader,
    /// Every entry in file order, `compactd_leaf` markers and duplicate ids included.
    entries: Vec<Entry>,
    /// id -> index of the first entry with that id.
    index: index::IdIndex,
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
    /// The last root→entry path walked, reused and extended by later walks.
    paths: paths::Paths,
    /// Where the lines live (see `store.rs`).
    store: Box<dyn store::Store>,
    /// Set when only part of a stored session is loaded (see `partial.rs`).
    partial: Option<partial::Partial>,
    /// Two entries share an id (the first one wins): opening must read everything.
    duplicate_ids: bool,
    /// What the last digest computed can spare the next one (see `partial.rs`).
    digest_memo: std::sync::Mutex<Option<partial::DigestMemo>>,
    /// The blob store of the size controls (`None`: no home directory; nothing is moved out).
    blobs: Option<super::size_controls::BlobStore>,
}

impl Session {
    /// A session of `header` with no entries yet, read up to `disk`, its lines in `store`:
    /// what creating a file and loading one start from.
    fn empty(
        path: PathBuf,
        file: PathBuf,
        header: SessionHeader,
        disk: DiskState,
        lazy: bool,
        store: Box<dyn store::Store>,
    ) -> Session {
        Session {
            path,
            file,
            header,
            entries: Vec::new(),
            index: Default::default(),
            leaf: None,
            file_leaf: None,
            raw_lines: Vec::new(),
            needs_rewrite: false,
            disk,
            sync: SyncPolicy::default(),
            lazy,
            revision: next_revision(),
            paths: Default::default(),
            store,
            partial: None,
            duplicate_ids: false,
            digest_memo: Default::default(),
            blobs: super::size_controls::default_store(),
        }
    }
}

/// The next value of [`Session::revision`]; shared by every session of the process so a
/// value is never reused, not even after a reload replaces a session whole.
fn next_revision() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Session {
    /// Sets whether appends are fsynced.
    pub fn set_sync_policy(&mut self, sync: SyncPolicy) {
        self.sync = sync;
    }

    /// Where images and the full text of truncated strings go (`storage.blobDir`).
    pub fn set_blob_store(&mut self, store: Option<super::size_controls::BlobStore>) {
        self.blobs = store;
    }

    /// `new` with the size controls applied (DESIGN §2): blobs are in the store, synced, when
    /// this returns, before any line refers to them.
    pub(crate) fn controlled(&self, new: Vec<Entry>) -> Result<Vec<Entry>> {
        let Some(store) = &self.blobs else {
            return Ok(new);
        };
        new.into_iter()
            .map(|e| {
                super::size_controls::control_entry(&e, store)
                    .map(|c| c.unwrap_or(e))
                    .map_err(|source| SessionError::Io {
                        path: store.dir().to_path_buf(),
                        source,
                    })
            })
            .collect()
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
    /// in trees or paths) and later entries with a duplicate id. On a partly loaded stored
    /// session, only the loaded ones: call [`Session::load_whole`] first.
    pub fn entries(&self) -> &[Entry] {
        debug_assert!(
            self.partial.is_none(),
            "entries() of a partly loaded session"
        );
        &self.entries
    }

    /// The (first) entry with this id.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.index.get(id).map(|&i| &self.entries[i])
    }

    /// Where the entry `id` is in [`Self::entries`] (the first, if a broken file repeats it).
    pub fn position(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// Whether the next write rewrites the whole file (a migrated version 1 or 2 file, or
    /// one that vanished) rather than appending to it: a pass over every entry.
    pub fn rewrites_on_next_write(&self) -> bool {
        self.needs_rewrite
    }

    /// The current leaf; `None` before the first entry or after `move_leaf(None)`.
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
            Some(&i) => {
                let indices = self.path_indices(i);
                indices.iter().map(|&i| &self.entries[i]).collect()
            }
            None => Vec::new(),
        }
    }

    /// The root→`entries[end]` path as indices (see [`paths::Paths`]).
    fn path_indices(&self, end: usize) -> Arc<Vec<usize>> {
        self.paths.indices(
            &self.entries,
            end,
            |child, p| self.parent_index(child, p),
            || self.walk_indices(end),
        )
    }

    /// The tree of all entries (markers hidden). A partly loaded stored session must be
    /// loaded whole first ([`Session::load_whole`]).
    pub fn tree(&self) -> Tree<'_> {
        debug_assert!(self.partial.is_none(), "tree() of a partly loaded session");
        Tree::new(&self.entries)
    }

    /// The LLM context at the current leaf (spec §3.1).
    pub fn context(&self) -> SessionContext {
        let (mut messages, mut entry_ids) = (Vec::new(), Vec::new());
        let mut ctx = self.visit_context(|id, m| {
            messages.push(m);
            entry_ids.push(id.to_owned());
        });
        ctx.messages = messages;
        ctx.entry_ids = entry_ids;
        ctx
    }

    /// [`Session::context`] one message at a time (see [`visit_context`]): `visit` gets each
    /// message with its entry's id, and the context returned has no messages. What counts a
    /// context of a million messages without holding it.
    pub fn visit_context(&self, visit: impl FnMut(&str, AgentMessage)) -> SessionContext {
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
        let indices = self.path_indices(start);
        let path: Vec<&Entry> = indices.iter().map(|&i| &self.entries[i]).collect();
        let state = self.paths.branch_state(start, &path);
        let options = ContextOptions {
            blob_dir: self.blobs.as_ref().map(|b| b.dir().to_path_buf()),
        };
        visit_context(&path, &state, &options, visit)
    }

    /// The context's state at the leaf (thinking level, models, mode, rules), without its
    /// messages (nor `missing_blobs`, which only reading the messages finds).
    pub fn context_state(&self) -> SessionContext {
        let Some(start) = self
            .leaf
            .as_deref()
            .and_then(|l| self.index.get(l).copied())
            .or(self.entries.len().checked_sub(1))
            .filter(|_| self.leaf.is_some())
        else {
            return SessionContext::default();
        };
        let indices = self.path_indices(start);
        let path: Vec<&Entry> = indices.iter().map(|&i| &self.entries[i]).collect();
        let state = self.paths.branch_state(start, &path);
        // No messages: an empty path with the state found on the real one.
        let state = state.without_messages();
        visit_context(&[], &state, &ContextOptions::default(), |_, _| {})
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
    /// entries), each the child of the previous, the first the child of the leaf, in one write.
    /// With `expected` set, checked under the writers' lock: fails with
    /// [`SessionError::LeafMoved`] (writing nothing) unless the leaf, once every other writer's
    /// lines are read, is still `expected`. A check before the write cannot see another
    /// process's append that lands between the check and the lock; this one can.
    pub fn append_expecting(
        &mut self,
        items: Vec<(EntryKind, Extra)>,
        expected: Option<Option<String>>,
    ) -> Result<&[Entry]> {
        let n = items.len();
        self.locked_write(|s| {
            if let Some(expected) = expected
                && expected.as_deref() != s.leaf_id()
            {
                return Err(SessionError::LeafMoved {
                    expected,
                    actual: s.leaf_id().map(str::to_owned),
                });
            }
            let (kinds, extras): (Vec<EntryKind>, Vec<Extra>) = items.into_iter().unzip();
            let mut chain = s.chain_at(s.leaf.clone(), kinds);
            for (entry, extra) in chain.iter_mut().zip(extras) {
                *entry.extra_mut() = extra;
            }
            Ok(chain)
        })?;
        Ok(&self.entries[self.entries.len() - n..])
    }

    /// Appends `entries`, built by the caller with their ids and parents (an undo's branch,
    /// `undo.rs`), in one write, checked under the writers' lock: fails with
    /// [`SessionError::LeafMoved`] (writing nothing) unless the leaf, once every other writer's
    /// lines are read, is still `expected`, and no id is taken meanwhile. The leaf moves to the
    /// last entry.
    pub fn append_planned(
        &mut self,
        entries: Vec<Entry>,
        expected: Option<String>,
    ) -> Result<&[Entry]> {
        let n = entries.len();
        self.locked_write(|s| {
            if expected.as_deref() != s.leaf_id() || entries.iter().any(|e| s.get(&e.id).is_some())
            {
                return Err(SessionError::LeafMoved {
                    expected,
                    actual: s.leaf_id().map(str::to_owned),
                });
            }
            Ok(entries)
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
            self.ensure_path(t)?;
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
            self.ensure_path(f)?;
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
        self.find(target)?;
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
        self.load_whole()?;
        self.needs_rewrite = true;
        self.locked_write(|_| Ok(Vec::new()))
    }

    fn rebuild_index(&mut self) {
        self.paths.clear();
        self.index.clear();
        self.duplicate_ids = false;
        for (i, e) in self.entries.iter().enumerate() {
            if !self.index.insert_new(&e.id, i) {
                self.duplicate_ids = true;
            }
        }
    }
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

mod cursor;
mod disk;
mod fork;
mod index;
mod load;
mod migrate;
mod partial;
mod paths;
mod store;
mod stream;

#[cfg(test)]
mod tests;
