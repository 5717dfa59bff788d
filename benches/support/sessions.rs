//! The cache of generated sessions shared by the benchmarks: one file per size, seed and
//! generator version under `target/bench-sessions/`, written on first use.

use std::path::{Path, PathBuf};

use anyhow::Result;
use compactd::devtools::SizePreset;
use compactd::devtools::generate::GENERATOR_VERSION;

fn cache_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-sessions")
}

/// The cached file for a size and seed; `write` generates it into the path it is given when
/// it is not there yet.
pub fn cached_session(
    preset: SizePreset,
    seed: u64,
    write: impl FnOnce(&Path, SizePreset, u64) -> Result<()>,
) -> Result<PathBuf> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!(
        "{}-seed{seed}-g{GENERATOR_VERSION}.jsonl",
        preset.name()
    ));
    if !path.exists() {
        // Written under a temporary name so an interrupted run never leaves a short file.
        let tmp = path.with_extension("jsonl.partial");
        write(&tmp, preset, seed)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}
