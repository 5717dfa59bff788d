//! Pure compaction planning, no I/O and no LLM: where to cut (spec §4.8), what to summarise
//! and keep (§4.6), file-operation tracking (§4.13), the summarizer's transcript (§4.11),
//! tool-output pruning (§5), the entries a branch summary covers (§6.1, §6.2), the
//! progress ledger (DESIGN §8) and the facts read from messages (`facts.rs`: failed tool
//! calls, standing instructions) that the ledger, the extractive summarizer and the
//! retention guard read alike. The threshold (§4.2) is a setting's:
//! `Settings::threshold_tokens`.
//!
//! Every function takes entries and a [`TokenCounter`](crate::tokens::TokenCounter) and
//! returns a plan; the engine performs it.

pub(crate) mod branch;
pub(crate) mod cut_point;
pub(crate) mod facts;
pub(crate) mod file_ops;
pub(crate) mod ledger;
pub(crate) mod prepare;
pub(crate) mod prune;
pub(crate) mod serialize;

#[cfg(test)]
mod test_support;

pub use branch::{BranchCollection, collect_entries_for_branch_summary, prepare_branch_entries};
pub use cut_point::CutMode;
pub use file_ops::{FileOps, compute_file_lists, file_lists_details, format_file_operations};
pub use ledger::{
    FileOp, Ledger, LedgerError, LedgerFile, LedgerFiles, LedgerPin, LedgerRequest,
    PIN_CUSTOM_TYPE, RequestStatus, UNPIN_CUSTOM_TYPE, gist as ledger_gist,
    record_in_details as record_ledger_in_details, render_block as render_ledger_block,
};
pub use prepare::{
    BoundaryError, CompactionParams, CompactionPreparation, CompactionSummary, prepare_compaction,
    prepare_compaction_at, prepare_compaction_in, summarize_compaction, validate_boundary,
};
pub use prune::{PruneConfig, apply_prune, prune_tool_outputs};
pub use serialize::{serialize_conversation, serialize_messages};
