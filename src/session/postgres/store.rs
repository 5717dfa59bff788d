//! The PostgreSQL backend of the storage seam (`session/file/store.rs`): a session's lines as
//! rows of a database shared by a fleet of daemons. Creating and opening a stored session,
//! reading what other daemons wrote (when the listener says something changed), and writes
//! and rewrites in one transaction holding the session row `FOR UPDATE`. The rows hold the
//! lines a file would, so the session's loader turns them into entries, and `compactd export`
//! of an imported file gives back its bytes. The session logic it calls is the one the file
//! backend calls; what is PostgreSQL's is here and in the rest of this folder.

use std::path::PathBuf;
use std::sync::Arc;

use super::{
    Changes, Finish, Head, Interest, Loaded, Locked, PgStore, StoreError, StoredLine, WriteMeta,
};
use crate::session::catalog::{Catalog, ImportProgress, ImportReport, SessionRow};
use crate::session::changes::ChangeSignal;
use crate::session::entry::Entry;
use crate::session::file::{
    Build, CreateOptions, Edit, Line, LoadReport, Result, Session, SessionError, Store,
};

/// A session stored in PostgreSQL: the store, the head of the rows this process has read,
/// and its interest in other daemons' notifications.
#[derive(Debug)]
struct Remote {
    store: Arc<PgStore>,
    head: Head,
    interest: Interest,
    /// Entries other writers added, not yet taken by [`Session::take_arrivals`]; `None`
    /// until [`Session::follow_changes`] (nobody would take them).
    arrivals: Option<Vec<Entry>>,
}

/// The name a stored session goes by where a file has its path.
pub fn postgres_path(id: &str) -> PathBuf {
    PathBuf::from(format!("{}:{id}", super::SCHEME))
}

fn store_error(id: &str) -> impl FnOnce(StoreError) -> SessionError + '_ {
    move |e| {
        if e.not_found {
            SessionError::NotFound {
                path: postgres_path(id),
            }
        } else if e.exists {
            SessionError::AlreadyExists {
                path: postgres_path(id),
            }
        } else {
            SessionError::Storage(e.to_string())
        }
    }
}

impl Remote {
    /// Keeps `arrived` for [`Store::take_arrivals`] when followed, and wakes the follower.
    fn record_arrivals(&mut self, arrived: Vec<Entry>) {
        if let Some(queue) = &mut self.arrivals
            && !arrived.is_empty()
        {
            queue.extend(arrived);
            self.interest.signal().poke();
        }
    }

    /// Takes in what other writers did; returns how many entries that made arrive.
    fn ingest(&mut self, session: &mut Session, changes: Changes) -> Result<usize> {
        let (count, arrived) = match changes {
            Changes::Nothing => return Ok(0),
            Changes::Appended { lines, head } => {
                let taken = session.ingest_stored(lines);
                self.head = head;
                taken
            }
            Changes::Rewritten { file, head } => {
                let taken = session.reload_stored(file)?;
                self.head = head;
                taken
            }
        };
        self.record_arrivals(arrived);
        Ok(count)
    }

    /// Reads the whole stored session again, as after another daemon's rewrite.
    fn reload(&mut self, session: &mut Session) -> Result<()> {
        let id = session.header().id.clone();
        let (file, head) = self.store.load(&id).map_err(store_error(&id))?;
        self.ingest(session, Changes::Rewritten { file, head })?;
        Ok(())
    }
}

impl Store for Remote {
    /// Asks the database (one query) what other writers changed, on every call with fresh
    /// reads (the default), otherwise only when a notification (or a listener outage) says
    /// something may have changed.
    fn refresh(&mut self, session: &mut Session) -> Result<usize> {
        let arrived = if self.store.fresh_reads() || self.interest.may_have_changed() {
            let epoch = self.interest.epoch_now();
            let id = session.header().id.clone();
            let changes = self
                .store
                .changes(&id, self.head)
                .map_err(store_error(&id))?;
            let arrived = self.ingest(session, changes)?;
            let version = self.head.version as u64;
            self.interest.mark_seen(version, epoch);
            arrived
        } else {
            0
        };
        // Another daemon may have moved the leaf off the loaded part (now, or before a read
        // of the rest failed): every read after a refresh walks a covered path.
        if session.leaf_needs_rest() {
            self.load_rest(session)?;
        }
        Ok(arrived)
    }

