//! oh-my-pi 18's title line: a fixed-width `{"type":"title",…}` slot before the header. Read,
//! kept byte for byte through every rewrite (as it is on disk at the time), never added.

use pretty_assertions::assert_eq;

use super::*;

/// The slot as oh-my-pi 18 writes it: 256 bytes with its `\n`, padded with spaces.
fn title_slot(title: &str, updated_at: &str) -> Vec<u8> {
    let unpadded = json!({"type": "title", "v": 1, "title": title, "updatedAt": updated_at,
        "pad": ""})
    .to_string();
    let pad = 255 - unpadded.len();
    let line = json!({"type": "title", "v": 1, "title": title, "updatedAt": updated_at,
        "pad": " ".repeat(pad)})
    .to_string();
    assert_eq!(line.len(), 255);
    let mut bytes = line.into_bytes();
    bytes.push(b'\n');
    bytes
}

fn titled_file(dir: &tempfile::TempDir, name: &str, entries: &[serde_json::Value]) -> PathBuf {
    let path = dir.path().join(name);
    let mut text = title_slot("", "2026-12-01T10:00:00.000Z");
    text.extend_from_slice(
        br#"{"type":"session","version":3,"id":"omp18","timestamp":"2026-12-01T10:00:00.000Z","cwd":"/w"}"#,
    );
    text.push(b'\n');
    for e in entries {
        text.extend_from_slice(e.to_string().as_bytes());
        text.push(b'\n');
    }
    fs::write(&path, text).unwrap();
    path
}

fn message(id: &str, parent: Option<&str>, role: &str, text: &str) -> serde_json::Value {
    json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-12-01T10:00:01.000Z",
        "message": {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}})
}

/// Overwrites the first 256 bytes in place, as the agent does when it renames the session.
fn retitle_in_place(path: &Path, title: &str) -> Vec<u8> {
    use std::io::{Seek, SeekFrom, Write};
    let slot = title_slot(title, "2026-12-01T11:00:00.000Z");
    let mut f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(&slot).unwrap();
    slot
}

#[test]
fn a_title_line_is_read_and_kept_byte_for_byte_through_appends_and_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = titled_file(
        &dir,
        "omp18.jsonl",
        &[
            message("u1", None, "user", "hello"),
            json!({"type": "title_change", "id": "t1", "parentId": "u1",
                "timestamp": "2026-12-01T10:00:02.000Z", "title": "Greeting", "source": "auto"}),
            message("a1", Some("t1"), "assistant", "hi"),
        ],
    );
    let original = fs::read(&path).unwrap();
    let (mut s, report) = Session::open(&path).unwrap();
    assert_eq!(report, LoadReport::default());
    assert_eq!(s.header().id, "omp18");
    assert_eq!(
        s.header().display_title(),
        None,
        "the slot's title is empty"
    );
    let ids: Vec<&str> = s.entries().iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["u1", "t1", "a1"]);
    assert_eq!(s.leaf_id(), Some("a1"));

    // An append adds lines and leaves the first 256 bytes alone.
    s.append(user("more")).unwrap();
    let after_append = fs::read(&path).unwrap();
    assert_eq!(after_append[..original.len()], original[..]);

    // The agent renames the session in place; compactd reads the title from the slot.
    let renamed = retitle_in_place(&path, "Saying hello");
    let (reopened, _) = Session::open(&path).unwrap();
    assert_eq!(reopened.header().display_title(), Some("Saying hello"));

    // A rewrite (here through `s`, opened before the rename) writes the slot as it is on disk
    // now, then the header and entries as before.
    s.replace_entries(|_| {}).unwrap();
    let rewritten = fs::read(&path).unwrap();
    assert_eq!(rewritten[..256], renamed[..]);
    assert_eq!(rewritten[256..], after_append[256..]);
    let (again, report) = Session::open(&path).unwrap();
    assert_eq!(report, LoadReport::default());
    assert_eq!(again.entries().len(), 4);
}

