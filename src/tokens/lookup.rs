//! A vocabulary's tokens found by rank and by their bytes, built in memory from the embedded
//! vocabulary (`table.rs`) the first time it counts: one pass over the lengths for the
//! offsets, and one hash and insert per token (o200k: 200k tokens, a few milliseconds; the
//! tables take 2.9 MB of memory, cl100k's 1.4 MB). tiktoken-rs built its hash maps in ~170 ms.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;

use super::table;

/// Marks an empty slot of the hash table.
const EMPTY: u32 = u32::MAX;

/// A vocabulary's tokens with the tables to find them: by rank, and by their bytes.
pub struct Lookup {
    /// The tokens' bytes, in rank order (embedded in the binary).
    bytes: &'static [u8],
    /// Token `r` is `bytes[offsets[r]..offsets[r + 1]]`.
    offsets: Vec<u32>,
    /// Open addressing with linear probing by [`token_hash`]: each slot is a rank or `EMPTY`.
    /// At least twice as many slots as tokens, so probes stay short (most lookups are of
    /// pairs that are not tokens, and end at an empty slot).
    slots: Vec<u32>,
}

impl Lookup {
    /// The tables of an embedded vocabulary.
    pub fn new(embedded: &'static [u8]) -> Lookup {
        let (lengths, bytes) = table::decode(embedded);
        let mut offsets = Vec::with_capacity(lengths.len() + 1);
        let mut end = 0u32;
        offsets.push(end);
        for &len in lengths {
            end += u32::from(len);
            offsets.push(end);
        }
        // Holds for what build.rs writes; anything else is a broken build.
        assert_eq!(
            end as usize,
            bytes.len(),
            "the lengths cover the tokens' bytes"
        );
        let mask = (2 * lengths.len()).next_power_of_two().max(16) - 1;
        let mut slots = vec![EMPTY; mask + 1];
        for (rank, window) in offsets.windows(2).enumerate() {
            let token = &bytes[window[0] as usize..window[1] as usize];
            let mut at = token_hash(token) & mask;
            while slots[at] != EMPTY {
                at = (at + 1) & mask;
            }
            slots[at] = rank as u32;
        }
        Lookup {
            bytes,
            offsets,
            slots,
        }
    }

    /// How many tokens the vocabulary has.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The bytes of the token of rank `rank`.
    pub fn token(&self, rank: usize) -> &[u8] {
        &self.bytes[self.offsets[rank] as usize..self.offsets[rank + 1] as usize]
    }

    /// The rank of `bytes` when they are one token.
    pub fn rank(&self, bytes: &[u8]) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut at = token_hash(bytes) & mask;
        loop {
            let rank = self.slots[at];
            if rank == EMPTY {
                return None;
            }
            if self.token(rank as usize) == bytes {
                return Some(rank);
            }
            at = (at + 1) & mask;
        }
    }
}

/// Where a token's bytes start probing. The table lives only in memory, so the hash need not
/// be stable across builds.
fn token_hash(bytes: &[u8]) -> usize {
    FixedState::default().hash_one(bytes) as usize
}
