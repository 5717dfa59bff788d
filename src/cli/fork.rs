//! `compactd fork SESSION OUT [--at ID]`: a new session file from a branch of SESSION (with
//! `--at`) or from a copy of all of it. SESSION is only read.

use std::path::PathBuf;

use crate::session::{CreateOptions, Destination};

use super::common::{self, CliError};

/// Arguments of `compactd fork`.
#[derive(Debug, clap::Args)]
pub struct ForkArgs {
    /// The session file to copy (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// The new session file; it must not exist yet.
    pub out: PathBuf,
    /// Keep only the root→ID branch, with its labels (the reference's createBranchedSession);
    /// without it every entry is copied.
    #[arg(long, value_name = "ID")]
    pub at: Option<String>,
    /// The new header's title (default: the source's).
    #[arg(long)]
    pub title: Option<String>,
}

pub fn run(args: &ForkArgs) -> Result<(), CliError> {
    if args.out.extension().is_none_or(|e| e != "jsonl") {
        return Err(CliError::new(format!(
            "{} is not a .jsonl session file",
            args.out.display()
        )));
    }
    let source = common::open(&args.session)?;
    let settings = common::settings_of(&source);
    let options = CreateOptions {
        title: args
            .title
            .clone()
            .or_else(|| source.header().display_title().map(str::to_owned)),
        parent_session: Some(match &args.at {
            Some(_) => args.session.to_string_lossy().into_owned(),
            None => source.header().id.clone(),
        }),
        sync: crate::engine::sync_policy(&settings),
        ..CreateOptions::default()
    };
    let made = match &args.at {
        Some(at) => source.create_branched(at, Destination::File(&args.out), options),
        None => source.fork(Destination::File(&args.out), options),
    }
    .map_err(|e| CliError::new(e.to_string()))?;
    common::print(&format!(
        "{} ({} entries, leaf {})\n",
        made.path().display(),
        made.entries().len(),
        made.leaf_id().unwrap_or("none")
    ))
}
