//! The two storage backends side by side (issue 17): the same generated session stored as a
//! JSONL file and in PostgreSQL (a real server started in a temp dir by
//! `devtools::postgres`, as the tests do: needs Debian's `postgresql` package, and root or
//! the server's user), then the operations the engine does on it, and the throughput of a
//! small fleet.
//!
//! ```text
//! cargo bench --bench storage                       # size S, 5 reps, 4 writers × 50 sessions
//! cargo bench --bench storage -- --size M --reps 3
//! cargo bench --bench storage -- --writers 4 --sessions 50 --rounds 10
//! ```
//!
//! * `open`: `Session::open` of the file / `Catalog::open_session` of the stored session (which
//!   reads only what the context at the leaf needs); the next row is how many lines each read.
//! * `context`: the first `context()` after opening (open not timed).
//! * `tree`: the first `tree()` after opening: the stored session reads the rest first.
//! * `append+context`: one user entry appended, then `context()` (median of 20).
//! * `read`: `refresh()` (what the daemon does before serving a read: a `stat` of the file;
//!   one query with `storage.postgres.freshReads`, none without while no notification came),
//!   then `context()`.
//! * `compaction`: plan (`prepare_compaction`, chars/4), append the compaction entry, context;
//!   no summariser (its cost does not depend on the backend).
//! * `fleet`: `--writers` threads, each with its own store (connections, listener) as a daemon
//!   has, append one entry to each of `--sessions` small sessions in turn, `--rounds` times;
//!   appends per second over all writers. Files: each writer opens every file itself and the
//!   sidecar lock serialises them.
//! * `fleet of daemons`: the same with `--writers` real `compactd` processes (this build's
//!   binary) over stdio, each opening every session and pipelining its appends; PostgreSQL
//!   daemons also push each other's appends to their clients (`external` notifications).
//! * A second table opens generated sessions of the `--history` sizes (the same kind of
//!   conversation, longer and longer): the file's open grows with the file, the stored one's
//!   with what the context at the leaf needs.
//!
//! Times are wall-clock medians of `--reps` runs, warm cache, on whatever else the machine
//! is running: compare the two columns of one run, not runs on different machines.
#![allow(clippy::print_stdout)] // A benchmark's job is to print its table.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/mod.rs"]
mod support;

use anyhow::{Result, anyhow, bail};
use clap::Parser;
use compactd::compaction::{CompactionParams, prepare_compaction};
use compactd::session::{AgentMessage, EntryKind};
use compactd::session::{Catalog, CompactionEntry};
use compactd::session::{CreateOptions, Session};
use compactd::testkit::{PgOptions, PgStore, import_file};
use compactd::tokens::Chars4;
use devtools::SizePreset;
use support::{cached_session, cached_target, cpu_model, median, utc_now, write_session};

#[derive(Parser)]
#[command(about = "compactd storage backends: files and PostgreSQL (issue 17)")]
struct Args {
    /// Generated session size: XS, S, M or L.
    #[arg(long, default_value = "S")]
    size: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Repetitions per measurement.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Writers (daemons) in the fleet measurement.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Sessions every writer appends to.
    #[arg(long, default_value_t = 50)]
    sessions: usize,
    /// Appends per writer and session.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Sizes of the open-versus-history table, comma-separated: presets (XS, S, M, L) or
    /// megabytes (`20MB`); empty: no table.
    #[arg(long, default_value = "XS,S")]
    history: String,
    /// `cargo bench` passes `--bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let preset =
        SizePreset::parse(&args.size).ok_or_else(|| anyhow!("unknown size {}", args.size))?;
    let source = cached_session(preset, args.seed, write_session)?;
    let server = devtools::postgres::shared();
    let url = server.create_database();
    let store = connect(&url)?;
    let scratch = tempfile::tempdir()?;

    println!(
        "storage backends, size {} ({:.1} MB), {} reps, {} on {}",
        preset.name(),
        std::fs::metadata(&source)?.len() as f64 / 1e6,
        args.reps,
        utc_now(),
        cpu_model()
    );
    println!("| operation | file | PostgreSQL |");
    println!("|---|---:|---:|");

    let file_copy = |i: usize| -> Result<PathBuf> {
        let path = scratch.path().join(format!("copy-{i}.jsonl"));
        std::fs::copy(&source, &path)?;
        Ok(path)
    };
    let id = {
        let (report, _) = import_file(&store, &source, true, |_, _| {})?;
        report.id
    };
    let reimport = || -> Result<()> {
        import_file(&store, &source, true, |_, _| {})?;
        Ok(())
    };

