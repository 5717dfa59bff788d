//! Framing: how JSON-RPC messages are cut out of (and written onto) the byte stream.
//!
//! Two framings are spoken, chosen by the first non-whitespace byte the client sends:
//! `{` means newline-delimited JSON (one message a line, split only on `\n`, so U+2028 and
//! U+2029 inside strings are harmless); anything else means LSP base-protocol headers
//! (`Content-Length: N`, optional `Content-Type`, names case-insensitive, a blank line, then N
//! bytes). Replies use the framing that was detected ([`DetectedFraming`]).
//!
//! Framing problems are items, not stream errors: a message over the size limit is drained
//! without being buffered whole and reported as [`Frame::Error`], and a broken header block is
//! reported and skipped up to the next `Content-Length` header, so the peer can answer with a
//! JSON-RPC error and keep serving. Only I/O errors end the stream.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio_util::bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// The default limit on one message's size: 64 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// A header block longer than this is garbage, not a header.
const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The longest sequence that ends a header block (`\n\r\n`).
const HEADER_END_MAX_LEN: usize = 3;

/// What resynchronisation looks for after a broken header block (compared case-insensitively).
const CONTENT_LENGTH: &[u8] = b"content-length";

/// The two framings compactd speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// LSP base protocol: `Content-Length` headers, a blank line, the body.
    Lsp,
    /// One JSON message a line.
    Ndjson,
}

/// The framing the decoder detected, shared with the encoder so replies match the input.
///
/// Until something was read, the encoder uses LSP headers.
#[derive(Debug, Clone, Default)]
pub struct DetectedFraming(Arc<AtomicU8>);

impl DetectedFraming {
    const UNKNOWN: u8 = 0;
    const LSP: u8 = 1;
    const NDJSON: u8 = 2;

    /// The detected framing, or `None` before the first byte arrived.
    pub fn get(&self) -> Option<Framing> {
        match self.0.load(Ordering::Acquire) {
            Self::LSP => Some(Framing::Lsp),
            Self::NDJSON => Some(Framing::Ndjson),
            _ => None,
        }
    }

    fn set(&self, framing: Framing) {
        let value = match framing {
            Framing::Lsp => Self::LSP,
            Framing::Ndjson => Self::NDJSON,
        };
        self.0.store(value, Ordering::Release);
    }

    fn is_unknown(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::UNKNOWN
    }
}

/// One item cut from the input stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A message body (not yet parsed as JSON).
    Message(Bytes),
    /// A framing problem; the stream goes on after it.
    Error(FrameError),
}

/// A framing problem the peer answers with an error instead of closing the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The message is larger than the limit; it was skipped. `declared` is the
    /// `Content-Length` when there was one.
    TooLarge {
        declared: Option<usize>,
        limit: usize,
    },
    /// The header block could not be understood; input was skipped to the next
    /// `Content-Length` header.
    BadHeader(String),
    /// The input ended in the middle of a message.
    Truncated,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge {
                declared: Some(len),
                limit,
            } => write!(
                f,
                "message of {len} bytes exceeds the limit of {limit} bytes and was skipped"
            ),
            Self::TooLarge {
                declared: None,
                limit,
            } => write!(
                f,
                "message exceeds the limit of {limit} bytes and was skipped"
            ),
            Self::BadHeader(detail) => write!(f, "bad message header: {detail}"),
            Self::Truncated => f.write_str("input ended in the middle of a message"),
        }
    }
}

impl std::error::Error for FrameError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen yet.
    Detect,
    LspHeaders,
    LspBody {
        len: usize,
    },
    /// Draining an oversized body.
    LspSkip {
        remaining: usize,
    },
    /// Looking for the next `Content-Length` after a broken header block.
    LspResync,
    /// `scanned` bytes of the buffer are known to hold no `\n`.
    Ndjson {
        scanned: usize,
    },
    /// Draining an oversized line up to its `\n`.
    NdjsonSkipLine,
}

/// A tokio-util codec for both framings (see the module documentation).
///
/// The decoder yields [`Frame`]s; the encoder takes a serialised JSON message and frames it as
/// the shared [`DetectedFraming`] says.
#[derive(Debug)]
pub struct MessageCodec {
    state: State,
    max_message_bytes: usize,
    detected: DetectedFraming,
}

