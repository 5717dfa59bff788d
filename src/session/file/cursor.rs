//! Where reading a session's lines stands, shared by the loader (`load.rs`), the large-file
//! scanner (`stream.rs`) and the writers (`disk.rs`, `store.rs`): the entries read
//! ([`Loaded`]), how far the file has been read ([`DiskState`], [`FileId`]), and what to do
//! about an unterminated last line ([`TailMode`], [`TailRepair`]).

use std::fs;

use crate::session::entry::Entry;

/// Identity of the file on disk, to notice another process's rename-based rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileId {
    dev: u64,
    ino: u64,
}

pub(super) fn file_id(meta: &fs::Metadata) -> Option<FileId> {
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

/// How to treat a trailing line with no `\n`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum TailMode {
    /// At open: keep it if it parses, else report it as torn.
    Open,
    /// Another writer may be mid-append: leave it for later.
    Wait,
    /// Under the write lock nobody is mid-append: it is torn for good.
    Locked,
}

/// What the next write must do about the end of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TailRepair {
    None,
    AddNewline,
    Truncate(u64),
}

/// What this process knows of the file's bytes.
#[derive(Clone, Debug, Default)]
pub(super) struct DiskState {
    /// Bytes read and used; ends at a line boundary, or at the end of an accepted
    /// unterminated last line (`missing_newline`).
    pub(super) consumed: u64,
    pub(super) missing_newline: bool,
    /// Lines read so far, for line numbers in reports.
    pub(super) lines: usize,
    pub(super) id: Option<FileId>,
}

/// Entries read from a file, each with the number of the line it came from, in two vectors
/// so that the entries become the session's without being moved.
#[derive(Debug, Default)]
pub(super) struct Loaded {
    pub(super) entries: Vec<Entry>,
    pub(super) lines: Vec<usize>,
}

impl Loaded {
    /// Room for `n` entries (address space until written).
    pub(super) fn with_capacity(n: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
            lines: Vec::with_capacity(n),
        }
    }

    pub(super) fn push(&mut self, entry: Entry, line: usize) {
        self.entries.push(entry);
        self.lines.push(line);
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Moves `other`'s entries onto the end of these.
    pub(super) fn append(&mut self, other: &mut Loaded) {
        self.entries.append(&mut other.entries);
        self.lines.append(&mut other.lines);
    }
}

impl IntoIterator for Loaded {
    type Item = (Entry, usize);
    type IntoIter = std::iter::Zip<std::vec::IntoIter<Entry>, std::vec::IntoIter<usize>>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter().zip(self.lines)
    }
}
