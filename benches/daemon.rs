//! The daemon over real stdio (issue 7): the release `compactd` binary driven through pipes
//! with LSP framing, as an editor or agent would. It prints
//!
//! * resident memory (`VmRSS` / `VmHWM` of `/proc/<pid>/status`): at start, idle with the S
//!   (~1 MB) session open, after the first exact token count, with the M (~50 MB) session
//!   open too, and after a compaction of M;
//! * small-request throughput: requests pipelined with at most `--window` unanswered;
//! * small-request latency (p50 / p99), one request at a time, idle and while a compaction of
//!   M streams its summary from a slow fake OpenAI-compatible server on 127.0.0.1.
//!
//! The small request is `session/usage` of a session that has just started (4 turns). Beside
//! it: the same on S, whose cost grows with the branch, and `session/abortBranchSummary` with
//! nothing to abort, which costs dispatch alone.
//!
//! Beside each figure is a floor measured in the same run: for throughput and latency the same
//! framed requests echoed back by `cat` and parsed as the client parses answers (under the
//! same compaction load for the latency during a compaction); for memory the binary right
//! after start, before `initialize` (and `cat` beside that).
//!
//! ```text
//! cargo bench --bench daemon                                   # the defaults below
//! cargo bench --bench daemon -- --requests 200000 --window 128 --sample-ms 5000
//! ```
//!
//! Sessions come from the generator and are cached under `target/bench-sessions` (shared with
//! `benches/bench.rs`); the daemon works on scratch copies in a temp home.
#![allow(clippy::print_stdout)] // A benchmark's job is to print its table.

#[path = "support/mod.rs"]
mod support;

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use devtools::fake_llm::{FakeLlm, openai_sse};
use devtools::{GenerateOptions, SizePreset, generate_session};
use serde_json::{Value, json};
use support::{cached_session, cpu_model, utc_now};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

/// Every wait on the daemon gives up after this long.
const TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Parser)]
#[command(about = "compactd daemon benchmark: RSS, throughput and latency over stdio")]
struct Args {
    /// Pipelined requests for the throughput figure.
    #[arg(long, default_value_t = 100_000)]
    requests: usize,
    /// Requests in flight at most while pipelining.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// One-at-a-time requests for the idle latency figure.
    #[arg(long, default_value_t = 20_000)]
    latency_requests: usize,
    /// How long latency is sampled while the compaction streams, in ms.
    #[arg(long, default_value_t = 4_000)]
    sample_ms: u64,
    /// The fake LLM sends one SSE delta every this many ms.
    #[arg(long, default_value_t = 3)]
    chunk_ms: u64,
    /// The session opened for the "big session" figures: XS, S, M or L.
    #[arg(long, default_value = "M")]
    big: String,
    /// The seed of the generated sessions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> Result<()> {
    // `cargo bench` appends `--bench`; it means nothing here.
    let args = Args::parse_from(std::env::args().filter(|a| a != "--bench"));
    // The fake LLM serves from its own thread, so its timers do not delay the client's reads.
    let llm_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let llm = llm_runtime.block_on(FakeLlm::start());
    // The client runs on one thread, so it takes as little as it can of the cores the daemon
    // also wants.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(&args, &llm))
}

