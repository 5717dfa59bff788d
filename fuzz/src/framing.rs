//! `framing`: arbitrary bytes, cut into arbitrary chunks, through [`MessageCodec`].
//!
//! Input layout: byte 0 picks the message size limit, byte 1 seeds the chunk sizes, the rest
//! is the stream. Invariants: decoding never fails or panics; between reads the decoder holds
//! at most `max(limit, header limit)` bytes plus a line end; every message frame is at most
//! `limit` bytes; the frames do not depend on how the stream was split; after EOF nothing is
//! left buffered; and every message frame survives an encode/decode round trip in the
//! detected framing.

use compactd::testkit::{DetectedFraming, Frame, MessageCodec};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

/// The codec's own cap on a header block (`MAX_HEADER_BYTES` in `framing.rs`): the only input
/// it may hold beyond the message limit while waiting for more.
const HEADER_LIMIT: usize = 8 * 1024;
/// What may be pending beyond either cap: the start of a line end (`\r` of an NDJSON line, or
/// the first two bytes of a `\n\r\n` ending a header block).
const LINE_END_SLACK: usize = 2;

pub fn check(data: &[u8]) {
    let [limit_byte, split_byte, stream @ ..] = data else {
        return;
    };
    let limit = usize::from(*limit_byte) * 8 + 1;
    let chunks = chunk_sizes(*split_byte, stream.len());

    let detected = DetectedFraming::default();
    let split = decode(limit, &detected, stream, &chunks);
    let whole = decode(
        limit,
        &DetectedFraming::default(),
        stream,
        &[stream.len().max(1)],
    );
    assert_eq!(
        split, whole,
        "the frames depend on how the input was split ({chunks:?})"
    );

    for frame in &split {
        let Frame::Message(body) = frame else {
            continue;
        };
        assert!(
            body.len() <= limit,
            "a {}-byte frame over the limit {limit}",
            body.len()
        );
        round_trip(limit, &detected, body);
    }
}

/// Chunk sizes in `1..=max`, from a tiny xorshift generator seeded by `seed`, covering `len`.
fn chunk_sizes(seed: u8, len: usize) -> Vec<usize> {
    let max = 1 + usize::from(seed & 0x3f) * 3;
    let mut state = u32::from(seed) | 0x9e37_0000;
    let mut sizes = Vec::new();
    let mut covered = 0;
    while covered < len {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let size = 1 + (state as usize) % max;
        sizes.push(size);
        covered += size;
    }
    sizes
}

/// Decodes `stream` as `FramedRead` would: feed a chunk, decode until "need more", repeat,
/// then drain with `decode_eof`.
fn decode(limit: usize, detected: &DetectedFraming, stream: &[u8], chunks: &[usize]) -> Vec<Frame> {
    let mut codec = MessageCodec::new(limit, detected.clone());
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut rest = stream;
    let mut sizes = chunks.iter().cycle();
    while !rest.is_empty() {
        let size = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        buf.extend_from_slice(chunk);
        while let Some(frame) = codec.decode(&mut buf).expect("decode never fails") {
            frames.push(frame);
        }
        assert!(
            buf.len() <= limit.max(HEADER_LIMIT) + LINE_END_SLACK,
            "the decoder holds {} bytes waiting for more (limit {limit})",
            buf.len()
        );
    }
    while let Some(frame) = codec.decode_eof(&mut buf).expect("decode_eof never fails") {
        frames.push(frame);
    }
    assert!(buf.is_empty(), "{} bytes left after EOF", buf.len());
    frames
}

/// A message re-encoded in the detected framing decodes to itself.
fn round_trip(limit: usize, detected: &DetectedFraming, body: &[u8]) {
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let mut encoded = BytesMut::new();
    MessageCodec::new(limit, detected.clone())
        .encode(text.to_owned(), &mut encoded)
        .expect("encode never fails");
    let mut reader = MessageCodec::new(limit, detected.clone());
    let mut frames = Vec::new();
    while let Some(frame) = reader.decode(&mut encoded).expect("decode never fails") {
        frames.push(frame);
    }
    while let Some(frame) = reader
        .decode_eof(&mut encoded)
        .expect("decode_eof never fails")
    {
        frames.push(frame);
    }
    assert_eq!(
        frames,
        vec![Frame::Message(body.to_vec().into())],
        "an encoded message did not decode to itself"
    );
}
