//! `compactd compact SESSION`: compact a session file now (or preview the compaction), with
//! progress on stderr and the result on stdout.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::compaction::{CompactionParams, CutMode, summarize_compaction};
use crate::engine::SummaryEdit;
use crate::engine::compact::{commit_preview, compact_keeping};
use crate::engine::usage::estimate_context;
use crate::engine::{
    CompactEnv, CompactOptions, CompactOutcome, EngineError, EnvSource, OperationObserver, Phase,
    Purpose, SharedSession, SummarizerChoice, SummaryObserver, SummaryStatus, compact,
    session_window,
};
use crate::foreign::claude;
use crate::server::to_proto;
use crate::session::{Entry, EntryKind, Session};
use crate::settings::{Settings, SummarizerKind};
use crate::tokens::TokenCache;
use tokio_util::sync::CancellationToken;

use super::common::{self, CliError, TokenizerArg};
use super::guest;

/// `--summarizer` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SummarizerArg {
    Extractive,
    Openai,
    Anthropic,
    Remote,
}

/// Arguments of `compactd compact`.
#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// The session file (`.jsonl`); the compaction entry is appended to it. A Claude Code
    /// transcript gets Claude Code's own compaction records instead (docs/claude-code.md), a
    /// Codex rollout Codex's own (README, Use with Codex).
    pub session: PathBuf,
    /// What the summary should focus on.
    #[arg(long)]
    pub instructions: Option<String>,
    /// Compute the compaction and print it, but write nothing.
    #[arg(long, conflicts_with = "summary_file")]
    pub preview: bool,
    /// Write the compaction with this file's text as its summary (e.g. a `--preview` output
    /// the user edited), marked `details.edited`; the retention guard, file tags and progress
    /// ledger apply as to a generated summary. Summarises offline (extractive) for the rest
    /// unless `--summarizer`/`--model` say otherwise.
    #[arg(long, value_name = "FILE")]
    pub summary_file: Option<PathBuf>,
    /// Which summarizer to use (default: the configured model, else extractive).
    #[arg(long, value_enum)]
    pub summarizer: Option<SummarizerArg>,
    /// The model to summarise with, as `provider/id`.
    #[arg(long)]
    pub model: Option<String>,
    /// Tokens of recent conversation to keep verbatim (default: the setting).
    #[arg(long)]
    pub keep_recent_tokens: Option<u64>,
    /// The summary's size in tokens, overriding `compaction.detail` (the result says whether
    /// it was met).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub target_tokens: Option<u64>,
    /// Print the result as JSON (a `session/compact` result, the protocol's schema).
    #[arg(long)]
    pub json: bool,
    /// Token counter (default: the `tokenizer` setting).
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
}

pub fn run(args: &CompactArgs) -> Result<(), CliError> {
    if claude::is_transcript(&args.session) {
        return run_claude(args);
    }
    if guest::is_codex_rollout(&args.session) {
        return run_codex(args);
    }
    let session = open_writable(&args.session)?;
    compact_and_print(session, args, false, |_, _| Ok(None))
}

/// Compacts a Codex rollout: a preview of the compaction of a compactd copy of it, then
/// Codex's own records of it appended to the rollout (cli/guest.rs).
fn run_codex(args: &CompactArgs) -> Result<(), CliError> {
    if !args.preview {
        guest::refuse_if_busy(&args.session)?;
    }
    let (session, rollout) = guest::open_codex(&args.session)?;
    compact_and_print(session, args, true, |_, outcome| {
        if !args.preview {
            guest::append_codex(
                &args.session,
                &rollout,
                &outcome.summary,
                Some(&outcome.first_kept_entry_id),
            )?;
        }
        Ok(None)
    })
}

/// Compacts a Claude Code transcript: compactd's compaction of the session read from it, then
/// Claude Code's own records of it appended to the transcript (`foreign::claude`).
fn run_claude(args: &CompactArgs) -> Result<(), CliError> {
    if !args.preview {
        claude::ensure_quiet(&args.session)?;
    }
    let guest = common::open_guest(&args.session)?;
    let transcript = &guest.transcript;
    compact_and_print(guest.session, args, false, |session, outcome| {
        let Some(id) = &outcome.entry_id else {
            return Ok(None);
        };
        let Some(EntryKind::Compaction(c)) = session.get(id).map(Entry::kind) else {
            return Err(CliError::new(format!(
                "{}: the compaction {id} is not in the session read from it; nothing written",
                args.session.display()
            )));
        };
        let kept = kept_lines(session, transcript, &c.first_kept_entry_id, id);
        let lines = claude::compaction_lines(transcript, &c.summary, c.tokens_before, &kept);
        claude::append(&args.session, transcript.len, &lines)?;
        Ok(Some(format!(
            "Claude Code compaction appended to {}: compact_boundary, summary and {} kept line(s) \
             (compactd's entry {id} lives only in memory)",
            args.session.display(),
            kept.len()
        )))
    })
}