    /// Locks the row, takes in others' lines, builds, then appends (or rewrites, when one is
    /// due) and commits in one transaction.
    fn write(&mut self, session: &mut Session, build: Build<'_>) -> Result<()> {
        let id = session.header().id.clone();
        let store = Arc::clone(&self.store);
        let epoch = self.interest.epoch_now();
        let mut locked = store.lock(&id, self.head).map_err(store_error(&id))?;
        let changes = std::mem::replace(&mut locked.changes, Changes::Nothing);
        self.ingest(session, changes)?;
        let rewrite = session.rewrites_on_next_write();
        if session.is_partial() && (rewrite || !session.leaf_covered()) {
            load_whole_locked(session, &locked)?;
        }
        let mut new = build(&*session)?;
        session.avoid_unloaded_ids(
            |ids| {
                locked
                    .existing(ids)
                    .map_err(|e| SessionError::Storage(e.to_string()))
            },
            &mut new,
        )?;
        let new = session.controlled(new)?;
        if !rewrite && new.is_empty() {
            return Ok(());
        }
        let head = if rewrite {
            let (header, lines) = all_lines(session, &new);
            let meta = meta_after(session, &new);
            locked
                .finish(Finish::Rewrite {
                    header,
                    lines,
                    meta,
                })
                .map_err(store_error(&id))?
        } else {
            let lines = new.iter().map(stored_line).collect();
            let meta = meta_after(session, &new);
            locked
                .finish(Finish::Append { lines, meta })
                .map_err(store_error(&id))?
        };
        session.commit(new);
        if rewrite {
            session.stored_whole();
        }
        self.head = head;
        self.interest.mark_seen(head.version as u64, epoch);
        Ok(())
    }

    /// One transaction replaces the rows.
    fn replace(&mut self, session: &mut Session, edit: Edit<'_>) -> Result<()> {
        let id = session.header().id.clone();
        let store = Arc::clone(&self.store);
        let epoch = self.interest.epoch_now();
        let mut locked = store.lock(&id, self.head).map_err(store_error(&id))?;
        let changes = std::mem::replace(&mut locked.changes, Changes::Nothing);
        self.ingest(session, changes)?;
        // A rewrite stores every line.
        load_whole_locked(session, &locked)?;
        session.rewrite_with(edit, |session| {
            let (header, lines) = all_lines(session, &[]);
            let meta = meta_after(session, &[]);
            let head = locked
                .finish(Finish::Rewrite {
                    header,
                    lines,
                    meta,
                })
                .map_err(store_error(&id))?;
            session.stored_whole();
            self.head = head;
            self.interest.mark_seen(head.version as u64, epoch);
            Ok(())
        })
    }

    /// The stored lines before the loaded part, or all of them again when the session was
    /// rewritten since this process read it.
    fn load_rest(&mut self, session: &mut Session) -> Result<()> {
        let Some(from_seq) = session.partial_from() else {
            return Ok(());
        };
        let id = session.header().id.clone();
        let lines = self
            .store
            .lines_before(&id, from_seq, self.head.generation)
            .map_err(store_error(&id))?;
        match lines {
            Some(lines) => session.absorb_prefix(lines),
            // Another daemon rewrote the session meanwhile: read all of it again.
            None => self.reload(session),
        }
    }

    fn follow(&mut self) -> Option<ChangeSignal> {
        self.arrivals.get_or_insert_with(Vec::new);
        Some(self.interest.signal())
    }