impl MessageCodec {
    /// A codec that detects the framing itself and records it in `detected`.
    pub fn new(max_message_bytes: usize, detected: DetectedFraming) -> Self {
        let state = match detected.get() {
            None => State::Detect,
            Some(Framing::Lsp) => State::LspHeaders,
            Some(Framing::Ndjson) => State::Ndjson { scanned: 0 },
        };
        Self {
            state,
            max_message_bytes,
            detected,
        }
    }

    /// One step of the state machine: `Ok(None)` means "need more input".
    fn step(&mut self, buf: &mut BytesMut) -> Option<Step> {
        match self.state {
            State::Detect => {
                skip_whitespace(buf);
                let first = *buf.first()?;
                let framing = if first == b'{' {
                    self.state = State::Ndjson { scanned: 0 };
                    Framing::Ndjson
                } else {
                    self.state = State::LspHeaders;
                    Framing::Lsp
                };
                if self.detected.is_unknown() {
                    self.detected.set(framing);
                }
                Some(Step::Continue)
            }
            State::LspHeaders => self.lsp_headers(buf),
            State::LspBody { len } => {
                if buf.len() < len {
                    buf.reserve(len - buf.len());
                    return None;
                }
                self.state = State::LspHeaders;
                Some(Step::Yield(Frame::Message(buf.split_to(len).freeze())))
            }
            State::LspSkip { remaining } => {
                let n = remaining.min(buf.len());
                buf.advance(n);
                if n == remaining {
                    self.state = State::LspHeaders;
                    Some(Step::Continue)
                } else {
                    self.state = State::LspSkip {
                        remaining: remaining - n,
                    };
                    None
                }
            }
            State::LspResync => {
                if let Some(pos) = find_ignore_ascii_case(buf, CONTENT_LENGTH) {
                    buf.advance(pos);
                    self.state = State::LspHeaders;
                    return Some(Step::Continue);
                }
                // Keep a tail that may be the start of a header split across reads.
                let keep = buf.len().min(CONTENT_LENGTH.len() - 1);
                buf.advance(buf.len() - keep);
                None
            }
            State::Ndjson { scanned } => self.ndjson_line(buf, scanned),
            State::NdjsonSkipLine => match memchr::memchr(b'\n', buf) {
                Some(pos) => {
                    buf.advance(pos + 1);
                    self.state = State::Ndjson { scanned: 0 };
                    Some(Step::Continue)
                }
                None => {
                    buf.clear();
                    None
                }
            },
        }
    }

    fn lsp_headers(&mut self, buf: &mut BytesMut) -> Option<Step> {
        // Tolerate stray line breaks between messages.
        skip_whitespace(buf);
        // Only a blank line that starts within the first MAX_HEADER_BYTES counts, wherever the
        // reads happened to end: otherwise one large read would accept a header block that
        // byte-by-byte reads reject.
        let window = &buf[..buf.len().min(MAX_HEADER_BYTES + HEADER_END_MAX_LEN)];
        // A JSON line where a header belongs (an NDJSON message in an LSP-framed stream) is
        // answered as soon as its line ends, not read as a header and dropped.
        if window.first() == Some(&b'{')
            && let Some(pos) = memchr::memchr(b'\n', window)
        {
            buf.advance(pos + 1);
            let detail = "a JSON line where an LSP header was expected: this stream is \
                          LSP-framed (`Content-Length: N`, a blank line, then N bytes of JSON)"
                .to_owned();
            return Some(Step::Yield(Frame::Error(FrameError::BadHeader(detail))));
        }
        let (block_len, body_start) = match find_header_end(window) {
            Some((block_len, body_start)) if block_len <= MAX_HEADER_BYTES => {
                (block_len, body_start)
            }
            None if window.len() < MAX_HEADER_BYTES + HEADER_END_MAX_LEN => return None,
            _ => {
                buf.advance(1);
                self.state = State::LspResync;
                let detail = format!("no blank line within {MAX_HEADER_BYTES} bytes");
                return Some(Step::Yield(Frame::Error(FrameError::BadHeader(detail))));
            }
        };
        let parsed = parse_headers(&buf[..block_len]);
        buf.advance(body_start);
        match parsed {
            Ok(len) if len > self.max_message_bytes => {
                self.state = State::LspSkip { remaining: len };
                Some(Step::Yield(Frame::Error(FrameError::TooLarge {
                    declared: Some(len),
                    limit: self.max_message_bytes,
                })))
            }
            Ok(len) => {
                self.state = State::LspBody { len };
                Some(Step::Continue)
            }
            Err(detail) => {
                self.state = State::LspResync;
                Some(Step::Yield(Frame::Error(FrameError::BadHeader(detail))))
            }
        }
    }

