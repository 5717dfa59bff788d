//! `compactd search SESSION QUERY` and `compactd show SESSION ENTRY_ID`: recall from a session
//! file (DESIGN §8 "Nothing is gone"), read-only. They print `session/search`'s and
//! `session/readEntry`'s results with `--json`.

use std::path::PathBuf;

use crate::protocol::{SearchScope, SessionSearchParams};
use crate::server::{from_proto, to_proto};
use crate::session::{entry_texts, read_entry, search};

use super::common::{self, CliError};

/// Arguments of `compactd search`.
#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// The text to find (literal and case-insensitive unless `--regex` / `--case-sensitive`).
    pub query: String,
    /// QUERY is a regular expression (Rust `regex` syntax).
    #[arg(long)]
    pub regex: bool,
    #[arg(long)]
    pub case_sensitive: bool,
    /// Search every branch of the tree, not only the current one.
    #[arg(long)]
    pub all_branches: bool,
    /// Hits per page (1 to 200).
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Continue after this entry (the previous page's `nextCursor`).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Print JSON (a `session/search` result).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `compactd show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// The entry's id.
    pub entry_id: String,
    /// Print JSON (a `session/readEntry` result: the entry object as written, full texts
    /// restored).
    #[arg(long)]
    pub json: bool,
}

pub fn run_search(args: &SearchArgs) -> Result<(), CliError> {
    let session = common::open_readable(&args.session)?;
    let store = crate::engine::blob_store(&common::settings_of(&session));
    let query = from_proto::search_query(SessionSearchParams {
        session_id: String::new(),
        query: args.query.clone(),
        regex: Some(args.regex),
        case_sensitive: Some(args.case_sensitive),
        scope: Some(if args.all_branches {
            SearchScope::Session
        } else {
            SearchScope::Branch
        }),
        limit: Some(args.limit),
        cursor: args.cursor.clone(),
    });
    let page = search(&session, store.as_ref(), &query)?;
    for blob in &page.missing_blobs {
        eprintln!(
            "warning: blob {blob} is missing from the blob store: only its head was searched"
        );
    }
    let result = to_proto::search_result(page);
    if args.json {
        return common::print_json(&result);
    }
    let mut text = String::new();
    for hit in &result.hits {
        let hidden = if hit.compacted { "  (compacted)" } else { "" };
        text.push_str(&format!(
            "{}  {}  {}{hidden}\n    {}\n",
            hit.entry_id, hit.role, hit.timestamp, hit.snippet
        ));
    }
    if let Some(cursor) = &result.next_cursor {
        eprintln!("more hits: --cursor {cursor}");
    }
    if result.hits.is_empty() {
        eprintln!("no hits");
    }
    common::print(&text)
}

pub fn run_show(args: &ShowArgs) -> Result<(), CliError> {
    let session = common::open_readable(&args.session)?;
    let store = crate::engine::blob_store(&common::settings_of(&session));
    let recalled = read_entry(&session, store.as_ref(), &args.entry_id)?;
    let result = to_proto::read_entry_result(recalled);
    if args.json {
        return common::print_json(&result);
    }
    let entry = serde_json::Value::Object(result.entry.0.clone());
    let mut text = format!(
        "entry {} ({}{}) {}{}\n",
        args.entry_id,
        entry["type"].as_str().unwrap_or("?"),
        entry["message"]["role"]
            .as_str()
            .map(|r| format!("/{r}"))
            .unwrap_or_default(),
        entry["timestamp"].as_str().unwrap_or(""),
        if result.compacted { ", compacted" } else { "" },
    );
    for (pointer, value) in entry_texts(&entry) {
        text.push_str(&format!("\n{pointer}:\n{value}\n"));
    }
    common::print(&text)
}
