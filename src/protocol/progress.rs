//! LSP work-done progress: `$/progress`, `window/workDoneProgress/create` and
//! `window/workDoneProgress/cancel`, and the phases a compaction or branch summary reports.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::ProgressToken;

/// Params of `$/progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressParams {
    /// The token from the request's `workDoneToken` or from `window/workDoneProgress/create`.
    pub token: ProgressToken,
    /// Begin, report or end.
    pub value: WorkDoneProgress,
}

/// LSP `WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum WorkDoneProgress {
    /// The first message for a token.
    Begin {
        /// E.g. `Compacting session 0a1b2c3d4e5f6789`.
        title: String,
        /// Whether `window/workDoneProgress/cancel` is honoured (true for compaction and
        /// branch summaries, false for opening a session).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancellable: Option<bool>,
        /// The phase: `pruning`, `preparing`, `summarizing (N characters)`, `persisting`; for
        /// `session/open`: `opening <path>`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// 0 to 100, where meaningful.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        percentage: Option<u32>,
    },
    /// A phase change or more streamed text.
    Report {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancellable: Option<bool>,
        /// The phase: `pruning`, `preparing`, `summarizing (N characters)`, `persisting`; for
        /// `session/open`: `reading N MB`, `parsing N MB`, `migrating from version N`,
        /// `linking N entries`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// 0 to 100, where meaningful.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        percentage: Option<u32>,
    },
    /// The last message for a token: `done`, `cancelled` or the error message.
    End {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

/// The phases of a compaction or branch summary, as shown in progress `message`s. The
/// percentages are coarse: phases are not equally long, but the bar never goes backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressPhase {
    /// Tool-output pruning (auto-compaction only).
    Pruning,
    /// Choosing the cut point and collecting what to summarise; hooks run here.
    Preparing,
    /// Waiting for the summarizer; `characters` of summary text have streamed so far.
    Summarizing { characters: u64 },
    /// Appending the entry and rebuilding the context.
    Persisting,
}

impl ProgressPhase {
    /// The `message` of a progress report, e.g. `summarizing (1234 characters)`.
    pub fn message(self) -> String {
        self.to_string()
    }

    /// A coarse `percentage` for the phase's start.
    pub fn percentage(self) -> u32 {
        match self {
            ProgressPhase::Pruning => 0,
            ProgressPhase::Preparing => 5,
            ProgressPhase::Summarizing { .. } => 10,
            ProgressPhase::Persisting => 95,
        }
    }
}

impl fmt::Display for ProgressPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgressPhase::Pruning => f.write_str("pruning"),
            ProgressPhase::Preparing => f.write_str("preparing"),
            ProgressPhase::Summarizing { characters: 0 } => f.write_str("summarizing"),
            ProgressPhase::Summarizing { characters } => {
                write!(f, "summarizing ({characters} characters)")
            }
            ProgressPhase::Persisting => f.write_str("persisting"),
        }
    }
}

/// Params of `window/workDoneProgress/create` (server to client) and
/// `window/workDoneProgress/cancel` (client to server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkDoneProgressTokenParams {
    /// The progress token.
    pub token: ProgressToken,
}