    fn ndjson_line(&mut self, buf: &mut BytesMut, scanned: usize) -> Option<Step> {
        if scanned == 0 {
            // Leading whitespace (and blank lines) are no part of a message: dropping them here
            // keeps them out of the size check, as they are when the whole line is at hand.
            skip_whitespace(buf);
        }
        let Some(offset) = memchr::memchr(b'\n', &buf[scanned..]) else {
            // A `\r` just before the `\n` is a line end, not content: allow for one in flight.
            let pending = buf.len() - usize::from(buf.last() == Some(&b'\r'));
            if pending > self.max_message_bytes {
                buf.clear();
                self.state = State::NdjsonSkipLine;
                return Some(Step::Yield(Frame::Error(self.too_large_line())));
            }
            self.state = State::Ndjson { scanned: buf.len() };
            return None;
        };
        self.state = State::Ndjson { scanned: 0 };
        let line = buf.split_to(scanned + offset + 1).freeze();
        Some(self.line_frame(line))
    }

    /// A complete line (with or without its `\n`) as a frame; blank lines are skipped.
    ///
    /// The size limit applies to the line without leading whitespace and without its line end
    /// (`\n` or `\r\n`): exactly what [`Self::ndjson_line`] can measure before the line end
    /// arrives, so the verdict does not depend on how the input was split into reads.
    fn line_frame(&self, line: Bytes) -> Step {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return Step::Continue;
        }
        let content = line.trim_ascii_start();
        let content = content.strip_suffix(b"\n").unwrap_or(content);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        if content.len() > self.max_message_bytes {
            return Step::Yield(Frame::Error(self.too_large_line()));
        }
        Step::Yield(Frame::Message(line.slice_ref(trimmed)))
    }

    fn too_large_line(&self) -> FrameError {
        FrameError::TooLarge {
            declared: None,
            limit: self.max_message_bytes,
        }
    }
}

enum Step {
    Continue,
    Yield(Frame),
}

impl Decoder for MessageCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        loop {
            match self.step(buf) {
                None => return Ok(None),
                Some(Step::Continue) => {}
                Some(Step::Yield(frame)) => return Ok(Some(frame)),
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Frame>> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        // A script's last line may lack its newline; it is still a message.
        if let State::Ndjson { .. } = self.state {
            self.state = State::Ndjson { scanned: 0 };
            let rest = buf.split().freeze();
            return Ok(match self.line_frame(rest) {
                Step::Yield(frame) => Some(frame),
                Step::Continue => None,
            });
        }
        let truncated = matches!(self.state, State::LspBody { .. })
            || (self.state == State::LspHeaders && !buf.trim_ascii().is_empty());
        buf.clear();
        self.state = State::LspHeaders;
        Ok(truncated.then_some(Frame::Error(FrameError::Truncated)))
    }
}

impl Encoder<String> for MessageCodec {
    type Error = io::Error;

    fn encode(&mut self, message: String, dst: &mut BytesMut) -> io::Result<()> {
        match self.detected.get().unwrap_or(Framing::Lsp) {
            Framing::Lsp => {
                let header = format!("Content-Length: {}\r\n\r\n", message.len());
                dst.reserve(header.len() + message.len());
                dst.put_slice(header.as_bytes());
                dst.put_slice(message.as_bytes());
            }
            Framing::Ndjson => {
                dst.reserve(message.len() + 1);
                dst.put_slice(message.as_bytes());
                dst.put_u8(b'\n');
            }
        }
        Ok(())
    }
}

