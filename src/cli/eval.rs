//! `compactd eval SESSION`: compacts the session at several points (previews, nothing
//! written) with the configured summarizer and scores what each summary kept of where the
//! agent stood then: its progress ledger's requests, files, unresolved errors and pins.

use std::fmt::Write;
use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::{CompactOptions, Ledger, RequestStatus, SharedSession, compact};
use crate::protocol::{EvalCompaction, EvalReport, Retention};
use crate::session::{AgentMessage, Entry};

use super::common::{self, CliError, TokenizerArg};
use super::compact::{SummarizerArg, engine_env_with_choice, summarizer_choice};

/// Arguments of `compactd eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// How many points to compact at: the ends of turns spread over the session, the last at
    /// its leaf.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub points: u32,
    /// Which summarizer to use (default: the configured model, else extractive).
    #[arg(long, value_enum)]
    pub summarizer: Option<SummarizerArg>,
    /// The model to summarise with, as `provider/id`.
    #[arg(long)]
    pub model: Option<String>,
    /// Tokens of recent conversation to keep verbatim (default: the setting).
    #[arg(long)]
    pub keep_recent_tokens: Option<u64>,
    /// Print JSON instead of text (`EvalReport` in the schema).
    #[arg(long)]
    pub json: bool,
    /// Token counter (default: the `tokenizer` setting).
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
}

pub fn run(args: &EvalArgs) -> Result<(), CliError> {
    let mut session = common::open(&args.session)?;
    let mut settings = common::settings_for(&mut session);
    if let Some(keep) = args.keep_recent_tokens {
        settings.compaction.keep_recent_tokens = keep;
    }
    let choice = summarizer_choice(args.summarizer, args.model.clone());
    let env = engine_env_with_choice(&session, settings, args.tokenizer, &choice)?;
    let points: Vec<(String, Ledger)> = {
        let path = session.path_to_leaf();
        points(&path, args.points as usize)
            .into_iter()
            .map(|i| (path[i].id.clone(), Ledger::derive(&path[..=i])))
            .collect()
    };
    let shared: SharedSession = Arc::new(tokio::sync::RwLock::new(session));
    let progress = super::compact::StderrProgress::new();
    let mut compactions = Vec::new();
    for (leaf, ledger) in points {
        let opts = CompactOptions {
            preview: true,
            leaf_id: Some(leaf.clone()),
            ..CompactOptions::manual()
        };
        let outcome = super::compact::run_cancellable(|cancel| {
            let (shared, env, progress) = (&shared, &env, &progress);
            async move { compact(shared, env, opts, cancel, progress).await }
        })?;
        progress.finish();
        match outcome {
            Ok(o) => compactions.push(score(leaf, o.summarizer, &o.summary, &ledger)),
            // A point with nothing to summarise yet is not a compaction to score.
            Err(e) => tracing::info!(leaf, error = %e, "eval: no compaction at this point"),
        }
    }
    let (kept, total) = compactions.iter().fold((0, 0), |(k, t), c| {
        let (ck, ct) = totals(c);
        (k + ck, t + ct)
    });
    let report = EvalReport {
        compactions,
        score: ratio(kept, total),
    };
    if args.json {
        common::print_json(&report)
    } else {
        common::print(&render(&report))
    }
}

/// Path indices to compact at: the entry before each of `n - 1` user requests spread evenly
/// over the path (the end of the turn before it), and the leaf.
fn points(path: &[&Entry], n: usize) -> Vec<usize> {
    let turn_ends: Vec<usize> = path
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, e)| matches!(e.message(), Some(AgentMessage::User(_))))
        .map(|(i, _)| i - 1)
        .collect();
    let mut out: Vec<usize> = (1..n)
        .filter_map(|k| turn_ends.get(k * turn_ends.len() / n))
        .copied()
        .collect();
    if !path.is_empty() {
        out.push(path.len() - 1);
    }
    out.dedup();
    out
}

fn normalize(text: &str) -> String {
    text.trim_end_matches('…')
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn score(leaf: String, summarizer: String, summary: &str, ledger: &Ledger) -> EvalCompaction {
    let haystack = normalize(summary);
    let mut missing = Vec::new();
    let mut count = |kind: &str, facts: Vec<String>| {
        let mut kept = 0;
        for fact in &facts {
            if haystack.contains(&normalize(fact)) {
                kept += 1;
            } else {
                missing.push(format!("{kind}: {}", common::one_line(fact, 120)));
            }
        }
        Retention {
            kept,
            total: facts.len(),
        }
    };
    let requests = count(
        "request",
        ledger
            .requests
            .iter()
            .map(|r| match r.status {
                RequestStatus::Current => r.text.clone(),
                _ => crate::compaction::ledger_gist(&r.text),
            })
            .collect(),
    );
    let files = count(
        "file",
        ledger
            .files
            .read
            .iter()
            .chain(&ledger.files.modified)
            .map(|f| f.path.clone())
            .collect(),
    );
    let errors = count(
        "error",
        ledger
            .errors
            .iter()
            .filter(|e| !e.resolved)
            .map(|e| e.text.clone())
            .collect(),
    );
    let pins = count("pin", ledger.pins.iter().map(|p| p.text.clone()).collect());
    let mut c = EvalCompaction {
        leaf_id: leaf,
        summarizer,
        requests,
        files,
        errors,
        pins,
        score: 0.0,
        missing,
    };
    let (kept, total) = totals(&c);
    c.score = ratio(kept, total);
    c
}

fn totals(c: &EvalCompaction) -> (usize, usize) {
    [c.requests, c.files, c.errors, c.pins]
        .iter()
        .fold((0, 0), |(k, t), r| (k + r.kept, t + r.total))
}

fn ratio(kept: usize, total: usize) -> f64 {
    if total == 0 {
        1.0
    } else {
        // Three decimals, so the JSON is the same from one run to the next.
        (kept as f64 / total as f64 * 1000.0).round() / 1000.0
    }
}

fn render(r: &EvalReport) -> String {
    let mut out = String::new();
    let cell = |x: Retention| format!("{}/{}", x.kept, x.total);
    let _ = writeln!(
        out,
        "{:<12} {:<22} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "leaf", "summarizer", "requests", "files", "errors", "pins", "score"
    );
    for c in &r.compactions {
        let _ = writeln!(
            out,
            "{:<12} {:<22} {:>9} {:>9} {:>9} {:>9} {:>6.3}",
            c.leaf_id,
            common::one_line(&c.summarizer, 22),
            cell(c.requests),
            cell(c.files),
            cell(c.errors),
            cell(c.pins),
            c.score
        );
        for m in c.missing.iter().take(5) {
            let _ = writeln!(out, "    missing {m}");
        }
        if c.missing.len() > 5 {
            let _ = writeln!(out, "    … and {} more (see --json)", c.missing.len() - 5);
        }
    }
    let _ = writeln!(out, "score: {:.3}", r.score);
    out
}
