//! Codex CLI rollouts (`$CODEX_HOME/sessions/…/rollout-*.jsonl`, measured on Codex 0.169.0):
//! recognised by their first line (`session_meta`), read into a pi-format session that the
//! rest of compactd loads ([`Rollout::to_session_jsonl`]), and compacted by appending Codex's
//! own records ([`Rollout::compaction_lines`]): a `compacted` line (`message`,
//! `replacement_history`) and a `token_count` event with the smaller usage, so Codex neither
//! sends the summarised turns again nor compacts again at once.
//!
//! Read: user and assistant messages, function and custom tool calls with their outputs, and
//! Codex's own compactions (as compactions that keep nothing before them). Not read (kept in
//! the file, absent from compactd's view): developer and environment-context messages (Codex
//! re-sends them; they are carried into `replacement_history`), reasoning items, web searches,
//! local shell calls, images, events and turn metadata.

mod busy;
mod convert;

pub use busy::being_written;
pub use convert::{Rollout, RolloutError, SUMMARY_PREFIX, is_rollout};
