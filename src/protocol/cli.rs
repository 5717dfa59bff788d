//! What the command-line tool prints with `--json`. Each command prints a protocol type, so
//! one schema covers the daemon and the CLI: `tree`, `compact`, `navigate` and `prune` print
//! the result of the method they mirror; `context` prints `session/context`'s result with its
//! per-message counts and the usage beside it; `plan` and `blobs`, which have no method, print
//! the types below.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::EntryId;
use super::schema::TypeSpec;
use super::session::{SessionContextResult, SessionUsageResult};
use super::{
    CompactResult, NavigateTreeResult, PruneResult, SessionLedgerResult, SessionPinResult,
    SessionTreeResult, SessionUnpinResult,
};

/// `compactd context --json`: `session/context` with `perMessage: true`, the counter used,
/// and `session/usage` (the CLI runs no compaction, so its `is*` flags are `false`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextReport {
    #[serde(flatten)]
    pub context: SessionContextResult,
    /// The token counter used (`chars4`, `o200k`, `cl100k`).
    pub tokenizer: String,
    pub usage: SessionUsageResult,
}

/// Whose rules `compactd plan` cut with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PlanMode {
    /// compactd's rules (the default).
    Fixed,
    /// The reference's rules, quirks included (`--parity`).
    Parity,
}

/// `compactd plan --json`: where a compaction would cut now, without summarising.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionPlan {
    pub first_kept_entry_id: EntryId,
    /// Index of the first kept entry among the file's entries (0 = the line after the header).
    pub first_kept_entry_index: Option<usize>,
    /// Type and role of the first kept entry, e.g. `message/user`.
    pub first_kept_entry_kind: String,
    pub is_split_turn: bool,
    /// Where the split turn starts, numbered as `firstKeptEntryIndex`.
    pub turn_start_index: Option<usize>,
    pub messages_to_summarize: usize,
    pub turn_prefix_messages: usize,
    pub recent_messages: usize,
    pub tokens_before: u64,
    pub keep_recent_tokens: u64,
    /// Whether a previous compaction's summary would be updated.
    pub previous_summary: bool,
    pub read_files: Vec<String>,
    pub modified_files: Vec<String>,
    /// The token counter used.
    pub tokenizer: String,
    pub mode: PlanMode,
}

/// `compactd blobs --json`: the blob store against the sessions that refer to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlobsReport {
    /// The store's directory.
    pub store: PathBuf,
    /// How many session files were read.
    pub sessions: usize,
    /// Each referenced blob (SHA-256, hex) with the sessions that refer to it.
    pub referenced: BTreeMap<String, Vec<PathBuf>>,
    /// Referenced but not in the store.
    pub missing: Vec<String>,
    /// In the store but referenced by none of the sessions read.
    pub unreferenced: Vec<String>,
    /// Deleted by `--gc`.
    pub deleted: Vec<String>,
    /// Unreferenced, but modified within the grace period (`--grace`), so kept: a writer puts a
    /// blob in the store before the line that refers to it.
    #[serde(default)]
    pub kept_recent: Vec<String>,
    /// The grace period used, in seconds.
    #[serde(default)]
    pub grace_seconds: u64,
}

/// `compactd eval --json`: what compactions at several points of a session kept of where the
/// agent stood (its progress ledger at each point), a retention score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvalReport {
    /// One per point compacted, oldest first.
    pub compactions: Vec<EvalCompaction>,
    /// Kept over total, over every compaction and kind (1 when there was nothing to keep).
    pub score: f64,
}

/// One compaction (a preview at `leafId`, nothing written) and what its summary kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvalCompaction {
    /// The entry the compaction was computed at, as if it were the leaf.
    pub leaf_id: EntryId,
    /// Which summarizer wrote the summary.
    pub summarizer: String,
    /// The current request (verbatim) and the gists of the earlier ones.
    pub requests: Retention,
    /// Every file read and modified, by path.
    pub files: Retention,
    /// The unresolved errors, by their key line.
    pub errors: Retention,
    pub pins: Retention,
    pub score: f64,
    /// What the summary lacks, as `kind: text`.
    pub missing: Vec<String>,
}

/// How many of a kind of fact the summary kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    pub kept: usize,
    pub total: usize,
}

/// One command's `--json` output type.
#[derive(Debug, Clone, Copy)]
pub struct CliOutput {
    /// The subcommand, e.g. `context`.
    pub command: &'static str,
    pub output: TypeSpec,
}

/// Every command that prints JSON, with the type it prints (in the schema bundle's `cli`).
pub const CLI_OUTPUTS: &[CliOutput] = &[
    CliOutput {
        command: "context",
        output: TypeSpec::of::<ContextReport>(),
    },
    CliOutput {
        command: "eval",
        output: TypeSpec::of::<EvalReport>(),
    },
    CliOutput {
        command: "ledger",
        output: TypeSpec::of::<SessionLedgerResult>(),
    },
    CliOutput {
        command: "pin",
        output: TypeSpec::of::<SessionPinResult>(),
    },
    CliOutput {
        command: "unpin",
        output: TypeSpec::of::<SessionUnpinResult>(),
    },
    CliOutput {
        command: "plan",
        output: TypeSpec::of::<CompactionPlan>(),
    },
    CliOutput {
        command: "tree",
        output: TypeSpec::of::<SessionTreeResult>(),
    },
    CliOutput {
        command: "compact",
        output: TypeSpec::of::<CompactResult>(),
    },
    CliOutput {
        command: "navigate",
        output: TypeSpec::of::<NavigateTreeResult>(),
    },
    CliOutput {
        command: "undo",
        output: TypeSpec::of::<super::UndoCompactionResult>(),
    },
    CliOutput {
        command: "prune",
        output: TypeSpec::of::<PruneResult>(),
    },
    CliOutput {
        command: "search",
        output: TypeSpec::of::<super::SessionSearchResult>(),
    },
    CliOutput {
        command: "show",
        output: TypeSpec::of::<super::SessionReadEntryResult>(),
    },
    CliOutput {
        command: "blobs",
        output: TypeSpec::of::<BlobsReport>(),
    },
];
