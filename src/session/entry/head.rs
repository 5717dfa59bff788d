//! The header fields of a line (`type`, `id`, `parentId`, `timestamp`) found by a scanner that
//! reads only the start of the line, so opening a session costs a look at each line's first
//! hundred bytes instead of a JSON parse of the whole file.
//!
//! The scanner accepts only the shape every writer uses: an object whose first members are
//! the four header fields, in any order, each a plain string (no escape, no control
//! character) or, except `type`, `null`. It stops at the first member after them. Anything
//! else (another key first, an escape, a number) makes it give up, and the caller parses the
//! line with serde as before, so unusual lines are decided exactly as they always were. What
//! lies after the header fields is not read here: the body is checked when it is parsed
//! (see `raw.rs`), including a header field repeated later in the line.

use std::borrow::Cow;

use serde::Deserialize;

/// The fields of a line that every decision needs, borrowed from the line; bodies are skipped.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub(crate) struct Head<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) type_name: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) id: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "parentId")]
    pub(crate) parent_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) timestamp: Option<Cow<'a, str>>,
}

/// Where the scanner stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// At the `,` before the first member that is not a header field: the rest of the line
    /// is the body, unread.
    Body,
    /// At the `}` closing an object of header fields only; the byte after it is at this offset.
    End(usize),
}

/// JSON whitespace, as serde_json reads it.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).copied().is_some_and(is_ws) {
        at += 1;
    }
    at
}

/// A plain string starting at `bytes[at]` (the opening quote): its bytes and the offset
/// after the closing quote. `None` for an escape, a control character, or a string that does
/// not end within `bytes`. Header strings are short: one pass over their bytes beats setting
/// up a vector search.
fn plain_bytes(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let body = &bytes[at + 1..];
    let close = body
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    (body[close] == b'"').then(|| (&body[..close], at + 1 + close + 1))
}

/// [`plain_bytes`] as text; `None` also for invalid UTF-8. Header strings are nearly always
/// ASCII, which a word-at-a-time check confirms faster than a general validation sets up.
fn plain_string(bytes: &[u8], at: usize) -> Option<(&str, usize)> {
    let (text, next) = plain_bytes(bytes, at)?;
    let text = if text.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(text) }
    } else {
        std::str::from_utf8(text).ok()?
    };
    Some((text, next))
}

/// Reads the header fields from `prefix`, the start of a line (or all of it). `None` when the
/// line is not in the usual shape or the header does not end within `prefix`.
pub(crate) fn scan(prefix: &[u8]) -> Option<(Head<'_>, Stop)> {
    let mut at = skip_ws(prefix, 0);
    if prefix.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    let mut fields: [Option<Option<&str>>; 4] = [None; 4];
    loop {
        at = skip_ws(prefix, at);
        let (key, next) = plain_bytes(prefix, at)?;
        let slot = match key {
            b"type" => 0,
            b"id" => 1,
            b"parentId" => 2,
            b"timestamp" => 3,
            _ => return None,
        };
        if fields[slot].is_some() {
            return None;
        }
        at = skip_ws(prefix, next);
        if prefix.get(at) != Some(&b':') {
            return None;
        }
        at = skip_ws(prefix, at + 1);
        let value = if prefix[at..].starts_with(b"null") && slot != 0 {
            at += 4;
            None
        } else {
            let (text, next) = plain_string(prefix, at)?;
            at = next;
            Some(text)
        };
        fields[slot] = Some(value);
        at = skip_ws(prefix, at);
        let done = fields.iter().all(Option::is_some);
        match prefix.get(at) {
            Some(b',') if done => return Some((head(fields)?, Stop::Body)),
            Some(b',') => at += 1,
            Some(b'}') => return Some((head(fields)?, Stop::End(at + 1))),
            _ => return None,
        }
    }
}

fn head(fields: [Option<Option<&str>>; 4]) -> Option<Head<'_>> {
    let [type_name, id, parent_id, timestamp] = fields;
    Some(Head {
        type_name: Cow::Borrowed(type_name.flatten()?),
        id: id.flatten().map(Cow::Borrowed),
        parent_id: parent_id.flatten().map(Cow::Borrowed),
        timestamp: timestamp.flatten().map(Cow::Borrowed),
    })
}

/// The header of the whole line `line`, or `None` when the line must be parsed with serde:
/// the scan gave up, or (a body follows) the line does not end with `}` (a line cut short,
/// the most common corruption, is still reported at open), or (no body) something follows
/// the object.
pub(crate) fn scan_line(line: &[u8]) -> Option<Head<'_>> {
    let last = line.iter().rposition(|&b| !is_ws(b)).map(|i| line[i]);
    scan_prefix(line, line.len(), last)
}

