//! The file on disk: creating and opening it, the sidecar lock, bringing memory up to date
//! with what other writers did, appends, and atomic rewrites (the protocol in the module
//! header of `session/file.rs`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cursor::{DiskState, FileId, TailMode, TailRepair, file_id};
use super::store::{Build, Edit, Line, Store};
use super::{
    CreateOptions, LoadReport, LoadStep, Result, Session, SessionError, SyncPolicy, file_leaf_of,
    load, next_revision, stream,
};
use crate::files;
use crate::session::entry::LineSource;
use crate::session::ids;

/// Holds the writers' locks: the sidecar named after the path, and the session file itself
/// (its inode, so every name of the file, hard links included, shares it). Closing the files
/// releases them.
pub(super) struct LockGuard {
    sidecar: File,
    data: Option<File>,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(data) = &self.data {
            let _ = data.unlock();
        }
        let _ = self.sidecar.unlock();
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
        let sync = options.sync;
        let header = options.into_header(cwd);
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
        let written = (|| {
            file.write_all(&line)?;
            if sync == SyncPolicy::Fsync {
                file.sync_all()?;
                // The new name must survive a power loss too, not only the bytes.
                sync_parent_dir(&path)?;
            }
            Ok(())
        })();
        if let Err(e) = written {
            // A file without its whole header would be refused as "not a session" forever.
            let _ = fs::remove_file(&path);
            return Err(io_err(&path)(e));
        }
        let file_path = fs::canonicalize(&path).map_err(io_err(&path))?;
        let meta = file.metadata().map_err(io_err(&path))?;
        let disk = DiskState {
            consumed: line.len() as u64,
            missing_newline: false,
            lines: 1,
            id: file_id(&meta),
        };
        let mut session = Session::empty(path, file_path, header, disk, true, Box::new(FileStore));
        session.sync = sync;
        Ok(session)
    }

    /// Opens a session file without writing to it. Versions 1 and 2 are migrated in memory.
    pub fn open(path: impl AsRef<Path>) -> Result<(Session, LoadReport)> {
        Session::open_reporting(path, &|_| {})
    }

    /// [`Session::open`], telling `progress` each [`LoadStep`] as it starts. Synchronous and
    /// CPU-bound on a large file: async code runs it on a blocking thread.
    pub fn open_reporting(
        path: impl AsRef<Path>,
        progress: &dyn Fn(LoadStep),
    ) -> Result<(Session, LoadReport)> {
        let path = path.as_ref().to_path_buf();
        let file = resolve(&path)?;
        load(path, file, progress)
    }
}

/// Takes the writers' locks of `session`: the sidecar's, then the file's own (what two names
/// of one file share); both are released when the guard drops.
fn lock_writers(session: &Session) -> Result<LockGuard> {
    let lock_path = sidecar(&session.file, ".lock");
    let file = files::open_regular(
        &lock_path,
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true),
    )
    .map_err(io_err(&lock_path))?;
    file.lock().map_err(io_err(&lock_path))?;
    let data = lock_data_file(session)?;
    Ok(LockGuard {
        sidecar: file,
        data,
    })
}

/// Takes the exclusive lock on the session file's inode, then checks that the path still
/// names that inode (a writer that held it may have renamed a rewrite over the path in
/// the meantime; then the new file is locked instead). `None` when there is no file (it
/// was deleted: the write puts it back). The sidecar lock is named after one path; this
/// one is what two names of one file (hard links) share.
fn lock_data_file(session: &Session) -> Result<Option<File>> {
    for _ in 0..1000 {
        let file = match files::open_regular(&session.file, OpenOptions::new().read(true)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&session.path)(e)),
        };
        file.lock().map_err(io_err(&session.path))?;
        let locked = file_id(&file.metadata().map_err(io_err(&session.path))?);
        match fs::metadata(&session.file) {
            Ok(meta) if file_id(&meta) == locked => return Ok(Some(file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&session.path)(e)),
            // Replaced while this waited: lock the file the path names now.
            Ok(_) => {}
        }
    }
    Err(io_err(&session.path)(io::Error::other(
        "the session file kept being replaced while waiting for its lock",
    )))
}

