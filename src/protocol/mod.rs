//! The protocol contract: every message compactd sends or accepts, as serde + schemars wire
//! types (camelCase on the wire), and the one table of methods.
//!
//! This is the only place that knows the protocol's JSON field names; the engine works on
//! domain types and converts at the edge. Entries and messages travel as JSON objects
//! ([`WireEntry`], [`WireMessage`]) exactly as they are stored in the session file.
//!
//! * [`METHODS`] lists every method with its wire name, direction, params and result types
//!   and, for the client's methods, its [`Concurrency`] class. The [`method`] module has a
//!   marker type per method ([`method::SessionCompact`] ...) whose [`Method`] impl carries
//!   the same facts at compile time, so neither a handler registration nor a message to the
//!   client can pick the wrong types: the daemon registers `.on::<SessionCompact>(compact)`
//!   and sends `notify::<SessionCompactionStarted>(params)`. [`ClientRequest`],
//!   [`ClientNotification`], [`ServerRequest`] and [`ServerNotification`] say which way each
//!   goes.
//! * [`ErrorKind`] lists the typed errors with stable codes and `data.kind` strings.
//! * [`protocol_schemas`](schema::protocol_schemas) turns all of it into the JSON Schemas
//!   checked in under `schema/`.
//!
//! `docs/protocol.md` is the readable companion; a test checks that its examples
//! deserialise into these types.

pub(crate) mod cli;
mod common;
mod compaction;
mod errors;
mod events;
mod hooks;
mod ledger;
mod lifecycle;
mod progress;
mod recall;
pub(crate) mod schema;
mod session;
mod settings;
mod undo;

pub use cli::{
    BlobsReport, CompactionPlan, ContextReport, EvalCompaction, EvalReport, PlanMode, Retention,
};
pub use common::{
    Empty, ProgressToken, SummarizerFailure, SummarizerReport, SummaryDetails, WireEntry,
    WireMessage,
};
pub use compaction::{
    AbortResult, BranchSummaryPreview, CommitCompactionParams, CompactResult, NavigateTreeParams,
    NavigateTreeResult, PruneResult, SessionCompactParams, SessionPruneParams,
};
pub use errors::{ErrorInfo, ErrorKind};
pub use events::{
    AutoCompactionFinished, AutoCompactionOutcome, AutoCompactionPauseReason, AutoCompactionPaused,
    AutoCompactionReason, AutoCompactionStarted, AutoContinue, BackgroundCompaction,
    BackgroundCompactionState, BackgroundDiscardReason, CompactionDelta, CompactionFinished,
    CompactionReason, CompactionStarted, EntriesAppended, SummaryPart, TreeNavigated,
};
pub use hooks::{
    BeforeCompactParams, BeforeCompactResponse, BeforeTreeParams, BeforeTreeResponse,
    CompactingParams, CompactingResponse, CompactionPreparation, FileOps, HookCompaction,
    SummarizeParams, SummaryPurpose, TreePreparation,
};
pub use ledger::{
    FileOp, LedgerError, LedgerFile, LedgerFiles, LedgerPin, LedgerRequest, RequestStatus,
    SessionLedgerResult, SessionPinParams, SessionPinResult, SessionUnpinParams,
    SessionUnpinResult,
};
pub use lifecycle::{
    CancelParams, ClientCapabilities, HookCapabilities, InitializeParams, InitializeResult,
    NoParams, PROTOCOL_VERSION, ServerCapabilities, ServerInfo,
};
pub use progress::{ProgressParams, ProgressPhase, WorkDoneProgress, WorkDoneProgressTokenParams};
pub use recall::{
    SearchHit, SearchScope, SessionReadEntryParams, SessionReadEntryResult, SessionSearchParams,
    SessionSearchResult,
};
pub use schema::write_schemas;
pub use session::{
    AppendEntry, BackgroundCompactionStatus, MissingBlobInfo, NextAction, ObserveTurnParams,
    ObserveTurnResult, SessionAppendParams, SessionAppendResult, SessionContextParams,
    SessionContextResult, SessionCreateParams, SessionForkParams, SessionInfo, SessionListItem,
    SessionListParams, SessionListResult, SessionLocator, SessionOpenParams, SessionRef,
    SessionTreeParams, SessionTreeResult, SessionUsageResult, SetLabelParams, SetLabelResult,
    TreeNode,
};
pub use settings::{
    SettingValue, SettingsGetParams, SettingsGetResult, SettingsTarget, SettingsUpdateParams,
    SettingsUpdateResult,
};

