//! Opening a large current file without copying it into memory.
//!
//! The file is read once through a small buffer that is reused (what `wc -l` does), two
//! halves on two threads; each line's header fields are taken from its first bytes by the
//! scanner of `entry/head.rs`, and the line is kept as an offset range of the open file. Its
//! body is read again from the file when something parses it or a rewrite writes it back.
//!
//! Why not `mmap`: a mapped file that another program truncates in place makes the next touch
//! of a page past its new end raise SIGBUS, which kills the process; no lock can prevent that,
//! since such a program does not take ours. A read through a buffer sees a short read
//! instead, which is an ordinary error: the open is retried by reading the whole file, and a
//! line that can no longer be read back as it was is reported when it is used and stops any
//! rewrite that would have to copy it (`entry/raw.rs`). Reading costs about what mapping costs
//! (the copy from the page cache into a buffer that stays in the CPU cache, against a page
//! fault per 4 KiB page of the map), and memory stays at the entries' size, not the file's.
//!
//! Lines the scanner gives up on (unusual shapes, a line cut short, invalid UTF-8 in the
//! header) are read whole into memory and decided by the ordinary loader, so the result is the
//! same as reading the file whole; only the time and the memory change.

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::sync::Arc;

use super::cursor::Loaded;
use crate::session::entry::{Entry, LineSource, head, read_exact_at};

/// Files from this size on are streamed; smaller ones are read whole. Unit tests use small
/// values so their generated files take this path and its long-line cases.
pub(super) const STREAM_MIN_BYTES: u64 = if cfg!(test) { 16 << 10 } else { 4 << 20 };
/// The reused read buffer of each thread. Small enough to stay in the core's own cache while
/// the kernel copies into it and the scan reads it back: with 1 MiB buffers two threads
/// scanned a 50 MB file hardly faster than one (11 ms against 13 for a bare read-and-count
/// loop; 7 ms with 64 KiB buffers, 2026-12-03).
const BUF_BYTES: usize = if cfg!(test) { 2 << 10 } else { 64 << 10 };
/// A line start closer than this to the end of the buffer moves to its front before the
/// header scan, so the header of an ordinary line is always in the buffer.
const HEAD_BYTES: usize = if cfg!(test) { 256 } else { 4 << 10 };

/// The complete lines of one region of the file, in order: the entries the scanner took,
/// each with its line number counted from 1 at the region's start, and the lines it gave up
/// on (read whole, for the ordinary loader to decide), with theirs.
pub(super) struct Part {
    pub(super) entries: Loaded,
    pub(super) odd: Vec<(usize, Vec<u8>)>,
    /// How many lines the region held.
    pub(super) lines: usize,
}

impl Part {
    /// Room for the lines of `bytes` bytes, guessed generously: the room is only address
    /// space until it is written, while growing a vector of entries copies it.
    fn with_room_for(bytes: u64) -> Self {
        let guess = (bytes / ROOM_BYTES_PER_LINE).min(ROOM_MAX_LINES) as usize + 16;
        Self {
            entries: Loaded::with_capacity(guess),
            odd: Vec::new(),
            lines: 0,
        }
    }

    fn push(&mut self, item: Item) {
        self.lines += 1;
        match item {
            Item::Lazy(entry) => self.entries.push(entry, self.lines),
            Item::Bytes(bytes) => self.odd.push((self.lines, bytes)),
        }
    }
}

/// Sessions average kilobytes a line; a region is given room for a line per this many bytes.
const ROOM_BYTES_PER_LINE: u64 = 512;
/// ... and at most this many lines' room before it grows as it goes.
const ROOM_MAX_LINES: u64 = 1 << 20;

/// One complete line of the file.
enum Item {
    /// Its header fields; its bytes stay in the file.
    Lazy(Entry),
    /// The whole line, for the ordinary loader to decide.
    Bytes(Vec<u8>),
}

/// The complete lines of `file[from..to]` (`from` a line start), in parts to be taken in
/// order (one per thread; the first has room for the others' entries), and the offset after
/// the last of them: the start of an unterminated tail, or `to`.
pub(super) fn scan_file(src: &Arc<LineSource>, from: u64, to: u64) -> io::Result<(Vec<Part>, u64)> {
    let LineSource::File(file) = &**src else {
        return Err(io::Error::other("not a file source"));
    };
    let Some(cut) = split_point(file, from, to)? else {
        let (part, end) = scan_range(src, file, from, to, Part::with_room_for(to - from))?;
        return Ok((vec![part], end));
    };
    // The second thread reads through its own handle on the file (a duplicate descriptor),
    // so the two threads do not bump one shared counter for every line; its entries are
    // pointed at `src` afterwards.
    let own = Arc::new(LineSource::File(file.try_clone()?));
    let (first, second) = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let LineSource::File(own_file) = &*own else {
                unreachable!("made from a file just above")
            };
            scan_range(&own, own_file, cut, to, Part::with_room_for(to - cut))
        });
        let first = scan_range(src, file, from, cut, Part::with_room_for(to - from));
        // Cannot fail unless the scan panicked, which would be a bug worth surfacing.
        (first, other.join().expect("the scan thread finished"))
    });
    let (part, first_end) = first?;
    let (mut more, end) = second?;
    for entry in &mut more.entries.entries {
        entry.rebind(&own, src);
    }
    debug_assert_eq!(first_end, cut, "the first half ends at a line boundary");
    Ok((vec![part, more], end))
}

