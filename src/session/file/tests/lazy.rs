//! The loader that reads only headers: bodies checked when they are used, large files streamed
//! and read again by offset, and files cut or changed in place under an open session.

use std::io::Write;

use pretty_assertions::assert_eq;

use super::*;
use crate::session::entry::LineSource;

const HEADER: &str = r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/w"}"#;

fn message(id: &str, parent: Option<&str>, text: &str) -> String {
    json!({"type":"message","id":id,"parentId":parent,"timestamp":"t",
        "message":{"role":"user","content":text,"timestamp":1}})
    .to_string()
}

/// `lines` after the header, padded with `filler` messages first so the file is large enough
/// to be streamed (over `STREAM_MIN_BYTES`, 16 KiB in unit tests) when `filler` is large.
fn write_session(path: &Path, filler: usize, lines: &[&[u8]]) {
    let mut out = Vec::new();
    out.extend_from_slice(HEADER.as_bytes());
    out.push(b'\n');
    let mut parent = None::<String>;
    for i in 0..filler {
        let id = format!("f{i}");
        out.extend_from_slice(message(&id, parent.as_deref(), &"w ".repeat(200)).as_bytes());
        out.push(b'\n');
        parent = Some(id);
    }
    for line in lines {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    fs::write(path, out).unwrap();
}

/// A line whose header is fine but whose body is not JSON (a syntax error, invalid UTF-8, a
/// repeated header field) is an entry at open, found broken when its body is used, and
/// written back byte for byte; a line cut short is still reported at open. Streamed or not.
#[test]
fn a_corrupt_body_is_found_when_used_and_kept_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let syntax = br#"{"type":"message","id":"b1","parentId":"ok","timestamp":"t","message":{"role":"user","content":"x" "y"}}"#.to_vec();
    let mut utf8 = br#"{"type":"message","id":"b2","parentId":"b1","timestamp":"t","message":{"role":"user","content":"caf"#.to_vec();
    utf8.extend_from_slice(b"\xe9\"}}");
    let cut = br#"{"type":"message","id":"b3","parentId":"b2","timestamp":"t","message":{"role":"user","content":"hel"#.to_vec();
    let last = message("b4", Some("b2"), "after");
    let ok = message("ok", None, "fine");
    for filler in [0, 60] {
        let path = dir.path().join(format!("corrupt-{filler}.jsonl"));
        let ok = if filler == 0 {
            ok.clone()
        } else {
            message("ok", Some(&format!("f{}", filler - 1)), "fine")
        };
        write_session(
            &path,
            filler,
            &[ok.as_bytes(), &syntax, &utf8, &cut, last.as_bytes()],
        );
        let streamed = fs::metadata(&path).unwrap().len() >= super::super::stream::STREAM_MIN_BYTES;
        assert_eq!(streamed, filler > 0);

        let (mut s, report) = Session::open(&path).unwrap();
        let skipped: Vec<usize> = report.skipped.iter().map(|l| l.line).collect();
        assert_eq!(
            skipped,
            [filler + 5],
            "only the line cut short, at open: {report:?}"
        );
        assert_eq!(s.leaf_id(), Some("b4"));
        let path_ids: Vec<&str> = s.path_to_leaf().iter().map(|e| e.id.as_str()).collect();
        assert!(
            path_ids.ends_with(&["ok", "b1", "b2", "b4"]),
            "{path_ids:?}"
        );
        for id in ["b1", "b2"] {
            let e = s.get(id).unwrap();
            assert_eq!(e.type_name(), "message", "known from the header");
            assert!(!e.is_parsed());
        }
        // Used: the context parses them, finds them broken, and leaves them out.
        let ctx = s.context();
        assert!(ctx.entry_ids.iter().any(|id| id == "b4"));
        assert!(!ctx.entry_ids.iter().any(|id| id == "b1" || id == "b2"));
        for id in ["b1", "b2"] {
            assert!(matches!(
                s.get(id).unwrap().kind(),
                EntryKind::Unknown { .. }
            ));
        }
        // Kept: a rewrite and an append leave every byte of them.
        s.rewrite().unwrap();
        s.append(user("more")).unwrap();
        let data = fs::read(&path).unwrap();
        for line in [&syntax, &utf8, &cut] {
            let found = data.split(|&b| b == b'\n').filter(|l| l == line).count();
            assert_eq!(found, 1, "{}", String::from_utf8_lossy(line));
        }
        let (again, report) = Session::open(&path).unwrap();
        assert_eq!(report.skipped.len(), 1);
        assert_eq!(again.entries().len(), s.entries().len());
    }
}

