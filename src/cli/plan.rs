//! `compactd plan SESSION`: where a compaction would cut now, without summarising or writing.

use std::fmt::Write;
use std::path::PathBuf;

use crate::compaction::{CompactionParams, CutMode, compute_file_lists, summarize_compaction};
use crate::protocol::{CompactionPlan, PlanMode};
use crate::session::Entry;

use super::common::{self, CliError, TokenizerArg};

/// Arguments of `compactd plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// Override `compaction.keepRecentTokens`.
    #[arg(long, value_name = "N")]
    pub keep_recent_tokens: Option<u64>,
    /// Print JSON instead of text (`CompactionPlan` in the schema).
    #[arg(long)]
    pub json: bool,
    /// Token counter (default: the `tokenizer` setting).
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
    /// Cut with the reference's rules, quirks included (window after the previous compaction,
    /// spec §4.6/§4.8) instead of compactd's. With `--tokenizer chars4` the plan is the
    /// reference's own, for comparison.
    #[arg(long)]
    pub parity: bool,
}

fn kind_of(entry: &Entry) -> String {
    match entry.message() {
        Some(m) => format!("{}/{}", entry.type_name(), m.role()),
        None => entry.type_name().to_owned(),
    }
}

pub fn run(args: &PlanArgs) -> Result<(), CliError> {
    let session = common::open_readable(&args.session)?;
    let settings = common::settings_of(&session);
    let counter = common::counter(args.tokenizer, &settings)?;
    let params = CompactionParams {
        keep_recent_tokens: args
            .keep_recent_tokens
            .unwrap_or(settings.compaction.keep_recent_tokens),
        mode: if args.parity {
            CutMode::Parity
        } else {
            CutMode::Fixed
        },
        recompact: false,
    };
    let path = session.path_to_leaf();
    let Some(summary) = summarize_compaction(&path, &params, counter.as_ref()) else {
        // An answer to the question, not a failure of the command: exit 0 with the reason.
        // `--json` has no plan to print: it says so on stderr with the exit status of
        // `compact` in the same case.
        let why = match path.last() {
            Some(last) if last.type_name() == "compaction" => format!(
                "the session ends with a compaction (entry {}); nothing was added since",
                last.id
            ),
            _ => format!(
                "the session is too small: all of it is within the {} recent tokens kept verbatim",
                params.keep_recent_tokens
            ),
        };
        let text = format!("nothing to compact now: {why}\n");
        if args.json {
            return Err(CliError {
                message: format!("{}: {}", args.session.display(), text.trim_end()),
                code: common::EXIT_NOTHING_TO_COMPACT,
            });
        }
        return common::print(&text);
    };
    // Indices over the file's entries (markers included, as they are lines of the file).
    let file_index = |id: &str| session.position(id);
    let turn_start_index = summary
        .turn_start_index
        .and_then(|i| path.get(i))
        .and_then(|e| file_index(&e.id));
    let (read_files, modified_files) = compute_file_lists(&summary.file_ops);
    let report = CompactionPlan {
        first_kept_entry_index: file_index(&summary.first_kept_entry_id),
        first_kept_entry_kind: session
            .get(&summary.first_kept_entry_id)
            .map_or_else(String::new, kind_of),
        first_kept_entry_id: summary.first_kept_entry_id.clone(),
        is_split_turn: summary.is_split_turn,
        turn_start_index,
        messages_to_summarize: summary.messages_to_summarize,
        turn_prefix_messages: summary.turn_prefix_messages,
        recent_messages: summary.recent_messages,
        tokens_before: summary.tokens_before,
        keep_recent_tokens: summary.keep_recent_tokens,
        previous_summary: summary.has_previous_summary,
        read_files,
        modified_files,
        tokenizer: counter.name().to_owned(),
        mode: match params.mode {
            CutMode::Fixed => PlanMode::Fixed,
            CutMode::Parity => PlanMode::Parity,
        },
    };
    // The process exits next: freeing every entry, one allocation at a time, cost a tenth of
    // the whole run on a 50 MB session. The operating system takes the memory back at once.
    std::mem::forget(path);
    std::mem::forget(session);
    if args.json {
        common::print_json(&report)
    } else {
        common::print(&render(&report))
    }
}

fn render(r: &CompactionPlan) -> String {
    let mut out = String::new();
    let idx = |i: Option<usize>| i.map_or("?".to_owned(), |i| i.to_string());
    let _ = writeln!(
        out,
        "first kept entry: {} (index {}, {})",
        r.first_kept_entry_id,
        idx(r.first_kept_entry_index),
        r.first_kept_entry_kind
    );
    let _ = writeln!(
        out,
        "split turn: {}{}",
        if r.is_split_turn { "yes" } else { "no" },
        if r.is_split_turn {
            format!(" (turn starts at index {})", idx(r.turn_start_index))
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "messages: {} to summarize, {} turn prefix, {} kept",
        r.messages_to_summarize, r.turn_prefix_messages, r.recent_messages
    );
    let _ = writeln!(out, "tokens before: {}", r.tokens_before);
    let _ = writeln!(
        out,
        "keep recent tokens: {} ({}, {} rules)",
        r.keep_recent_tokens,
        r.tokenizer,
        match r.mode {
            PlanMode::Fixed => "compactd",
            PlanMode::Parity => "reference",
        }
    );
    let _ = writeln!(
        out,
        "previous summary: {}",
        if r.previous_summary { "yes" } else { "no" }
    );
    let _ = writeln!(out, "read files: {}", list(&r.read_files));
    let _ = writeln!(out, "modified files: {}", list(&r.modified_files));
    out
}

fn list(files: &[String]) -> String {
    if files.is_empty() {
        "(none)".to_owned()
    } else {
        files.join(", ")
    }
}
