//! What the benchmarks share: the cache of generated sessions (one file per size, seed and
//! generator version under `target/bench-sessions/`, written on first use) and a description
//! of the machine for the header of their tables.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use devtools::SizePreset;
use devtools::generate::GENERATOR_VERSION;

fn cache_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-sessions")
}

/// The cached file of `GenerateOptions::for_target` at `bytes`, named `<name>-seed…`.
#[allow(dead_code)] // Each bench compiles this module; only `storage` generates by bytes.
pub fn cached_target(name: &str, bytes: u64, seed: u64) -> Result<PathBuf> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}-seed{seed}-g{GENERATOR_VERSION}.jsonl"));
    if !path.exists() {
        let tmp = path.with_extension("jsonl.partial");
        let file = std::fs::File::create(&tmp)?;
        devtools::generate_session(
            std::io::BufWriter::with_capacity(1 << 20, file),
            &devtools::GenerateOptions::for_target(seed, bytes),
        )?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
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

/// The CPU's model name, from `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// UTC date and time of the run, without a date crate.
pub fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Writes the generated session of `preset` and `seed` to `path` (for [`cached_session`]).
#[allow(dead_code)] // Each bench compiles this module; `bench` and `daemon` report as they write.
pub fn write_session(path: &Path, preset: SizePreset, seed: u64) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {path:?}"))?;
    devtools::generate_session(
        std::io::BufWriter::with_capacity(1 << 20, file),
        &devtools::GenerateOptions::for_size(preset, seed),
    )?;
    Ok(())
}

/// The median of `reps` timings of `f` (at least one).
#[allow(dead_code)] // Each bench compiles this module; not every one times this way.
pub fn median(
    reps: usize,
    mut f: impl FnMut() -> Result<std::time::Duration>,
) -> Result<std::time::Duration> {
    let mut times = (0..reps.max(1)).map(|_| f()).collect::<Result<Vec<_>>>()?;
    times.sort();
    Ok(times[times.len() / 2])
}
