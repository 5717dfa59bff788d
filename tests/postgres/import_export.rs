//! `compactd import FILE…` and `compactd export ID` with the real binary: many files in one
//! run with progress, each exported back byte for byte (unknown types and fields, malformed
//! lines, key order); version 1/2 files stored as their version 3 migration; a stored
//! session's context is the file's.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use compactd::session::{Catalog, Session};
use compactd::testkit::{PgOptions, PgStore};
use devtools::fixtures;
use devtools::postgres::PASSWORD;

fn cli(url: &str, args: &[&str]) -> std::process::Output {
    // An empty config directory of its own, removed when the command has run.
    let config = tempfile::tempdir().unwrap();
    Command::new(fixtures::compactd_bin())
        .args(args)
        .env("DATABASE_URL", url)
        .env("COMPACTD_CONFIG_DIR", config.path())
        .output()
        .expect("compactd runs")
}

fn store(url: &str) -> Arc<PgStore> {
    PgStore::connect(&PgOptions {
        url: url.to_owned(),
        pool_size: 2,
        timeout: Duration::from_secs(10),
        fresh_reads: true,
    })
    .expect("the test database is reachable")
}

#[test]
fn import_then_export_gives_back_the_same_bytes() {
    let url = devtools::postgres::shared().create_database();
    // A generated session with branches, labels, compactions and images.
    let dir = tempfile::tempdir().unwrap();
    let generated = dir.path().join("generated.jsonl");
    devtools::generate_session(
        std::fs::File::create(&generated).unwrap(),
        &devtools::GenerateOptions::for_size(devtools::SizePreset::Xs, 7),
    )
    .unwrap();
    let exact: Vec<PathBuf> = vec![
        fixtures::session("quirks.jsonl"),
        // oh-my-pi 18: a title line before the header, a `title_change` entry.
        fixtures::session("omp18-title.jsonl"),
        fixtures::demo_session(),
        generated,
    ];
    let migrated = vec![
        fixtures::pi_session("before-compaction.jsonl"),
        fixtures::pi_session("large-session.jsonl"),
        fixtures::session("v1.jsonl"),
        fixtures::session("v2.jsonl"),
    ];
    let mut args: Vec<String> = vec!["import".into()];
    args.extend(
        exact
            .iter()
            .chain(&migrated)
            .map(|p| p.display().to_string()),
    );
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = cli(&url, &refs);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "import failed: {stderr}");
    assert!(output.stdout.is_empty(), "import prints nothing on stdout");
    let n = exact.len() + migrated.len();
    for i in 1..=n {
        assert!(
            stderr.contains(&format!("[{i}/{n}] ")),
            "no progress line {i}: {stderr}"
        );
    }
    assert!(
        stderr.contains(&format!("imported {n} of {n} sessions")),
        "{stderr}"
    );
    assert!(
        !stderr.contains(PASSWORD),
        "the password is on stderr: {stderr}"
    );
    assert!(stderr.contains("migrated from version 1"), "{stderr}");
    assert!(
        stderr.contains("kept a malformed line as written"),
        "{stderr}"
    );

    // Again: refused per session, unless --replace.
    let again = cli(&url, &["import", &exact[0].display().to_string()]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let replaced = cli(
        &url,
        &["import", "--replace", &exact[0].display().to_string()],
    );
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );

    let store = store(&url);
    let unterminated = fixtures::session("unterminated-tail.jsonl");
    let torn = fixtures::session("torn-tail.jsonl");
    for file in exact.iter().chain(&migrated).chain([&unterminated, &torn]) {
        if [&unterminated, &torn].contains(&file) {
            // These share quirks.jsonl's session id.
            let done = cli(&url, &["import", "--replace", &file.display().to_string()]);
            assert!(
                done.status.success(),
                "{}",
                String::from_utf8_lossy(&done.stderr)
            );
            if file == &torn {
                assert!(String::from_utf8_lossy(&done.stderr).contains("torn last line left out"));
            }
        }
        let (mut from_file, _) = Session::open(file).unwrap();
        if migrated.contains(file) {
            // A migrated file is stored as the file backend's first write makes it, size
            // controls included (`partialJson` dropped): compare with that write.
            let copy = dir.path().join(format!(
                "migrated-{}",
                file.file_name().unwrap().to_string_lossy()
            ));
            std::fs::copy(file, &copy).unwrap();
            Session::open(&copy).unwrap().0.rewrite().unwrap();
            from_file = Session::open(&copy).unwrap().0;
        }
        let id = from_file.header().id.clone();
        let output = cli(&url, &["export", &id]);
        assert!(
            output.status.success(),
            "export {id}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let original = std::fs::read(file).unwrap();
        if exact.contains(file) || file == &unterminated {
            let mut expected = original.clone();
            if !expected.ends_with(b"\n") {
                // An unterminated last line that parses is kept; it gets its newline.
                expected.push(b'\n');
            }
            assert!(
                output.stdout == expected,
                "{}: the export differs from the file",
                file.display()
            );
        }
        // Whatever the file was, the stored session has the file's entries and context, as
        // opened (maybe only what the context needs) and once loaded whole.
        let (mut stored, _) = store.open_session(&id).unwrap();
        assert_eq!(
            serde_json::to_value(stored.context().messages).unwrap(),
            serde_json::to_value(from_file.context().messages).unwrap(),
            "{}",
            file.display()
        );
        stored.load_whole().unwrap();
        // Ids of a version 1 file are made at migration (they may differ between two
        // migrations of the same file); compare the shape: types, parents and leaf by position.
        let shape = |s: &Session| {
            let position =
                |id: Option<&str>| id.and_then(|id| s.entries().iter().position(|e| e.id == id));
            let entries: Vec<(String, Option<usize>)> = s
                .entries()
                .iter()
                .map(|e| (e.type_name().to_owned(), position(e.parent_id.as_deref())))
                .collect();
            (entries, position(s.leaf_id()))
        };
        assert_eq!(shape(&stored), shape(&from_file), "{}", file.display());
        if !migrated.contains(file) {
            assert_eq!(stored.leaf_id(), from_file.leaf_id(), "{}", file.display());
        }
        assert_eq!(
            serde_json::to_value(stored.context().messages).unwrap(),
            serde_json::to_value(from_file.context().messages).unwrap(),
            "{}",
            file.display()
        );
        if migrated.contains(file) {
            assert!(
                output
                    .stdout
                    .starts_with(b"{\"type\":\"session\",\"version\":3")
            );
        }
        if *file == torn {
            assert_eq!(
                output.stdout,
                original[..original.len() - torn_len(&original)]
            );
        }
    }
    // Export to a file; a missing id is an error.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let (demo, _) = Session::open(fixtures::demo_session()).unwrap();
    let done = cli(
        &url,
        &[
            "export",
            &demo.header().id,
            "--out",
            &out.display().to_string(),
        ],
    );
    assert!(done.status.success());
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(fixtures::demo_session()).unwrap()
    );
    let missing = cli(&url, &["export", "no-such-session"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));
}