/// Brings memory up to date with the file. Returns the tail repair a write must do, and
/// whether the file was reloaded whole.
fn sync_from_disk(session: &mut Session, mode: TailMode) -> Result<(TailRepair, bool)> {
    let meta = match fs::metadata(&session.file) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Deleted under us: the next write puts back everything we hold.
            session.needs_rewrite = true;
            return Ok((TailRepair::None, false));
        }
        Err(e) => return Err(io_err(&session.path)(e)),
    };
    let replaced = file_id(&meta) != session.disk.id;
    if replaced || meta.len() < session.disk.consumed {
        reload(session)?;
        // The reloaded file may end in a torn line (cut in place mid-line): under the lock
        // it must go before anything is appended, or the append would glue onto it.
        let len = fs::metadata(&session.file).map_or(0, |m| m.len());
        let repair = if session.disk.missing_newline {
            TailRepair::AddNewline
        } else if mode == TailMode::Locked && len > session.disk.consumed {
            TailRepair::Truncate(session.disk.consumed)
        } else {
            TailRepair::None
        };
        return Ok((repair, true));
    }
    let mut data = Vec::new();
    if meta.len() > session.disk.consumed {
        let mut file = files::open_regular(&session.file, OpenOptions::new().read(true))
            .map_err(io_err(&session.path))?;
        file.seek(SeekFrom::Start(session.disk.consumed))
            .map_err(io_err(&session.path))?;
        file.read_to_end(&mut data).map_err(io_err(&session.path))?;
    }
    Ok((session.ingest_lines(data, mode), false))
}

/// Re-reads the whole file after another process replaced it.
fn reload(session: &mut Session) -> Result<()> {
    let (fresh, _) = load(session.path.clone(), session.file.clone(), &|_| {})?;
    session.adopt_reloaded(fresh);
    Ok(())
}

/// Writes header, entries and kept malformed lines to a temp file and renames it over the
/// session file. Caller holds the lock.
fn write_all_atomically(session: &mut Session) -> Result<()> {
    session.control_changed_entries()?;
    let (mut header, body) = session.whole_lines(&[]);
    if header.title_line.is_some() {
        // The agent rewrites its title slot in place, without our lock: keep what it
        // holds now, not what it held when this session was read.
        header.title_line = current_title_line(&session.file).or(header.title_line);
    }
    let mut out = header.head_bytes();
    out.push(b'\n');
    let lines = header.head_lines() + body.len();
    for line in body {
        match line {
            // A line that cannot be read back as it was (the file was cut or changed in
            // place by another program) stops the rewrite: the file is left as it is.
            Line::Entry(e) => {
                out.extend_from_slice(&e.line_bytes().map_err(io_err(&session.path))?)
            }
            Line::Kept(bytes) => out.extend_from_slice(bytes),
        }
        out.push(b'\n');
    }
    refuse_hard_linked(&session.file).map_err(io_err(&session.path))?;
    remove_stale_temp_files(&session.file);
    let id = atomic_write(&session.file, &out).map_err(io_err(&session.path))?;
    session.header = header;
    session.needs_rewrite = false;
    session.disk = DiskState {
        consumed: out.len() as u64,
        missing_newline: false,
        lines,
        id,
    };
    session.file_leaf = file_leaf_of(&session.entries);
    Ok(())
}

/// The file backend: a JSONL file shared with other processes by the sidecar lock (the
/// protocol in the module header of `session/file.rs`). What it knows of the file's bytes is
/// the session's [`DiskState`], which the loader advances as it reads.
#[derive(Debug, Default)]
pub(super) struct FileStore;

impl Store for FileStore {
    fn refresh(&mut self, session: &mut Session) -> Result<usize> {
        let before = session.entries.len();
        let reloaded = sync_from_disk(session, TailMode::Wait)?.1;
        Ok(if reloaded {
            session.entries.len()
        } else {
            session.entries.len() - before
        })
    }

    fn write(&mut self, session: &mut Session, build: Build<'_>) -> Result<()> {
        let _lock = lock_writers(session)?;
        let (repair, _) = sync_from_disk(session, TailMode::Locked)?;
        let new = build(&*session)?;
        let new = session.controlled(new)?;
        if session.needs_rewrite {
            let n = session.entries.len();
            let leaves = (session.leaf.clone(), session.file_leaf.clone());
            session.commit(new);
            if let Err(e) = write_all_atomically(session) {
                session.entries.truncate(n);
                session.revision = next_revision();
                session.rebuild_index();
                (session.leaf, session.file_leaf) = leaves;
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
            bytes.extend_from_slice(&e.line_bytes().map_err(io_err(&session.path))?);
            bytes.push(b'\n');
        }
        let mut file = files::open_regular(&session.file, OpenOptions::new().write(true))
            .map_err(io_err(&session.path))?;
        if let TailRepair::Truncate(len) = repair {
            file.set_len(len).map_err(io_err(&session.path))?;
        }
        let start = file.seek(SeekFrom::End(0)).map_err(io_err(&session.path))?;
        // One write of the whole batch; if it fails part way (EFBIG past `ulimit -f`, ENOSPC,
        // EIO) or cannot be synced, the file is cut back to where it was, so the error means
        // nothing of the batch landed and a retry cannot duplicate entries.
        let written = file.write_all(&bytes).and_then(|()| {
            if session.sync == SyncPolicy::Fsync {
                file.sync_data()?;
            }
            Ok(())
        });
        if let Err(e) = written {
            if let Err(cut) = file.set_len(start) {
                tracing::error!(
                    path = %session.path.display(),
                    error = %cut,
                    "cutting a failed append back to {start} bytes failed: the file may end in part of it"
                );
            }
            return Err(io_err(&session.path)(e));
        }
        session.disk.consumed = start + bytes.len() as u64;
        session.disk.missing_newline = false;
        session.disk.lines += new.len();
        session.commit(new);
        Ok(())
    }

    fn replace(&mut self, session: &mut Session, edit: Edit<'_>) -> Result<()> {
        let _lock = lock_writers(session)?;
        sync_from_disk(session, TailMode::Locked)?;
        session.rewrite_with(edit, write_all_atomically)
    }
}

/// The title line the file at `path` starts with now, if it starts with one.
fn current_title_line(path: &Path) -> Option<crate::session::entry::TitleLine> {
    let file = files::open_regular(path, OpenOptions::new().read(true)).ok()?;
    let mut first = Vec::new();
    // A title slot is a few hundred bytes; a longer first line is read no further.
    io::BufRead::read_until(
        &mut io::BufReader::new(file).take(64 << 10),
        b'\n',
        &mut first,
    )
    .ok()?;
    let line = first.strip_suffix(b"\n")?;
    let value = serde_json::from_slice(line).ok()?;
    crate::session::entry::TitleLine::from_line(line, &value)
}

/// `path` with every symlink resolved: the file itself, whatever name it was given by.
pub(super) fn resolve(path: &Path) -> Result<PathBuf> {
    fs::canonicalize(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => SessionError::NotFound {
            path: path.to_path_buf(),
        },
        _ => io_err(path)(e),
    })
}

