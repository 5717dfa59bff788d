//! `compactd blobs [--dir DIR] [--gc] SESSION_OR_DIR...`: the blob references of session files
//! and the blob store's files nothing among them refers to; `--gc` deletes those (only then:
//! blobs are never deleted automatically).
//!
//! Only the sessions named are read, so `--gc` must be given every session that shares the
//! store (the reference agent's included), or it deletes blobs another session still needs.
//!
//! A writer puts a blob in the store before the line that refers to it reaches the session
//! file (and [`BlobStore::put`] refreshes the mtime of a blob it reuses), so a blob younger
//! than `--grace` seconds (default one hour) is never deleted, even unreferenced: it may belong
//! to an append in flight. Such blobs are reported as `keptRecent`. The mtime is read again
//! just before each deletion.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::protocol::BlobsReport;
use crate::session::size_controls::{BlobStore, blob_refs_in_line};

use crate::settings::SettingsStack;

use super::common::{self, CliError};

/// Arguments of `compactd blobs`.
#[derive(Debug, clap::Args)]
pub struct BlobsArgs {
    /// Session files (`.jsonl`) or directories searched for them (recursively).
    #[arg(required = true)]
    pub sessions: Vec<PathBuf>,
    /// The blob store (default: `storage.blobDir`, else `~/.omp/agent/blobs`).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Delete the store's files that none of the sessions refers to.
    #[arg(long)]
    pub gc: bool,
    /// With `--gc`: keep unreferenced blobs modified less than this many seconds ago (a
    /// concurrent writer may be about to refer to them). `0` deletes every unreferenced blob.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_GRACE_SECONDS)]
    pub grace: u64,
    #[arg(long)]
    pub json: bool,
}

/// `--grace` by default: one hour, far longer than a blob waits for its line.
pub const DEFAULT_GRACE_SECONDS: u64 = 3600;

/// Whether the store file `path` was modified within `grace` (or its age cannot be told, or
/// it is gone: nothing to delete then).
fn is_recent(path: &Path, grace: std::time::Duration) -> bool {
    match std::fs::symlink_metadata(path).and_then(|m| m.modified()) {
        Ok(modified) => match std::time::SystemTime::now().duration_since(modified) {
            Ok(age) => age < grace,
            // Modified "in the future" (clock skew): young.
            Err(_) => true,
        },
        Err(_) => true,
    }
}

fn session_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), CliError> {
    if path.is_dir() {
        let mut children: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?
            .filter_map(|d| d.ok().map(|d| d.path()))
            .collect();
        children.sort();
        for child in children {
            if child.is_dir() || child.extension().is_some_and(|x| x == "jsonl") {
                session_files(&child, out)?;
            }
        }
    } else {
        out.push(path.to_path_buf());
    }
    Ok(())
}

pub fn run(args: &BlobsArgs) -> Result<(), CliError> {
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            let settings = SettingsStack::discover(None).effective()?;
            match crate::engine::blob_store(&settings) {
                Some(store) => store.dir().to_path_buf(),
                None => return Err(CliError::new("no home directory: pass --dir")),
            }
        }
    };
    let store = BlobStore::new(&dir);
    let mut files = Vec::new();
    for path in &args.sessions {
        session_files(path, &mut files)?;
    }
    let mut referenced: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in &files {
        let text = crate::files::read_regular_to_string(file)
            .map_err(|e| CliError::new(format!("{}: {e}", file.display())))?;
        let mut refs = BTreeSet::new();
        for line in text.lines() {
            blob_refs_in_line(line, &mut refs);
        }
        for hex in refs {
            referenced.entry(hex).or_default().push(file.clone());
        }
    }
    let mut in_store = BTreeSet::new();
    if let Ok(read) = std::fs::read_dir(&dir) {
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_blob = name.len() == 64 && name.bytes().all(|c| c.is_ascii_hexdigit());
            if is_blob && entry.file_type().is_ok_and(|t| t.is_file()) {
                in_store.insert(name);
            }
        }
    }
    let missing = referenced
        .keys()
        .filter(|h| store.get(h).is_none())
        .cloned()
        .collect();
    let unreferenced: Vec<String> = in_store
        .iter()
        .filter(|h| !referenced.contains_key(*h))
        .cloned()
        .collect();
    let mut deleted = Vec::new();
    let mut kept_recent = Vec::new();
    let grace = std::time::Duration::from_secs(args.grace);
    for hex in &unreferenced {
        let path = dir.join(hex);
        if is_recent(&path, grace) {
            kept_recent.push(hex.clone());
            continue;
        }
        if args.gc {
            match std::fs::remove_file(&path) {
                Ok(()) => deleted.push(hex.clone()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(CliError::new(format!("{}: {e}", path.display()))),
            }
        }
    }
    let report = BlobsReport {
        store: dir,
        sessions: files.len(),
        referenced,
        missing,
        unreferenced,
        deleted,
        kept_recent,
        grace_seconds: args.grace,
    };
    if args.json {
        return common::print_json(&report);
    }
    let mut text = format!(
        "blob store {}: {} session file(s), {} referenced blob(s), {} missing, {} unreferenced\n",
        report.store.display(),
        report.sessions,
        report.referenced.len(),
        report.missing.len(),
        report.unreferenced.len()
    );
    for hex in &report.missing {
        text.push_str(&format!("  missing {hex}\n"));
    }
    for hex in &report.unreferenced {
        let verb = if report.kept_recent.contains(hex) {
            "kept (recent)"
        } else if args.gc {
            "deleted"
        } else {
            "unreferenced"
        };
        text.push_str(&format!("  {verb} {hex}\n"));
    }
    if !report.kept_recent.is_empty() {
        text.push_str(&format!(
            "({} unreferenced blob(s) modified in the last {} s are kept: a writer may be about \
             to refer to them; see --grace)\n",
            report.kept_recent.len(),
            report.grace_seconds
        ));
    }
    if !args.gc && report.unreferenced.len() > report.kept_recent.len() {
        text.push_str("(run again with --gc to delete the unreferenced blobs)\n");
    }
    common::print(&text)
}