/// Where to cut `from..to` for two threads: just after the first `\n` at or after the middle.
/// `None` when the region is small or no line ends in its second half.
fn split_point(file: &File, from: u64, to: u64) -> io::Result<Option<u64>> {
    if to - from < 2 * BUF_BYTES as u64 {
        return Ok(None);
    }
    let mut buf = vec![0u8; HEAD_BYTES.max(4096)];
    let mut at = from + (to - from) / 2;
    while at < to {
        let n = buf.len().min((to - at) as usize);
        read_exact_at(file, &mut buf[..n], at)?;
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            let cut = at + i as u64 + 1;
            return Ok((cut < to).then_some(cut));
        }
        at += n as u64;
    }
    Ok(None)
}

/// JSON whitespace.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn last_non_ws(bytes: &[u8]) -> Option<u8> {
    bytes.iter().rev().copied().find(|&b| !is_ws(b))
}

/// The reused buffer over `file`, from `base` on.
struct Window<'f> {
    file: &'f File,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    base: u64,
    /// Valid bytes in `buf`.
    filled: usize,
    /// End of the region being read.
    to: u64,
}

impl Window<'_> {
    fn unread(&self) -> u64 {
        self.to - (self.base + self.filled as u64)
    }

    /// Moves `buf[at..filled]` to the front and fills the rest; returns the new `at` (0).
    fn refill(&mut self, at: usize) -> io::Result<usize> {
        self.buf.copy_within(at..self.filled, 0);
        self.base += at as u64;
        self.filled -= at;
        let n = (self.buf.len() - self.filled).min(self.unread() as usize);
        let offset = self.base + self.filled as u64;
        read_exact_at(
            self.file,
            &mut self.buf[self.filled..self.filled + n],
            offset,
        )?;
        self.filled += n;
        Ok(0)
    }
}

fn scan_range(
    src: &Arc<LineSource>,
    file: &File,
    from: u64,
    to: u64,
    mut part: Part,
) -> io::Result<(Part, u64)> {
    let mut w = Window {
        file,
        buf: vec![0u8; BUF_BYTES],
        base: from,
        filled: 0,
        to,
    };
    let mut at = 0;
    loop {
        if w.filled - at < HEAD_BYTES && w.unread() > 0 {
            at = w.refill(at)?;
        }
        if let Some(nl) = memchr::memchr(b'\n', &w.buf[at..w.filled]) {
            let line = &w.buf[at..at + nl];
            let start = w.base + at as u64;
            part.push(match head::scan_line(line) {
                Some(head) => {
                    Item::Lazy(Entry::lazy(src, start as usize, start as usize + nl, head))
                }
                None => Item::Bytes(line.to_vec()),
            });
            at += nl + 1;
            continue;
        }
        if w.unread() == 0 {
            // What is left has no newline: the caller reads it as the file's tail.
            return Ok((part, w.base + at as u64));
        }
        if at > 0 {
            at = w.refill(at)?;
            continue;
        }
        // A line longer than the buffer, starting at its front.
        match long_line(src, &mut w)? {
            Some((item, next)) => {
                part.push(item);
                at = next;
            }
            None => return Ok((part, w.base)),
        }
    }
}

/// The line that fills the whole buffer (it starts at `w.base`): its header scanned from the
/// buffer, its end found by reading on through the same buffer. Returns the item and where
/// the next line starts in the buffer, or `None` when the region ends before the line does
/// (then `w.base` is still the line's start).
fn long_line(src: &Arc<LineSource>, w: &mut Window<'_>) -> io::Result<Option<(Item, usize)>> {
    let start = w.base;
    let scanned = head::scan(&w.buf[..w.filled]).map(|(h, stop)| (owned(h), stop));
    let mut last = last_non_ws(&w.buf[..w.filled]);
    let mut pos = w.base + w.filled as u64;
    loop {
        let n = w.buf.len().min((w.to - pos) as usize);
        if n == 0 {
            return Ok(None);
        }
        read_exact_at(w.file, &mut w.buf[..n], pos)?;
        let newline = memchr::memchr(b'\n', &w.buf[..n]);
        if let Some(b) = last_non_ws(&w.buf[..newline.unwrap_or(n)]) {
            last = Some(b);
        }
        let Some(nl) = newline else {
            pos += n as u64;
            continue;
        };
        let end = pos + nl as u64;
        let item = match scanned {
            Some((head, head::Stop::Body)) if last == Some(b'}') => {
                Item::Lazy(Entry::lazy(src, start as usize, end as usize, head))
            }
            _ => {
                let mut line = vec![0u8; (end - start) as usize];
                read_exact_at(w.file, &mut line, start)?;
                Item::Bytes(line)
            }
        };
        w.base = pos;
        w.filled = n;
        return Ok(Some((item, nl + 1)));
    }
}

fn owned(h: head::Head<'_>) -> head::Head<'static> {
    let own = |c: Cow<'_, str>| Cow::Owned(c.into_owned());
    head::Head {
        type_name: own(h.type_name),
        id: h.id.map(own),
        parent_id: h.parent_id.map(own),
        timestamp: h.timestamp.map(own),
    }
}
