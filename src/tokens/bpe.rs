//! Exact BPE counts over the vocabularies `build.rs` embeds (`table.rs`): the text is split
//! into pieces by the vocabulary's pattern, and each piece is merged pair by pair, always the
//! lowest-ranked adjacent pair first (the leftmost of equals), as tiktoken does; the count is
//! the number of parts left. A vocabulary's first count builds two things, each once per
//! process: its lookup tables (`lookup.rs`, a few milliseconds) and the splitting automaton (a
//! forward-only lazy DFA: each piece starts where the last ended, so no reverse automaton or
//! capture machinery is needed, which makes it about 3x cheaper to build than a `regex`).
//!
//! tiktoken's patterns contain one look-ahead, `\s+(?!\S)` (a run of whitespace not followed by
//! other text, i.e. all of it at the end of the text, else all but its last character), which
//! the `regex` crates do not support. It is written here as `\s+\s`, whose last character is
//! then given back, with `\s+$` placed before it for a run that ends the text; leftmost-first
//! alternation picks the same alternative a backtracking engine does.
//! The possessive quantifiers of cl100k's pattern never change its matches (each is followed
//! by a class it cannot share characters with), so they are written as plain ones. Tests
//! compare every count with tiktoken-rs's.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Mutex, OnceLock};

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::{Anchored, Input, MatchKind};

use super::lookup::Lookup;

/// A vocabulary: its embedded tokens and its splitting pattern, and what is built from them
/// on first use.
pub(super) struct Vocab {
    embedded: &'static [u8],
    lookup: OnceLock<Lookup>,
    pattern: &'static str,
    splitter: OnceLock<Splitter>,
}

/// The compiled pattern and the scratch space of its searches (one per concurrent caller).
pub(super) struct Splitter {
    dfa: DFA,
    caches: Mutex<Vec<Cache>>,
}

const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+$",
    r"|\s+\s",
    r"|\s+",
);

const CL100K_PATTERN: &str = concat!(
    r"'(?i:[sdmt]|ll|ve|re)",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s+$",
    r"|\s*[\r\n]",
    r"|\s+\s",
    r"|\s",
);

pub(super) fn o200k() -> &'static Vocab {
    static V: OnceLock<Vocab> = OnceLock::new();
    V.get_or_init(|| {
        Vocab::new(
            include_bytes!(concat!(env!("OUT_DIR"), "/o200k-v2.bpe")),
            O200K_PATTERN,
        )
    })
}

pub(super) fn cl100k() -> &'static Vocab {
    static V: OnceLock<Vocab> = OnceLock::new();
    V.get_or_init(|| {
        Vocab::new(
            include_bytes!(concat!(env!("OUT_DIR"), "/cl100k-v2.bpe")),
            CL100K_PATTERN,
        )
    })
}

impl Vocab {
    fn new(embedded: &'static [u8], pattern: &'static str) -> Vocab {
        Vocab {
            embedded,
            lookup: OnceLock::new(),
            pattern,
            splitter: OnceLock::new(),
        }
    }

    /// The tables that find tokens, built on first use.
    pub(super) fn lookup(&self) -> &Lookup {
        self.lookup.get_or_init(|| Lookup::new(self.embedded))
    }

    /// The splitting automaton, built on first use.
    pub(super) fn splitter(&self) -> &Splitter {
        self.splitter.get_or_init(|| {
            let dfa = DFA::builder()
                .configure(DFA::config().match_kind(MatchKind::LeftmostFirst))
                .thompson(thompson::Config::new().which_captures(thompson::WhichCaptures::None))
                .build(self.pattern)
                // Cannot fail: the patterns are constants that the tests compile.
                .expect("the pattern compiles");
            Splitter {
                dfa,
                caches: Mutex::new(Vec::new()),
            }
        })
    }

    /// Tokens in `text`.
    pub(super) fn count(&self, text: &str) -> usize {
        let lookup = self.lookup();
        let splitter = self.splitter();
        let mut cache = splitter
            .caches
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop()
            .unwrap_or_else(|| splitter.dfa.create_cache());
        let n = pieces(&splitter.dfa, &mut cache, text)
            .map(|piece| count_piece(lookup, piece.as_bytes()))
            .sum();
        splitter
            .caches
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(cache);
        n
    }
}

/// Tokens in one piece of the split.
fn count_piece(lookup: &Lookup, piece: &[u8]) -> usize {
    if piece.len() <= 1 || lookup.rank(piece).is_some() {
        return piece.len().min(1);
    }
    if piece.len() < LONG_PIECE {
        merge_short(lookup, piece)
    } else {
        merge_long(lookup, piece)
    }
}