/// The uuids of the transcript lines a compaction keeps verbatim: those the messages from
/// `first_kept` up to the compaction `compaction_id` came from, oldest first.
fn kept_lines(
    session: &Session,
    transcript: &claude::Transcript,
    first_kept: &str,
    compaction_id: &str,
) -> Vec<String> {
    let path = session.path_to_leaf();
    let Some(start) = path.iter().position(|e| e.id == first_kept) else {
        return Vec::new();
    };
    let mut kept: Vec<String> = Vec::new();
    for entry in &path[start..] {
        if entry.id == compaction_id {
            break;
        }
        if let Some(uuid) = transcript.origin.get(&entry.id)
            && kept.last() != Some(uuid)
        {
            kept.push(uuid.clone());
        }
    }
    kept
}

/// Compacts `session` as `args` say and prints the result; `written` runs once the compaction
/// is in the session, before anything is printed, and may say in a line where it was written.
/// A `codex` session is a copy of a rollout: compacted as a preview there, `written` then
/// appends Codex's records, and the result is printed as Codex's.
fn compact_and_print(
    mut session: Session,
    args: &CompactArgs,
    codex: bool,
    written: impl FnOnce(&Session, &CompactOutcome) -> Result<Option<String>, CliError>,
) -> Result<(), CliError> {
    let mut settings = common::settings_for(&mut session);
    // A summarizer named here that cannot run is an error, not a silent extractive summary.
    let edited = match &args.summary_file {
        Some(file) => Some(read_summary_file(file)?),
        None => None,
    };
    // The user's summary replaces the history summary: no need for a model unless asked.
    let summarizer = match (&edited, args.summarizer, &args.model) {
        (Some(_), None, None) => Some(SummarizerArg::Extractive),
        _ => args.summarizer,
    };
    let choice = summarizer_choice(summarizer, args.model.clone());
    if let Some(keep) = args.keep_recent_tokens {
        settings.compaction.keep_recent_tokens = keep;
    }
    let env = engine_env_with_choice(&session, settings, args.tokenizer, &choice)?;
    // What a person compares: the context's size before and after, by the same counter (what
    // `compactd context` reports), and what the cut summarises and keeps (what `plan` reports).
    // The sum of the context's counts (`context_view`'s total), without holding the context.
    // Its cache is dropped at once: a count for every entry of a huge path is not held through
    // the compaction for the few kept entries counted again after it.
    let context_before = estimate_context(&session, &TokenCache::new(env.counter.clone()));
    let cut = summarize_compaction(
        &session.path_to_leaf(),
        &CompactionParams {
            keep_recent_tokens: env.settings.compaction.keep_recent_tokens,
            mode: CutMode::Fixed,
            recompact: false,
        },
        env.counter.as_ref(),
    );
    let shared: SharedSession = Arc::new(tokio::sync::RwLock::new(session));
    let opts = CompactOptions {
        custom_instructions: args.instructions.clone(),
        preview: args.preview || edited.is_some() || codex,
        target_tokens: args.target_tokens,
        ..CompactOptions::manual()
    };
    let progress = StderrProgress::new();
    let outcome = run_cancellable(|cancel| {
        let (shared, env, progress) = (&shared, &env, &progress);
        async move {
            let Some(summary) = edited else {
                return compact(shared, env, opts, cancel, progress).await;
            };
            // Prepared as a preview, then written with the user's text, as
            // `session/commitCompaction` does.
            let (_, previewed) =
                compact_keeping(shared, env, opts, cancel.clone(), progress).await?;
            let previewed = previewed.ok_or(EngineError::NothingToCompact)?;
            let edit = SummaryEdit {
                summary: Some(summary),
                short_summary: None,
            };
            commit_preview(
                shared,
                env.counter.as_ref(),
                previewed,
                false,
                edit,
                &cancel,
            )
            .await
        }
    })?;
    progress.finish();
    let outcome = outcome.map_err(|e| match e {
        // Not a failure: the session is as compact as it gets, and nothing was written.
        EngineError::AlreadyCompacted | EngineError::NothingToCompact => CliError {
            message: format!(
                "{}: nothing to compact: {} (nothing written)",
                args.session.display(),
                nothing_to_compact_why(&e)
            ),
            code: common::EXIT_NOTHING_TO_COMPACT,
        },
        e => CliError::new(format!("{}: {e}", args.session.display())),
    })?;
    let headline = match outcome.entry_id {
        Some(_) => written(&shared.blocking_read(), &outcome)?,
        None if codex => written(&shared.blocking_read(), &outcome)?,
        None => None,
    };
    if args.json {
        return common::print_json(&to_proto::compact_result(outcome));
    }
    if codex {
        return common::print(&codex_pretty(&outcome, &args.session, args.preview));
    }
    let context_after = match outcome.entry_id {
        Some(_) => estimate_context(
            &shared.blocking_read(),
            &TokenCache::new(env.counter.clone()),
        ),
        None => outcome.tokens_after,
    };
    let sizes = Sizes {
        tokenizer: env.counter.name(),
        before: context_before,
        after: context_after,
        cut: cut.map(|c| {
            (
                c.messages_to_summarize,
                c.turn_prefix_messages,
                c.recent_messages,
            )
        }),
    };
    common::print(&pretty(&outcome, &sizes, &args.session, headline))
}

