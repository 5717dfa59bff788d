//! Puts the commit the binary was built from into `COMPACTD_VERSION` (what `compactd --version`
//! prints): from git when building in a checkout of this repository (`cargo build`,
//! `cargo install --path .`, `cargo install --git`), else from the `.cargo_vcs_info.json` that
//! `cargo package` writes into a packaged crate, else the version alone.
//!
//! It also writes the exact tokenizers' vocabularies (o200k_base, cl100k_base) into `OUT_DIR`
//! in the layout of `src/tokens/table.rs`, taken from tiktoken-rs, so the binary embeds them
//! and does not depend on tiktoken-rs at run time.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/tokens/table.rs"]
#[allow(dead_code)] // Only `encode` is used here; the rest is what the library reads with.
mod table;

/// Bumped when the layout of `table.rs` changes, so a stale table in `OUT_DIR` is not reused.
const TABLE_VERSION: u32 = 2;

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let commit = git_commit(Path::new(&manifest_dir)).or_else(|| packaged_commit(&manifest_dir));
    let full = match commit {
        Some(commit) => format!("{version} (commit {commit})"),
        None => format!("{version} (commit unknown)"),
    };
    println!("cargo:rustc-env=COMPACTD_VERSION={full}");
    write_vocabularies();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/tokens/table.rs");
    // Only in a packaged crate: a watched file that does not exist reruns the script (and so
    // recompiles the crate) on every build.
    watch(
        Path::new(&manifest_dir),
        Some(".cargo_vcs_info.json".to_owned()),
    );
}

/// The checkout's commit (12 hex digits), only when the git work tree is this crate's own: a
/// crate vendored inside another repository must not report that repository's commit.
fn git_commit(dir: &Path) -> Option<String> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    let same = Path::new(&top).canonicalize().ok()? == dir.canonicalize().ok()?;
    if !same {
        return None;
    }
    let commit = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    // Rebuild when HEAD moves: HEAD itself (a branch switch), the branch's ref (a commit), and
    // packed refs. Only existing files: a missing one would rerun the script on every build.
    for what in ["HEAD", "packed-refs"] {
        watch(dir, git(dir, &["rev-parse", "--git-path", what]));
    }
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch(dir, git(dir, &["rev-parse", "--git-path", &branch]));
    }
    Some(commit)
}

fn watch(dir: &Path, path: Option<String>) {
    if let Some(path) = path {
        let path = dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// `{"git": {"sha1": "..."}}` of a packaged crate (written by `cargo package`).
fn packaged_commit(manifest_dir: &str) -> Option<String> {
    let text =
        std::fs::read_to_string(Path::new(manifest_dir).join(".cargo_vcs_info.json")).ok()?;
    let key = "\"sha1\"";
    let rest = &text[text.find(key)? + key.len()..];
    let start = rest.find('"')? + 1;
    let sha: String = rest[start..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    (sha.len() >= 12).then(|| sha[..12].to_owned())
}

/// `OUT_DIR/<name>-v<TABLE_VERSION>.bpe` for each vocabulary, written once: the table depends
/// only on the tiktoken-rs version (which changes `OUT_DIR`) and the layout version.
fn write_vocabularies() {
    type Load = fn() -> anyhow::Result<tiktoken_rs::CoreBPE>;
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let vocabularies: [(&str, Load, usize); 2] = [
        ("o200k", tiktoken_rs::o200k_base, 199_998),
        ("cl100k", tiktoken_rs::cl100k_base, 100_256),
    ];
    for (name, load, expected) in vocabularies {
        let path = out.join(format!("{name}-v{TABLE_VERSION}.bpe"));
        if path.exists() {
            continue;
        }
        let core = load().expect("tiktoken-rs loads its own vocabulary");
        let specials = core.special_tokens();
        // Ordinary tokens have ranks 0..n; special tokens come after them and are never
        // produced by an ordinary encoding, so they are left out.
        let tokens: Vec<Vec<u8>> = (0..)
            .map_while(|rank| core.decode_bytes(&[rank]).ok())
            .take_while(|bytes| !specials.iter().any(|s| s.as_bytes() == bytes.as_slice()))
            .collect();
        assert_eq!(tokens.len(), expected, "{name}: unexpected vocabulary size");
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, table::encode(&tokens)).expect("OUT_DIR is writable");
        std::fs::rename(&tmp, &path).expect("OUT_DIR is writable");
    }
}
