//! One running operation (a manual compaction, an auto-compaction or a branch summary) as the
//! client sees it: its operation id and progress token, the summary text streamed but not yet
//! sent, and the two throttles.
//!
//! Summary deltas are coalesced to at most one `session/compactionDelta` per part every
//! [`DELTA_INTERVAL`]. `$/progress` reports say what the operation waits for: each phase, and
//! each change of a summary's status (queued for its server's slot, waiting for the model's
//! first token, retrying, which chunk of how many) are reported as they happen; the character
//! count of streamed text at most once per [`PROGRESS_INTERVAL`]. A count held back is sent
//! before the next report or the `end`, so the last state always arrives.

use std::time::{Duration, Instant};

use super::outbox::Outbox;
use crate::engine::{Phase, Purpose, SummaryStatus};
use crate::protocol::method::{SessionCompactionDelta, SessionCompactionStarted};
use crate::protocol::{
    AutoCompactionReason, AutoContinue, CompactionDelta, CompactionReason, CompactionStarted,
    ProgressPhase, ProgressToken, SummaryPart as WirePart, WorkDoneProgress,
};
use crate::server::to_proto;

/// Deltas are coalesced to at most one notification per part in this interval (≤ 20/s).
pub const DELTA_INTERVAL: Duration = Duration::from_millis(50);

/// Streamed characters are reported at most once in this interval (≤ 4/s): a slow local
/// model streams a token every 50-100 ms, and one report per token flooded the client.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// What a running operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// A manual or automatic compaction (one at a time per session).
    Compaction,
    /// A navigation's branch summary, which may run beside a compaction.
    BranchSummary,
}

/// One running operation; see the module doc.
pub(super) struct Op {
    /// `Some` for an auto-compaction.
    pub(super) auto: Option<AutoCompactionReason>,
    pub(super) reason: CompactionReason,
    pub(super) operation_id: Option<String>,
    pub(super) progress: Option<ProgressToken>,
    pub(super) started_sent: bool,
    characters: u64,
    percentage: u32,
    pending: Vec<(WirePart, String)>,
    /// Parts with text already sent since their last restart.
    sent: Vec<WirePart>,
    last_delta: Option<Instant>,
    /// When the last `$/progress` report was sent.
    last_report: Option<Instant>,
    /// A character count held back by the throttle, sent before the next message.
    held_report: bool,
    /// Which chunk of how many the latest status named, when the input was split.
    chunk: Option<(usize, usize)>,
    /// `session/autoContinue` waits for `session/autoCompactionFinished`.
    pub(super) auto_continue: Option<AutoContinue>,
}

impl Op {
    pub(super) fn new(reason: CompactionReason) -> Self {
        Op {
            auto: None,
            reason,
            operation_id: None,
            progress: None,
            started_sent: false,
            characters: 0,
            percentage: 0,
            pending: Vec::new(),
            sent: Vec::new(),
            last_delta: None,
            last_report: None,
            held_report: false,
            chunk: None,
            auto_continue: None,
        }
    }

    fn operation_id(&self) -> String {
        self.operation_id.clone().unwrap_or_default()
    }

    /// `$/progress` `value` on the operation's token, if it has one.
    pub(super) fn progress(&self, out: &Outbox, value: WorkDoneProgress) {
        if let Some(token) = &self.progress {
            out.progress(token, value);
        }
    }

    /// A new phase: what streamed so far goes out first.
    pub(super) fn phase(
        &mut self,
        out: &Outbox,
        session_id: &str,
        phase: Phase,
        percentage: Option<u32>,
        now: Instant,
    ) {
        self.settle(out, session_id, now);
        let phase = to_proto::progress_phase(phase, self.characters);
        let percentage = percentage.unwrap_or_else(|| phase.percentage());
        self.report(out, phase.message(), Some(percentage), now);
    }