/// The rank of `piece[starts[i]..starts[i + 2]]`, the pair of parts `i` and `i + 1`.
fn pair_rank(lookup: &Lookup, piece: &[u8], starts: &[usize], i: usize) -> u32 {
    match starts.get(i + 2) {
        Some(&end) => lookup.rank(&piece[starts[i]..end]).unwrap_or(NO_PAIR),
        None => NO_PAIR,
    }
}

/// The merge by repeated scans for the lowest pair: quadratic, fast for short pieces.
fn merge_short(lookup: &Lookup, piece: &[u8]) -> usize {
    // starts[i]: where part i begins; the last element is the piece's end.
    let mut starts: Vec<usize> = (0..=piece.len()).collect();
    let mut ranks: Vec<u32> = (0..piece.len())
        .map(|i| pair_rank(lookup, piece, &starts, i))
        .collect();
    loop {
        let mut best = (NO_PAIR, 0);
        for (i, &r) in ranks.iter().enumerate() {
            if r < best.0 {
                best = (r, i);
            }
        }
        let (rank, i) = best;
        if rank == NO_PAIR {
            return starts.len() - 1;
        }
        starts.remove(i + 1);
        ranks.remove(i + 1);
        ranks[i] = pair_rank(lookup, piece, &starts, i);
        if i > 0 {
            ranks[i - 1] = pair_rank(lookup, piece, &starts, i - 1);
        }
    }
}

/// The same merge with a heap of candidate pairs and linked parts: `n log n` for long
/// pieces (a run of spaces, a long word). A heap entry is stale once either part of its
/// pair has changed; it is then skipped.
fn merge_long(lookup: &Lookup, piece: &[u8]) -> usize {
    let n = piece.len();
    // Parts are named by their start; next[s] is the start of the following part (n at
    // the end), prev[s] the start of the one before, alive[s] whether s still starts one.
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|s| s.wrapping_sub(1)).collect();
    let mut alive = vec![true; n];
    let rank_of = |start: usize, end: usize| lookup.rank(&piece[start..end]);
    let mut heap = BinaryHeap::new();
    for s in 0..n - 1 {
        if let Some(r) = rank_of(s, s + 2) {
            heap.push(Reverse((r, s, s + 2)));
        }
    }
    let mut parts = n;
    while let Some(Reverse((_, s, end))) = heap.pop() {
        let mid = if s < n && alive[s] { next[s] } else { continue };
        if mid >= n || next[mid] != end {
            continue;
        }
        // Merge the parts at s and mid.
        alive[mid] = false;
        next[s] = end;
        if end < n {
            prev[end] = s;
        }
        parts -= 1;
        if end < n
            && let Some(r) = rank_of(s, next[end])
        {
            heap.push(Reverse((r, s, next[end])));
        }
        let before = prev[s];
        if before < n
            && let Some(r) = rank_of(before, end)
        {
            heap.push(Reverse((r, before, end)));
        }
    }
    parts
}

/// The rank of a pair that is not a token (higher than every rank).
const NO_PAIR: u32 = u32::MAX;

/// Pieces from this length on are merged with the heap.
const LONG_PIECE: usize = 64;

/// The pieces of `text` as the vocabulary's pattern splits it (see the module header for the
/// look-ahead): each is the leftmost-first match anchored where the previous one ended (every
/// character starts a match of some alternative, so the pieces cover the text).
fn pieces<'t>(
    dfa: &'t DFA,
    cache: &'t mut Cache,
    text: &'t str,
) -> impl Iterator<Item = &'t str> + 't {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= text.len() {
            return None;
        }
        let input = Input::new(text).range(at..).anchored(Anchored::Yes);
        // The lazy DFA gives up only when configured to (it is not) or on a quit byte (there
        // are none: the patterns have no word boundary); stop rather than loop if it does.
        let end = dfa.try_search_fwd(cache, &input).ok()??.offset();
        let start = at;
        let mut end = end;
        if is_lookahead_match(text, start, end) {
            // Cannot fail: the match holds at least two characters.
            end -= text[..end].chars().next_back().map_or(0, char::len_utf8);
        }
        if end <= start {
            return None;
        }
        at = end;
        Some(&text[start..end])
    })
}

/// Whether `text[start..end]` was matched by the `\s+\s` alternative: only whitespace, at
/// least two characters, not at the end of the text, not ending in a line break (the
/// alternatives before it would have taken the run then) and not a single character (the
/// alternative after it).
fn is_lookahead_match(text: &str, start: usize, end: usize) -> bool {
    let m = &text[start..end];
    end < text.len()
        && !m.ends_with(['\r', '\n'])
        && m.chars().nth(1).is_some()
        && m.chars().all(char::is_whitespace)
}

#[cfg(test)]
mod tests;
