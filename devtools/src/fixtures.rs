//! The repository's files as the tests use them: every path is found here, from the
//! repository's root, and nothing is read from outside the repository.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The repository's root (the `compactd` package).
pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Hex SHA-256 of `bytes`: the name compactd gives a blob (`blob:sha256:<hex>`) and its file
/// in the blob store, computed here rather than asked of compactd.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A file of the repository by its path from the root; fails when it is missing.
pub fn repo_file(relative: &str) -> PathBuf {
    let path = repo().join(relative);
    assert!(path.exists(), "missing from the repository: {relative}");
    path
}

/// One of the reference's real sessions in `tests/fixtures/pi-sessions/` (MIT, see the note
/// there), e.g. `before-compaction.jsonl`.
pub fn pi_session(name: &str) -> PathBuf {
    repo_file(&format!("tests/fixtures/pi-sessions/{name}"))
}

/// A hand-written session in `tests/fixtures/sessions/`, e.g. `v1.jsonl`.
pub fn session(name: &str) -> PathBuf {
    repo_file(&format!("tests/fixtures/sessions/{name}"))
}

/// The bundled example session, `examples/demo-session.jsonl`.
pub fn demo_session() -> PathBuf {
    repo_file("examples/demo-session.jsonl")
}

/// Copies `src` into a fresh temp dir; returns the dir (keep it alive) and the copy's path.
pub fn copy_to_temp(src: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dst = dir.path().join(src.file_name().expect("file name"));
    std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("cannot copy {}: {e}", src.display()));
    (dir, dst)
}

/// A copy of [`pi_session`] `name` in a fresh temp dir.
pub fn pi_session_copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    copy_to_temp(&pi_session(name))
}

/// A copy of [`demo_session`] in a fresh temp dir.
pub fn demo_copy() -> (tempfile::TempDir, PathBuf) {
    copy_to_temp(&demo_session())
}

/// The built `compactd` binary of the test or benchmark being run. Cargo names it in
/// `CARGO_BIN_EXE_compactd` when it runs an integration test (since 1.94); before that, it is
/// the `compactd` next to the `deps/` directory the test runs from.
pub fn compactd_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_compactd") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test knows its own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps");
    let path = profile_dir.join(format!("compactd{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the compactd binary is missing at {}: run the tests with cargo test",
        path.display()
    );
    path
}

/// Runs the `compactd` command line with `args` and no user settings file.
pub fn run_cli(args: &[&str]) -> std::process::Output {
    let no_config = tempfile::tempdir().expect("temp dir");
    std::process::Command::new(compactd_bin())
        .args(args)
        .env("COMPACTD_CONFIG_DIR", no_config.path())
        .output()
        .expect("the compactd binary runs")
}
