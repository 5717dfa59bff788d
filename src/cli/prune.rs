//! `compactd prune SESSION [--dry-run]`: prune old tool outputs in the live context.

use std::path::PathBuf;

use crate::engine::prune::prune_live;
use crate::server::to_proto;

use super::common::{self, CliError, TokenizerArg};

/// Arguments of `compactd prune`.
#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// The session file (`.jsonl`); rewritten atomically unless `--dry-run`.
    pub session: PathBuf,
    /// Only report what would be pruned.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON (a `session/prune` result, the protocol's schema).
    #[arg(long)]
    pub json: bool,
    /// Token counter (default: the `tokenizer` setting).
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
}

pub fn run(args: &PruneArgs) -> Result<(), CliError> {
    let mut session = common::open(&args.session)?;
    let settings = common::settings_for(&mut session);
    let counter = common::counter(args.tokenizer, &settings)?;
    let outcome = prune_live(&mut session, counter.as_ref(), args.dry_run)?;
    if args.json {
        return common::print_json(&to_proto::prune_result(outcome));
    }
    let verb = if args.dry_run {
        "would prune"
    } else {
        "pruned"
    };
    let mut text = format!(
        "{verb} {} tool output(s), saving {} tokens ({})\n",
        outcome.pruned_count,
        outcome.tokens_saved,
        counter.name()
    );
    for id in &outcome.entry_ids {
        text.push_str(&format!("  {id}\n"));
    }
    common::print(&text)
}