async fn run(args: &Args, llm: &FakeLlm) -> Result<()> {
    let big_preset = SizePreset::parse(&args.big).context("--big: one of XS, S, M, L")?;
    // Another seed than the big one's: the same seed gives the same session id, and the
    // daemon refuses to open two files with one id.
    let small = cached_session(SizePreset::S, args.seed + 1, write_session)?;
    let big = cached_session(big_preset, args.seed, write_session)?;
    let home = tempfile::tempdir()?;
    let small = scratch_copy(&small, home.path())?;
    let big = scratch_copy(&big, home.path())?;
    let big_name = format!(
        "{} ({})",
        big_preset.name(),
        mb(std::fs::metadata(&big)?.len())
    );

    let mut rows = Vec::new();
    let cat_rss = cat_memory().await?;
    let mut d = Daemon::spawn(home.path())?;
    let started = d.memory_before_initialize().await?;
    rows.push(Row::memory(
        "RSS at start, before initialize",
        started,
        cat_rss,
        "`cat`",
        None,
    ));
    let since_start = |name: &str, memory: Memory, target_mb: Option<f64>| {
        Row::memory(name, memory, started, "at start", target_mb)
    };

    d.initialize(&llm.url()).await?;
    let small_id = d.open(&small).await?;
    rows.push(since_start(
        "RSS idle: initialized, S open",
        d.pipe.memory()?,
        Some(80.0),
    ));
    // The first exact token count loads the o200k tokenizer, which then stays.
    let fresh_id = d.create_small(home.path()).await?;
    d.call("session/context", json!({ "sessionId": small_id }))
        .await?;
    rows.push(since_start(
        "RSS idle: + a 4-turn session, session/context on S (o200k loaded)",
        d.pipe.memory()?,
        Some(80.0),
    ));
    // `session/open` of the big file, timed over the pipe (median of 3: opened, closed,
    // opened again), beside `wc -l` of the same file as a whole process.
    let mut opens = Vec::new();
    let mut big_id = String::new();
    for i in 0..3 {
        if i > 0 {
            d.call("session/close", json!({ "sessionId": big_id }))
                .await?;
        }
        let started = Instant::now();
        big_id = d.open(&big).await?;
        opens.push(started.elapsed());
    }
    opens.sort();
    let mut wc = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let status = std::process::Command::new("wc")
            .arg("-l")
            .arg(&big)
            .stdout(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "wc -l failed");
        wc.push(started.elapsed());
    }
    wc.sort();
    rows.push(Row::open(&big_name, opens[1], wc[1]));
    let big_memory = d.pipe.memory()?;
    let file_mb = std::fs::metadata(&big)?.len() as f64 / (1 << 20) as f64;
    rows.push(since_start(
        &format!("RSS idle: {big_name} open too"),
        big_memory,
        None,
    ));
    rows.push(Row {
        name: format!("RSS with {big_name} open, over the file's size"),
        value: format!("{:.1} MB", big_memory.rss_kb as f64 / 1024.0),
        floor: format!("{file_mb:.1} MiB (the file)"),
        ratio: big_memory.rss_kb as f64 / 1024.0 / file_mb,
        verdict: verdict(
            big_memory.rss_kb as f64 / 1024.0 <= 1.5 * file_mb,
            "≤ 1.5x the file",
        ),
    });

    // The small request: `session/usage` of a session that just started (4 turns). Beside it
    // the same on S, whose cost grows with the branch, and one that only touches the
    // registry, to show what dispatch alone costs.
    let usage = Probe::new(
        "session/usage, 4-turn session",
        "session/usage",
        json!({ "sessionId": fresh_id }),
    );
    let usage_s = Probe::new(
        "session/usage, S session",
        "session/usage",
        json!({ "sessionId": small_id }),
    );
    let dispatch = Probe::new(
        "session/abortBranchSummary (nothing to abort)",
        "session/abortBranchSummary",
        json!({ "sessionId": fresh_id }),
    );
    let mut cat = Pipe::spawn(&mut Command::new("cat"))?;
    for probe in [&usage, &usage_s, &dispatch] {
        let floor = throughput(&mut cat, &probe.request, args).await?;
        let daemon = throughput(&mut d.pipe, &probe.request, args).await?;
        rows.push(Row::throughput(probe, daemon, floor, args));
    }
    let count = Sampling::Count(args.latency_requests);
    let floor = latency(&mut cat, &usage.request, count).await?;
    for probe in [&usage, &usage_s, &dispatch] {
        let idle = latency(&mut d.pipe, &probe.request, count).await?;
        rows.push(Row::latency(
            &format!("latency idle, {}", probe.name),
            &idle,
            &floor,
            None,
        ));
    }
    let probes = [&usage, &usage_s];
    let streamed = latency_while_compacting(&mut d, &mut cat, llm, &big_id, &probes, args).await?;
    cat.close().await?;
    for (probe, sampled) in probes.iter().zip(&streamed.probes) {
        rows.push(Row::latency(
            &format!(
                "latency while {} compacts, {} ({} deltas streamed meanwhile)",
                big_preset.name(),
                probe.name,
                sampled.deltas
            ),
            &sampled.latency,
            &streamed.floor,
            Some(5.0),
        ));
    }
    rows.push(since_start(
        &format!("RSS after compacting {big_name}"),
        d.pipe.memory()?,
        None,
    ));
    d.shutdown().await?;

    print_table(&rows, args);
    Ok(())
}

