//! Replays the fuzz targets' saved inputs on stable: every file under
//! `fuzz/regressions/<target>/` (crashers the fuzzer once found, now fixed) and
//! `fuzz/seeds/<target>/` (the seed corpus) goes through the same check as the fuzz target,
//! which is included here by path so the two cannot drift apart.

#[path = "../../fuzz/src/lib.rs"]
mod checks;

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;

/// The saved inputs of `target`, sorted so failures are reported in a stable order.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = devtools::fixtures::repo_file("fuzz");
    let mut files: Vec<PathBuf> = ["regressions", "seeds"]
        .iter()
        .filter_map(|kind| fs::read_dir(root.join(kind).join(target)).ok())
        .flatten()
        .map(|entry| entry.expect("the fuzz directories can be listed").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` over every saved input of `target`; fails naming each input that panicked.
fn replay(target: &str, check: fn(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no seeds or regressions for `{target}`");
    let failures: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let data = fs::read(file).expect("a saved fuzz input can be read");
            panic::catch_unwind(AssertUnwindSafe(|| check(&data)))
                .err()
                .map(|_| file.display().to_string())
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} saved `{target}` inputs fail (see the panics above): {failures:#?}",
        failures.len(),
        files.len()
    );
}

#[test]
fn framing() {
    replay("framing", checks::framing::check);
}

#[test]
fn rpc_message() {
    replay("rpc_message", checks::rpc_message::check);
}

#[test]
fn settings() {
    replay("settings", checks::settings::check);
}

#[test]
fn session_loader() {
    replay("session_loader", checks::session_loader::check);
}