pub use undo::{UndoCompactionParams, UndoCompactionResult};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::rpc::Concurrency;
// Private: `schema` uses it, and `cli` uses `schema`.
use cli::CLI_OUTPUTS;
use hooks::SummarizeResponse;
use schema::TypeSpec;

/// Who sends a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

/// Whether a message expects an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MessageKind {
    Request,
    Notification,
}

/// A method's facts at compile time; implemented by the markers in [`method`].
pub trait Method {
    /// The wire name, e.g. `session/compact`.
    const NAME: &'static str;
    const DIRECTION: Direction;
    type Params: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
}

/// A method that is answered.
pub trait RequestMethod: Method {
    type Result: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
}

/// A method the client sends, with the concurrency class the server runs it in.
pub trait ClientMethod: Method {
    const CONCURRENCY: Concurrency;
}

/// A request the client sends; the server answers it.
pub trait ClientRequest: ClientMethod + RequestMethod {}

/// A notification the client sends.
pub trait ClientNotification: ClientMethod {}

/// A request the server sends; the client answers it.
pub trait ServerRequest: RequestMethod {}

/// A notification the server sends.
pub trait ServerNotification: Method {}

/// One row of [`METHODS`].
#[derive(Debug, Clone, Copy)]
pub struct MethodSpec {
    /// The wire name.
    pub name: &'static str,
    pub direction: Direction,
    pub kind: MessageKind,
    /// The class the server runs it in; `None` for server-to-client messages.
    pub concurrency: Option<Concurrency>,
    /// What it does (the marker type's doc comment).
    pub doc: &'static str,
    pub params: TypeSpec,
    /// `None` for notifications.
    pub result: Option<TypeSpec>,
}

impl MethodSpec {
    /// The row of a wire name.
    pub fn find(name: &str) -> Option<&'static MethodSpec> {
        METHODS.iter().find(|m| m.name == name)
    }

    /// The doc comment as one paragraph.
    pub fn description(&self) -> String {
        self.doc
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The `camelCase` name of a concurrency class, as the docs and the schema bundle write it.
pub fn concurrency_name(concurrency: Concurrency) -> &'static str {
    match concurrency {
        Concurrency::Parallel => "parallel",
        Concurrency::GlobalSerial => "globalSerial",
        Concurrency::SessionSerial => "sessionSerial",
        Concurrency::SessionRead => "sessionRead",
    }
}

