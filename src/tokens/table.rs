//! The layout of a BPE vocabulary as compactd embeds it: built once by `build.rs` from
//! tiktoken-rs's vocabularies and read in place at run time, so an exact count needs no table
//! to be built when a process starts (tiktoken-rs builds its hash maps in about 170 ms).
//!
//! A table is one little-endian byte string:
//! * `u32` token count `n`, `u32` slot bits `b`;
//! * `n + 1` `u32` offsets: token `r`'s bytes are `bytes[offset[r]..offset[r + 1]]`;
//! * `2^b` `u32` slots of an open-addressing hash table (linear probing by [`token_hash`]),
//!   each a rank or `u32::MAX` for empty;
//! * the tokens' bytes, in rank order.
//!
//! This file is also compiled into `build.rs` (by path), so the hash is the same on both sides.

/// Marks an empty slot.
pub const EMPTY: u32 = u32::MAX;

/// The hash that places a token's bytes in the table.
pub fn token_hash(bytes: &[u8]) -> u64 {
    const MUL: u64 = 0x2127_599b_f432_5c37;
    let mix = |h: u64, word: u64| {
        let h = (h ^ word).wrapping_mul(MUL);
        h ^ (h >> 47)
    };
    let mut h = 0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = mix(h, u64::from_le_bytes(word));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(word));
    }
    h
}

/// The table of `tokens` (indexed by rank) in the layout above.
#[allow(dead_code)] // Used by build.rs; the library only reads tables.
pub fn encode(tokens: &[Vec<u8>]) -> Vec<u8> {
    let n = tokens.len();
    let bits = (usize::BITS - (2 * n).next_power_of_two().leading_zeros() - 1).max(4);
    let mask = (1usize << bits) - 1;
    let mut slots = vec![EMPTY; 1 << bits];
    for (rank, token) in tokens.iter().enumerate() {
        let mut at = token_hash(token) as usize & mask;
        while slots[at] != EMPTY {
            at = (at + 1) & mask;
        }
        slots[at] = rank as u32;
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&bits.to_le_bytes());
    let mut offset = 0u32;
    out.extend_from_slice(&offset.to_le_bytes());
    for token in tokens {
        offset += token.len() as u32;
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for slot in slots {
        out.extend_from_slice(&slot.to_le_bytes());
    }
    for token in tokens {
        out.extend_from_slice(token);
    }
    out
}
