//! Generated sessions (compactions, branches, labels, images) loaded lazily: every entry, the
//! context, rewrites and revisions as an eager parse of the same bytes gives them.

use pretty_assertions::assert_eq;

use super::*;

/// A generated session with compactions, branches, labels, images and model changes.
fn generated(dir: &tempfile::TempDir, seed: u64, bytes: u64) -> PathBuf {
    use devtools::{GenerateOptions, generate_session};
    let path = dir.path().join(format!("gen{seed}.jsonl"));
    let file = File::create(&path).unwrap();
    generate_session(
        io::BufWriter::new(file),
        &GenerateOptions::for_target(seed, bytes),
    )
    .unwrap();
    path
}

/// Every line parsed eagerly, the way the loader did before entries were kept raw.
fn eager_entries(path: &Path) -> Vec<Entry> {
    let data = fs::read(path).unwrap();
    data.split(|&b| b == b'\n')
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| parse_line(l).unwrap())
        .collect()
}

#[test]
fn lazily_loaded_entries_equal_eagerly_parsed_ones() {
    let dir = tempfile::tempdir().unwrap();
    for seed in [1, 2] {
        let path = generated(&dir, seed, 400_000);
        let eager = eager_entries(&path);
        let (s, report) = Session::open(&path).unwrap();
        assert_eq!(report, LoadReport::default());
        assert!(s.entries().iter().all(|e| !e.is_parsed()));
        assert_eq!(s.entries().len(), eager.len());
        // Without parsing: the header fields, the wire type and marker-ness.
        for (lazy, e) in s.entries().iter().zip(&eager) {
            assert_eq!(
                (&lazy.id, &lazy.parent_id, &lazy.timestamp, lazy.type_name()),
                (&e.id, &e.parent_id, &e.timestamp, e.type_name())
            );
            assert_eq!(lazy.is_leaf_move(), matches!(e.kind(), EntryKind::LeafMove));
        }
        let leaf = s.leaf_id().map(str::to_owned);
        let expected = build_session_context(&eager, leaf.as_deref());
        assert_eq!(s.context(), expected);
        // An untouched entry writes back its own line; the eager entry its canonical form.
        let text = fs::read_to_string(&path).unwrap();
        for ((lazy, e), line) in s.entries().iter().zip(&eager).zip(text.lines().skip(1)) {
            assert_eq!(lazy, e);
            assert_eq!(lazy.to_line(), line);
            let canonical: Value = serde_json::from_str(&e.to_line()).unwrap();
            assert_eq!(serde_json::from_str::<Value>(line).unwrap(), canonical);
        }
    }
}

#[test]
fn context_parses_only_state_and_the_kept_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = generated(&dir, 3, 3_000_000);
    let (s, _) = Session::open(&path).unwrap();
    let ctx = s.context();
    assert_eq!(
        ctx.messages
            .first()
            .map(|m| matches!(m, AgentMessage::CompactionSummary(_))),
        Some(true),
        "the generated session ends after a compaction"
    );
    let in_context: HashSet<&str> = ctx.entry_ids.iter().map(String::as_str).collect();
    let on_path: HashSet<&str> = s.path_to_leaf().iter().map(|e| e.id.as_str()).collect();
    let mut untouched_messages = 0;
    for e in s.entries() {
        if !on_path.contains(e.id.as_str()) {
            assert!(!e.is_parsed(), "{} is off the path but was parsed", e.id);
        } else if e.type_name() == "message" && !in_context.contains(e.id.as_str()) {
            assert!(!e.is_parsed(), "compacted message {} was parsed", e.id);
            untouched_messages += 1;
        }
    }
    assert!(
        untouched_messages > 0,
        "the session has compacted messages on its path"
    );
}

