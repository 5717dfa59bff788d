//! compactd beside the reference it replaces (issue 14): oh-my-pi 13.19.0 under Bun 1.4.4
//! doing what `compactd plan` does (open a session file, build the context at its leaf,
//! prepare a compaction) on the same generated sessions, timed in the same run.
//!
//! ```text
//! cargo bench --bench reference                     # sizes S and M, 7 runs each
//! cargo bench --bench reference -- --sizes S,M,L --reps 5
//! ```
//!
//! The reference is installed on first use the way `scripts/test.d/omp.sh` installs it for the
//! extension's tests: `npm ci --ignore-scripts` of `integrations/oh-my-pi/test/agent`'s
//! lockfile into `target/omp-agent/` (cached by the lockfile's hash; needs npm and the
//! registry once). `benches/reference/plan.ts` runs there.
//!
//! Columns, medians of `--reps`:
//! * `reference warm`: one Bun process runs open + context + prepare `--reps + 1` times and
//!   times each in-process; the first run (cold JIT) is dropped. The figure the issue's 20x
//!   goal is stated against.
//! * `reference cold`: the first of those runs, JIT cold (start-up not included).
//! * `reference process`: the whole `bun plan.ts FILE 1` process, start-up included.
//! * `compactd process`: the whole `compactd plan --tokenizer chars4 FILE` process of this
//!   build (the reference estimates tokens as chars/4 too).
//!
//! The two do not cut at the same entry on these sessions, by design: compactd's compaction
//! window starts at the previous compaction's kept region, the reference's after the previous
//! compaction entry (DESIGN.md, deviation 1), so compactd plans over more messages.
#![allow(clippy::print_stdout)] // A benchmark's job is to print its table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "support/mod.rs"]
mod support;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use devtools::SizePreset;
use serde::Deserialize;
use support::{cached_session, cpu_model, median, utc_now, write_session};

#[derive(Parser)]
#[command(about = "compactd plan beside the reference (oh-my-pi under Bun) on the same files")]
struct Args {
    /// Generated session sizes, comma-separated: XS, S, M, L.
    #[arg(long, default_value = "S,M")]
    sizes: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timed runs per column.
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// `cargo bench` passes `--bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

/// What `plan.ts` prints.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReferenceRun {
    runs_ms: Vec<f64>,
    entries: usize,
    messages_to_summarize: Option<usize>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let agent = install_reference()?;
    println!(
        "compactd plan beside the reference (oh-my-pi 13.19.0, Bun 1.4.4), {} on {}, medians of {}",
        utc_now(),
        cpu_model(),
        args.reps
    );
    println!();
    println!(
        "| size | entries | reference warm | reference cold | reference process | compactd process | warm / compactd | process / process |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for size in args
        .sizes
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let preset = SizePreset::parse(size).ok_or_else(|| anyhow!("unknown size {size}"))?;
        let source = cached_session(preset, args.seed, write_session)?;
        // A copy in a scratch home: the reference may write beside a file it opens.
        let home = tempfile::tempdir()?;
        let file = home.path().join("session.jsonl");
        std::fs::copy(&source, &file)?;

        let in_process = run_reference(&agent, home.path(), &file, args.reps + 1)?;
        let (cold, warm) = in_process
            .runs_ms
            .split_first()
            .ok_or_else(|| anyhow!("the reference printed no runs"))?;
        let warm = median_ms(warm.to_vec());
        let reference_process = median(args.reps, || {
            let start = Instant::now();
            run_reference(&agent, home.path(), &file, 1)?;
            Ok(start.elapsed())
        })?;
        let compactd_process = median(args.reps, || {
            let start = Instant::now();
            run_compactd(home.path(), &file)?;
            Ok(start.elapsed())
        })?;
        let reference_process = ms(reference_process);
        let compactd_process = ms(compactd_process);
        println!(
            "| {size} ({:.1} MB) | {} | {warm:.1} ms | {cold:.1} ms | {reference_process:.1} ms | {compactd_process:.1} ms | {:.1}x | {:.1}x |",
            std::fs::metadata(&file)?.len() as f64 / 1e6,
            in_process.entries,
            warm / compactd_process,
            reference_process / compactd_process,
        );
        if in_process.messages_to_summarize.is_none() {
            bail!("{size}: the reference found nothing to compact");
        }
    }
    Ok(())
}

/// `target/omp-agent/` with the reference installed and `plan.ts` beside its node_modules.
fn install_reference() -> Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let agent = target.join("omp-agent");
    let lock_dir = root.join("integrations/oh-my-pi/test/agent");
    let lock = std::fs::read(lock_dir.join("package-lock.json"))?;
    let stamp = devtools::fixtures::sha256_hex(&lock);
    let installed = std::fs::read_to_string(agent.join(".lock-stamp")).unwrap_or_default();
    if installed.trim() != stamp || !agent.join("node_modules").is_dir() {
        eprintln!("installing the reference: npm ci --ignore-scripts in {agent:?} (once)");
        std::fs::create_dir_all(&agent)?;
        for name in ["package.json", "package-lock.json"] {
            std::fs::copy(lock_dir.join(name), agent.join(name))?;
        }
        let status = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&agent)
            .status()
            .context("npm is needed to install the reference")?;
        if !status.success() {
            bail!("npm ci in {agent:?} failed");
        }
        std::fs::write(agent.join(".lock-stamp"), format!("{stamp}\n"))?;
    }
    // Bun resolves imports from the script's directory: it runs beside node_modules.
    std::fs::copy(
        root.join("benches/reference/plan.ts"),
        agent.join("bench-plan.ts"),
    )?;
    Ok(agent)
}

fn run_reference(agent: &Path, home: &Path, file: &Path, reps: usize) -> Result<ReferenceRun> {
    let bun = agent.join("node_modules/@oven/bun-linux-x64/bin/bun");
    let out = Command::new(&bun)
        .arg(agent.join("bench-plan.ts"))
        .arg(file)
        .arg(reps.to_string())
        .current_dir(agent)
        .env("HOME", home)
        .output()
        .with_context(|| format!("running {bun:?}"))?;
    if !out.status.success() {
        bail!(
            "the reference failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).with_context(|| format!("plan.ts printed {line:?}"))
}

fn run_compactd(home: &Path, file: &Path) -> Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(["plan", "--tokenizer", "chars4"])
        .arg(file)
        .env("COMPACTD_CONFIG_DIR", home.join("config"))
        .output()?;
    if !out.status.success() {
        bail!(
            "compactd plan failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn median_ms(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs.get(runs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
