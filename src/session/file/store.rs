//! The storage seam: what a session needs of the place its lines live. The in-memory session
//! (entries, index, leaf, paths, context, appends and navigation) is written once, in this
//! folder; a backend implements [`Store`]:
//!
//! | operation | file ([`FileStore`], `disk.rs`) | PostgreSQL (`Remote`, `session/postgres/store.rs`) |
//! |---|---|---|
//! | create, open (load) | a new file with its header; read the file | a session row; the rows the context at the leaf needs (`partial.rs`), or all |
//! | [`Store::refresh`] (watch) | new bytes, or the whole file after a rename | new rows, or all after a rewrite; skipped when the listener saw nothing |
//! | [`Store::write`] (lock, append) | one `write` under the sidecar `flock` | rows in one transaction holding the session row `FOR UPDATE` |
//! | [`Store::replace`] (lock, rewrite) | temp file, fsync, rename | replace the rows in one transaction |
//! | [`Store::load_rest`] | (always whole) | the rows before the loaded part |
//! | [`Store::follow`] | no signal: other writers are seen at the next refresh | a [`ChangeSignal`] rung by the database's notifications |
//!
//! Every backend holds the same lines, so the loader in `load.rs` turns either into entries.
//! The trait names no backend's types, and nothing in this folder imports one: PostgreSQL is
//! all in `session/postgres/`, which calls the steps below (and those of `partial.rs`) and is
//! never called back by name. So a third backend is one folder: a [`Store`], its
//! constructors (built with [`Session::from_stored`] and [`Session::set_store`]) and, if it
//! keeps sessions by id, a [`crate::session::catalog::Catalog`] (where new sessions, a fork's
//! among them, are made, opened and listed), which `backend::connect` returns.
//! The engine sees no backend: it calls [`Session`]'s methods, which call the session's store
//! through [`Session::with_store`], and a catalog's.

use std::fmt;
use std::path::Path;

use super::cursor::{Loaded, TailMode, TailRepair};
use super::{LoadReport, Result, Session, SessionError, file_leaf_of, next_revision};
use crate::session::changes::ChangeSignal;
use crate::session::entry::{CURRENT_SESSION_VERSION, Entry, EntryKind, LineSource, SessionHeader};

/// Builds the entries a write appends, under the writers' lock, from the session as it is
/// once every other writer's lines are read; an error writes nothing.
pub(crate) type Build<'a> = Box<dyn FnOnce(&Session) -> Result<Vec<Entry>> + 'a>;

/// Changes the entries before a rewrite (a prune).
pub(crate) type Edit<'a> = Box<dyn FnOnce(&mut Vec<Entry>) + 'a>;