fn skip_whitespace(buf: &mut BytesMut) {
    let n = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
    buf.advance(n);
}

/// Where the header block ends: `(length of the header lines, offset of the body)`.
/// The block ends at the first empty line; bare `\n` line ends are tolerated.
fn find_header_end(buf: &[u8]) -> Option<(usize, usize)> {
    let crlf = memchr::memmem::find(buf, b"\n\r\n").map(|pos| (pos, pos + 3));
    let lf = memchr::memmem::find(buf, b"\n\n").map(|pos| (pos, pos + 2));
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The `Content-Length` of a header block, or why there is none.
fn parse_headers(block: &[u8]) -> Result<usize, String> {
    let text =
        std::str::from_utf8(block).map_err(|_| "the header block is not valid UTF-8".to_owned())?;
    let mut content_length = None;
    for line in text.split('\n').map(|line| line.trim_end_matches('\r')) {
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line
            .split_once(':')
            .filter(|(name, _)| is_header_name(name))
        else {
            return Err(format!("expected `Name: value`, got `{}`", shorten(line)));
        };
        // Content-Type is optional and only UTF-8 JSON is spoken, so other headers are ignored.
        if name.trim().eq_ignore_ascii_case("content-length") {
            let value = value.trim();
            let len = value.parse::<usize>().map_err(|_| {
                format!(
                    "Content-Length must be a byte count, got `{}`",
                    shorten(value)
                )
            })?;
            content_length = Some(len);
        }
    }
    content_length.ok_or_else(|| "missing Content-Length header".to_owned())
}

/// An HTTP header field name (RFC 9110 `token`), so that a line like `{"jsonrpc":"2.0",…}`
/// is not taken for a header named `{"jsonrpc"` and silently ignored.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn shorten(text: &str) -> String {
    const MAX_CHARS: usize = 60;
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

fn find_ignore_ascii_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec(max: usize) -> MessageCodec {
        MessageCodec::new(max, DetectedFraming::default())
    }

    /// Feeds `input` in chunks of `chunk` bytes, then signals EOF; returns every frame.
    fn decode_chunked(codec: &mut MessageCodec, input: &[u8], chunk: usize) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for piece in input.chunks(chunk) {
            buf.extend_from_slice(piece);
            while let Some(frame) = codec.decode(&mut buf).expect("decoding never fails") {
                frames.push(frame);
            }
        }
        while let Some(frame) = codec.decode_eof(&mut buf).expect("decoding never fails") {
            frames.push(frame);
        }
        frames
    }

    fn message(text: &str) -> Frame {
        Frame::Message(Bytes::copy_from_slice(text.as_bytes()))
    }

    fn lsp(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    #[test]
    fn lsp_split_byte_by_byte() {
        let input = format!("{}{}", lsp(r#"{"a":1}"#), lsp(r#"{"b":"é"}"#));
        let mut codec = codec(1024);
        let frames = decode_chunked(&mut codec, input.as_bytes(), 1);
        assert_eq!(frames, vec![message(r#"{"a":1}"#), message(r#"{"b":"é"}"#)]);
        assert_eq!(codec.detected.get(), Some(Framing::Lsp));
    }

    #[test]
    fn lsp_several_messages_in_one_chunk_with_content_type_and_odd_case() {
        let input = format!(
            "content-LENGTH: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{{}}{}",
            lsp("[1]")
        );
        let frames = decode_chunked(&mut codec(1024), input.as_bytes(), input.len());
        assert_eq!(frames, vec![message("{}"), message("[1]")]);
    }

    #[test]
    fn lsp_bad_header_is_reported_and_the_next_message_is_found() {
        let input = format!(
            "Content-Length: lots\r\n\r\n{{}}garbage{}Nonsense\r\n\r\n{}",
            lsp(r#"{"ok":1}"#),
            lsp(r#"{"ok":2}"#)
        );
        for chunk in [1, 7, input.len()] {
            let frames = decode_chunked(&mut codec(1024), input.as_bytes(), chunk);
            assert_eq!(frames.len(), 4, "chunk {chunk}: {frames:?}");
            assert!(
                matches!(&frames[0], Frame::Error(FrameError::BadHeader(d)) if d.contains("`lots`"))
            );
            assert_eq!(frames[1], message(r#"{"ok":1}"#));
            assert!(matches!(&frames[2], Frame::Error(FrameError::BadHeader(_))));
            assert_eq!(frames[3], message(r#"{"ok":2}"#));
        }
    }

    #[test]
    fn an_ndjson_line_in_an_lsp_stream_is_an_error_not_dropped() {
        // Alone (answered before the next header arrives), and run into a header block.
        let alone = format!("{}{{\"id\":2}}\n", lsp(r#"{"ok":1}"#));
        let frames = decode_chunked(&mut codec(1024), alone.as_bytes(), alone.len());
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert!(
            matches!(&frames[1], Frame::Error(FrameError::BadHeader(d)) if d.contains("JSON line")),
            "{frames:?}"
        );
        let input = format!("{}{{\"id\":2}}\n{}", lsp(r#"{"ok":1}"#), lsp(r#"{"ok":3}"#));
        for chunk in [1, 5, input.len()] {
            let frames = decode_chunked(&mut codec(1024), input.as_bytes(), chunk);
            assert_eq!(frames.len(), 3, "chunk {chunk}: {frames:?}");
            assert_eq!(frames[0], message(r#"{"ok":1}"#));
            assert!(matches!(&frames[1], Frame::Error(FrameError::BadHeader(_))));
            assert_eq!(frames[2], message(r#"{"ok":3}"#));
        }
        // A JSON line inside a header block is refused too, not taken for a header.
        let input = format!(
            "{}X-Note: 1\r\n{{\"id\":2,\"a\":1}}\r\nContent-Length: 2\r\n\r\n{{}}",
            lsp("[]")
        );
        let frames = decode_chunked(&mut codec(1024), input.as_bytes(), input.len());
        assert_eq!(frames[0], message("[]"));
        assert!(
            matches!(&frames[1], Frame::Error(FrameError::BadHeader(d)) if d.contains("Name: value")),
            "{frames:?}"
        );
    }

    #[test]
    fn lsp_missing_content_length_is_an_error_item() {
        let input = format!("Content-Type: x\r\n\r\n{}", lsp("{}"));
        let frames = decode_chunked(&mut codec(1024), input.as_bytes(), 3);
        assert_eq!(
            frames,
            vec![
                Frame::Error(FrameError::BadHeader(
                    "missing Content-Length header".into()
                )),
                message("{}")
            ]
        );
    }

    #[test]
    fn lsp_oversized_body_is_drained_without_buffering() {
        let big = "x".repeat(10_000);
        let input = format!("{}{}", lsp(&big), lsp("{}"));
        let mut codec = codec(100);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for piece in input.as_bytes().chunks(512) {
            buf.extend_from_slice(piece);
            while let Some(frame) = codec.decode(&mut buf).expect("decoding never fails") {
                frames.push(frame);
            }
            assert!(buf.len() <= 512, "buffer grew to {}", buf.len());
        }
        assert_eq!(
            frames,
            vec![
                Frame::Error(FrameError::TooLarge {
                    declared: Some(10_000),
                    limit: 100
                }),
                message("{}")
            ]
        );
    }

    #[test]
    fn lsp_truncated_body_at_eof_is_reported() {
        let frames = decode_chunked(&mut codec(1024), b"Content-Length: 10\r\n\r\n{}", 4);
        assert_eq!(frames, vec![Frame::Error(FrameError::Truncated)]);
    }

    #[test]
    fn ndjson_with_blank_lines_crlf_and_unicode_separators() {
        // U+2028 and U+2029 are legal inside JSON strings and must not split a message.
        let input = "\n  {\"a\":\"x\u{2028}y\u{2029}z\"}\r\n\r\n\n{\"b\":2}\r\n   \n{\"c\":3}";
        for chunk in [1, 5, input.len()] {
            let mut codec = codec(1024);
            let frames = decode_chunked(&mut codec, input.as_bytes(), chunk);
            assert_eq!(
                frames,
                vec![
                    message("{\"a\":\"x\u{2028}y\u{2029}z\"}"),
                    message(r#"{"b":2}"#),
                    message(r#"{"c":3}"#),
                ],
                "chunk {chunk}"
            );
            assert_eq!(codec.detected.get(), Some(Framing::Ndjson));
        }
    }

    #[test]
    fn ndjson_oversized_line_is_skipped() {
        let input = format!("{{\"big\":\"{}\"}}\n{{}}\n", "y".repeat(5000));
        for chunk in [64, input.len()] {
            let frames = decode_chunked(&mut codec(100), input.as_bytes(), chunk);
            assert_eq!(
                frames,
                vec![
                    Frame::Error(FrameError::TooLarge {
                        declared: None,
                        limit: 100
                    }),
                    message("{}")
                ],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn encoder_uses_the_detected_framing() {
        let detected = DetectedFraming::default();
        let mut writer = MessageCodec::new(1024, detected.clone());
        let mut out = BytesMut::new();
        writer
            .encode("{}".into(), &mut out)
            .expect("encoding never fails");
        assert_eq!(&out[..], b"Content-Length: 2\r\n\r\n{}");

        let mut reader = MessageCodec::new(1024, detected);
        decode_chunked(&mut reader, b"{}\n", 3);
        out.clear();
        writer
            .encode("{}".into(), &mut out)
            .expect("encoding never fails");
        assert_eq!(&out[..], b"{}\n");
    }

    /// Found by the `framing` fuzz target: whitespace before an NDJSON message counted toward
    /// the size limit while the line was incomplete, so the same stream gave a message or a
    /// "too large" error depending on where the reads ended. The same held for a `\r` before
    /// the `\n` of a message exactly at the limit, and for LSP header blocks just over
    /// `MAX_HEADER_BYTES` that arrived in one read.
    #[test]
    fn the_size_verdict_does_not_depend_on_read_boundaries() {
        let ndjson_cases: [(&[u8], usize, &str); 2] = [
            (b"{}\n      {}\n", 3, "{}"),
            (b"{\"a\":1}\r\n{}\r\n", 7, r#"{"a":1}"#),
        ];
        for (input, limit, first) in ndjson_cases {
            let whole = decode_chunked(&mut codec(limit), input, input.len());
            assert_eq!(whole, vec![message(first), message("{}")]);
            for chunk in 1..input.len() {
                let split = decode_chunked(&mut codec(limit), input, chunk);
                assert_eq!(split, whole, "chunk {chunk} of {input:?}");
            }
        }

        let long_header = format!(
            "Content-Length: 2\r\nX-Pad: {}\r\n\r\n{{}}",
            "a".repeat(MAX_HEADER_BYTES)
        );
        let whole = decode_chunked(&mut codec(1024), long_header.as_bytes(), long_header.len());
        assert!(
            matches!(&whole[..], [Frame::Error(FrameError::BadHeader(_))]),
            "{whole:?}"
        );
        let split = decode_chunked(&mut codec(1024), long_header.as_bytes(), 1);
        assert_eq!(split, whole);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(
            input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
            chunk in 1usize..64,
        ) {
            decode_chunked(&mut codec(256), &input, chunk);
        }

        #[test]
        fn messages_survive_any_split(
            bodies in proptest::collection::vec("[a-z0-9 \u{2028}]{0,40}", 1..5),
            chunk in 1usize..32,
            ndjson in proptest::prelude::any::<bool>(),
        ) {
            let bodies: Vec<String> = bodies.iter().map(|b| format!("{{\"t\":\"{b}\"}}")).collect();
            let input: String = if ndjson {
                bodies.iter().map(|b| format!("{b}\n")).collect()
            } else {
                bodies.iter().map(|b| lsp(b)).collect()
            };
            let frames = decode_chunked(&mut codec(1024), input.as_bytes(), chunk);
            let expected: Vec<Frame> = bodies.iter().map(|b| message(b)).collect();
            proptest::prop_assert_eq!(frames, expected);
        }
    }
}
