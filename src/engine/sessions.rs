//! The session table: the open sessions by id, each with its state, and how sessions are
//! created, forked, opened and listed.
//!
//! Paths: a session path given by a client must name a `.jsonl` file; a session id used to
//! build a path must be plain (`[A-Za-z0-9_-]+`). Anything else is refused with
//! [`EngineError::PathOutsideAllowed`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::session::entry::CURRENT_SESSION_VERSION;
use crate::session::listing::{self, ListCursor};
use crate::session::{
    Catalog, CreateOptions, Destination, LoadReport, LoadStep, Session, SessionError,
};
use crate::settings::{SettingsSource, SettingsStack};

use super::events::EventSink;
use super::state::{SessionState, sync_policy};
use super::{EngineError, SharedSession};

/// An open session as the protocol reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    pub path: PathBuf,
    pub cwd: String,
    pub title: Option<String>,
    pub leaf_id: Option<String>,
    /// Entries in the file (leaf markers excluded).
    pub entry_count: usize,
    /// The file's format version as found on disk (1 or 2 for a file migrated in memory; the
    /// next write saves the current version).
    pub version: u64,
    /// What loading found (skipped lines, torn tail, migration), one line each.
    pub warnings: Vec<String>,
    /// Opened read-only (see [`SessionTable::open`]).
    pub read_only: bool,
}

/// A session file found by [`SessionTable::list`].
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    pub id: String,
    pub path: PathBuf,
    pub cwd: String,
    pub title: Option<String>,
    /// The header's creation time (ISO-8601).
    pub created: String,
    /// Whether the session is open in this engine.
    pub open: bool,
    /// Lines after the header (estimated for very large files).
    pub entry_count: usize,
    /// When it was last written (ISO-8601), when the store keeps it (the database); `None`
    /// for a file, whose modification time is its own.
    pub modified: Option<String>,
}

/// Which page of a listing to return.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// At most this many sessions (at least one); all of them when `None`.
    pub limit: Option<usize>,
    /// Start after this session (the previous page's `next` cursor).
    pub after: Option<ListCursor>,
}

/// Told each step of loading a session, from the thread that loads it.
pub type LoadProgress = Arc<dyn Fn(LoadStep) + Send + Sync>;

/// Where new sessions go and plain session ids are found (`storage.backend`).
pub(crate) enum Home {
    /// Session files in this directory.
    Dir(PathBuf),
    /// Sessions in this catalog (a database).
    Store(Arc<dyn Catalog>),
}

/// The sessions' home, computed (or connected to) only when an operation needs it.
pub(crate) type SessionsHome<'a> = &'a (dyn Fn() -> Result<Home, EngineError> + Sync);

/// The open sessions by id.
pub(crate) struct SessionTable {
    open: Mutex<HashMap<String, Arc<SessionState>>>,
    /// Where a followed session's other writers' entries are reported (`follow.rs`).
    events: Arc<dyn EventSink>,
}