/// Lines of every length around the stream's buffer (2 KiB in unit tests) and its header
/// window, with headers the scanner reads and ones it leaves to serde, load the same streamed
/// as read whole.
#[test]
fn streamed_lines_of_every_length_load_as_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lengths.jsonl");
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut parent = None::<String>;
    for (i, len) in [
        10usize, 300, 2040, 2047, 2048, 2049, 5000, 9000, 1, 700, 30_000, 3,
    ]
    .iter()
    .cycle()
    .take(40)
    .enumerate()
    {
        let id = format!("e{i}");
        let line = match i % 5 {
            // The header after a long member: serde decides.
            1 => json!({"data": "d".repeat(*len), "type":"custom","id":id,"parentId":parent,"timestamp":"t","customType":"x"}).to_string(),
            // Blank lines of the length.
            2 => " ".repeat(*len),
            _ => message(&id, parent.as_deref(), &"x".repeat(*len)),
        };
        if i % 5 != 2 {
            parent = Some(id);
        }
        lines.push(line.into_bytes());
    }
    let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    write_session(&path, 0, &refs);
    // An unterminated last line that parses.
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(message("tail", parent.as_deref(), "t").as_bytes())
        .unwrap();
    drop(f);
    let data = fs::read(&path).unwrap();
    assert!(data.len() as u64 > super::super::stream::STREAM_MIN_BYTES);

    let (streamed, streamed_report) = Session::open(&path).unwrap();
    let mut report = LoadReport::default();
    let whole = load::from_bytes(
        path.clone(),
        path.clone(),
        LineSource::memory(data),
        None,
        &mut report,
        &|_| {},
    )
    .unwrap();
    assert_eq!(streamed.entries(), whole.entries());
    assert_eq!(streamed_report, report);
    assert_eq!(streamed.leaf_id(), Some("tail"));
    assert_eq!(streamed.disk.consumed, whole.disk.consumed);
    assert_eq!(streamed.disk.lines, whole.disk.lines);
    for (a, b) in streamed.entries().iter().zip(whole.entries()) {
        assert_eq!(a.line_bytes().unwrap(), b.line_bytes().unwrap());
    }
    // Both scan threads' entries read through one handle on the file: the second thread's
    // own descriptor is closed once the load is done.
    let sources: std::collections::HashSet<_> = streamed
        .entries()
        .iter()
        .filter_map(Entry::file_source)
        .collect();
    assert_eq!(sources.len(), 1, "{sources:?}");
}

/// Another program cuts the file in place (no rename) under an open, streamed session: the
/// lines past the cut cannot be read back, which is an error where they are used (never a
/// crash, never other bytes), and the next write reloads the file as it now is.
#[test]
fn a_file_cut_in_place_under_an_open_session_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.jsonl");
    write_session(&path, 80, &[]);
    let len = fs::metadata(&path).unwrap().len();
    let (mut s, _) = Session::open(&path).unwrap();
    assert_eq!(s.entries().len(), 80);

    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let last = s.entries().last().unwrap();
    let err = last.line_bytes().unwrap_err();
    assert!(err.to_string().contains("shrank"), "{err}");
    assert!(matches!(last.kind(), EntryKind::Unknown { .. }));
    assert!(
        s.entries()[0].line_bytes().is_ok(),
        "lines before the cut still read"
    );

    // The next write sees the file shrank and reloads it: half the entries, a torn tail cut.
    s.append(user("after the cut")).unwrap();
    let (again, report) = Session::open(&path).unwrap();
    assert_eq!(report, LoadReport::default());
    assert!(again.entries().len() < 50, "{}", again.entries().len());
    let last = again.entries().last().unwrap();
    assert_eq!(
        last.message().map(|m| m.role()),
        Some("user"),
        "{last:?} {:?}",
        last.line_bytes()
    );
}

/// The same, but the file is rewritten in place to its old length with other bytes, so its
/// size and identity do not show the change: a rewrite must fail and leave the file alone,
/// rather than copy the other program's bytes in place of lines it no longer has.
#[test]
fn a_rewrite_refuses_lines_changed_in_place_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changed.jsonl");
    write_session(&path, 80, &[]);
    let (mut s, _) = Session::open(&path).unwrap();
    let mut data = fs::read(&path).unwrap();
    let at = data.len() / 2;
    data[at..]
        .iter_mut()
        .filter(|b| **b == b'w')
        .for_each(|b| *b = b'v');
    let other_ids = String::from_utf8(data.clone())
        .unwrap()
        .replace("\"f7", "\"g7");
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all(other_ids.as_bytes())
        .unwrap();
    let before = fs::read(&path).unwrap();
    let err = s.rewrite().unwrap_err();
    assert!(err.to_string().contains("changed on disk"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), before, "nothing written");
}

/// An appended entry kept as its line reads, writes and serialises as it did parsed, and
/// gives its parsed kind back whole; a line under the threshold is left parsed.
#[test]
fn an_appended_entry_kept_as_its_line_is_the_same_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write_session(&path, 3, &[]);
    let (mut s, _) = Session::open(&path).unwrap();
    let details = json!({"readFiles": ["a.rs"], "ledger": {"requests": ["x".repeat(5000)]}});
    let kind = EntryKind::Compaction(crate::session::CompactionEntry {
        summary: "s".into(),
        short_summary: None,
        first_kept_entry_id: "f1".into(),
        tokens_before: 9,
        details: Some(details.clone()),
        preserve_data: None,
        from_extension: Some(false),
        extra: Default::default(),
    });
    let id = s.append(kind.clone()).unwrap().id.clone();
    let before = s.get(&id).unwrap().clone();
    let line = before.to_line();

    assert_eq!(s.keep_as_line(&id, line.len() + 1), None);
    assert!(s.get(&id).unwrap().is_parsed());

    let back = s.keep_as_line(&id, line.len()).expect("kept as its line");
    assert_eq!(back, kind);
    let kept = s.get(&id).unwrap();
    assert!(!kept.is_parsed());
    assert!(kept.is_unmodified_line());
    assert_eq!(kept.to_line(), line);
    assert_eq!(serde_json::to_string(&kept.json()).unwrap(), line);
    assert_eq!(kept, &before);
    assert_eq!(s.leaf_id(), Some(id.as_str()));
    let (again, _) = Session::open(&path).unwrap();
    assert_eq!(again.get(&id).unwrap(), &before);
}