    // open
    let path = file_copy(0)?;
    let file_open = median(args.reps, || {
        let start = Instant::now();
        Session::open(&path)?;
        Ok(start.elapsed())
    })?;
    let pg_open = median(args.reps, || {
        let start = Instant::now();
        store.open_session(&id)?;
        Ok(start.elapsed())
    })?;
    row("open", file_open, pg_open);
    let (lines, read) = lines_read_by_open(&store, &id)?;
    println!("| open: lines read | {lines} (all) | {read} |");

    // context
    let file_context = median(args.reps, || {
        let (session, _) = Session::open(&path)?;
        let start = Instant::now();
        session.context();
        Ok(start.elapsed())
    })?;
    let pg_context = median(args.reps, || {
        let (session, _) = store.open_session(&id)?;
        let start = Instant::now();
        session.context();
        Ok(start.elapsed())
    })?;
    row("context", file_context, pg_context);

    // tree (the stored session reads the rest first)
    let file_tree = median(args.reps, || {
        let (session, _) = Session::open(&path)?;
        let start = Instant::now();
        session.tree().flat_nodes();
        Ok(start.elapsed())
    })?;
    let pg_tree = median(args.reps, || {
        let (mut session, _) = store.open_session(&id)?;
        let start = Instant::now();
        session.load_whole()?;
        session.tree().flat_nodes();
        Ok(start.elapsed())
    })?;
    row(
        "tree (PostgreSQL: reads the rest first)",
        file_tree,
        pg_tree,
    );

    // append+context
    let (mut on_file, _) = Session::open(file_copy(1)?)?;
    let file_append = append_context(&mut on_file)?;
    let (mut on_pg, _) = store.open_session(&id)?;
    let pg_append = append_context(&mut on_pg)?;
    row("append+context (median of 20)", file_append, pg_append);

    // a read as the daemon serves one: look for other writers' changes, then the context
    let file_read = refresh_context(&mut on_file)?;
    let pg_read = refresh_context(&mut on_pg)?;
    row(
        "read: refresh + context (median of 200; freshReads: one query)",
        file_read,
        pg_read,
    );
    let notified = connect_with(&url, false)?;
    let (mut on_notified, _) = notified.open_session(&id)?;
    let pg_notified = refresh_context(&mut on_notified)?;
    println!(
        "| read with `freshReads: false` (no query while no notification came) | | {} |",
        ms(pg_notified)
    );

    // compaction
    let mut i = 10;
    let file_compaction = median(args.reps, || {
        i += 1;
        let (mut session, _) = Session::open(file_copy(i)?)?;
        compact(&mut session)
    })?;
    let pg_compaction = median(args.reps, || {
        reimport()?;
        let (mut session, _) = store.open_session(&id)?;
        compact(&mut session)
    })?;
    row(
        "compaction (plan + entry + context)",
        file_compaction,
        pg_compaction,
    );

    // fleet
    let dir = scratch.path().join("fleet");
    let file_rate = fleet_files(&dir, &args)?;
    let pg_rate = fleet_postgres(&url, &args)?;
    println!(
        "| fleet: {} writers × {} sessions, appends/s | {file_rate:.0} | {pg_rate:.0} |",
        args.writers, args.sessions
    );
    let runtime = tokio::runtime::Runtime::new()?;
    let file_daemons = runtime.block_on(fleet_daemons(None, &dir, scratch.path(), &args))?;
    let pg_url = server.create_database();
    let pg_daemons = runtime.block_on(fleet_daemons(Some(&pg_url), &dir, scratch.path(), &args))?;
    println!(
        "| fleet of daemons: {} processes × {} sessions, appends/s | {file_daemons:.0} | {pg_daemons:.0} |",
        args.writers, args.sessions
    );

    open_versus_history(&args, &store, scratch.path())
}

/// Lines stored for `id`, and lines a fresh open of it reads.
fn lines_read_by_open(store: &Arc<PgStore>, id: &str) -> Result<(u64, u64)> {
    let before = store.lines_read();
    let (mut session, _) = store.open_session(id)?;
    let read = store.lines_read() - before;
    session.load_whole()?;
    Ok((store.lines_read() - before, read))
}