#[test]
fn a_line_with_an_unusual_header_takes_the_eager_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let header = r#"{"type":"session","version":3,"id":"s","timestamp":"","cwd":"/"}"#;
    // A numeric id is read as "" by the eager parser; the head parse refuses it and defers.
    let a = r#"{"type":"custom","id":7,"parentId":null,"timestamp":"t","customType":"x"}"#;
    let b = r#"{"type":"custom","id":"b","parentId":null,"timestamp":"t","type":"label"}"#;
    fs::write(&path, format!("{header}\n{a}\n{b}\n")).unwrap();
    let (s, _) = Session::open(&path).unwrap();
    let eager = eager_entries(&path);
    assert_eq!(s.entries()[0], eager[0]);
    assert_eq!(s.entries()[0].id, "");
    // A header field repeated after the header (JSON's last-wins would make `b` a label): the
    // scan reads the first, and the body check, when the body is used, finds the repeat and
    // keeps the entry as an unknown one, written back as it was.
    assert_eq!(s.entries()[1].type_name(), "custom");
    assert!(
        matches!(s.entries()[1].kind(), EntryKind::Unknown { type_name } if type_name == "custom")
    );
    assert!(s.entries()[1].is_unmodified_line());
    assert_eq!(s.entries()[1].to_line(), b);
}

/// A line whose header parses but whose body `serde_json::Value` refuses stays in the tree as
/// an unknown entry and is written back unchanged by every kind of rewrite.
#[test]
fn a_line_whose_body_does_not_parse_survives_rewrites_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.jsonl");
    let header = r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/w"}"#;
    let a = r#"{"type":"message","id":"a1","parentId":null,"timestamp":"t","message":{"role":"user","content":"hi","timestamp":1}}"#;
    let huge = r#"{"type":"custom","id":"a2","parentId":"a1","timestamp":"t","customType":"x","data":{"n":1e400}}"#;
    let surrogate = r#"{"type":"custom_message","id":"a3","parentId":"a2","timestamp":"t","customType":"y","content":"\ud800","display":true}"#;
    fs::write(&path, format!("{header}\n{a}\n{huge}\n{surrogate}\n")).unwrap();

    let (mut s, report) = Session::open(&path).unwrap();
    assert_eq!(report, LoadReport::default());
    assert_eq!(s.leaf_id(), Some("a3"));
    assert_eq!(s.get("a2").unwrap().type_name(), "custom");
    assert!(matches!(
        s.get("a3").unwrap().kind(),
        EntryKind::Unknown { .. }
    ));
    // Modifying the broken entries (as a prune or migration would) does not lose their lines.
    s.replace_entries(|entries| {
        for e in entries.iter_mut() {
            let _ = e.extra_mut();
        }
    })
    .unwrap();
    s.append(user("after")).unwrap();
    s.rewrite().unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(&got[1..4], &[a, huge, surrogate], "{text}");
    let (again, _) = Session::open(&path).unwrap();
    assert_eq!(again.entries().len(), 4);
    assert_eq!(again.get("a3").unwrap().parent_id.as_deref(), Some("a2"));
}