/// A small request to time, with its id left 0 (see [`with_id`]).
struct Probe {
    name: &'static str,
    request: String,
}

impl Probe {
    fn new(name: &'static str, method: &str, params: Value) -> Probe {
        Probe {
            name,
            request: request_text(method, params),
        }
    }
}

/// Memory of `cat`, a trivial process, after one echo (so it is surely loaded and running).
async fn cat_memory() -> Result<Memory> {
    let mut cat = Pipe::spawn(&mut Command::new("cat"))?;
    cat.send(&request_text("ping", Value::Null)).await?;
    cat.next().await?;
    let memory = cat.memory()?;
    cat.close().await?;
    Ok(memory)
}

// ---------------------------------------------------------------------------------------------
// Generated sessions (the cache of `benches/bench.rs`, same names)

/// Generates a session into `path`.
fn write_session(path: &Path, preset: SizePreset, seed: u64) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {path:?}"))?;
    generate_session(
        BufWriter::with_capacity(1 << 20, file),
        &GenerateOptions::for_size(preset, seed),
    )?;
    eprintln!("generated {}", path.display());
    Ok(())
}

/// A copy the daemon may rewrite (compaction appends to it).
fn scratch_copy(path: &Path, dir: &Path) -> Result<PathBuf> {
    let name = path.file_name().context("a session file name")?;
    let copy = dir.join(name);
    std::fs::copy(path, &copy).with_context(|| format!("copying {path:?}"))?;
    Ok(copy)
}

// ---------------------------------------------------------------------------------------------
// A child process spoken to with LSP framing

/// A child's stdin and stdout, framed with `Content-Length` headers.
struct Pipe {
    child: Child,
    writer: FrameWriter,
    reader: FrameReader,
}

/// The child's stdin, with frames queued until a flush.
struct FrameWriter {
    stdin: ChildStdin,
    queued: Vec<u8>,
}

/// The child's stdout.
struct FrameReader {
    stdout: BufReader<ChildStdout>,
    line: String,
    body: Vec<u8>,
}

impl Pipe {
    fn spawn(command: &mut Command) -> Result<Pipe> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning the child")?;
        let stdin = child.stdin.take().context("piped stdin")?;
        let stdout = child.stdout.take().context("piped stdout")?;
        Ok(Pipe {
            child,
            writer: FrameWriter {
                stdin,
                queued: Vec::with_capacity(64 << 10),
            },
            reader: FrameReader {
                stdout: BufReader::with_capacity(64 << 10, stdout),
                line: String::new(),
                body: Vec::new(),
            },
        })
    }

    async fn send(&mut self, body: &str) -> Result<()> {
        self.writer.push(body);
        self.writer.flush().await
    }

    async fn next(&mut self) -> Result<Value> {
        self.reader.next().await
    }

    /// VmRSS and VmHWM of the child.
    fn memory(&self) -> Result<Memory> {
        let pid = self.child.id().context("the child is running")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kb = |key: &str| -> Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .with_context(|| format!("no {key} in /proc/{pid}/status"))
        };
        Ok(Memory {
            rss_kb: kb("VmRSS:")?,
            hwm_kb: kb("VmHWM:")?,
        })
    }

    /// Closes stdin and waits for the child to exit.
    async fn close(mut self) -> Result<()> {
        drop(self.writer);
        tokio::time::timeout(TIMEOUT, self.child.wait())
            .await
            .context("the child did not exit")??;
        Ok(())
    }
}

