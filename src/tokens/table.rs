//! The layout of a BPE vocabulary as compactd embeds it: `build.rs` writes each of
//! tiktoken-rs's vocabularies once, as one byte string:
//! * `u32` token count `n`, little-endian;
//! * `n` lengths, one byte each (every token is 1 to 255 bytes long; [`encode`] checks);
//! * the tokens' bytes, in rank order.
//!
//! Only that is embedded (o200k 1.6 MB, cl100k 0.7 MB); the offsets of the tokens and the hash
//! table that finds a token's rank are built from it on first use (`lookup.rs`). Embedded
//! ready-built, they took 4 MB more of the binary.
//!
//! This file is also compiled into `build.rs` (by path), which uses only [`encode`].

/// The embedded form of `tokens` (indexed by rank), in the layout above.
#[allow(dead_code)] // Used by build.rs; the library only reads vocabularies.
pub fn encode(tokens: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    for token in tokens {
        let len = u8::try_from(token.len()).expect("every token is at most 255 bytes long");
        assert!(len > 0, "no token is empty");
        out.push(len);
    }
    for token in tokens {
        out.extend_from_slice(token);
    }
    out
}

/// The lengths and the bytes of an embedded vocabulary's tokens.
#[allow(dead_code)] // Used by the library; build.rs only writes vocabularies.
pub fn decode(embedded: &[u8]) -> (&[u8], &[u8]) {
    let (count, rest) = embedded.split_at(4);
    let n = u32::from_le_bytes(count.try_into().expect("split at 4 bytes"));
    rest.split_at(n as usize)
}