/// The length of the unterminated last line.
fn torn_len(bytes: &[u8]) -> usize {
    bytes.len() - bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

/// The real pi sessions (version 1 files): stored as the version 3 file the file backend
/// writes when it migrates them, line for line (every field, in its order, with ids by
/// position since migration makes fresh ones); that export imported again exports byte for
/// byte.
#[test]
fn the_real_pi_sessions_round_trip_as_the_file_backend_migrates_them() {
    let url = devtools::postgres::shared().create_database();
    let dir = tempfile::tempdir().unwrap();
    for name in ["before-compaction.jsonl", "large-session.jsonl"] {
        let original = fixtures::pi_session(name);
        let done = cli(&url, &["import", &original.display().to_string()]);
        assert!(
            done.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        let (from_file, _) = Session::open(&original).unwrap();
        let id = from_file.header().id.clone();
        let exported = cli(&url, &["export", &id]);
        assert!(exported.status.success());

        // The file backend's own migration: a copy, rewritten in place.
        let copy = dir.path().join(name);
        std::fs::copy(&original, &copy).unwrap();
        let (mut migrated, report) = Session::open(&copy).unwrap();
        assert_eq!(report.migrated_from, Some(1), "{name} is a version 1 file");
        migrated.rewrite().unwrap();
        let on_disk = std::fs::read(&copy).unwrap();
        assert_eq!(
            by_position(&exported.stdout),
            by_position(&on_disk),
            "{name}: the export is not the file backend's migration"
        );
        assert_eq!(
            exported.stdout.iter().filter(|&&b| b == b'\n').count(),
            std::fs::read(&original)
                .unwrap()
                .iter()
                .filter(|&&b| b == b'\n')
                .count(),
            "{name}: a line was lost or added"
        );

        // The version 3 export is stored exactly.
        let v3 = dir.path().join(format!("v3-{name}"));
        std::fs::write(&v3, &exported.stdout).unwrap();
        let again = cli(&url, &["import", "--replace", &v3.display().to_string()]);
        assert!(again.status.success());
        let second = cli(&url, &["export", &id]);
        assert!(
            second.stdout == exported.stdout,
            "{name}: the second round trip changed bytes"
        );
    }
}

/// Each line of a session file as JSON (fields in their order) with every entry id, parent
/// id and first kept id replaced by the line number of the entry that has it.
fn by_position(bytes: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(bytes).unwrap();
    let mut values: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let position: std::collections::HashMap<String, usize> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some((v.get("id")?.as_str()?.to_owned(), i)))
        .collect();
    for v in values.iter_mut().skip(1) {
        for key in ["id", "parentId", "firstKeptEntryId"] {
            if let Some(slot) = v.get_mut(key)
                && let Some(id) = slot.as_str()
            {
                *slot = serde_json::json!(position.get(id).copied());
            }
        }
    }
    values.iter().map(|v| v.to_string()).collect()
}

/// A bulk import goes on past files that cannot be stored, says which and why (stderr, and
/// `--json` on stdout), stores every good file whole and none of a bad one, and fails at
/// the end.
#[test]
fn a_bulk_import_goes_past_bad_files_and_fails_at_the_end() {
    let url = devtools::postgres::shared().create_database();
    let dir = tempfile::tempdir().unwrap();
    let good_a = fixtures::demo_session();
    let good_b = fixtures::session("quirks.jsonl");
    let not_a_session = dir.path().join("notes.jsonl");
    std::fs::write(&not_a_session, "hello\n").unwrap();
    let missing = dir.path().join("missing.jsonl");
    // A valid file the database refuses half-way (PostgreSQL text cannot hold NUL): its
    // transaction rolls back, nothing of it stays.
    let refused = dir.path().join("refused.jsonl");
    std::fs::write(
        &refused,
        concat!(
            r#"{"type":"session","version":3,"id":"refused-session","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#,
            "\n",
            r#"{"type":"thinking_level_change","id":"aaaa0001","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","thinkingLevel":"high"}"#,
            "\n",
            r#"{"type":"thinking_level_change","id":"bad\u0000id","parentId":"aaaa0001","timestamp":"2026-01-01T00:00:02.000Z","thinkingLevel":"low"}"#,
            "\n"
        ),
    )
    .unwrap();
    let files = [&good_a, &not_a_session, &missing, &refused, &good_b];
    let mut args: Vec<String> = vec!["import".into(), "--json".into()];
    args.extend(files.iter().map(|p| p.display().to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = cli(&url, &refs);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "three files failed: {stderr}");
    for (i, bad) in [(2, &not_a_session), (3, &missing), (4, &refused)] {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("[{i}/5] {}: error: ", bad.display())))
            .unwrap_or_else(|| panic!("no error line for file {i}: {stderr}"));
        assert!(line.ends_with("(not imported)"), "{line}");
    }
    for i in [1, 5] {
        assert!(stderr.contains(&format!("[{i}/5] ")), "{stderr}");
    }
    assert!(stderr.contains("imported 2 of 5 sessions"), "{stderr}");
    assert!(
        stderr.contains("3 of 5 files were not imported"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");

    // stdout: one JSON object per file, in order, then the summary.
    let events: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap(),
                e["kind"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("stored", ""),
            ("failed", "invalidHeader"),
            ("failed", "notFound"),
            ("failed", "storage"),
            ("stored", ""),
            ("done", ""),
        ],
        "{events:#?}"
    );
    assert_eq!(events[5]["stored"], 2);
    assert_eq!(events[5]["failed"], 3);
    assert_eq!(events[4]["file"], good_b.display().to_string());
    assert!(
        events[4]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("malformed")
    );

    // The good files are stored whole (they export to their bytes); the refused one not at all.
    for good in [&good_a, &good_b] {
        let (session, _) = Session::open(good).unwrap();
        let exported = cli(&url, &["export", &session.header().id]);
        assert!(exported.status.success());
        assert!(exported.stdout == std::fs::read(good).unwrap());
    }
    let store = store(&url);
    assert!(!store.exists("refused-session").unwrap());
}