impl FrameWriter {
    /// Queues one framed message; [`FrameWriter::flush`] writes it.
    fn push(&mut self, body: &str) {
        use std::io::Write;
        // Writing into a Vec cannot fail.
        let _ = write!(self.queued, "Content-Length: {}\r\n\r\n{body}", body.len());
    }

    async fn flush(&mut self) -> Result<()> {
        self.stdin.write_all(&self.queued).await?;
        self.stdin.flush().await?;
        self.queued.clear();
        Ok(())
    }
}

impl FrameReader {
    /// Reads one message and parses it, as a client does with every answer.
    async fn next(&mut self) -> Result<Value> {
        let mut length = None;
        loop {
            self.line.clear();
            if self.stdout.read_line(&mut self.line).await? == 0 {
                bail!("the child closed its output");
            }
            let header = self.line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some(v) = header.strip_prefix("Content-Length:") {
                length = Some(v.trim().parse::<usize>()?);
            }
        }
        self.body
            .resize(length.context("a Content-Length header")?, 0);
        self.stdout.read_exact(&mut self.body).await?;
        Ok(serde_json::from_slice(&self.body)?)
    }
}

/// A JSON-RPC request with id 0; [`with_id`] gives each copy its own id.
fn request_text(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": method, "params": params}).to_string()
}

/// `request` (from [`request_text`]) with id `id`.
fn with_id(request: &str, id: u64) -> String {
    request.replacen("\"id\":0", &format!("\"id\":{id}"), 1)
}

/// The id of an answer (of an echoed request, for `cat`); `None` for a notification. An error
/// answer is an error here: every request of the benchmark must succeed.
fn answer_id(message: &Value) -> Result<Option<u64>> {
    if let Some(error) = message.get("error") {
        bail!("the daemon answered with an error: {error}");
    }
    Ok(message.get("id").and_then(Value::as_u64))
}

// ---------------------------------------------------------------------------------------------
// The daemon

struct Daemon {
    pipe: Pipe,
    next_id: u64,
}

impl Daemon {
    /// Starts the release binary with its config and data under `home`.
    fn spawn(home: &Path) -> Result<Daemon> {
        let config = home.join("config");
        let data = home.join("data");
        std::fs::create_dir_all(&config)?;
        std::fs::create_dir_all(&data)?;
        let log = std::fs::File::create(home.join("compactd.log"))?;
        let pipe = Pipe::spawn(
            Command::new(env!("CARGO_BIN_EXE_compactd"))
                .env("COMPACTD_CONFIG_DIR", &config)
                .env("COMPACTD_DATA_DIR", &data)
                .env_remove("COMPACTD_LOG")
                .env_remove("OPENAI_API_KEY")
                .env_remove("ANTHROPIC_API_KEY")
                .current_dir(home)
                .stderr(log),
        )?;
        Ok(Daemon {
            pipe,
            // Far above the ids of the measurement loops, which count from 1.
            next_id: 1 << 40,
        })
    }

    /// Memory once the daemon is up and answering: a request before `initialize` gets
    /// `notInitialized`, which proves the read loop runs.
    async fn memory_before_initialize(&mut self) -> Result<Memory> {
        let id = self.next_id;
        self.next_id += 1;
        self.pipe
            .send(&with_id(&request_text("session/list", json!({})), id))
            .await?;
        let answer = self.pipe.next().await?;
        ensure!(
            answer["error"]["code"] == -32002,
            "expected notInitialized before initialize, got {answer}"
        );
        self.pipe.memory()
    }

