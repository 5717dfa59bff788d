//! Claude Code transcripts (`tests/fixtures/claude/`) through the command line: read into
//! compactd's model (its own compaction honoured, tool calls and results paired, a sidechain
//! left out), searched, compacted by appending Claude Code's records with every byte before
//! kept, and refused while freshly written. The real `claude` resuming such a compaction is
//! `scripts/test.d/claude.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use serde_json::Value;

const FIXTURE: &str = "5b1f0c1e-7d1a-4c43-9a0e-2f1d6f3e9a10.jsonl";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/claude")
        .join(FIXTURE)
}

/// The command line with a home of its own (no user settings, no model configured).
fn compactd(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("COMPACTD_CONFIG_DIR", home.join(".config/compactd"))
        .output()
        .expect("compactd runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "compactd failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A copy of the fixture last written a minute ago, as Claude Code leaves a finished session.
fn quiet_copy(dir: &Path) -> PathBuf {
    let path = dir.join(FIXTURE);
    std::fs::copy(fixture(), &path).unwrap();
    age(&path);
    path
}

fn age(path: &Path) {
    let file = std::fs::File::options().append(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(60))
        .unwrap();
}

#[test]
fn the_context_starts_at_claude_codes_own_compaction() {
    let home = tempfile::tempdir().unwrap();
    let text = stdout(&compactd(
        home.path(),
        &["context", fixture().to_str().unwrap()],
    ));
    assert!(!text.contains("OLD-"), "{text}");
    for kept in [
        "NEW-REQUEST",
        "Bash(",
        "12 passed",
        "NEW-NOTE",
        "NEW-ANSWER",
    ] {
        assert!(text.contains(kept), "{kept} missing:\n{text}");
    }
    assert!(!text.contains("SIDECHAIN"), "{text}");
    assert!(text.contains("messages: 6"), "{text}");
}

#[test]
fn search_finds_what_claude_code_compacted_away_by_line_uuid() {
    let home = tempfile::tempdir().unwrap();
    let text = stdout(&compactd(
        home.path(),
        &["search", fixture().to_str().unwrap(), "OLD-TOOL-OUTPUT"],
    ));
    assert!(
        text.contains("00000000-0000-4000-8000-000000000005  toolResult")
            && text.contains("(compacted)"),
        "{text}"
    );
}

#[test]
fn compact_appends_claude_codes_records_and_keeps_every_byte() {
    let home = tempfile::tempdir().unwrap();
    let path = quiet_copy(home.path());
    let before = std::fs::read(&path).unwrap();
    let file = path.to_str().unwrap();
    let args = [
        "compact",
        file,
        "--summarizer",
        "extractive",
        "--keep-recent-tokens",
        "20",
    ];
    let printed = stdout(&compactd(home.path(), &args));
    assert!(
        printed.starts_with("Claude Code compaction appended to "),
        "{printed}"
    );
    let after = std::fs::read(&path).unwrap();
    assert!(after.starts_with(&before), "bytes already there changed");
    let added: Vec<Value> = String::from_utf8(after[before.len()..].to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(added[0]["subtype"], "compact_boundary");
    assert_eq!(added[0]["parentUuid"], Value::Null);
    assert_eq!(
        added[0]["logicalParentUuid"],
        "00000000-0000-4000-8000-000000000013"
    );
    assert_eq!(added[1]["isCompactSummary"], true);
    assert_eq!(added[1]["parentUuid"], added[0]["uuid"]);
    let summary = added[1]["message"]["content"].as_str().unwrap();
    assert!(summary.starts_with("This session is being continued"));
    assert!(summary.contains("NEW-REQUEST"), "{summary}");
    // The verbatim tail: copies of the kept lines, chained on the summary, naming the original.
    assert!(added.len() > 2, "no verbatim tail: {added:?}");
    assert_eq!(added[2]["parentUuid"], added[1]["uuid"]);
    let last = added.last().unwrap();
    assert_eq!(
        last["compactdKeptFrom"],
        "00000000-0000-4000-8000-000000000013"
    );
    assert_ne!(last["message"]["id"], "msg_04");

    // Read back: the new compaction, then the kept messages, nothing counted twice.
    let text = stdout(&compactd(home.path(), &["context", file]));
    assert!(
        text.contains("NEW-ANSWER") && !text.contains("OLD-"),
        "{text}"
    );
    assert_eq!(text.matches("NEW-ANSWER").count(), 1, "{text}");

    // Nothing new since: nothing to compact (exit 3), nothing written.
    age(&path);
    let again = compactd(
        home.path(),
        &["compact", file, "--summarizer", "extractive"],
    );
    assert_eq!(again.status.code(), Some(3), "{again:?}");
    assert_eq!(std::fs::read(&path).unwrap(), after);
}

#[test]
fn a_transcript_written_a_moment_ago_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join(FIXTURE);
    std::fs::copy(fixture(), &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let out = compactd(home.path(), &["compact", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Claude Code is writing this transcript now"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn commands_that_would_rewrite_a_transcript_refuse_it() {
    let home = tempfile::tempdir().unwrap();
    let path = quiet_copy(home.path());
    let before = std::fs::read(&path).unwrap();
    let out = compactd(home.path(), &["prune", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a Claude Code transcript"), "{stderr}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
