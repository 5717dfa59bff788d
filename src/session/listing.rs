//! Where session files live by default and how to list them (spec §1.1 naming): one directory
//! per working directory, `--<encoded cwd>--`, holding `<timestamp>_<session id>.jsonl` files.

use std::env;
use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use super::entry::{SessionHeader, TitleLine};
use super::ids;

/// Environment variable that overrides the data directory (tests, portable installs).
pub const DATA_DIR_ENV: &str = "COMPACTD_DATA_DIR";

/// compactd's data directory: `$COMPACTD_DATA_DIR` when set and non-empty, else the
/// platform's (e.g. `~/.local/share/compactd`). `None` when the platform has no home.
pub fn data_dir() -> Option<PathBuf> {
    data_dir_from(env::var_os(DATA_DIR_ENV))
}

fn data_dir_from(override_dir: Option<OsString>) -> Option<PathBuf> {
    match override_dir.filter(|d| !d.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => directories::ProjectDirs::from("", "", "compactd")
            .map(|dirs| dirs.data_dir().to_path_buf()),
    }
}

/// `<data dir>/sessions`.
pub fn sessions_dir() -> Option<PathBuf> {
    data_dir().map(|d| d.join("sessions"))
}

/// `--<cwd>--` with one leading `/` or `\` dropped and every `/`, `\` and `:` replaced by `-`.
pub fn encode_cwd(cwd: &str) -> String {
    let trimmed = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(cwd);
    let encoded: String = trimmed
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    format!("--{encoded}--")
}

/// The directory for sessions of `cwd` under `base`.
pub fn session_dir_for_cwd(base: &Path, cwd: &str) -> PathBuf {
    base.join(encode_cwd(cwd))
}

/// `<ISO timestamp with ':' and '.' replaced by '-'>_<id>.jsonl`.
pub fn session_file_name(timestamp_iso: &str, id: &str) -> String {
    format!("{}_{id}.jsonl", timestamp_iso.replace([':', '.'], "-"))
}

/// A fresh session id and the path of its file under `base` for `cwd`. Pass the id to
/// `Session::create` in `CreateOptions::id`.
pub fn new_session_path(base: &Path, cwd: &str) -> (PathBuf, String) {
    let id = ids::new_session_id();
    let name = session_file_name(&ids::now_iso(), &id);
    (session_dir_for_cwd(base, cwd).join(name), id)
}

/// A session file found by [`list_sessions`].
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    pub path: PathBuf,
    pub id: String,
    pub title: Option<String>,
    pub cwd: String,
    /// The header's creation time.
    pub timestamp: String,
    pub modified: SystemTime,
    /// Lines after the header (exact for files up to 8 MiB, estimated above).
    pub entry_count: usize,
}

const EXACT_COUNT_LIMIT: u64 = 8 << 20;

/// The valid session files directly in `dir`, most recently modified first. Files that are
/// not sessions (bad header, hidden, other extensions) are ignored; a missing dir is empty.
#[cfg(test)]
pub fn list_sessions(dir: &Path) -> io::Result<Vec<SessionInfo>> {
    Ok(list_page(&[dir.to_path_buf()], None, None)?.0)
}

/// [`list_sessions`] over every per-cwd directory under `base`.
pub fn list_all_sessions(base: &Path) -> io::Result<Vec<SessionInfo>> {
    Ok(list_page(&cwd_dirs(base)?, None, None)?.0)
}

/// The per-cwd directories under `base` (none when it is missing).
pub fn cwd_dirs(base: &Path) -> io::Result<Vec<PathBuf>> {
    let read = match fs::read_dir(base) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for item in read {
        let path = item?.path();
        if path.is_dir() {
            out.push(path);
        }
    }
    Ok(out)
}

/// Where a page of a listing starts: after the session with this place in the order (most
/// recently modified first, then by path or id). Sent to clients as an opaque string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListCursor {
    /// After the file modified at `nanos` (since the Unix epoch) with this path.
    File { nanos: u128, path: String },
    /// After the stored session written at `micros` (since the Unix epoch) with this id.
    Store { micros: i64, id: String },
}

impl std::fmt::Display for ListCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListCursor::File { nanos, path } => write!(f, "f.{nanos}.{path}"),
            ListCursor::Store { micros, id } => write!(f, "p.{micros}.{id}"),
        }
    }
}

impl std::str::FromStr for ListCursor {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let (kind, rest) = s.split_once('.').ok_or(())?;
        let (time, key) = rest.split_once('.').ok_or(())?;
        match kind {
            "f" => Ok(ListCursor::File {
                nanos: time.parse().map_err(|_| ())?,
                path: key.to_owned(),
            }),
            "p" => Ok(ListCursor::Store {
                micros: time.parse().map_err(|_| ())?,
                id: key.to_owned(),
            }),
            _ => Err(()),
        }
    }
}