    fn take_arrivals(&mut self) -> Vec<Entry> {
        self.arrivals
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

/// Creates a session in `store` with its header (version 3) and no entries.
fn create_in(store: &Arc<PgStore>, cwd: &str, options: CreateOptions) -> Result<Session> {
    let header = options.into_header(cwd);
    let id = header.id.clone();
    let line = header.to_value().to_string().into_bytes();
    let mut interest = store.interest(&id);
    let epoch = interest.epoch_now();
    let head = store
        .create(line.clone(), &header)
        .map_err(store_error(&id))?;
    interest.mark_seen(head.version as u64, epoch);
    let mut file = line;
    file.push(b'\n');
    let mut session = Session::from_stored(postgres_path(&id), file, &mut LoadReport::default())?;
    session.set_store(Box::new(Remote {
        store: Arc::clone(store),
        head,
        interest,
        arrivals: None,
    }));
    Ok(session)
}

/// Opens session `id` from `store` (one snapshot of its rows), without writing: only what the
/// context at its leaf needs when the session row says what that is (see
/// `session/file/partial.rs`), otherwise every line.
fn open_in(store: &Arc<PgStore>, id: &str) -> Result<(Session, LoadReport)> {
    let mut interest = store.interest(id);
    let epoch = interest.epoch_now();
    let (loaded, mut head) = store.load_context(id).map_err(store_error(id))?;
    let mut report = LoadReport::default();
    let partly = match &loaded {
        Loaded::Partial {
            header,
            prefix,
            tail,
            from_seq,
            entry_count,
        } => Session::parse_partial(
            postgres_path(id),
            header,
            prefix,
            tail,
            *from_seq,
            *entry_count,
        )?,
        Loaded::Whole(_) => None,
    };
    let mut session = match (partly, loaded) {
        (Some(session), _) => session,
        (None, Loaded::Whole(file)) => Session::from_stored(postgres_path(id), file, &mut report)?,
        (None, Loaded::Partial { .. }) => {
            // Not covered after all (a session this build did not write): all of it.
            let (file, whole_head) = store.load(id).map_err(store_error(id))?;
            head = whole_head;
            Session::from_stored(postgres_path(id), file, &mut report)?
        }
    };
    interest.mark_seen(head.version as u64, epoch);
    session.set_store(Box::new(Remote {
        store: Arc::clone(store),
        head,
        interest,
        arrivals: None,
    }));
    Ok((session, report))
}

/// The database as the engine and the CLI see it.
impl Catalog for Arc<PgStore> {
    fn scheme(&self) -> &'static str {
        super::SCHEME
    }

    fn target(&self) -> &str {
        PgStore::target(self)
    }

    fn create_session(&self, cwd: &str, options: CreateOptions) -> Result<Session> {
        create_in(self, cwd, options)
    }

    fn open_session(&self, id: &str) -> Result<(Session, LoadReport)> {
        open_in(self, id)
    }

    fn list(
        &self,
        cwd: Option<&str>,
        limit: Option<usize>,
        after: Option<(i64, String)>,
    ) -> Result<Vec<SessionRow>> {
        let limit = limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        PgStore::list(self, cwd, limit, after).map_err(|e| SessionError::Storage(e.to_string()))
    }

    fn import(
        &self,
        path: &std::path::Path,
        replace: bool,
        progress: ImportProgress,
    ) -> Result<(ImportReport, LoadReport)> {
        import_file(self, path, replace, progress)
    }

    fn export(
        &self,
        id: &str,
        out: &mut dyn std::io::Write,
        progress: &mut dyn FnMut(usize, u64),
    ) -> Result<u64> {
        PgStore::export(self, id, out, progress).map_err(|e| SessionError::Storage(e.to_string()))
    }
}

/// [`Session::load_whole`] under the writers' lock, in its transaction.
fn load_whole_locked(session: &mut Session, locked: &Locked<'_>) -> Result<()> {
    let Some(from_seq) = session.partial_from() else {
        return Ok(());
    };
    let lines = locked
        .lines_before(from_seq)
        .map_err(|e| SessionError::Storage(e.to_string()))?;
    session.absorb_prefix(lines)
}

/// The header line and every line (entries, then `extra`, with the kept malformed lines in
/// place), as a rewrite stores them.
fn all_lines(session: &Session, extra: &[Entry]) -> (Vec<u8>, Vec<StoredLine>) {
    let (header, lines) = session.whole_lines(extra);
    let lines = lines
        .into_iter()
        .map(|line| match line {
            Line::Entry(e) => stored_line(e),
            Line::Kept(bytes) => StoredLine {
                entry_id: None,
                parent_id: None,
                type_name: None,
                bytes: bytes.to_vec(),
            },
        })
        .collect();
    (header.head_bytes(), lines)
}

/// The session-level fields once `new` is appended.
fn meta_after(session: &Session, new: &[Entry]) -> WriteMeta {
    WriteMeta {
        leaf_id: session.leaf_after(new),
        entry_count: (session.visible_entry_count()
            + new.iter().filter(|e| !e.is_leaf_move()).count()) as i64,
        digest: session.digest_after(new),
    }
}

/// An entry as a row: its exact line and the fields the database indexes.
fn stored_line(e: &Entry) -> StoredLine {
    StoredLine {
        entry_id: Some(e.id.clone()),
        parent_id: e.parent_id.clone(),
        type_name: Some(e.type_name().to_owned()),
        // The lines of a stored session and of a file being imported are in memory (only a
        // large version 3 file keeps its lines in the file, and it is imported as written),
        // so this is the line itself.
        bytes: e.line_bytes().map_or_else(
            |_| e.to_value().to_string().into_bytes(),
            |b| b.into_owned(),
        ),
    }
}

/// Stores the session file at `path` in `store` (see `compactd import`): a current file's
/// lines exactly as written (malformed and blank lines included, in place), so exporting it
/// gives the same bytes; a version 1 or 2 file as the version 3 file its first write would
/// make. A torn last line (a crash mid-append) is left out, as the next write would cut it.
/// `progress` gets `(lines, bytes)` stored so far.
pub fn import_file(
    store: &Arc<PgStore>,
    path: &std::path::Path,
    replace: bool,
    progress: impl Fn(usize, u64) + Send + Sync + 'static,
) -> Result<(ImportReport, LoadReport)> {
    let (mut session, report) = Session::open(path)?;
    let (header, lines) = if report.migrated_from.is_some() {
        // As the file backend's migration writes it: with the size controls of a rewrite.
        session.control_changed_entries()?;
        all_lines(&session, &[])
    } else {
        let bytes = std::fs::read(session.resolved_path()).map_err(|source| SessionError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        exact_lines(
            &bytes,
            session.header().head_lines(),
            report.torn_tail.is_some(),
        )
    };
    let meta = meta_after(&session, &[]);
    let id = session.header().id.clone();
    let stored = PgStore::import(
        store,
        header,
        session.header(),
        lines,
        meta,
        replace,
        progress,
    )
    .map_err(store_error(&id))?;
    Ok((stored, report))
}

/// A file's head (its first `head_lines` lines: the title line, if any, and the header) and
/// every other line as written, each with the fields of its entry when it is one.
fn exact_lines(bytes: &[u8], head_lines: usize, torn_tail: bool) -> (Vec<u8>, Vec<StoredLine>) {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, rename = "type")]
        type_name: std::borrow::Cow<'a, str>,
        #[serde(borrow, default)]
        id: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default, rename = "parentId")]
        parent_id: Option<std::borrow::Cow<'a, str>>,
    }
    let mut pieces: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // The piece after the last `\n` is empty for a file that ends with one; otherwise it is
    // the unterminated last line, kept unless it is torn.
    if pieces.last().is_some_and(|p| p.is_empty()) || torn_tail {
        pieces.pop();
    }
    let mut pieces = pieces.into_iter();
    let header = pieces
        .by_ref()
        .take(head_lines)
        .collect::<Vec<_>>()
        .join(&b'\n');
    let lines = pieces
        .map(|line| {
            let head = std::str::from_utf8(line)
                .ok()
                .and_then(|t| serde_json::from_str::<Head<'_>>(t).ok());
            match head {
                Some(h) => StoredLine {
                    entry_id: h.id.map(|c| c.into_owned()),
                    parent_id: h.parent_id.map(|c| c.into_owned()),
                    type_name: Some(h.type_name.into_owned()),
                    bytes: line.to_vec(),
                },
                None => StoredLine {
                    entry_id: None,
                    parent_id: None,
                    type_name: None,
                    bytes: line.to_vec(),
                },
            }
        })
        .collect();
    (header, lines)
}