impl SessionTable {
    pub(crate) fn new(events: Arc<dyn EventSink>) -> Self {
        SessionTable {
            open: Mutex::default(),
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<SessionState>>> {
        // A map of Arcs: a panic while holding the lock cannot leave it inconsistent.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every open session.
    pub(crate) fn all(&self) -> Vec<Arc<SessionState>> {
        self.lock().values().cloned().collect()
    }

    /// The open session `id`.
    pub(crate) fn get(&self, id: &str) -> Result<Arc<SessionState>, EngineError> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::SessionNotFound(id.to_owned()))
    }

    /// Forgets session `id` (running operations keep their own handle and finish).
    pub(crate) fn close(&self, id: &str) -> Result<(), EngineError> {
        match self.lock().remove(id) {
            Some(_) => Ok(()),
            None => Err(EngineError::SessionNotFound(id.to_owned())),
        }
    }

    /// Creates a session for `cwd`: at `path` (a new `.jsonl` file), or at home: in the
    /// sessions directory under the default naming scheme, or in the database.
    pub(crate) fn create(
        &self,
        base: &SettingsStack,
        home: SessionsHome<'_>,
        cwd: &Path,
        path: Option<PathBuf>,
        title: Option<String>,
    ) -> Result<SessionInfo, EngineError> {
        let cwd_text = cwd.to_string_lossy().into_owned();
        let (path, id) = match path {
            Some(p) => {
                check_session_path(&p)?;
                (p, crate::session::ids::new_session_id())
            }
            None => match home()? {
                Home::Dir(dir) => listing::new_session_path(&dir, &cwd_text),
                Home::Store(store) => {
                    let options = CreateOptions {
                        title,
                        ..Default::default()
                    };
                    let session = store.create_session(&cwd_text, options)?;
                    return self.register(
                        base,
                        session,
                        Vec::new(),
                        CURRENT_SESSION_VERSION,
                        false,
                    );
                }
            },
        };
        let sync = base
            .effective()
            .map(|s| sync_policy(&s))
            .unwrap_or_default();
        let options = CreateOptions {
            id: Some(id),
            title,
            sync,
            ..Default::default()
        };
        let session = Session::create(&path, &cwd_text, options)?;
        self.register(base, session, Vec::new(), CURRENT_SESSION_VERSION, false)
    }

    /// A new session made from the open `source`, and opened: with `entry_id`, its
    /// root→entry branch (the reference's `createBranchedSession`; `parentSession` is the
    /// source's path); without, a copy of every entry (`fork`; `parentSession` is the source's
    /// id). It goes to `path` (a new `.jsonl` file) or the sessions directory; its title is
    /// `title`, else the source's. The source is only read.
    pub(crate) async fn fork(
        &self,
        base: &SettingsStack,
        home: SessionsHome<'_>,
        source: &SessionState,
        entry_id: Option<&str>,
        path: Option<PathBuf>,
        title: Option<String>,
    ) -> Result<SessionInfo, EngineError> {
        // A fork copies entries from anywhere in the session.
        source.load_whole().await?;
        let mut store = None;
        let (path, id) = match path {
            Some(p) => {
                check_session_path(&p)?;
                (p, crate::session::ids::new_session_id())
            }
            None => match home()? {
                Home::Dir(dir) => listing::new_session_path(&dir, &source.cwd),
                Home::Store(s) => {
                    let id = crate::session::ids::new_session_id();
                    let path = s.path_of(&id);
                    store = Some(s);
                    (path, id)
                }
            },
        };
        let destination = match &store {
            Some(store) => Destination::Store(store.as_ref()),
            None => Destination::File(&path),
        };
        let settings = source.effective_settings()?;
        let session = source.session.read().await;
        let options = CreateOptions {
            id: Some(id),
            title: title.or_else(|| session.header().display_title().map(str::to_owned)),
            parent_session: Some(match entry_id {
                Some(_) => source.path.to_string_lossy().into_owned(),
                None => source.id.clone(),
            }),
            sync: sync_policy(&settings),
        };
        let made = match entry_id {
            Some(entry) => session.create_branched(entry, destination, options),
            None => session.fork(destination, options),
        };
        drop(session);
        let made = made.map_err(EngineError::from_lookup)?;
        self.register(base, made, Vec::new(), CURRENT_SESSION_VERSION, false)
    }

    /// Opens a session by `.jsonl` path or by id (an open session, or a file in the sessions
    /// directory). Opening never writes to the file. `read_only` is for a file another program
    /// owns (an agent that appends to it): the session is never written, reads and previews
    /// see the owner's appends, and every write fails with [`EngineError::ReadOnly`].
    ///
    /// Reading and parsing the file (seconds for a large one) runs on a blocking thread, so
    /// the runtime keeps serving other requests; `progress` hears each [`LoadStep`] as it
    /// starts, from that thread.
    pub(crate) async fn open(
        &self,
        base: &SettingsStack,
        home: SessionsHome<'_>,
        path_or_id: &str,
        read_only: bool,
        progress: LoadProgress,
    ) -> Result<SessionInfo, EngineError> {
        // `SCHEME:ID` (`postgres:ID`), the path a stored session's `SessionInfo` shows, names
        // it by id.
        let (path_or_id, named_stored) = match crate::session::stored_id(path_or_id) {
            Some((scheme, id)) if is_plain_id(id) => (id, Some(scheme)),
            _ => (path_or_id, None),
        };
        let path = if path_or_id.ends_with(".jsonl") {
            let p = PathBuf::from(path_or_id);
            check_session_path(&p)?;
            p
        } else if is_plain_id(path_or_id) {
            if let Ok(state) = self.get(path_or_id) {
                check_open_mode(&state, read_only)?;
                state.refresh().await?;
                let version = state.original_version;
                return Ok(info_of_state(&state, Vec::new(), version));
            }
            match home()? {
                Home::Dir(dir) => {
                    if let Some(scheme) = named_stored {
                        return Err(EngineError::PathOutsideAllowed(format!(
                            "\"{scheme}:{path_or_id}\" names a session of the {scheme} backend, \
                             but storage.backend is \"file\""
                        )));
                    }
                    let id = path_or_id.to_owned();
                    super::off_runtime(move || find_by_id(&dir, &id)).await?
                }
                Home::Store(store) => {
                    let (session, report) =
                        store.open_session(path_or_id).map_err(|e| match e {
                            SessionError::NotFound { .. } => {
                                EngineError::SessionNotFound(path_or_id.to_owned())
                            }
                            other => other.into(),
                        })?;
                    let version = report.migrated_from.unwrap_or(CURRENT_SESSION_VERSION);
                    return self.register(
                        base,
                        session,
                        load_warnings(&report),
                        version,
                        read_only,
                    );
                }
            }
        } else {
            return Err(EngineError::PathOutsideAllowed(format!(
                "{path_or_id:?} is neither a .jsonl path nor a plain session id"
            )));
        };
        let (session, report) =
            super::off_runtime(move || Session::open_reporting(&path, &*progress)).await?;
        let version = report.migrated_from.unwrap_or(CURRENT_SESSION_VERSION);
        self.register(base, session, load_warnings(&report), version, read_only)
    }

    /// A page of the sessions at home (only those of `cwd` when given), most recently
    /// modified first: files in the directory (only the page's files are read), or an
    /// indexed query of the database that reads no entries. With the cursor of the next page
    /// when more sessions follow.
    pub(crate) fn list(
        &self,
        home: Home,
        cwd: Option<&Path>,
        page: ListPage,
    ) -> Result<(Vec<SessionSummary>, Option<ListCursor>), EngineError> {
        let open: HashMap<String, PathBuf> = self
            .all()
            .iter()
            .map(|s| (s.id.clone(), s.path.clone()))
            .collect();
        let wrong_cursor = || {
            EngineError::InvalidParams(
                "invalid cursor: pass the nextCursor of a listing of this daemon's sessions".into(),
            )
        };
        let dir = match home {
            Home::Dir(dir) => dir,
            Home::Store(store) => {
                let after = match page.after {
                    None => None,
                    Some(ListCursor::Store { micros, id }) => Some((micros, id)),
                    Some(ListCursor::File { .. }) => return Err(wrong_cursor()),
                };
                let cwd = cwd.map(|c| c.to_string_lossy().into_owned());
                // One more than asked: whether another page follows.
                let asked = page.limit.map(|l| l.max(1));
                let mut rows =
                    store.list(cwd.as_deref(), asked.map(|l| l.saturating_add(1)), after)?;
                let next = match asked {
                    Some(l) if rows.len() > l => {
                        rows.truncate(l);
                        rows.last().map(|r| ListCursor::Store {
                            micros: r.updated_micros,
                            id: r.id.clone(),
                        })
                    }
                    _ => None,
                };
                let sessions = rows
                    .into_iter()
                    .map(|row| {
                        let path = store.path_of(&row.id);
                        SessionSummary {
                            open: open.get(&row.id).is_some_and(|p| *p == path),
                            id: row.id,
                            path,
                            cwd: row.cwd,
                            title: row.title,
                            created: row.created,
                            entry_count: row.entry_count,
                            modified: Some(row.modified),
                        }
                    })
                    .collect();
                return Ok((sessions, next));
            }
        };
        let after = match &page.after {
            None => None,
            Some(ListCursor::File { nanos, path }) => Some((*nanos, path.as_str())),
            Some(ListCursor::Store { .. }) => return Err(wrong_cursor()),
        };
        let dir = dir.as_path();
        let io = |e: std::io::Error| {
            EngineError::SessionFile(SessionError::Io {
                path: dir.to_owned(),
                source: e,
            })
        };
        let dirs = match cwd {
            Some(c) => vec![listing::session_dir_for_cwd(dir, &c.to_string_lossy())],
            None => listing::cwd_dirs(dir).map_err(io)?,
        };
        let (found, next) = listing::list_page(&dirs, after, page.limit).map_err(io)?;
        let sessions = found
            .into_iter()
            .map(|info| SessionSummary {
                open: open.get(&info.id).is_some_and(|p| same_file(p, &info.path)),
                id: info.id,
                path: info.path,
                cwd: info.cwd,
                title: info.title,
                created: info.timestamp,
                entry_count: info.entry_count,
                modified: None,
            })
            .collect();
        Ok((sessions, next))
    }

    /// Registers a loaded session with `base` and its project layer (or returns the one
    /// already open with that id and path, when it was opened the same way, read-only or not).
    fn register(
        &self,
        base: &SettingsStack,
        session: Session,
        warnings: Vec<String>,
        version: u64,
        read_only: bool,
    ) -> Result<SessionInfo, EngineError> {
        let id = session.header().id.clone();
        let cwd = session.header().cwd.clone();
        let path = session.path().to_path_buf();
        let mut sessions = self.lock();
        if let Some(existing) = sessions.get(&id) {
            if same_file(&existing.path, &path) {
                let existing = Arc::clone(existing);
                drop(sessions);
                check_open_mode(&existing, read_only)?;
                return Ok(info_of_state(&existing, warnings, version));
            }
            return Err(EngineError::InvalidParams(format!(
                "a different session with id {id} is already open ({})",
                existing.path.display()
            )));
        }
        let (stack, settings_warning) = session_stack(base, &cwd);
        let mut warnings = warnings;
        warnings.extend(settings_warning);
        let mut session = session;
        let settings = stack
            .effective()
            .map_err(|e| EngineError::Settings(e.to_string()))?;
        session.set_sync_policy(sync_policy(&settings));
        session.set_blob_store(super::state::blob_store(&settings));
        // Another daemon's appends to a stored session are read (and reported) as the
        // database announces them, when there is a runtime to wait on.
        let signal = match tokio::runtime::Handle::try_current() {
            Ok(_) => session.follow_changes(),
            Err(_) => None,
        };
        let info = SessionInfo {
            id: id.clone(),
            path: path.clone(),
            cwd: cwd.clone(),
            title: session.header().display_title().map(str::to_owned),
            leaf_id: session.leaf_id().map(str::to_owned),
            entry_count: visible_count(&session),
            warnings,
            version,
            read_only,
        };
        let shared: SharedSession = Arc::new(tokio::sync::RwLock::new(session));
        let mut state = SessionState::new(id.clone(), path, cwd, shared, stack);
        state.original_version = version;
        state.read_only = read_only;
        let state = Arc::new(state);
        if let Some(signal) = signal {
            super::follow::spawn(&state, signal, Arc::clone(&self.events));
        }
        sessions.insert(id, state);
        Ok(info)
    }
}

fn info_of_state(state: &SessionState, warnings: Vec<String>, version: u64) -> SessionInfo {
    // Only called right after registration or for an open session: a short read.
    let session = state.session.try_read();
    let (title, leaf_id, entry_count) = match session {
        Ok(s) => (
            s.header().display_title().map(str::to_owned),
            s.leaf_id().map(str::to_owned),
            visible_count(&s),
        ),
        Err(_) => (None, None, 0),
    };
    SessionInfo {
        id: state.id.clone(),
        path: state.path.clone(),
        cwd: state.cwd.clone(),
        title,
        leaf_id,
        entry_count,
        warnings,
        version,
        read_only: state.read_only,
    }
}

/// An open session is reused only in the mode it was opened in: a read-only open must not
/// hand out a writable session, nor the reverse.
fn check_open_mode(state: &SessionState, read_only: bool) -> Result<(), EngineError> {
    if state.read_only == read_only {
        return Ok(());
    }
    let mode = if state.read_only {
        "read-only"
    } else {
        "for writing"
    };
    Err(EngineError::InvalidParams(format!(
        "session {} is already open {mode}",
        state.id
    )))
}

/// The file of session `id` in `dir`.
fn find_by_id(dir: &Path, id: &str) -> Result<PathBuf, EngineError> {
    listing::list_all_sessions(dir)
        .ok()
        .and_then(|all| all.into_iter().find(|s| s.id == id))
        .map(|s| s.path)
        .ok_or_else(|| EngineError::SessionNotFound(id.to_owned()))
}

/// The engine stack with `cwd`'s project layer, and what to warn the client of: a broken
/// project file is skipped, and an untrusted project's routing keys are ignored.
pub(crate) fn session_stack(base: &SettingsStack, cwd: &str) -> (SettingsStack, Vec<String>) {
    if cwd.is_empty() {
        return (base.clone(), Vec::new());
    }
    match base.with_project_dir(Path::new(cwd)) {
        Ok(stack) => {
            let warnings = project_warnings(&stack);
            (stack, warnings)
        }
        Err(e) => (base.clone(), vec![format!("project settings ignored: {e}")]),
    }
}

/// The warnings of `stack`'s project layer.
pub(crate) fn project_warnings(stack: &SettingsStack) -> Vec<String> {
    stack
        .warnings()
        .iter()
        .filter(|warning| warning.source == SettingsSource::Project)
        .map(|warning| warning.message.clone())
        .collect()
}

/// Whether `id` may become part of a file name.
pub fn is_plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks a client-given session path: it must name a `.jsonl` file.
pub fn check_session_path(path: &Path) -> Result<(), EngineError> {
    let ok = path.extension().is_some_and(|e| e == "jsonl")
        && path.file_name().is_some_and(|n| n != ".jsonl");
    if ok {
        Ok(())
    } else {
        Err(EngineError::PathOutsideAllowed(format!(
            "{} is not a .jsonl session file",
            path.display()
        )))
    }
}

fn load_warnings(report: &LoadReport) -> Vec<String> {
    let mut out: Vec<String> = report
        .skipped
        .iter()
        .map(|s| format!("line {}: skipped: {}", s.line, s.reason))
        .collect();
    out.extend(
        report
            .duplicate_ids
            .iter()
            .map(|d| format!("line {}: duplicate entry id {}", d.line, d.id)),
    );
    if let Some(t) = &report.torn_tail {
        out.push(format!(
            "line {}: torn last line ignored: {}",
            t.line, t.reason
        ));
    }
    if let Some(v) = report.migrated_from {
        out.push(format!(
            "migrated from version {v} in memory; the next write saves version 3"
        ));
    }
    out
}

fn visible_count(session: &Session) -> usize {
    session.visible_entry_count()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_paths_must_name_jsonl_files_and_ids_must_be_plain() {
        assert!(check_session_path(Path::new("/tmp/a.jsonl")).is_ok());
        for bad in ["/tmp/a.json", "/tmp/.jsonl", "/tmp/a"] {
            let error = check_session_path(Path::new(bad)).unwrap_err();
            assert_eq!(
                error.kind(),
                crate::engine::EngineErrorKind::PathOutsideAllowed,
                "{bad}"
            );
        }
        assert!(is_plain_id("2026-01-01_abc-DEF"));
        for bad in ["", "../x", "a/b", "a.b", &"x".repeat(129)] {
            assert!(!is_plain_id(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_session_opened_twice_is_one_entry_and_another_file_with_its_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = SettingsStack::default();
        let no_dir = || -> Result<Home, EngineError> { panic!("not needed") };
        let table = SessionTable::new(Arc::new(super::super::events::NoopSink));
        let path = dir.path().join("a.jsonl");
        let made = table
            .create(&base, &no_dir, dir.path(), Some(path.clone()), None)
            .unwrap();
        let again = table
            .open(
                &base,
                &no_dir,
                path.to_str().unwrap(),
                false,
                Arc::new(|_| {}),
            )
            .await
            .unwrap();
        let error = table
            .open(
                &base,
                &no_dir,
                path.to_str().unwrap(),
                true,
                Arc::new(|_| {}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            error.kind(),
            crate::engine::EngineErrorKind::InvalidParams,
            "not reused in another mode"
        );
        assert_eq!(again.id, made.id);
        assert_eq!(table.all().len(), 1);
        // A copy of the file under another name carries the same id: refused while open.
        let copy = dir.path().join("b.jsonl");
        std::fs::copy(&path, &copy).unwrap();
        let error = table
            .open(
                &base,
                &no_dir,
                copy.to_str().unwrap(),
                false,
                Arc::new(|_| {}),
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind(), crate::engine::EngineErrorKind::InvalidParams);
        table.close(&made.id).unwrap();
        assert_eq!(
            table.close(&made.id).unwrap_err().kind(),
            crate::engine::EngineErrorKind::SessionNotFound
        );
    }
}