/// Open times of sessions of growing history, file beside database.
fn open_versus_history(args: &Args, store: &Arc<PgStore>, scratch: &Path) -> Result<()> {
    let sizes: Vec<&str> = args
        .history
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if sizes.is_empty() {
        return Ok(());
    }
    println!();
    println!("| history | lines | open: file | open: PostgreSQL | lines PostgreSQL read |");
    println!("|---|---:|---:|---:|---:|");
    for size in sizes {
        let source = match (SizePreset::parse(size), size.strip_suffix("MB")) {
            (Some(preset), _) => cached_session(preset, args.seed, write_session)?,
            (None, Some(mb)) => {
                let mb: u64 = mb.parse().map_err(|_| anyhow!("unknown size {size}"))?;
                cached_target(size, mb * 1_000_000, args.seed)?
            }
            (None, None) => bail!("unknown size {size}"),
        };
        let (report, _) = import_file(store, &source, true, |_, _| {})?;
        let copy = scratch.join(format!("history-{size}.jsonl"));
        std::fs::copy(&source, &copy)?;
        let file_open = median(args.reps, || {
            let start = Instant::now();
            Session::open(&copy)?;
            Ok(start.elapsed())
        })?;
        let pg_open = median(args.reps, || {
            let start = Instant::now();
            store.open_session(&report.id)?;
            Ok(start.elapsed())
        })?;
        let (lines, read) = lines_read_by_open(store, &report.id)?;
        println!(
            "| {size} ({:.1} MB) | {lines} | {} | {} | {read} |",
            std::fs::metadata(&source)?.len() as f64 / 1e6,
            ms(file_open),
            ms(pg_open)
        );
        std::fs::remove_file(&copy)?;
    }
    Ok(())
}

fn connect(url: &str) -> Result<Arc<PgStore>> {
    connect_with(url, true)
}

