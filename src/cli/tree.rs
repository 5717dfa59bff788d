//! `compactd tree SESSION`: the session tree, the leaf marked.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::engine::usage::{render_tree, tree_view};
use crate::server::to_proto;

use super::common::{self, CliError, TokenizerArg};

/// Arguments of `compactd tree`.
#[derive(Debug, clap::Args)]
pub struct TreeArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// Print JSON (a `session/tree` result, the protocol's schema) instead of the pretty tree.
    #[arg(long)]
    pub json: bool,
    /// Accepted for symmetry with the other commands; the tree shows no token counts.
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
}

pub fn run(args: &TreeArgs) -> Result<(), CliError> {
    let session = common::open_readable(&args.session)?;
    let view = tree_view(&session);
    if args.json {
        common::print_json(&to_proto::tree_result(view, HashMap::new()))
    } else {
        common::print(&render_tree(&view))
    }
}