/// The valid session files directly in `dirs`, most recently modified first (then by path),
/// after `after` and at most `limit` of them, with the cursor of the next page when more
/// files follow. Only the files of the page are read (their header and line count); the
/// others are only `stat`ed.
pub fn list_page(
    dirs: &[PathBuf],
    after: Option<(u128, &str)>,
    limit: Option<usize>,
) -> io::Result<(Vec<SessionInfo>, Option<ListCursor>)> {
    let mut candidates: Vec<(u128, String, PathBuf)> = Vec::new();
    for dir in dirs {
        let read = match fs::read_dir(dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for item in read {
            let path = item?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with('.') || !name.ends_with(".jsonl") {
                continue;
            }
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let nanos = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            candidates.push((nanos, path.to_string_lossy().into_owned(), path));
        }
    }
    // Newest first; equal times by path, so every page sees one order.
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let start = match after {
        Some((nanos, path)) => {
            candidates.partition_point(|c| c.0 > nanos || (c.0 == nanos && c.1.as_str() <= path))
        }
        None => 0,
    };
    let limit = limit.unwrap_or(usize::MAX).max(1);
    let mut out = Vec::new();
    let mut next = None;
    for (i, (_, _, path)) in candidates.iter().enumerate().skip(start) {
        if out.len() == limit {
            // More files follow: the next page starts after the last one read.
            let (nanos, path, _) = &candidates[i - 1];
            next = Some(ListCursor::File {
                nanos: *nanos,
                path: path.clone(),
            });
            break;
        }
        if let Some(info) = inspect(path) {
            out.push(info);
        }
    }
    Ok((out, next))
}

fn inspect(path: &Path) -> Option<SessionInfo> {
    let file = crate::files::open_regular(path, OpenOptions::new().read(true)).ok()?;
    let meta = file.metadata().ok()?;
    let mut reader = BufReader::new(file);
    let mut first = Vec::new();
    // A header is small; a huge first line is not one.
    (&mut reader)
        .take(1 << 20)
        .read_until(b'\n', &mut first)
        .ok()?;
    let mut head_len = first.len() as u64;
    let mut value: Value = serde_json::from_slice(&first).ok()?;
    // oh-my-pi 18's title line comes before the header.
    let line = first.strip_suffix(b"\n").unwrap_or(&first);
    let title_line = TitleLine::from_line(line, &value);
    if title_line.is_some() {
        let mut second = Vec::new();
        (&mut reader)
            .take(1 << 20)
            .read_until(b'\n', &mut second)
            .ok()?;
        head_len += second.len() as u64;
        value = serde_json::from_slice(&second).ok()?;
    }
    let mut header = SessionHeader::from_value(value)?;
    header.title_line = title_line;
    let entry_count = count_entries(&mut reader, meta.len(), head_len);
    Some(SessionInfo {
        path: path.to_path_buf(),
        id: header.id.clone(),
        title: header.display_title().map(str::to_owned),
        cwd: header.cwd,
        timestamp: header.timestamp,
        modified: meta.modified().ok()?,
        entry_count,
    })
}

fn count_entries(reader: &mut impl Read, len: u64, header_len: u64) -> usize {
    let mut buf = vec![0u8; 64 << 10];
    let mut lines = 0usize;
    let mut read = 0u64;
    let mut last = b'\n';
    while read < EXACT_COUNT_LIMIT.min(len - header_len.min(len)) {
        let n = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        lines += memchr::memchr_iter(b'\n', &buf[..n]).count();
        last = buf[n - 1];
        read += n as u64;
    }
    let rest = len.saturating_sub(header_len);
    if read < rest && read > 0 {
        // Estimate from the average line length seen so far.
        return ((lines.max(1) as u64) * rest / read) as usize;
    }
    lines + usize::from(last != b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::file::{CreateOptions, Session};

    #[test]
    fn cwd_encoding_and_file_names_follow_the_reference() {
        assert_eq!(encode_cwd("/home/dev/proj"), "--home-dev-proj--");
        assert_eq!(encode_cwd("C:\\Users\\dev"), "--C--Users-dev--");
        assert_eq!(encode_cwd("\\srv\\x"), "--srv-x--");
        assert_eq!(
            session_file_name("2026-03-01T09:00:00.000Z", "0a1b2c3d4e5f6789"),
            "2026-03-01T09-00-00-000Z_0a1b2c3d4e5f6789.jsonl"
        );
        let (path, id) = new_session_path(Path::new("/data/sessions"), "/w/p");
        assert!(path.starts_with("/data/sessions/--w-p--"));
        assert!(path.to_string_lossy().ends_with(&format!("_{id}.jsonl")));
    }

    #[test]
    fn the_environment_overrides_the_data_dir() {
        assert_eq!(
            data_dir_from(Some("/tmp/cd".into())),
            Some(PathBuf::from("/tmp/cd"))
        );
        assert_ne!(data_dir_from(Some("".into())), Some(PathBuf::new()));
    }

    #[test]
    fn listing_ignores_invalid_files() {
        let dir = tempfile::tempdir().unwrap();
        let (path, id) = new_session_path(dir.path(), "/w/p");
        let mut s = Session::create(
            &path,
            "/w/p",
            CreateOptions {
                id: Some(id.clone()),
                title: Some("t".into()),
                ..Default::default()
            },
        )
        .unwrap();
        s.append(crate::session::EntryKind::ThinkingLevelChange {
            thinking_level: "high".into(),
        })
        .unwrap();
        let cwd_dir = path.parent().unwrap();
        fs::write(cwd_dir.join("bad.jsonl"), "{\"type\":\"message\"}\n").unwrap();
        fs::write(cwd_dir.join("empty.jsonl"), "").unwrap();
        fs::write(cwd_dir.join("notes.txt"), "hello").unwrap();
        let found = list_sessions(cwd_dir).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].id, id);
        assert_eq!(found[0].title.as_deref(), Some("t"));
        assert_eq!(found[0].cwd, "/w/p");
        assert_eq!(found[0].entry_count, 1);
        assert_eq!(list_all_sessions(dir.path()).unwrap().len(), 1);
        assert!(list_sessions(&dir.path().join("nope")).unwrap().is_empty());
    }
}
