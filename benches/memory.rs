//! Peak memory on huge sessions (issue 35 item 7): a long linear chain of small entries (about
//! 315 bytes each: user prompts, assistant replies with tool calls, tool results), the shape
//! that took `compactd compact` to ~30x the file. Each command runs as its own process of a
//! built binary, and the table gives its peak RSS over the file's size.
//!
//! ```text
//! cargo build --release --bin compactd
//! cargo bench --bench memory                                   # 100k and 300k entries
//! cargo bench --bench memory -- --entries 1000000 --no-compact  # without the compactions
//! cargo bench --bench memory -- --bin /path/to/other/compactd  # e.g. an older build
//! ```
//!
//! * `context`: `compactd context --json FILE` (the context and `session/usage`'s figures).
//! * `plan`: `compactd plan --json FILE`.
//! * `compact`: `compactd compact --json --summarizer extractive` on a copy of the file.
//! * `daemon open`, `+usage`, `+compact`: one daemon, the peak (`VmHWM`) after `session/open`,
//!   after `session/usage` and after `session/compact` of the same file (no model configured:
//!   the extractive summarizer).
//!
//! Peaks come from `wait4`'s `ru_maxrss` (the CLI) and `/proc/PID/status` (the daemon); both
//! are the resident high-water mark, so they do not depend on the machine's speed.
#![allow(clippy::print_stdout)] // A benchmark's job is to print its table.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(about = "compactd's peak memory on huge linear sessions (issue 35 item 7)")]
struct Args {
    /// Session sizes in entries, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100000,300000")]
    entries: Vec<usize>,
    /// The compactd binary to measure (default: `$CARGO_TARGET_DIR/release/compactd`).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Skip the daemon's columns.
    #[arg(long)]
    no_daemon: bool,
    /// Skip the compactions (the CLI's and the daemon's), the slowest columns.
    #[arg(long)]
    no_compact: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let bin = args
        .bin
        .clone()
        .unwrap_or_else(|| target_dir().join("release/compactd"));
    if !bin.exists() {
        bail!(
            "{} is missing: cargo build --release --bin compactd",
            bin.display()
        );
    }
    let dir = target_dir().join("bench-sessions");
    std::fs::create_dir_all(&dir)?;
    println!("binary: {}", bin.display());
    println!("| entries | file MB | context | plan | compact | daemon open | +usage | +compact |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &args.entries {
        let file = dir.join(format!("linear-{n}.jsonl"));
        if !file.exists() {
            let tmp = file.with_extension("partial");
            write_linear_session(&tmp, n)?;
            std::fs::rename(&tmp, &file)?;
        }
        let bytes = std::fs::metadata(&file)?.len();
        let cell = |kib: u64| {
            let mb = kib as f64 / 1024.0;
            format!("{mb:.0} MB ({:.1}x)", kib as f64 * 1024.0 / bytes as f64)
        };
        let work = tempdir(&dir, n)?;
        let context = run_cli(&bin, &work, &["context", "--json"], &file, false)?;
        let plan = run_cli(&bin, &work, &["plan", "--json"], &file, false)?;
        let compact = if args.no_compact {
            "-".to_owned()
        } else {
            cell(run_cli(
                &bin,
                &work,
                &["compact", "--json", "--summarizer", "extractive"],
                &file,
                true,
            )?)
        };
        let daemon = if args.no_daemon {
            ["-".to_owned(), "-".to_owned(), "-".to_owned()]
        } else {
            let mut peaks = daemon_peaks(&bin, &work, &file, !args.no_compact)?.map(cell);
            if args.no_compact {
                peaks[2] = "-".to_owned();
            }
            peaks
        };
        println!(
            "| {n} | {:.0} | {} | {} | {} | {} | {} | {} |",
            bytes as f64 / 1e6,
            cell(context),
            cell(plan),
            compact,
            daemon[0],
            daemon[1],
            daemon[2]
        );
        std::fs::remove_dir_all(&work).ok();
    }
    Ok(())
}

/// A fresh working directory with empty config and data dirs, so no user setting applies.
fn tempdir(under: &Path, n: usize) -> Result<PathBuf> {
    let work = under.join(format!("memory-work-{n}-{}", std::process::id()));
    std::fs::remove_dir_all(&work).ok();
    for sub in ["config", "data", "home"] {
        std::fs::create_dir_all(work.join(sub))?;
    }
    Ok(work)
}

fn command(bin: &Path, work: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env("COMPACTD_CONFIG_DIR", work.join("config"))
        .env("COMPACTD_DATA_DIR", work.join("data"))
        .env("HOME", work.join("home"))
        .current_dir(work);
    c
}

/// Runs `bin ARGS FILE` (on a copy of the file when `copy`) and returns its peak RSS in KiB.
fn run_cli(bin: &Path, work: &Path, args: &[&str], file: &Path, copy: bool) -> Result<u64> {
    let file = if copy {
        let to = work.join("copy.jsonl");
        std::fs::copy(file, &to)?;
        to
    } else {
        file.to_owned()
    };
    let child = command(bin, work)
        .args(args)
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut stderr = child.stderr.expect("piped");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err)?;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet reaped; both pointers are to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if r != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("compactd {args:?} failed ({status}): {err}");
    }
    Ok(usage.ru_maxrss as u64)
}