/// Loads the session file `file` (the resolved `path`): a large current file is streamed
/// (`stream.rs`), anything else read whole. A file that shrinks while it is streamed (another
/// program cut it) is read again whole.
pub(super) fn load(
    path: PathBuf,
    file: PathBuf,
    progress: &dyn Fn(LoadStep),
) -> Result<(Session, LoadReport)> {
    let not_found = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => SessionError::NotFound { path: path.clone() },
        _ => io_err(&path)(e),
    };
    let mut handle =
        files::open_regular(&file, OpenOptions::new().read(true)).map_err(not_found)?;
    let mut meta = handle.metadata().map_err(io_err(&path))?;
    progress(LoadStep::Reading { bytes: meta.len() });
    if meta.len() >= stream::STREAM_MIN_BYTES {
        let id = file_id(&meta);
        let src = Arc::new(LineSource::File(handle));
        let mut report = LoadReport::default();
        match load::streamed(
            path.clone(),
            file.clone(),
            Arc::clone(&src),
            meta.len(),
            id,
            &mut report,
            progress,
        ) {
            Ok(Some(session)) => {
                return session.map(|mut s| {
                    s.set_store(Box::new(FileStore));
                    (s, report)
                });
            }
            Ok(None) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        handle = files::open_regular(&file, OpenOptions::new().read(true)).map_err(not_found)?;
        meta = handle.metadata().map_err(io_err(&path))?;
    }
    let id = file_id(&meta);
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    handle.read_to_end(&mut data).map_err(io_err(&path))?;
    let mut report = LoadReport::default();
    let data = LineSource::memory(data);
    let mut session = load::from_bytes(path, file, data, id, &mut report, progress)?;
    session.set_store(Box::new(FileStore));
    Ok((session, report))
}

/// `.<name><suffix>` next to `path`.
pub(super) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}{suffix}"))
}

/// Removes `.<name>.<hex>.tmp` files a crashed rewrite of `path` left behind. Only called
/// under the write lock, so no other writer is between its temp write and its rename.
pub(super) fn remove_stale_temp_files(path: &Path) {
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

/// A rewrite renames a new file over the path: with more than one hard link the other names
/// would keep the old file and stop seeing the session's writes, so it is refused (appends,
/// which write the file in place under its inode's lock, go on).
fn refuse_hard_linked(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match fs::metadata(path) {
            Ok(meta) if meta.nlink() > 1 => {
                return Err(io::Error::other(format!(
                    "the session file has {} hard links; compactd does not rewrite (prune, \
                     migrate, repair) a hard-linked session, as replacing it would split its \
                     names into two files: give it a single name (copy it) to rewrite it",
                    meta.nlink()
                )));
            }
            _ => {}
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Temp file in the same directory, fsync, rename over `path`, fsync the directory. Keeps the
/// permissions of the file it replaces.
pub(super) fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<Option<FileId>> {
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
pub(super) fn sync_parent_dir(path: &Path) -> io::Result<()> {
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

/// An I/O error on `path` as a session error; a path that is not a regular file gets its own.
pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SessionError + '_ {
    move |source| match files::not_regular(&source) {
        Some(not_regular) => SessionError::NotRegularFile {
            path: path.to_path_buf(),
            kind: not_regular.kind,
        },
        None => SessionError::Io {
            path: path.to_path_buf(),
            source,
        },
    }
}
