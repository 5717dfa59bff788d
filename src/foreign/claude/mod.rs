//! Claude Code transcripts (`~/.claude/projects/<cwd>/<session uuid>.jsonl`, as measured on
//! Claude Code 2.1.328): recognised ([`is_transcript`]), read into compactd's session format
//! ([`read`]: JSONL text the session loader opens), and compacted from outside by appending
//! Claude Code's own two compaction records ([`compaction_lines`], [`append`]).
//!
//! The file stays Claude Code's: its bytes are never rewritten, lines are only appended, and
//! a file another process has open or wrote a moment ago is refused ([`ensure_quiet`]).
//! `docs/claude-code.md` says what of the format is read and what is not.

mod read;
mod write;

pub use read::{Transcript, is_transcript, read};
pub use write::{append, compaction_lines, ensure_quiet};

/// How Claude Code opens its summary message: written before compactd's summary, so the model
/// reads it as it reads Claude Code's own, and taken off a summary read back.
pub const SUMMARY_PREAMBLE: &str = "This session is being continued from a previous conversation \
    that ran out of context. The summary below covers the earlier portion of the conversation.\n\n";

/// Why a transcript cannot be read or compacted; each message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ClaudeError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a Claude Code transcript: {why}")]
    NotATranscript { path: String, why: String },
    #[error(
        "{path}: Claude Code is writing this transcript now ({why}); compactd does not race it. \
         Finish or quit that `claude` session and run the command again"
    )]
    Busy { path: String, why: String },
    #[error(
        "{path}: the transcript changed while compactd read it (it was {read} bytes, now {now}); \
         nothing written. Run the command again when Claude Code is done with it"
    )]
    Changed { path: String, read: u64, now: u64 },
}