    /// Sends a request and reads until its answer (skipping notifications); its result.
    async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.pipe
            .send(&with_id(&request_text(method, params), id))
            .await?;
        self.wait_answer(id)
            .await
            .with_context(|| format!("{method} failed"))
    }

    /// Reads until the answer to `id`; its result.
    async fn wait_answer(&mut self, id: u64) -> Result<Value> {
        let wait = async {
            loop {
                let message = self.pipe.next().await?;
                if answer_id(&message)? == Some(id) {
                    return Ok(message["result"].clone());
                }
            }
        };
        tokio::time::timeout(TIMEOUT, wait)
            .await
            .with_context(|| format!("no answer to {id} within {TIMEOUT:?}"))?
    }

    /// `initialize` with an OpenAI-compatible summarizer at `llm_url`, then `initialized`.
    async fn initialize(&mut self, llm_url: &str) -> Result<()> {
        let settings = json!({
            "providers": {"fake": {"kind": "openai", "baseUrl": format!("{llm_url}/v1"),
                "apiKey": "bench",
                "models": {"m": {"contextWindow": 200000, "maxOutputTokens": 8000}}}},
            "summarizer": {"kind": "openai", "model": "fake/m"},
            "retry": {"enabled": false},
        });
        self.call(
            "initialize",
            json!({"processId": std::process::id(), "clientInfo": {"name": "bench"},
                   "capabilities": {}, "initializationOptions": {"settings": settings}}),
        )
        .await?;
        self.pipe
            .send(&json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}).to_string())
            .await
    }

    /// Opens the session file at `path`; returns its id.
    async fn open(&mut self, path: &Path) -> Result<String> {
        let info = self.call("session/open", json!({ "path": path })).await?;
        info["sessionId"]
            .as_str()
            .map(str::to_owned)
            .context("session/open answered without a sessionId")
    }

    /// Creates a session in `home`'s project directory with four short turns; its id.
    async fn create_small(&mut self, home: &Path) -> Result<String> {
        let project = home.join("project");
        std::fs::create_dir_all(&project)?;
        let info = self
            .call("session/create", json!({ "cwd": project }))
            .await?;
        let id = info["sessionId"]
            .as_str()
            .context("session/create answered without a sessionId")?
            .to_owned();
        let mut entries = Vec::new();
        for turn in 0..4 {
            entries.push(json!({"type": "message", "message": {
                "role": "user", "content": format!("Step {turn}: edit src/file{turn}.rs."),
                "timestamp": 1767225600000_i64}}));
            entries.push(json!({"type": "message", "message": {
                "role": "assistant", "content": [{"type": "text", "text": format!("Done with step {turn}.")}],
                "provider": "anthropic", "model": "claude-sonnet-4-5",
                "usage": {"input": 1000, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1010},
                "stopReason": "stop", "timestamp": 1767225600000_i64}}));
        }
        self.call(
            "session/append",
            json!({ "sessionId": id, "entries": entries }),
        )
        .await?;
        Ok(id)
    }

    async fn shutdown(mut self) -> Result<()> {
        self.call("shutdown", Value::Null).await?;
        self.pipe
            .send(&json!({"jsonrpc": "2.0", "method": "exit"}).to_string())
            .await?;
        self.pipe.close().await
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements

#[derive(Clone, Copy)]
struct Memory {
    rss_kb: u64,
    hwm_kb: u64,
}

/// `requests` copies of `request` (ids 1..) pipelined with at most `window` unanswered;
/// returns answers per second. Works the same on the daemon and on `cat`.
async fn throughput(pipe: &mut Pipe, request: &str, args: &Args) -> Result<f64> {
    // Warm up: the first requests pay for allocations and thread wake-ups.
    pipeline(pipe, request, args.requests.min(5_000), args.window).await?;
    let start = Instant::now();
    pipeline(pipe, request, args.requests, args.window).await?;
    Ok(args.requests as f64 / start.elapsed().as_secs_f64())
}

async fn pipeline(pipe: &mut Pipe, request: &str, requests: usize, window: usize) -> Result<()> {
    let window = Semaphore::new(window);
    let Pipe { writer, reader, .. } = pipe;
    let write = async {
        for id in 1..=requests as u64 {
            match window.try_acquire() {
                Ok(permit) => permit.forget(),
                Err(_) => {
                    // The window is full: send what is queued, then wait for an answer.
                    writer.flush().await?;
                    window.acquire().await?.forget();
                }
            }
            writer.push(&with_id(request, id));
        }
        writer.flush().await
    };
    let read = async {
        let mut answered = 0;
        while answered < requests {
            if answer_id(&reader.next().await?)?.is_some() {
                answered += 1;
                window.add_permits(1);
            }
        }
        anyhow::Ok(())
    };
    tokio::try_join!(write, read)?;
    Ok(())
}

/// When a latency sample ends.
#[derive(Clone, Copy)]
enum Sampling {
    Count(usize),
    For(Duration),
}

/// Sorted round-trip times, and every other message read meanwhile.
struct Sampled {
    samples: Vec<Duration>,
    others: Vec<Value>,
}

impl Sampled {
    fn percentile(&self, p: f64) -> Duration {
        let at = ((self.samples.len() - 1) as f64 * p).round() as usize;
        self.samples[at]
    }
}

/// Round trips of `request` one at a time: write it, read until its answer. Messages that
/// arrive meanwhile (notifications, other answers) are kept in [`Sampled::others`].
async fn latency(pipe: &mut Pipe, request: &str, sampling: Sampling) -> Result<Sampled> {
    // Warm up, as for throughput.
    round_trips(pipe, request, Sampling::Count(1_000)).await?;
    round_trips(pipe, request, sampling).await
}

async fn round_trips(pipe: &mut Pipe, request: &str, sampling: Sampling) -> Result<Sampled> {
    let mut samples = Vec::new();
    let mut others = Vec::new();
    let start = Instant::now();
    for id in 1.. {
        let done = match sampling {
            Sampling::Count(n) => samples.len() >= n,
            Sampling::For(d) => start.elapsed() >= d,
        };
        if done {
            break;
        }
        let sent = Instant::now();
        pipe.send(&with_id(request, id)).await?;
        loop {
            let message = pipe.next().await?;
            if answer_id(&message)? == Some(id) {
                break;
            }
            others.push(message);
        }
        samples.push(sent.elapsed());
    }
    samples.sort_unstable();
    Ok(Sampled { samples, others })
}

/// What [`latency_while_compacting`] sampled.
struct Streamed {
    /// `cat` meanwhile: the floor under the same load.
    floor: Sampled,
    probes: Vec<StreamedProbe>,
}

struct StreamedProbe {
    latency: Sampled,
    /// `session/compactionDelta` notifications read while sampling.
    deltas: usize,
}

/// Latency of `cat` (the first probe's request) and of each probe in turn, sampled for
/// `--sample-ms` each while a compaction of session `compacted` streams its summary from the
/// fake LLM, one delta every `--chunk-ms`. The stream outlasts the sampling; that it did is
/// checked.
async fn latency_while_compacting(
    d: &mut Daemon,
    cat: &mut Pipe,
    llm: &FakeLlm,
    compacted: &str,
    probes: &[&Probe],
    args: &Args,
) -> Result<Streamed> {
    let chunk = Duration::from_millis(args.chunk_ms.max(1));
    let sample = Duration::from_millis(args.sample_ms);
    // Warm-ups and the time the compaction takes to prepare come on top of the sampling.
    let stream = sample * (probes.len() as u32 + 1) + Duration::from_secs(3);
    let words: Vec<String> = (0..stream.as_millis() / chunk.as_millis())
        .map(|i| format!("word{i} "))
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    // The history summary streams slowly; any further call (turn prefix, short summary) is
    // answered at once.
    llm.push(openai_sse(&words, "stop").chunk_delay(chunk));
    llm.set_default(openai_sse(&["A short summary."], "stop"));

    let compact = d.next_id;
    d.next_id += 1;
    d.pipe
        .send(&with_id(
            &request_text("session/compact", json!({ "sessionId": compacted })),
            compact,
        ))
        .await?;
    // Sampling starts once the summarizer's request reached the server: from then on the
    // compaction is streaming.
    llm.wait_for_requests(1, TIMEOUT).await;
    let floor = latency(cat, &probes[0].request, Sampling::For(sample)).await?;
    let mut streamed = Vec::new();
    for probe in probes {
        let latency = latency(&mut d.pipe, &probe.request, Sampling::For(sample)).await?;
        let finished = latency.others.iter().any(|m| {
            m["method"] == "session/compactionFinished"
                || m.get("id").and_then(Value::as_u64) == Some(compact)
        });
        ensure!(
            !finished,
            "the compaction finished before the sampling did; raise --chunk-ms"
        );
        let deltas = latency
            .others
            .iter()
            .filter(|m| m["method"] == "session/compactionDelta")
            .count();
        streamed.push(StreamedProbe { latency, deltas });
    }
    let answer = d.wait_answer(compact).await?;
    ensure!(
        answer["entryId"].is_string(),
        "the compaction wrote no entry: {answer}"
    );
    Ok(Streamed {
        floor,
        probes: streamed,
    })
}

// ---------------------------------------------------------------------------------------------
// The table

struct Row {
    name: String,
    value: String,
    floor: String,
    /// Measured over floor (for throughput, floor over measured): how many times worse.
    ratio: f64,
    verdict: String,
}

impl Row {
    fn memory(
        name: &str,
        memory: Memory,
        floor: Memory,
        floor_name: &str,
        target_mb: Option<f64>,
    ) -> Row {
        let rss = memory.rss_kb as f64 / 1024.0;
        Row {
            name: name.to_owned(),
            value: format!(
                "RSS {rss:.1} MB, HWM {:.1} MB",
                memory.hwm_kb as f64 / 1024.0
            ),
            floor: format!("{:.1} MB ({floor_name})", floor.rss_kb as f64 / 1024.0),
            ratio: memory.rss_kb as f64 / floor.rss_kb as f64,
            verdict: match target_mb {
                Some(target) => verdict(rss <= target, &format!("≤ {target:.0} MB")),
                None => String::new(),
            },
        }
    }

    fn open(name: &str, took: Duration, wc: Duration) -> Row {
        Row {
            name: format!("session/open of {name}, request to answer (median of 3)"),
            value: format!("{:.1} ms", ms(took)),
            floor: format!("{:.1} ms (`wc -l`, whole process)", ms(wc)),
            ratio: ms(took) / ms(wc),
            verdict: verdict(ms(took) <= 40.0, "≤ 40 ms"),
        }
    }

    fn throughput(probe: &Probe, daemon: f64, floor: f64, args: &Args) -> Row {
        Row {
            name: format!(
                "throughput, {}, window {} ({} requests)",
                probe.name, args.window, args.requests
            ),
            value: format!("{daemon:.0} req/s"),
            floor: format!("{floor:.0} req/s (`cat`)"),
            ratio: floor / daemon,
            verdict: verdict(daemon >= 20_000.0, "≥ 20,000 req/s"),
        }
    }

    fn latency(name: &str, sampled: &Sampled, floor: &Sampled, target_ms: Option<f64>) -> Row {
        let p99 = ms(sampled.percentile(0.99));
        Row {
            name: name.to_owned(),
            value: format!(
                "p50 {:.3} ms, p99 {p99:.3} ms, max {:.2} ms (n={})",
                ms(sampled.percentile(0.5)),
                ms(sampled.percentile(1.0)),
                sampled.samples.len()
            ),
            floor: format!(
                "p50 {:.3} ms, p99 {:.3} ms (`cat`)",
                ms(floor.percentile(0.5)),
                ms(floor.percentile(0.99))
            ),
            ratio: p99 / ms(floor.percentile(0.99)),
            verdict: match target_ms {
                Some(target) => verdict(p99 <= target, &format!("p99 ≤ {target:.0} ms")),
                None => String::new(),
            },
        }
    }
}

fn verdict(met: bool, target: &str) -> String {
    format!("{target}: {}", if met { "met" } else { "MISSED" })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn print_table(rows: &[Row], args: &Args) {
    println!(
        "compactd daemon over stdio (LSP framing), release build, {} CPUs ({}), {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        cpu_model(),
        utc_now()
    );
    println!(
        "latency: one request at a time; throughput: pipelined, window {}; the compaction's \
         summary streams one SSE delta every {} ms",
        args.window, args.chunk_ms
    );
    println!(
        "ratio: how many times the floor (memory and p99 over the floor's, throughput the \
         floor's over compactd's)"
    );
    println!();
    println!("| measurement | compactd | floor | ratio | target |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {} | {:.2}x | {} |",
            row.name, row.value, row.floor, row.ratio, row.verdict
        );
    }
}