fn connect_with(url: &str, fresh_reads: bool) -> Result<Arc<PgStore>> {
    Ok(PgStore::connect(&PgOptions {
        url: url.to_owned(),
        pool_size: 4,
        timeout: Duration::from_secs(30),
        fresh_reads,
    })?)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn row(name: &str, file: Duration, pg: Duration) {
    println!("| {name} | {} | {} |", ms(file), ms(pg));
}

fn user(text: String) -> EntryKind {
    EntryKind::Message(AgentMessage::user_text(text, 1_767_254_400_000))
}

fn append_context(session: &mut Session) -> Result<Duration> {
    median(20, || {
        let start = Instant::now();
        session.append(user(
            "Next step: run the tests again and fix what fails.".into(),
        ))?;
        session.context();
        Ok(start.elapsed())
    })
}

fn refresh_context(session: &mut Session) -> Result<Duration> {
    median(200, || {
        let start = Instant::now();
        session.refresh()?;
        session.context();
        Ok(start.elapsed())
    })
}

fn compact(session: &mut Session) -> Result<Duration> {
    let start = Instant::now();
    let path = session.path_to_leaf();
    let Some(prep) = prepare_compaction(&path, &CompactionParams::default(), &Chars4) else {
        bail!("nothing to compact in the generated session");
    };
    let entry = CompactionEntry {
        summary: "## Goal\n- benchmark".into(),
        short_summary: None,
        first_kept_entry_id: prep.first_kept_entry_id.clone(),
        tokens_before: prep.tokens_before,
        details: None,
        preserve_data: None,
        from_extension: Some(false),
        extra: Default::default(),
    };
    session.append(EntryKind::Compaction(entry))?;
    session.context();
    Ok(start.elapsed())
}

/// Appends per second of `writers` threads over `sessions` files.
fn fleet_files(dir: &Path, args: &Args) -> Result<f64> {
    std::fs::create_dir_all(dir)?;
    let paths: Vec<PathBuf> = (0..args.sessions)
        .map(|i| {
            let path = dir.join(format!("s{i}.jsonl"));
            let mut s = Session::create(&path, "/bench", CreateOptions::default())?;
            s.append(user("first".into()))?;
            Ok(path)
        })
        .collect::<Result<_>>()?;
    let paths = Arc::new(paths);
    run_fleet(args, move |_| {
        let sessions = paths
            .iter()
            .map(|p| Ok(Session::open(p)?.0))
            .collect::<Result<Vec<_>>>()?;
        Ok(sessions)
    })
}

/// Appends per second of `writers` threads, each with its own store, over `sessions` rows.
fn fleet_postgres(url: &str, args: &Args) -> Result<f64> {
    let setup = connect(url)?;
    let ids: Vec<String> = (0..args.sessions)
        .map(|_| {
            let mut s = setup.create_session("/bench", CreateOptions::default())?;
            s.append(user("first".into()))?;
            Ok(s.header().id.clone())
        })
        .collect::<Result<_>>()?;
    let ids = Arc::new(ids);
    let url = url.to_owned();
    run_fleet(args, move |_| {
        let store = connect(&url)?;
        ids.iter()
            .map(|id| Ok(store.open_session(id)?.0))
            .collect::<Result<Vec<_>>>()
    })
}

/// Appends per second of `writers` daemon processes, each with every one of `sessions`
/// sessions open (files in `dir`, or rows in the database at `url`), pipelining `rounds`
/// appends to each.
async fn fleet_daemons(url: Option<&str>, dir: &Path, scratch: &Path, args: &Args) -> Result<f64> {
    use devtools::daemon::{DaemonProcess, Framing, SpawnOptions};
    use serde_json::json;
    let (targets, settings, env): (Vec<String>, serde_json::Value, Vec<(String, String)>) =
        match url {
            None => {
                let paths = (0..args.sessions)
                    .map(|i| {
                        let path = dir.join(format!("d{i}.jsonl"));
                        let mut s = Session::create(&path, "/bench", CreateOptions::default())?;
                        s.append(user("first".into()))?;
                        Ok(path.display().to_string())
                    })
                    .collect::<Result<_>>()?;
                (paths, json!({}), Vec::new())
            }
            Some(url) => {
                let setup = connect(url)?;
                let ids = (0..args.sessions)
                    .map(|_| {
                        let mut s = setup.create_session("/bench", CreateOptions::default())?;
                        s.append(user("first".into()))?;
                        Ok(s.header().id.clone())
                    })
                    .collect::<Result<_>>()?;
                (
                    ids,
                    json!({"storage": {"backend": "postgres"}}),
                    vec![("DATABASE_URL".to_owned(), url.to_owned())],
                )
            }
        };
    let mut daemons = Vec::new();
    for w in 0..args.writers {
        let log = std::fs::File::create(scratch.join(format!("daemon-{w}.log")))?;
        let mut env = env.clone();
        env.push(("COMPACTD_LOG".into(), "warn".into()));
        let mut d = DaemonProcess::spawn_opts(SpawnOptions {
            framing: Framing::Ndjson,
            settings: Some(settings.clone()),
            env,
            stderr: Some(log),
            ..SpawnOptions::default()
        })
        .await;
        d.initialize(json!({}), json!({})).await;
        let mut ids = Vec::new();
        for target in &targets {
            let key = if url.is_some() { "sessionId" } else { "path" };
            let info = d.ok("session/open", json!({ key: target })).await;
            ids.push(info["sessionId"].as_str().unwrap_or_default().to_owned());
        }
        daemons.push((d, ids));
    }
    let rounds = args.rounds;
    let start = Instant::now();
    let tasks: Vec<_> = daemons
        .into_iter()
        .enumerate()
        .map(|(w, (mut d, ids))| {
            tokio::spawn(async move {
                let mut sent = Vec::new();
                for r in 0..rounds {
                    for id in &ids {
                        let entry = json!({"type": "message", "message": {"role": "user",
                            "content": format!("daemon {w} round {r}"), "timestamp": 1}});
                        let params = json!({"sessionId": id, "entries": [entry]});
                        sent.push(d.send_request("session/append", params).await);
                    }
                }
                for id in sent {
                    let answer = d.read_until_response(id).await;
                    if answer.get("result").is_none() {
                        return Err(anyhow!("an append failed: {answer}"));
                    }
                }
                d.drain_buffer();
                Ok::<_, anyhow::Error>((d, rounds * ids.len()))
            })
        })
        .collect();
    let mut total = 0;
    let mut done = Vec::new();
    for task in tasks {
        let (d, n) = task.await??;
        total += n;
        done.push(d);
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    for d in done {
        d.kill().await;
    }
    Ok(rate)
}

fn run_fleet(
    args: &Args,
    open: impl Fn(usize) -> Result<Vec<Session>> + Send + Sync + 'static,
) -> Result<f64> {
    let open = Arc::new(open);
    let barrier = Arc::new(std::sync::Barrier::new(args.writers + 1));
    let rounds = args.rounds;
    let handles: Vec<_> = (0..args.writers)
        .map(|w| {
            let open = Arc::clone(&open);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || -> Result<usize> {
                let mut sessions = open(w);
                barrier.wait();
                let sessions = sessions.as_mut().map_err(|e| anyhow!("{e:#}"))?;
                let mut n = 0;
                for r in 0..rounds {
                    for s in sessions.iter_mut() {
                        s.append(user(format!("writer {w} round {r}")))?;
                        n += 1;
                    }
                }
                Ok(n)
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut total = 0;
    for h in handles {
        total += h.join().map_err(|_| anyhow!("a writer panicked"))??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}