/// DESIGN promises byte-for-byte preservation of what compactd does not change: key order,
/// number spelling, escapes and whitespace of untouched lines survive a rewrite, while an
/// entry that was changed is written in the canonical form.
#[test]
fn untouched_lines_are_rewritten_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("order.jsonl");
    let header = r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/w"}"#;
    let custom = r#"{"zeta":1,"type":"custom_message","alpha":{"b":2,"a":1},"id":"c1","parentId":null,"timestamp":"t","customType":"note","content":"caf\u00e9","display":false,"n":1.50}"#;
    let spaced = r#"{ "type": "message", "id": "c2", "parentId": "c1", "timestamp": "t", "message": {"role":"user","content":"x","timestamp":2} }"#;
    let changed = r#"{"type":"message","id":"c3","parentId":"c2","timestamp":"t","message":{"role":"user","content":"old","timestamp":3}}"#;
    fs::write(&path, format!("{header}\n{custom}\n{spaced}\n{changed}\n")).unwrap();
    let (mut s, _) = Session::open(&path).unwrap();
    s.replace_entries(|entries| {
        if let EntryKind::Message(AgentMessage::User(u)) = entries[2].kind_mut() {
            u.content = crate::session::Content::Text("new".into());
        }
    })
    .unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(&got[1..3], &[custom, spaced]);
    assert!(got[3].contains(r#""content":"new""#), "{}", got[3]);
    assert!(
        !got[3].contains(' '),
        "the changed entry is canonical: {}",
        got[3]
    );
}

#[test]
fn the_revision_changes_with_every_change_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = new_session(&dir);
    let mut seen = HashSet::new();
    let mut changed = |s: &Session| assert!(seen.insert(s.revision()), "a new revision");
    changed(&s);
    let a = s.append(user("a")).unwrap().id.clone();
    changed(&s);
    s.append(user("b")).unwrap();
    changed(&s);
    let before = s.revision();
    let _ = s.context();
    assert_eq!(s.refresh().unwrap(), 0);
    assert_eq!(s.revision(), before, "reading changes nothing");
    s.move_leaf(Some(&a)).unwrap();
    changed(&s);
    s.replace_entries(|_| {}).unwrap();
    changed(&s);
    let (mut other, _) = Session::open(s.path()).unwrap();
    other.append(user("elsewhere")).unwrap();
    s.refresh().unwrap();
    changed(&s);
    other.rewrite().unwrap();
    s.refresh().unwrap();
    changed(&s);
}

/// Files over `STREAM_MIN_BYTES` (16 KiB in unit tests) are streamed through a small buffer
/// on two threads; the loader must see exactly what a whole read sees, wherever the halves
/// and the buffer are cut: malformed lines, unusual headers, blank lines and an unterminated
/// tail included.
#[test]
fn a_streamed_file_loads_like_one_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    for bad_at in [3usize, 150, 151, 152, 297] {
        let path = dir.path().join(format!("two-{bad_at}.jsonl"));
        let mut text =
            String::from(r#"{"type":"session","version":3,"id":"p","timestamp":"t","cwd":"/w"}"#);
        text.push('\n');
        let mut expected = Vec::new();
        let mut parent = None::<String>;
        for i in 0..300 {
            if i == bad_at {
                text.push_str("{\"type\":\"message\",\"id\":\"broken\n");
                text.push_str("   \n");
            }
            let id = format!("e{i}");
            // Every 50th line has a numeric id field before its string one: an unusual
            // header that takes the eager path.
            let line = json!({"type": "custom", "id": id, "parentId": parent,
                "timestamp": "t", "customType": "x", "data": "y".repeat(300)});
            let mut line = line.to_string();
            if i % 50 == 7 {
                line = line.replacen("{\"type\"", "{\"n\":1,\"type\"", 1);
            }
            text.push_str(&line);
            if i < 299 {
                text.push('\n');
            }
            expected.push(id.clone());
            parent = Some(id);
        }
        fs::write(&path, &text).unwrap();
        assert!(text.len() as u64 > super::stream::STREAM_MIN_BYTES);
        let (s, report) = Session::open(&path).unwrap();
        let ids: Vec<&str> = s.entries().iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, expected, "bad line at {bad_at}");
        assert_eq!(report.skipped.len(), 1, "{report:?}");
        assert_eq!(report.skipped[0].line, bad_at + 2);
        assert_eq!(s.leaf_id(), Some("e299"));
        for (e, line) in s.entries().iter().zip(
            text.lines()
                .skip(1)
                .filter(|l| !l.trim().is_empty() && !l.contains("broken")),
        ) {
            assert_eq!(e.to_line(), line);
        }
    }
}

#[test]
fn released_bodies_are_parsed_again_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let path = generated(&dir, 4, 200_000);
    let (mut s, _) = Session::open(&path).unwrap();
    let before = s.context();
    assert!(s.entries().iter().any(Entry::is_parsed));
    s.release_parsed_bodies();
    assert!(s.entries().iter().all(|e| !e.is_parsed()));
    assert_eq!(s.context(), before);
}
