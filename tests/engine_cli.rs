//! The `compact` and `navigate` commands of the real binary.

#[path = "engine_support/mod.rs"]
mod support;

use std::process::{Command, Output};

use compactd::session::{EntryKind, Session};
use serde_json::Value;
use support::demo_copy;

fn compactd(args: &[&str], home: &std::path::Path) -> Output {
    // A temp HOME / config dir so no user settings (or API keys) leak in.
    Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("the binary runs")
}

#[test]
fn compact_appends_an_entry_and_prints_json() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let out = compactd(
        &[
            "compact",
            p,
            "--json",
            "--keep-recent-tokens",
            "2000",
            "--tokenizer",
            "chars4",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let id = result["entryId"].as_str().expect("entry id");
    assert_eq!(result["summarizer"], "extractive");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Summarizing"));

    let (session, _) = Session::open(&path).unwrap();
    assert_eq!(session.leaf_id(), Some(id));
    let EntryKind::Compaction(c) = &session.get(id).unwrap().kind() else {
        panic!("not a compaction")
    };
    assert_eq!(
        c.first_kept_entry_id,
        result["firstKeptEntryId"].as_str().unwrap()
    );

    // Compacting again right away is refused, with the file named and a failure status.
    let again = compactd(&["compact", p], dir.path());
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains(p) && err.contains("Already compacted"),
        "{err}"
    );
}

#[test]
fn preview_and_navigate_from_the_command_line() {
    let (dir, path) = demo_copy();
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    let out = compactd(
        &["compact", p, "--preview", "--keep-recent-tokens", "2000"],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("preview (nothing written)"));
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let (session, _) = Session::open(&path).unwrap();
    let target = session.path_to_leaf()[3].id.clone();
    let out = compactd(
        &["navigate", p, &target, "--summarize", "--json"],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["cancelled"], false);
    let (session, _) = Session::open(&path).unwrap();
    assert_eq!(session.leaf_id(), result["leafId"].as_str());

    let bad = compactd(&["navigate", p, "nope"], dir.path());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Entry nope not found"));
}