/// What `compact` prints for a Codex rollout.
fn codex_pretty(o: &CompactOutcome, file: &Path, preview: bool) -> String {
    let what = if preview {
        format!(
            "preview (nothing written) of Codex rollout {}",
            file.display()
        )
    } else {
        format!(
            "Codex compaction (a `compacted` record and a `token_count` event) appended to {}",
            file.display()
        )
    };
    format!(
        "{what}\nfirst kept item: {} (L = line number)\nsummarizer: {}\n\nsummary:\n{}\n",
        o.first_kept_entry_id,
        o.summarizer,
        o.summary.trim_end()
    )
}

/// The text of `--summary-file`: not empty.
fn read_summary_file(file: &Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::new(format!("--summary-file {}: {e}", file.display())))?;
    if text.trim().is_empty() {
        return Err(CliError::new(format!(
            "--summary-file {}: the file is empty; nothing written",
            file.display()
        )));
    }
    Ok(text)
}

/// The figures `compact` prints beside the outcome.
struct Sizes<'a> {
    tokenizer: &'a str,
    /// The context's estimated size at the leaf before and after, by `tokenizer`.
    before: u64,
    after: u64,
    /// Messages summarised, in the turn prefix, and kept verbatim.
    cut: Option<(usize, usize, usize)>,
}

/// Why there is nothing to compact, in a person's words.
fn nothing_to_compact_why(e: &EngineError) -> &'static str {
    match e {
        EngineError::AlreadyCompacted => {
            "the session ends with a compaction; nothing was added since"
        }
        _ => "the session is too small (all of it is within the recent part kept verbatim)",
    }
}

/// The summarizer named by `--summarizer` and `--model`.
pub(crate) fn summarizer_choice(
    summarizer: Option<SummarizerArg>,
    model: Option<String>,
) -> SummarizerChoice {
    SummarizerChoice {
        kind: summarizer.map(|kind| match kind {
            SummarizerArg::Extractive => SummarizerKind::Extractive,
            SummarizerArg::Openai => SummarizerKind::Openai,
            SummarizerArg::Anthropic => SummarizerKind::Anthropic,
            SummarizerArg::Remote => SummarizerKind::Remote,
        }),
        model,
    }
}

/// Opens a session file for writing; load warnings go to stderr.
pub(crate) fn open_writable(path: &Path) -> Result<Session, CliError> {
    common::open(path)
}

/// The engine environment for a CLI command, built as the daemon builds it: the session's
/// settings and context window, the counter (`--tokenizer` or the setting), the summarizers
/// (no client summarizer, no hooks), the user's prompt overrides.
pub(crate) fn engine_env(
    session: &Session,
    settings: Settings,
    tokenizer: Option<TokenizerArg>,
) -> Result<CompactEnv, CliError> {
    engine_env_with_choice(session, settings, tokenizer, &SummarizerChoice::default())
}

/// [`engine_env`] with the summarizer the user named (`--summarizer`, `--model`).
pub(crate) fn engine_env_with_choice(
    session: &Session,
    settings: Settings,
    tokenizer: Option<TokenizerArg>,
    choice: &SummarizerChoice,
) -> Result<CompactEnv, CliError> {
    let window = session_window(session, &settings);
    Ok(EnvSource::standalone().env_with_choice(
        &session.header().id,
        settings,
        window,
        tokenizer.map(TokenizerArg::name),
        choice,
    )?)
}

