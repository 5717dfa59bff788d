//! Opening a large file on two cores: the read is split in two `pread`s, and the header fields
//! of the lines are parsed in two halves ahead of the (sequential) loader, which takes them in
//! order and parses anything not covered (the line that straddles the halves, a tail without a
//! newline, lines whose header is unusual) itself. The result is the same as a sequential open;
//! only the time changes.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use super::Entry;

/// Files from this size on are read and pre-parsed by two threads; below it a thread costs
/// more than it saves. Unit tests use a small value so their generated files take this path.
pub(super) const PARALLEL_MIN_BYTES: usize = if cfg!(test) { 64 << 10 } else { 4 << 20 };

/// Reads `file` (whose size was `len` a moment ago) whole, the two halves in parallel. A file
/// that shrank in the meantime is read again sequentially; one that grew is read to its end.
pub(super) fn read_in_two(file: &mut File, len: usize) -> io::Result<Vec<u8>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        // Zeroed memory comes straight from the kernel untouched, so each thread faults in
        // its own half. (Asking for transparent huge pages would halve the faults, but their
        // compaction stalls made open times jump from 0.6 to 1.3 s on L: not worth it.)
        let mut data = vec![0u8; len];
        let mid = len / 2;
        let (first, second) = data.split_at_mut(mid);
        let file_ref = &*file;
        let (a, b) = std::thread::scope(|s| {
            let other = s.spawn(move || file_ref.read_exact_at(second, mid as u64));
            let a = file_ref.read_exact_at(first, 0);
            (a, other.join())
        });
        match (a, b) {
            (Ok(()), Ok(Ok(()))) => {
                file.seek(SeekFrom::Start(len as u64))?;
                file.read_to_end(&mut data)?;
                Ok(data)
            }
            _ => read_sequentially(file),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = len;
        read_sequentially(file)
    }
}

fn read_sequentially(file: &mut File) -> io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(0))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

/// Lazily loaded entries of the complete lines of `buf[from..]`, keyed by the offset where
/// each line starts, in file order; lines whose header does not take the lazy path are left
/// out. The region is cut in two at a line boundary and each half parsed by its own thread.
pub(super) fn preparse(buf: &Arc<Vec<u8>>, from: usize) -> VecDeque<(usize, Entry)> {
    let from = from.min(buf.len());
    let mid = from + (buf.len() - from) / 2;
    let Some(cut) = memchr::memchr(b'\n', &buf[mid..]).map(|i| mid + i + 1) else {
        return heads_of_lines(buf, from, buf.len()).into();
    };
    let (mut first, second) = std::thread::scope(|s| {
        let other = s.spawn(|| heads_of_lines(buf, cut, buf.len()));
        let first = heads_of_lines(buf, from, cut);
        // Cannot fail unless the parser panicked, which would be a bug worth surfacing.
        (first, other.join().expect("the pre-parse thread finished"))
    });
    first.extend(second);
    first.into()
}

/// The lazily loaded entries of the newline-terminated lines of `buf[from..to]`.
fn heads_of_lines(buf: &Arc<Vec<u8>>, from: usize, to: usize) -> Vec<(usize, Entry)> {
    let mut out = Vec::new();
    let mut start = from;
    for nl in memchr::memchr_iter(b'\n', &buf[from..to]) {
        let end = from + nl;
        if let Ok(entry) = Entry::from_shared_line(buf, start, end) {
            out.push((start, entry));
        }
        start = end + 1;
    }
    out
}
