//! `compactd compact --summary-file` and `--target-tokens` (issue 33, items 1 and 3): the
//! real binary on a copy of the demo session.

use compactd::session::{EntryKind, Session};
use devtools::fixtures::demo_copy;
use serde_json::Value;

use super::cli::compactd;

/// Issue 33, item 1, on the command line: `compact --summary-file` writes the compaction with
/// the user's text (marked edited, the ledger block and file tags put back), and `context`
/// opens with it; an empty file writes nothing.
#[test]
fn compact_with_a_summary_file_writes_the_users_text() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    let empty = dir.path().join("empty.md");
    std::fs::write(&empty, "  \n").unwrap();
    let out = compactd(
        &["compact", p, "--summary-file", empty.to_str().unwrap()],
        dir.path(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let both = compactd(
        &[
            "compact",
            p,
            "--preview",
            "--summary-file",
            empty.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        !both.status.success(),
        "--preview and --summary-file conflict"
    );

    let mine = dir.path().join("summary.md");
    std::fs::write(&mine, "My own account of the session, written by hand.\n").unwrap();
    let out = compactd(
        &[
            "compact",
            p,
            "--json",
            "--keep-recent-tokens",
            "2000",
            "--summary-file",
            mine.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry_id = result["entryId"].as_str().expect("written");
    assert_eq!(result["details"]["edited"], true);
    let summary = result["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("My own account of the session"),
        "{summary}"
    );
    let (session, _) = Session::open(&path).unwrap();
    let stored = session.get(entry_id).expect("the entry is in the file");
    match stored.kind() {
        EntryKind::Compaction(c) => {
            assert_eq!(c.summary, summary);
            assert_eq!(c.details.as_ref().unwrap()["edited"], true);
            assert!(c.summary.contains("<progress-ledger>"), "{}", c.summary);
        }
        other => panic!("not a compaction: {other:?}"),
    }
    let out = compactd(&["context", p, "--json"], dir.path());
    let context = String::from_utf8_lossy(&out.stdout);
    assert!(context.contains("My own account of the session"));
}

/// `--target-tokens` reports whether the summary met the target, on stdout and in `--json`.
#[test]
fn compact_reports_whether_a_target_was_met() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let args = |target: &'static str| {
        [
            "compact",
            p,
            "--preview",
            "--json",
            "--summarizer",
            "extractive",
            "--keep-recent-tokens",
            "2000",
            "--target-tokens",
            target,
        ]
    };
    let out = compactd(&args("10"), dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tiny: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(tiny["targetMet"], false, "{tiny}");
    assert!(tiny["summaryTokens"].as_u64().unwrap() > 10);
    assert!(
        tiny["targetReason"]
            .as_str()
            .unwrap()
            .contains("target of 10")
    );
    let out = compactd(&args("50000"), dir.path());
    let roomy: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(roomy["targetMet"], true, "{roomy}");
    let bad = compactd(&["compact", p, "--target-tokens", "0"], dir.path());
    assert!(!bad.status.success(), "a target of 0 is refused");
}