/// Runs `op` on a single-threaded runtime; Ctrl-C cancels it (nothing is written then).
pub(crate) fn run_cancellable<T, F, Fut>(op: F) -> Result<T, CliError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = T>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cancel = CancellationToken::new();
    Ok(runtime.block_on(async {
        let on_ctrl_c = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });
        op(cancel).await
    }))
}

fn pretty(o: &CompactOutcome, sizes: &Sizes, file: &Path, headline: Option<String>) -> String {
    let entry = match (&o.entry_id, headline) {
        (Some(_), Some(headline)) => headline,
        (Some(id), None) => format!("compaction entry {id} appended to {}", file.display()),
        (None, _) => format!("preview (nothing written) of {}", file.display()),
    };
    let mut text = format!("{entry}\nfirst kept entry: {}\n", o.first_kept_entry_id);
    let saved = match sizes.before {
        0 => String::new(),
        before => format!(
            ", {:.0}% smaller",
            100.0 * before.saturating_sub(sizes.after) as f64 / before as f64
        ),
    };
    text.push_str(&format!(
        "context size ({} estimate, as `compactd context` counts it): {} tokens before, {} after{saved}\n",
        sizes.tokenizer, sizes.before, sizes.after
    ));
    if let Some((summarized, prefix, kept)) = sizes.cut {
        text.push_str(&format!(
            "messages: {summarized} summarised, {prefix} turn prefix, {kept} kept\n"
        ));
    }
    text.push_str(&format!(
        "tokensBefore in the entry (the usage the model last reported): {}\nsummarizer: {}\n",
        o.tokens_before, o.summarizer
    ));
    text.push_str(&common::fallback_lines(
        o.reports.iter().map(|(part, report)| (*part, report)),
    ));
    if let Some(t) = &o.target {
        let verdict = match &t.reason {
            None => "met".to_owned(),
            Some(reason) => format!("not met: {reason}"),
        };
        text.push_str(&format!(
            "target: {} tokens, summary {} tokens: {verdict}\n",
            t.target_tokens, t.summary_tokens
        ));
    }
    // The two summaries cover different spans: the short one the whole session (the kept
    // messages included), the long one only what was compacted. Saying so keeps a change made
    // in the kept messages from reading as a contradiction of an "In Progress" summary.
    if let Some(short) = &o.short_summary {
        text.push_str(&format!(
            "short summary (the whole session, kept messages included): {}\n",
            common::one_line(short, 200)
        ));
    }
    let kept = match sizes.cut {
        Some((_, _, kept)) => format!("the {kept} kept messages follow it verbatim"),
        None => "the kept messages follow it verbatim".to_owned(),
    };
    text.push_str(&format!("\nsummary of the compacted part only ({kept}):\n"));
    text.push_str(o.summary.trim_end());
    text.push('\n');
    text
}

/// Progress on stderr: one updating line on a terminal (phase and streamed characters), plain
/// lines otherwise.
pub(crate) struct StderrProgress {
    tty: bool,
    state: Mutex<(String, usize)>,
}

impl StderrProgress {
    pub(crate) fn new() -> Self {
        StderrProgress {
            tty: std::io::stderr().is_terminal(),
            state: Mutex::new((String::new(), 0)),
        }
    }

    fn draw(&self, phase: &str, chars: usize) {
        let mut err = std::io::stderr().lock();
        let _ = if chars > 0 {
            write!(err, "\r\x1b[2K{phase} ({chars} characters)")
        } else {
            write!(err, "\r\x1b[2K{phase}")
        };
        let _ = err.flush();
    }

    /// Ends the updating line.
    pub(crate) fn finish(&self) {
        if self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}

impl OperationObserver for StderrProgress {
    fn phase(&self, _phase: Phase, message: &str, _percentage: Option<u32>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        *state = (message.to_owned(), 0);
        if self.tty {
            self.draw(message, 0);
        } else {
            let _ = writeln!(std::io::stderr(), "{message}");
        }
    }
}

impl SummaryObserver for StderrProgress {
    fn restart(&self, _part: Purpose) {
        if let Ok(mut state) = self.state.lock() {
            state.1 = 0;
        }
    }

    fn status(&self, part: Purpose, status: &SummaryStatus) {
        self.phase(
            Phase::Summarizing,
            &to_proto::status_message(part, status),
            None,
        );
    }

    fn delta(&self, _part: Purpose, text: &str) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.1 += text.chars().count();
        if self.tty {
            self.draw(&state.0, state.1);
        }
    }
}
