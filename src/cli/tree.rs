//! `compactd tree SESSION`: the session tree, the leaf marked.

use std::path::PathBuf;

use compactd::engine::usage::{render_tree, tree_view};

use super::common::{self, CliError, TokenizerArg};

/// Arguments of `compactd tree`.
#[derive(Debug, clap::Args)]
pub struct TreeArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// Print JSON (flat nodes in pre-order with depth) instead of the pretty tree.
    #[arg(long)]
    pub json: bool,
    /// Accepted for symmetry with the other commands; the tree shows no token counts.
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
}

pub fn run(args: &TreeArgs) -> Result<(), CliError> {
    let session = common::open(&args.session)?;
    let view = tree_view(&session);
    if args.json {
        common::print_json(&view)
    } else {
        common::print(&render_tree(&view))
    }
}