    /// Streamed text of `part`: sent coalesced, and its character count throttled.
    pub(super) fn delta(
        &mut self,
        out: &Outbox,
        session_id: &str,
        part: Purpose,
        text: &str,
        now: Instant,
    ) {
        self.characters += text.chars().count() as u64;
        if let Some(part) = to_proto::summary_part(part) {
            match self.pending.iter_mut().find(|(p, _)| *p == part) {
                Some((_, pending)) => pending.push_str(text),
                None => self.pending.push((part, text.to_owned())),
            }
        }
        if self
            .last_delta
            .is_none_or(|last| now - last >= DELTA_INTERVAL)
        {
            self.flush_deltas(out, session_id, now);
        }
        if self
            .last_report
            .is_none_or(|last| now - last >= PROGRESS_INTERVAL)
        {
            self.report_characters(out, now);
        } else {
            self.held_report = true;
        }
    }

    /// A summary's status changed (queued, waiting for the model, retrying, the next chunk):
    /// reported at once, after any held character count.
    pub(super) fn status(
        &mut self,
        out: &Outbox,
        session_id: &str,
        part: Purpose,
        status: &SummaryStatus,
        now: Instant,
    ) {
        self.settle(out, session_id, now);
        self.chunk = (status.chunks > 1).then_some((status.chunk, status.chunks));
        self.report(out, to_proto::status_message(part, status), None, now);
    }

    /// An attempt starts `part` over: text not sent yet is dropped, and a client that already
    /// received some is told to discard it (`reset: true`, empty text) before the new text.
    pub(super) fn restart(&mut self, out: &Outbox, session_id: &str, part: Purpose) {
        let Some(part) = to_proto::summary_part(part) else {
            return;
        };
        self.pending.retain(|(p, _)| *p != part);
        if let Some(at) = self.sent.iter().position(|p| *p == part) {
            self.sent.remove(at);
            out.notify::<SessionCompactionDelta>(CompactionDelta {
                session_id: session_id.to_owned(),
                operation_id: self.operation_id(),
                part,
                text: String::new(),
                reset: true,
            });
        }
    }

    /// What streamed and what the throttle held back, sent now (before another message, or at
    /// the end).
    pub(super) fn settle(&mut self, out: &Outbox, session_id: &str, now: Instant) {
        self.flush_deltas(out, session_id, now);
        if self.held_report {
            self.report_characters(out, now);
        }
    }

    /// `session/compactionStarted` for this operation.
    pub(super) fn send_started(&mut self, out: &Outbox, session_id: &str) {
        self.started_sent = true;
        out.notify::<SessionCompactionStarted>(CompactionStarted {
            session_id: session_id.to_owned(),
            operation_id: self.operation_id(),
            reason: self.reason,
            work_done_token: self.progress.clone(),
        });
    }

    fn flush_deltas(&mut self, out: &Outbox, session_id: &str, now: Instant) {
        if self.pending.is_empty() {
            return;
        }
        self.last_delta = Some(now);
        let operation_id = self.operation_id();
        for (part, text) in self.pending.drain(..) {
            if !self.sent.contains(&part) {
                self.sent.push(part);
            }
            out.notify::<SessionCompactionDelta>(CompactionDelta {
                session_id: session_id.to_owned(),
                operation_id: operation_id.clone(),
                part,
                text,
                reset: false,
            });
        }
    }

    /// Sends a `$/progress` report; `percentage` only ever grows (`None` keeps it).
    fn report(&mut self, out: &Outbox, message: String, percentage: Option<u32>, now: Instant) {
        self.percentage = self.percentage.max(percentage.unwrap_or(0).min(100));
        self.last_report = Some(now);
        self.held_report = false;
        self.progress(
            out,
            WorkDoneProgress::Report {
                cancellable: Some(true),
                message: Some(message),
                percentage: Some(self.percentage),
            },
        );
    }

    /// `summarizing (N characters)`, with the chunk when the input was split.
    fn report_characters(&mut self, out: &Outbox, now: Instant) {
        let characters = self.characters;
        let mut message = ProgressPhase::Summarizing { characters }.message();
        if let Some((chunk, chunks)) = self.chunk {
            message.push_str(&format!(", chunk {chunk} of {chunks}"));
        }
        self.report(out, message, None, now);
    }
}

/// `$/progress` begin of an operation titled `title`.
pub(super) fn begin(title: String) -> WorkDoneProgress {
    WorkDoneProgress::Begin {
        title,
        cancellable: Some(true),
        message: Some(ProgressPhase::Preparing.message()),
        percentage: Some(0),
    }
}
