//! Puts the commit the binary was built from into `COMPACTD_VERSION` (what `compactd --version`
//! prints): from git when building in a checkout of this repository (`cargo build`,
//! `cargo install --path .`, `cargo install --git`), else from the `.cargo_vcs_info.json` that
//! `cargo package` writes into a packaged crate, else the version alone.

use std::path::Path;
use std::process::Command;

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let commit = git_commit(Path::new(&manifest_dir)).or_else(|| packaged_commit(&manifest_dir));
    let full = match commit {
        Some(commit) => format!("{version} (commit {commit})"),
        None => format!("{version} (commit unknown)"),
    };
    println!("cargo:rustc-env=COMPACTD_VERSION={full}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=.cargo_vcs_info.json");
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