macro_rules! protocol_table {
    (
        client_requests {
            $( $(#[doc = $crd:literal])* $cr:ident = $crn:literal, $crc:ident, $crp:ty => $crr:ty; )*
        }
        client_notifications {
            $( $(#[doc = $cnd:literal])* $cn:ident = $cnn:literal, $cnc:ident, $cnp:ty; )*
        }
        server_requests {
            $( $(#[doc = $srd:literal])* $sr:ident = $srn:literal, $srp:ty => $srr:ty; )*
        }
        server_notifications {
            $( $(#[doc = $snd:literal])* $sn:ident = $snn:literal, $snp:ty; )*
        }
    ) => {
        /// One marker type per method, implementing [`Method`] (and [`RequestMethod`],
        /// [`ClientMethod`] where they apply).
        pub mod method {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[doc = $crd])*
                #[derive(Debug)]
                pub enum $cr {}
                impl Method for $cr {
                    const NAME: &'static str = $crn;
                    const DIRECTION: Direction = Direction::ClientToServer;
                    type Params = $crp;
                }
                impl RequestMethod for $cr {
                    type Result = $crr;
                }
                impl ClientMethod for $cr {
                    const CONCURRENCY: Concurrency = Concurrency::$crc;
                }
                impl ClientRequest for $cr {}
            )*
            $(
                $(#[doc = $cnd])*
                #[derive(Debug)]
                pub enum $cn {}
                impl Method for $cn {
                    const NAME: &'static str = $cnn;
                    const DIRECTION: Direction = Direction::ClientToServer;
                    type Params = $cnp;
                }
                impl ClientMethod for $cn {
                    const CONCURRENCY: Concurrency = Concurrency::$cnc;
                }
                impl ClientNotification for $cn {}
            )*
            $(
                $(#[doc = $srd])*
                #[derive(Debug)]
                pub enum $sr {}
                impl Method for $sr {
                    const NAME: &'static str = $srn;
                    const DIRECTION: Direction = Direction::ServerToClient;
                    type Params = $srp;
                }
                impl RequestMethod for $sr {
                    type Result = $srr;
                }
                impl ServerRequest for $sr {}
            )*
            $(
                $(#[doc = $snd])*
                #[derive(Debug)]
                pub enum $sn {}
                impl Method for $sn {
                    const NAME: &'static str = $snn;
                    const DIRECTION: Direction = Direction::ServerToClient;
                    type Params = $snp;
                }
                impl ServerNotification for $sn {}
            )*
        }

        /// Every method of the protocol, client requests first, in the order of the docs.
        pub const METHODS: &[MethodSpec] = &[
            $( MethodSpec {
                name: $crn,
                direction: Direction::ClientToServer,
                kind: MessageKind::Request,
                concurrency: Some(Concurrency::$crc),
                doc: concat!($($crd, "\n"),*),
                params: TypeSpec::of::<$crp>(),
                result: Some(TypeSpec::of::<$crr>()),
            }, )*
            $( MethodSpec {
                name: $cnn,
                direction: Direction::ClientToServer,
                kind: MessageKind::Notification,
                concurrency: Some(Concurrency::$cnc),
                doc: concat!($($cnd, "\n"),*),
                params: TypeSpec::of::<$cnp>(),
                result: None,
            }, )*
            $( MethodSpec {
                name: $srn,
                direction: Direction::ServerToClient,
                kind: MessageKind::Request,
                concurrency: None,
                doc: concat!($($srd, "\n"),*),
                params: TypeSpec::of::<$srp>(),
                result: Some(TypeSpec::of::<$srr>()),
            }, )*
            $( MethodSpec {
                name: $snn,
                direction: Direction::ServerToClient,
                kind: MessageKind::Notification,
                concurrency: None,
                doc: concat!($($snd, "\n"),*),
                params: TypeSpec::of::<$snp>(),
                result: None,
            }, )*
        ];
    };
}

// The whole protocol on one screen. Classes: `SessionSerial` runs in arrival order on the
// session's queue (keyed by `params.sessionId`), `GlobalSerial` one at a time server-wide,
// `Parallel` at once. Aborts must be `Parallel`: queued behind the compaction they abort,
// they would only run once it had finished.
protocol_table! {
    client_requests {
        /// Opens the connection: capabilities and settings overrides. Must come first.
        Initialize = "initialize", GlobalSerial, InitializeParams => InitializeResult;
        /// Prepares to exit: later requests fail; in-flight ones finish.
        Shutdown = "shutdown", GlobalSerial, NoParams => ();
        /// Creates a session (the file is written with its first entry).
        SessionCreate = "session/create", GlobalSerial, SessionCreateParams => SessionInfo;
        /// Opens a stored session by path or id (migrating v1/v2 files in memory).
        SessionOpen = "session/open", GlobalSerial, SessionOpenParams => SessionInfo;
        /// A new session from a branch of an open one, or from a copy of all of it; opened.
        SessionFork = "session/fork", SessionSerial, SessionForkParams => SessionInfo;
        /// Lists stored sessions, newest first.
        SessionList = "session/list", Parallel, SessionListParams => SessionListResult;
        /// Closes a session after its queued requests; aborts nothing.
        SessionClose = "session/close", SessionSerial, SessionRef => Empty;
        /// Appends entries at the leaf; an assistant message runs the auto-compaction check.
        SessionAppend = "session/append", SessionSerial, SessionAppendParams => SessionAppendResult;
        /// The LLM-ready messages of the branch and their token figures.
        SessionContext = "session/context", SessionRead, SessionContextParams => SessionContextResult;
        /// Every entry as a flat tree.
        SessionTree = "session/tree", SessionRead, SessionTreeParams => SessionTreeResult;
        /// Context size, window, threshold and whether a compaction runs.
        SessionUsage = "session/usage", SessionRead, SessionRef => SessionUsageResult;
        /// An agent's turn: reads its new entries; a context in the lead band starts a
        /// background compaction.
        SessionObserveTurn = "session/observeTurn", SessionSerial, ObserveTurnParams => ObserveTurnResult;
        /// Finds text in every entry, behind compactions and in full texts too; pages.
        SessionSearch = "session/search", SessionRead, SessionSearchParams => SessionSearchResult;
        /// One entry as written, full texts and pruned originals restored.
        SessionReadEntry = "session/readEntry", SessionRead, SessionReadEntryParams => SessionReadEntryResult;
        /// Sets or clears an entry's label (appends a `label` entry).
        SessionSetLabel = "session/setLabel", SessionSerial, SetLabelParams => SetLabelResult;
        /// The progress ledger of the branch: requests, files, errors, pins, next step.
        SessionLedger = "session/ledger", SessionRead, SessionRef => SessionLedgerResult;
        /// Pins a fact, carried verbatim through every later compaction (appends an entry).
        SessionPin = "session/pin", SessionSerial, SessionPinParams => SessionPinResult;
        /// Unpins a pinned fact (appends an entry).
        SessionUnpin = "session/unpin", SessionSerial, SessionUnpinParams => SessionUnpinResult;
        /// Compacts now; answers when done, with progress and summary deltas meanwhile.
        SessionCompact = "session/compact", SessionSerial, SessionCompactParams => CompactResult;
        /// Writes a previewed compaction, optionally with the user's edited summary.
        SessionCommitCompaction = "session/commitCompaction", SessionSerial, CommitCompactionParams => CompactResult;
        /// Aborts the session's running compaction, manual or automatic.
        SessionAbortCompaction = "session/abortCompaction", Parallel, SessionRef => AbortResult;
        /// Prunes old tool outputs in the live context.
        SessionPrune = "session/prune", SessionSerial, SessionPruneParams => PruneResult;
        /// Moves the leaf, optionally summarising the branch being left.
        SessionNavigateTree = "session/navigateTree", SessionSerial, NavigateTreeParams => NavigateTreeResult;
        /// Undoes a compaction, or an undo: appends a branch without it (or with it again).
        SessionUndoCompaction = "session/undoCompaction", SessionSerial, UndoCompactionParams => UndoCompactionResult;
        /// Aborts the session's running branch summary.
        SessionAbortBranchSummary = "session/abortBranchSummary", Parallel, SessionRef => AbortResult;
        /// Effective settings and the layer each value came from.
        SettingsGet = "settings/get", Parallel, SettingsGetParams => SettingsGetResult;
        /// Patches the user file or this connection's layer, validated first.
        SettingsUpdate = "settings/update", GlobalSerial, SettingsUpdateParams => SettingsUpdateResult;
    }
    client_notifications {
        /// The client received the `initialize` result.
        Initialized = "initialized", Parallel, NoParams;
        /// Ends the process (exit code 0 after `shutdown`, 1 otherwise).
        Exit = "exit", Parallel, NoParams;
        /// Cancels a request by id (handled by the transport).
        CancelRequest = "$/cancelRequest", Parallel, CancelParams;
        /// Cancels the operation behind a progress token (LSP).
        WorkDoneProgressCancel = "window/workDoneProgress/cancel", Parallel, WorkDoneProgressTokenParams;
    }
    server_requests {
        /// Asks the client to show progress for a server-chosen token (only with the
        /// `workDoneProgress` capability).
        WorkDoneProgressCreate = "window/workDoneProgress/create", WorkDoneProgressTokenParams => ();
        /// Before a compaction: cancel it or supply it.
        HooksBeforeCompact = "hooks/beforeCompact", BeforeCompactParams => BeforeCompactResponse;
        /// Before summarising: extra context, a replacement prompt, `preserveData`.
        HooksCompacting = "hooks/compacting", CompactingParams => CompactingResponse;
        /// Before a navigation: cancel it or supply the branch summary.
        HooksBeforeTree = "hooks/beforeTree", BeforeTreeParams => BeforeTreeResponse;
        /// One summarizer LLM call run by the client.
        SummarizerSummarize = "summarizer/summarize", SummarizeParams => SummarizeResponse;
    }
    server_notifications {
        /// LSP work-done progress of a compaction or branch summary.
        Progress = "$/progress", ProgressParams;
        /// A compaction (manual or automatic) began.
        SessionCompactionStarted = "session/compactionStarted", CompactionStarted;
        /// Summary text streamed.
        SessionCompactionDelta = "session/compactionDelta", CompactionDelta;
        /// A compaction ended (authoritative).
        SessionCompactionFinished = "session/compactionFinished", CompactionFinished;
        /// An auto-compaction (threshold or overflow) began.
        SessionAutoCompactionStarted = "session/autoCompactionStarted", AutoCompactionStarted;
        /// An auto-compaction ended: what the agent should do next.
        SessionAutoCompactionFinished = "session/autoCompactionFinished", AutoCompactionFinished;
        /// The leaf moved by `session/navigateTree`.
        SessionTreeNavigated = "session/treeNavigated", TreeNavigated;
        /// Entries were written, by any client or by the server.
        SessionEntriesAppended = "session/entriesAppended", EntriesAppended;
        /// The continue prompt was appended after a threshold compaction: run the model.
        SessionAutoContinue = "session/autoContinue", AutoContinue;
        /// A background (speculative) compaction started, is armed, was committed or discarded.
        SessionBackgroundCompaction = "session/backgroundCompaction", BackgroundCompaction;
        /// Automatic compaction paused for the session (thrash guard or circuit breaker).
        SessionAutoCompactionPaused = "session/autoCompactionPaused", AutoCompactionPaused;
    }
}

#[cfg(test)]
mod tests;
