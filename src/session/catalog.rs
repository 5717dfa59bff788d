//! Sessions kept by id rather than as files in a directory: a backend of that kind (today
//! PostgreSQL, `postgres/`) is a [`Catalog`]. The engine and the CLI see only the trait: they
//! get one from `backend::connect`, the one place that names such a backend, and create,
//! open, list, import and export through it. Each session it opens carries its own store (the
//! seam of `file/store.rs`), so appends, rewrites and watching need nothing more from here.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{CreateOptions, LoadReport, Session, SessionError};

type Result<T> = std::result::Result<T, SessionError>;

/// A stored session as a listing shows it, read without its entries.
#[derive(Clone, Debug)]
pub struct SessionRow {
    pub id: String,
    pub cwd: String,
    pub title: Option<String>,
    pub created: String,
    pub entry_count: usize,
    /// The last write (ISO-8601, UTC, milliseconds).
    pub modified: String,
    /// The last write in microseconds since the Unix epoch: the listing's order.
    pub updated_micros: i64,
}

/// What [`Catalog::import`] stored of one file.
#[derive(Clone, Debug)]
pub struct ImportReport {
    pub id: String,
    pub lines: usize,
    pub bytes: u64,
}

/// Told `(lines, bytes)` stored so far by a long import (from the backend's own threads).
pub type ImportProgress = Box<dyn Fn(usize, u64) + Send + Sync>;

/// A backend that keeps sessions by id.
pub trait Catalog: fmt::Debug + Send + Sync {
    /// The backend's name as its sessions' paths show it: `postgres` in `postgres:ID`.
    fn scheme(&self) -> &'static str;

    /// Where it is, fit to show (a database's URL without its password).
    fn target(&self) -> &str;

    /// Creates a session with its header and no entries (see [`Session::create`]); fails with
    /// `AlreadyExists` when `options.id` is taken.
    fn create_session(&self, cwd: &str, options: CreateOptions) -> Result<Session>;

    /// Opens session `id` without writing, with what loading found (see [`Session::open`]);
    /// `NotFound` when there is none.
    fn open_session(&self, id: &str) -> Result<(Session, LoadReport)>;

    /// The sessions (those of `cwd` when given), most recently written first, then by id;
    /// after `after` (`(updated_micros, id)` of the previous page's last row), at most
    /// `limit`. Reads no entries.
    fn list(
        &self,
        cwd: Option<&str>,
        limit: Option<usize>,
        after: Option<(i64, String)>,
    ) -> Result<Vec<SessionRow>>;

    /// Stores the session file at `path` under its own id (`compactd import`): all of it or
    /// nothing, its lines as written, so that [`Catalog::export`] gives the same bytes (a
    /// version 1 or 2 file as the version 3 file its first write would make). Fails with
    /// `AlreadyExists` when the id is stored, unless `replace`.
    fn import(
        &self,
        path: &Path,
        replace: bool,
        progress: ImportProgress,
    ) -> Result<(ImportReport, LoadReport)>;

    /// Writes session `id` to `out` as the JSONL file it would be, telling `progress` the
    /// `(lines, bytes)` written so far; returns the bytes written.
    fn export(
        &self,
        id: &str,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(usize, u64),
    ) -> Result<u64>;

    /// The path session `id` shows (`SCHEME:ID`), which opening it by path also takes.
    fn path_of(&self, id: &str) -> PathBuf {
        PathBuf::from(format!("{}:{id}", self.scheme()))
    }
}