/// One daemon: `session/open`, `session/usage`, `session/compact` (when `compact`) of `file`
/// (a copy), and its peak RSS (KiB) after each.
fn daemon_peaks(bin: &Path, work: &Path, file: &Path, compact: bool) -> Result<[u64; 3]> {
    let copy = work.join("daemon.jsonl");
    std::fs::copy(file, &copy)?;
    std::fs::write(
        work.join("config/settings.json"),
        json!({"compaction": {"enabled": false}}).to_string(),
    )?;
    let mut child = command(bin, work)
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let mut input = BufWriter::new(child.stdin.take().expect("piped"));
    let mut output = BufReader::new(child.stdout.take().expect("piped"));
    let mut next_id = 0;
    let mut call = |method: &str, params: Value| -> Result<Value> {
        next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params});
        writeln!(input, "{request}")?;
        input.flush()?;
        let mut line = String::new();
        loop {
            line.clear();
            if output.read_line(&mut line)? == 0 {
                bail!("compactd exited during {method}");
            }
            // Notifications (progress, appended entries) are skipped unparsed when large.
            if !line.starts_with("{\"jsonrpc\":\"2.0\",\"id\":") && line.contains("\"method\"") {
                continue;
            }
            let mut message: Value = serde_json::from_str(&line)?;
            if message.get("method").is_some() || message["id"] != next_id {
                continue;
            }
            if let Some(e) = message.get("error") {
                bail!("{method}: {e}");
            }
            return Ok(message["result"].take());
        }
    };
    call("initialize", json!({"capabilities": {}}))?;
    let opened = call("session/open", json!({"path": copy}))?;
    let id = opened["sessionId"]
        .as_str()
        .context("session/open gave no sessionId")?
        .to_owned();
    let open = vm_hwm(pid)?;
    call("session/usage", json!({"sessionId": id}))?;
    let usage = vm_hwm(pid)?;
    if compact {
        call("session/compact", json!({"sessionId": id}))?;
    }
    let compact = vm_hwm(pid)?;
    drop(input);
    child.wait()?;
    Ok([open, usage, compact])
}

/// `VmHWM` of a process, in KiB.
fn vm_hwm(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM line")
}

/// Writes a linear session of `n` entries after the header, about 315 bytes each: turns of a
/// user prompt, an assistant reply with a tool call, its result and a closing reply.
fn write_linear_session(path: &Path, n: usize) -> Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    writeln!(
        out,
        r#"{{"type":"session","version":3,"id":"0a1b2c3d4e5f6789","timestamp":"2026-03-01T09:00:00.000Z","cwd":"/tmp/memory-bench"}}"#
    )?;
    let base_ms: u64 = 1_772_355_600_000;
    let mut parent = String::from("null");
    for i in 0..n {
        let id = format!("{i:08x}");
        let ms = base_ms + i as u64 * 1000;
        let ts = compactd::session::iso_from_ms(ms as i64);
        let turn = i / 4;
        let module = ["parser", "lexer", "render", "config", "storage"][turn % 5];
        let message = match i % 4 {
            0 => json!({"role": "user", "content": format!(
                "Please fix the failing test {turn} in src/{module}.rs and explain the cause of the failure briefly."
            ), "timestamp": ms}),
            1 => json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("I will read src/{module}.rs first.")},
                {"type": "toolCall", "id": format!("call_{turn}"), "name": "read",
                 "arguments": {"path": format!("src/{module}.rs")}}],
                "api": "openai-completions", "provider": "fake", "model": "fake-model",
                "usage": {"input": 1200, "output": 40, "cacheRead": 0, "cacheWrite": 0,
                          "totalTokens": 1240},
                "stopReason": "toolUse", "timestamp": ms}),
            2 => json!({"role": "toolResult", "toolCallId": format!("call_{turn}"),
                "toolName": "read", "content": [{"type": "text", "text": format!(
                    "pub fn parse_{turn}(s: &str) -> Result<Value, Error> {{ let t = s.trim(); todo!() }}"
                )}], "isError": false, "timestamp": ms}),
            _ => json!({"role": "assistant", "content": [{"type": "text", "text": format!(
                "Fixed test {turn}: the {module} trimmed the input twice; now once."
            )}], "api": "openai-completions", "provider": "fake", "model": "fake-model",
                "usage": {"input": 1300, "output": 30, "cacheRead": 0, "cacheWrite": 0,
                          "totalTokens": 1330},
                "stopReason": "stop", "timestamp": ms}),
        };
        let entry = format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"{ts}","message":{message}}}"#
        );
        writeln!(out, "{entry}")?;
        parent = format!("\"{id}\"");
    }
    out.flush()?;
    Ok(())
}