#[test]
fn a_file_without_a_title_line_never_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_session(&dir);
    s.append(user("hi")).unwrap();
    s.replace_entries(|_| {}).unwrap();
    let first = lines(s.path()).remove(0);
    assert!(first.starts_with(br#"{"type":"session""#), "{first:?}");
}

#[test]
fn line_numbers_and_header_errors_count_the_title_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = titled_file(&dir, "bad-line.jsonl", &[message("u1", None, "user", "x")]);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{not json\n");
    fs::write(&path, &bytes).unwrap();
    let (_, report) = Session::open(&path).unwrap();
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(
        report.skipped[0].line, 4,
        "title, header, u1, then the bad line"
    );

    // A title line followed by no header, or by a bad one, names line 2.
    for (name, after) in [
        ("alone.jsonl", &b""[..]),
        ("bad.jsonl", &b"{\"type\":\"x\"}\n"[..]),
    ] {
        let path = dir.path().join(name);
        let mut bytes = title_slot("t", "2026-12-01T10:00:00.000Z");
        bytes.extend_from_slice(after);
        fs::write(&path, bytes).unwrap();
        let error = Session::open(&path).unwrap_err().to_string();
        assert!(
            error.contains(&format!("{name}:2: invalid session header")),
            "{error}"
        );
    }
}

#[test]
fn a_streamed_titled_file_loads_like_one_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut entries = Vec::new();
    let mut parent: Option<String> = None;
    for i in 0..200 {
        let id = format!("e{i}");
        entries.push(json!({"type": "custom", "id": id, "parentId": parent,
            "timestamp": "t", "customType": "x", "data": "y".repeat(300)}));
        parent = Some(id);
    }
    let path = titled_file(&dir, "big.jsonl", &entries);
    assert!(fs::metadata(&path).unwrap().len() > super::super::stream::STREAM_MIN_BYTES);
    let (s, report) = Session::open(&path).unwrap();
    assert_eq!(report, LoadReport::default());
    assert_eq!(s.entries().len(), 200);
    assert_eq!(s.header().id, "omp18");
    assert_eq!(s.leaf_id(), Some("e199"));
}

#[test]
fn the_session_list_reads_the_header_after_a_title_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = titled_file(&dir, "listed.jsonl", &[message("u1", None, "user", "x")]);
    retitle_in_place(&path, "From the slot");
    let all = crate::session::listing::list_sessions(dir.path()).unwrap();
    let [info] = &all[..] else {
        panic!("one session listed: {all:?}")
    };
    assert_eq!(info.id, "omp18");
    assert_eq!(info.title.as_deref(), Some("From the slot"));
    assert_eq!(info.entry_count, 1);
}

#[test]
fn omp18_compaction_fields_load_and_survive_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let compaction = json!({"type": "compaction", "id": "c1", "parentId": "a1",
        "timestamp": "2026-12-01T10:00:03.000Z", "summary": "## Goal\nGreet.",
        "firstKeptEntryId": "a1", "tokensBefore": 900, "tokensAfter": 120, "method": "snapcompact",
        "providerReplayThroughEntryId": "a1", "warning": "freed little"});
    let path = titled_file(
        &dir,
        "compacted.jsonl",
        &[
            message("u1", None, "user", "hello"),
            message("a1", Some("u1"), "assistant", "hi"),
            compaction.clone(),
            message("u2", Some("c1"), "user", "again"),
        ],
    );
    let original = fs::read(&path).unwrap();
    let (mut s, report) = Session::open(&path).unwrap();
    assert_eq!(report, LoadReport::default());
    let entry = s.get("c1").unwrap();
    let EntryKind::Compaction(c) = entry.kind() else {
        panic!("c1 is a compaction: {:?}", entry.kind())
    };
    assert_eq!(
        (c.summary.as_str(), c.first_kept_entry_id.as_str()),
        ("## Goal\nGreet.", "a1")
    );
    assert_eq!(c.tokens_before, 900);
    // The fields compactd does not model are kept, and written back as they were.
    for field in [
        "tokensAfter",
        "method",
        "providerReplayThroughEntryId",
        "warning",
    ] {
        assert_eq!(entry.to_value()[field], compaction[field], "{field}");
    }
    let context = build_session_context(s.entries(), ContextLeaf::LastEntry);
    assert!(
        matches!(&context.messages[0], AgentMessage::CompactionSummary(m) if m.summary == "## Goal\nGreet."),
        "{:?}",
        context.messages
    );

    // A rewrite that parses every entry keeps the title slot and every field of the compaction.
    s.replace_entries(|entries| Entry::parse_all(&entries.iter().collect::<Vec<_>>()))
        .unwrap();
    let rewritten = fs::read(&path).unwrap();
    assert_eq!(rewritten[..256], original[..256]);
    let (again, report) = Session::open(&path).unwrap();
    assert_eq!(report, LoadReport::default());
    assert_eq!(again.get("c1").unwrap().to_value(), compaction);
}