/// A line of a session after its header, as a rewrite stores it.
#[derive(Clone, Copy, Debug)]
pub(in crate::session) enum Line<'a> {
    /// An entry's line.
    Entry(&'a Entry),
    /// A malformed line, kept verbatim.
    Kept(&'a [u8]),
}

/// Where a session's lines live, and how writers share them.
pub(crate) trait Store: fmt::Debug + Send + Sync {
    /// Takes in what other writers did since `session` last looked, without writing; returns
    /// how many entries arrived (all of them after a reload).
    fn refresh(&mut self, session: &mut Session) -> Result<usize>;

    /// Holding the writers' lock: takes in other writers' lines, builds the new entries with
    /// `build`, stores them (an append, or the whole session when a rewrite is due) and adds
    /// them to `session` (see [`Session::commit`]). On an error nothing is stored and
    /// `session` is as it was, other writers' lines aside.
    fn write(&mut self, session: &mut Session, build: Build<'_>) -> Result<()>;

    /// Holding the writers' lock: takes in other writers' lines, lets `edit` change the
    /// entries, then replaces the stored session with them at once. The leaf stays if its
    /// entry survives, otherwise it falls back to what the store implies. On an error the
    /// entries are as they were.
    fn replace(&mut self, session: &mut Session, edit: Edit<'_>) -> Result<()>;

    /// Reads the rest of a partly loaded session (see `partial.rs`); a store that always
    /// loads whole has nothing to do.
    fn load_rest(&mut self, session: &mut Session) -> Result<()> {
        let _ = session;
        Ok(())
    }

    /// Starts keeping the entries other writers add (see [`Store::take_arrivals`]) and
    /// returns the signal that wakes when the store says the session changed; `None` when
    /// other writers are only seen at the next refresh.
    fn follow(&mut self) -> Option<ChangeSignal> {
        None
    }

    /// The entries other writers added since the last call, when followed.
    fn take_arrivals(&mut self) -> Vec<Entry> {
        Vec::new()
    }
}

/// Stands in for a session's store until its constructor sets one (the loader makes sessions
/// for every backend), and while one of the store's operations runs (the store is taken out
/// of the session for the call, so both can be borrowed mutably; a store does not call back
/// into its session's store).
#[derive(Debug)]
pub(super) struct NoStore;

impl NoStore {
    fn error<T>() -> Result<T> {
        Err(SessionError::Storage(
            "the session has no store (its constructor did not set one, or the store called itself)".to_owned(),
        ))
    }
}

impl Store for NoStore {
    fn refresh(&mut self, _: &mut Session) -> Result<usize> {
        NoStore::error()
    }

    fn write(&mut self, _: &mut Session, _: Build<'_>) -> Result<()> {
        NoStore::error()
    }

    fn replace(&mut self, _: &mut Session, _: Edit<'_>) -> Result<()> {
        NoStore::error()
    }

    fn load_rest(&mut self, _: &mut Session) -> Result<()> {
        NoStore::error()
    }
}

impl Session {
    /// Runs `f` with this session's store and the session, both borrowed mutably.
    pub(crate) fn with_store<T>(&mut self, f: impl FnOnce(&mut dyn Store, &mut Session) -> T) -> T {
        let mut store = std::mem::replace(&mut self.store, Box::new(NoStore));
        let out = f(&mut *store, self);
        // `f` may have replaced the session whole (a reload): the store goes back into it.
        self.store = store;
        out
    }

    /// Puts this session in `store` (a constructor's last step).
    pub(crate) fn set_store(&mut self, store: Box<dyn Store>) {
        self.store = store;
    }

    /// Starts keeping the entries other writers add (see [`Session::take_arrivals`]) and
    /// returns the signal that wakes when the store says the session changed, so a follower
    /// can refresh at once. `None` for a file, whose other writers are seen at the next
    /// refresh.
    pub fn follow_changes(&mut self) -> Option<ChangeSignal> {
        self.store.follow()
    }

    /// The entries other writers added since the last call (markers left out), in the order
    /// they arrived; empty unless [`Session::follow_changes`] was called.
    pub fn take_arrivals(&mut self) -> Vec<Entry> {
        self.store.take_arrivals()
    }

    /// Reads what other writers appended (or reloads after their rewrite) without writing.
    /// Returns how many entries arrived.
    pub fn refresh(&mut self) -> Result<usize> {
        self.with_store(|store, s| store.refresh(s))
    }

    /// Under the writers' lock: takes in other writers' lines, builds new entries with
    /// `build`, stores them (an append, or a full rewrite when one is due), then commits them
    /// to memory.
    pub(super) fn locked_write(
        &mut self,
        build: impl FnOnce(&Self) -> Result<Vec<Entry>>,
    ) -> Result<()> {
        self.with_store(|store, s| store.write(s, Box::new(build)))
    }

    /// Lets `f` change the entries (e.g. pruning), then rewrites the stored session
    /// atomically. The leaf stays if its entry survives, otherwise it falls back to what the
    /// store implies.
    pub fn replace_entries(&mut self, f: impl FnOnce(&mut Vec<Entry>)) -> Result<()> {
        self.with_store(|store, s| store.replace(s, Box::new(f)))
    }
}

/// What every store does around its I/O, written once: taking in other writers' lines,
/// adopting a session read again whole, adding written entries, and a rewrite's edit and
/// rollback. A store calls these and keeps only how it reads and writes.
impl Session {
    /// Takes in `lines`, the stored bytes after what this session has read: parses them,
    /// adds their entries, and lets the leaf follow the store's (see
    /// [`Session::follow_file`]). Returns what the next write must do about an unterminated
    /// tail (only a file has one to repair).
    pub(super) fn ingest_lines(&mut self, lines: Vec<u8>, mode: TailMode) -> TailRepair {
        let mut report = LoadReport::default();
        let mut parsed = Loaded::default();
        let source = LineSource::memory(lines);
        let repair = self
            .reader()
            .read_lines(&source, 0, mode, &mut report, &mut parsed);
        if !parsed.is_empty() {
            // Room for them all at once: entry by entry, a large vector grows by an eighth.
            self.entries.reserve_exact(parsed.len());
            for (e, line) in parsed {
                self.push_entry(e, line, &mut report);
            }
            self.follow_file();
        }
        repair
    }

    /// After ingesting: the leaf follows the store's unless it was moved here since the last
    /// sync.
    pub(super) fn follow_file(&mut self) {
        let new_file_leaf = file_leaf_of(&self.entries);
        if self.leaf == self.file_leaf {
            self.leaf = new_file_leaf.clone();
        }
        self.file_leaf = new_file_leaf;
    }

    /// Becomes `fresh`, the session read again whole after another writer's rewrite: the
    /// sync policy stays, and so does a leaf moved here if its entry survived.
    pub(in crate::session) fn adopt_reloaded(&mut self, fresh: Session) {
        let moved_here = self.leaf != self.file_leaf;
        let keep_leaf = self.leaf.clone().filter(|l| fresh.index.contains_key(l));
        let sync = self.sync;
        // A store reloading inside `with_store` gets its place back from `with_store`.
        *self = fresh;
        self.sync = sync;
        if moved_here && keep_leaf.is_some() {
            self.leaf = keep_leaf;
        }
        self.revision = next_revision();
    }

    /// Adds written entries to memory; the leaf becomes what the store now implies.
    pub(in crate::session) fn commit(&mut self, new: Vec<Entry>) {
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

    /// Keeps the entry `id` as its line, parsed again on first use, and gives back its parsed
    /// kind, when the line is `from_len` bytes or more: for an entry just appended whose parts
    /// its writer still needs, when they are far larger parsed than written (a compaction's
    /// ledger on a huge session: megabytes of JSON, several times that as values), so they
    /// move back to the writer instead of being copied (issue 35 item 7). `None`, with nothing
    /// changed, when the entry is not there, its line is shorter, or the line does not read
    /// back as the same entry.
    pub fn keep_as_line(&mut self, id: &str, from_len: usize) -> Option<EntryKind> {
        let at = self.position(id)?;
        let entry = &self.entries[at];
        let line = entry.line_bytes().ok()?.into_owned();
        let len = line.len();
        if len < from_len {
            return None;
        }
        let kept = Entry::from_shared_line(&LineSource::memory(line), 0, len).ok()?;
        if (&kept.id, &kept.parent_id, &kept.timestamp)
            != (&entry.id, &entry.parent_id, &entry.timestamp)
        {
            return None;
        }
        // The entry is the same, so its revision stays.
        Some(std::mem::replace(&mut self.entries[at], kept).into_kind())
    }

    /// A rewrite ([`Store::replace`]): lets `edit` change the entries (the leaf stays if its
    /// entry survives, otherwise it falls back to what the store implies), then has `store`
    /// write the session whole. If that fails, the entries and the leaf are as they were.
    pub(in crate::session) fn rewrite_with(
        &mut self,
        edit: Edit<'_>,
        store: impl FnOnce(&mut Session) -> Result<()>,
    ) -> Result<()> {
        let before = (self.entries.clone(), self.leaf.clone());
        edit(&mut self.entries);
        self.revision = next_revision();
        self.rebuild_index();
        if self
            .leaf
            .as_ref()
            .is_some_and(|l| !self.index.contains_key(l))
        {
            self.leaf = file_leaf_of(&self.entries);
        }
        if let Err(e) = store(self) {
            (self.entries, self.leaf) = before;
            self.revision = next_revision();
            self.rebuild_index();
            return Err(e);
        }
        Ok(())
    }
}

/// What a backend outside this folder (one that keeps whole lines by id, as a database does)
/// needs of the session besides the steps above: reading its bytes, the lines a rewrite
/// stores, and marking the session stored whole.
impl Session {
    /// Takes in `lines`, whole stored lines after what this session has read (a store that
    /// keeps whole lines has no torn tail to repair). Returns how many entries they added,
    /// and those entries (markers left out), for [`Store::take_arrivals`].
    pub(in crate::session) fn ingest_stored(&mut self, lines: Vec<u8>) -> (usize, Vec<Entry>) {
        let before = self.entries.len();
        self.ingest_lines(lines, TailMode::Locked);
        let arrived = self.entries[before..]
            .iter()
            .filter(|e| !e.is_leaf_move())
            .cloned()
            .collect();
        (self.entries.len() - before, arrived)
    }

    /// Becomes the session stored as `whole` (a header line, then every line), read again
    /// after another writer's rewrite (see [`Session::adopt_reloaded`]). Returns how many
    /// entries it holds, and those this session did not have (markers left out).
    pub(in crate::session) fn reload_stored(
        &mut self,
        whole: Vec<u8>,
    ) -> Result<(usize, Vec<Entry>)> {
        let mut report = LoadReport::default();
        let mut fresh = Session::from_stored(self.file.clone(), whole, &mut report)?;
        fresh.path = self.path.clone();
        let arrived = fresh
            .entries
            .iter()
            .filter(|e| !e.is_leaf_move() && !self.index.contains_key(&e.id))
            .cloned()
            .collect();
        self.adopt_reloaded(fresh);
        Ok((self.entries.len(), arrived))
    }

    /// The header (as version 3) and every line after it, as a rewrite stores them: the
    /// entries, then `extra`, with the kept malformed lines in place.
    pub(in crate::session) fn whole_lines<'a>(
        &'a self,
        extra: &'a [Entry],
    ) -> (SessionHeader, Vec<Line<'a>>) {
        let mut header = self.header.clone();
        if header.version.is_none_or(|v| v < CURRENT_SESSION_VERSION) {
            header.version = Some(CURRENT_SESSION_VERSION);
        }
        let mut body = Vec::with_capacity(self.entries.len() + extra.len() + self.raw_lines.len());
        let mut raw = self.raw_lines.iter().peekable();
        for (i, e) in self.entries.iter().chain(extra).enumerate() {
            while let Some(r) = raw.next_if(|r| r.before_entry <= i) {
                body.push(Line::Kept(&r.bytes));
            }
            body.push(Line::Entry(e));
        }
        body.extend(raw.map(|r| Line::Kept(&r.bytes)));
        (header, body)
    }

    /// Size controls for the entries a rewrite changes (a pruned entry, a migrated one), as
    /// every write applies them; a line nothing changed is kept as it was, byte for byte.
    pub(in crate::session) fn control_changed_entries(&mut self) -> Result<()> {
        if let Some(store) = self.blobs.clone() {
            for i in 0..self.entries.len() {
                if self.entries[i].is_unmodified_line() {
                    continue;
                }
                let controlled =
                    crate::session::size_controls::control_entry(&self.entries[i], &store)
                        .map_err(|source| SessionError::Io {
                            path: store.dir().to_path_buf(),
                            source,
                        })?;
                if let Some(c) = controlled {
                    self.entries[i] = c;
                }
            }
        }
        Ok(())
    }

    /// The leaf the store implies once `new` is written after the entries.
    pub(in crate::session) fn leaf_after(&self, new: &[Entry]) -> Option<String> {
        let last = self.entries.last().into_iter().chain(new).last()?;
        if last.is_leaf_move() {
            last.parent_id.clone()
        } else {
            Some(last.id.clone())
        }
    }

    /// After the store took the whole session (a rewrite): no rewrite is due, the header is
    /// version 3, and the leaf the store implies is what its last line says.
    pub(in crate::session) fn stored_whole(&mut self) {
        self.needs_rewrite = false;
        if self
            .header
            .version
            .is_none_or(|v| v < CURRENT_SESSION_VERSION)
        {
            self.header.version = Some(CURRENT_SESSION_VERSION);
        }
        self.file_leaf = file_leaf_of(&self.entries);
    }

    /// The file itself (the path with every symlink resolved); a stored session's name.
    pub(in crate::session) fn resolved_path(&self) -> &Path {
        &self.file
    }
}