/// [`scan_line`] for a line of `len` bytes of which `prefix` are at hand, whose last
/// non-whitespace byte is `last`.
pub(crate) fn scan_prefix(prefix: &[u8], len: usize, last: Option<u8>) -> Option<Head<'_>> {
    let (head, stop) = scan(prefix)?;
    let complete = match stop {
        Stop::Body => last == Some(b'}'),
        Stop::End(after) => prefix.len() == len && prefix[after..].iter().copied().all(is_ws),
    };
    complete.then_some(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_head(line: &[u8]) -> Option<Head<'_>> {
        serde_json::from_slice(line).ok()
    }

    #[test]
    fn the_usual_shapes_are_read_without_serde() {
        let line = br#"{"type":"message","id":"a1","parentId":null,"timestamp":"t","message":{"role":"user"}}"#;
        let head = scan_line(line).expect("scanned");
        assert_eq!(Some(head), serde_head(line));
        let marker =
            br#" { "type" : "compactd_leaf" , "parentId":"a1","id":"m","timestamp":"t" } "#;
        assert_eq!(scan_line(marker), serde_head(marker));
        assert!(scan_line(marker).is_some());
        // The body is not read: a later syntax error is found when the body is parsed.
        let bad_body =
            br#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":}}"#;
        assert!(scan_line(bad_body).is_some());
        assert!(serde_head(bad_body).is_none());
    }

    #[test]
    fn unusual_lines_are_left_to_serde() {
        for line in [
            &br#"{"type":"message","id":"a2","parentId":"a1",  this is not json"#[..],
            br#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user""#,
            br#"{"id":"a","type":"x","extra":1,"parentId":null,"timestamp":"t"}"#,
            br#"{"type":"x\u0041","id":"a","parentId":null,"timestamp":"t","b":1}"#,
            br#"{"type":"x","id":"a","id":"b","parentId":null,"timestamp":"t","b":1}"#,
            br#"{"type":null,"id":"a","parentId":null,"timestamp":"t","b":1}"#,
            br#"{"type":"x","id":5,"parentId":null,"timestamp":"t","b":1}"#,
            br#"{"type":"x","id":"a","parentId":null,"timestamp":"t"} trailing"#,
            b"\xff\xfe{\"type\":\"message\",\"id\":\"bad-utf8\"}",
            b"{\"type\":\"x\xff\",\"id\":\"a\",\"parentId\":null,\"timestamp\":\"t\",\"b\":1}",
            b"[1,2,3]",
            b"",
        ] {
            assert_eq!(scan_line(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    /// Header strings take an ASCII shortcut past UTF-8 validation; anything else is still
    /// validated: kept when valid, left to serde (which refuses it) when not.
    #[test]
    fn header_strings_beyond_ascii_are_validated() {
        let line = "{\"type\":\"message\",\"id\":\"é日😀\",\"parentId\":\"ä\",\"timestamp\":\"t\",\"b\":1}";
        let head = scan_line(line.as_bytes()).expect("scanned");
        assert_eq!(head.id.as_deref(), Some("é日😀"));
        assert_eq!(head.parent_id.as_deref(), Some("ä"));
        assert_eq!(Some(head), serde_head(line.as_bytes()));
        for bad in [
            &b"{\"type\":\"message\",\"id\":\"a\xc3\",\"parentId\":null,\"timestamp\":\"t\",\"b\":1}"[..],
            b"{\"type\":\"message\",\"id\":\"a\",\"parentId\":\"\xed\xa0\x80\",\"timestamp\":\"t\",\"b\":1}",
            b"{\"type\":\"message\",\"id\":\"a\",\"parentId\":null,\"timestamp\":\"\x80t\",\"b\":1}",
        ] {
            assert_eq!(scan_line(bad), None, "{}", String::from_utf8_lossy(bad));
            assert!(serde_head(bad).is_none());
        }
    }

    #[test]
    fn a_prefix_is_enough_for_a_body_but_not_for_a_bare_object() {
        let line = br#"{"type":"message","id":"a","parentId":"p","timestamp":"t","message":{}}"#;
        assert!(scan_prefix(&line[..60], line.len(), Some(b'}')).is_some());
        assert!(scan_prefix(&line[..60], line.len(), Some(b'x')).is_none());
        assert!(scan_prefix(&line[..20], line.len(), Some(b'}')).is_none());
        let bare = br#"{"type":"m","id":"a","parentId":"p","timestamp":"t"}   "#;
        assert!(scan_prefix(&bare[..52], bare.len(), Some(b'}')).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whatever the scanner reads, serde reads the same, for valid lines of any member
        /// order and value shape; the scanner may only give up.
        #[test]
        fn the_scanner_agrees_with_serde(
            order in Just([0usize, 1, 2, 3]).prop_shuffle(),
            present in proptest::collection::vec(any::<bool>(), 4),
            values in proptest::collection::vec(
                prop_oneof![
                    Just("null".to_owned()),
                    "[a-z0-9:.\\-]{0,12}".prop_map(|s| format!("\"{s}\"")),
                    "[a-zé日😀]{0,6}".prop_map(|s| format!("\"{s}\"")),
                    Just("\"\\u0041\"".to_owned()),
                    Just("7".to_owned()),
                ],
                4,
            ),
            body in prop_oneof![
                Just(String::new()),
                Just(",\"message\":{\"role\":\"user\",\"content\":\"x\"}".to_owned()),
                Just(",\"x\":1,\"id\":\"dup\"".to_owned()),
                Just(",\"summary\":\"a\\nb\"".to_owned()),
            ],
            ws in prop_oneof![Just(""), Just(" "), Just("\t ")],
        ) {
            let keys = ["type", "id", "parentId", "timestamp"];
            let members: Vec<String> = order
                .iter()
                .filter(|&&k| present[k] || k == 0)
                .map(|&k| format!("{ws}\"{}\"{ws}:{ws}{}", keys[k], values[k]))
                .collect();
            let line = format!("{ws}{{{}{body}{ws}}}{ws}", members.join(","));
            if let Some(head) = scan_line(line.as_bytes()) {
                // A header field repeated in the body is serde's error; the body check
                // finds it later.
                if !body.contains("\"id\"") {
                    prop_assert_eq!(Some(head), serde_head(line.as_bytes()), "{}", line);
                }
            }
        }
    }
}
