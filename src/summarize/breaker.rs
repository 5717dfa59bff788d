//! What one operation (a compaction, a branch summary) has learned about its summarizers,
//! shared by all its requests: the history, turn-prefix and short summaries and every chunk of
//! a long input.
//!
//! * **Circuit breaker**: a summarizer that failed the same way twice (two timeouts, two
//!   rejected answers, two refused connections), or once in a way that cannot change (a
//!   refused key, an unknown model), is not asked again in this operation; its requests go
//!   straight to the next rung, and the reason is kept for the report.
//! * **Retry budget**: `retry.maxRetries` retries per summarizer for the whole operation, not
//!   per request, so a server that is down costs one back-off, not one per chunk and part.
//! * **Token ratio and window**: when a server says how many tokens a refused prompt had and
//!   how large its window is, the ratio to compactd's own count and the window are kept, so
//!   later requests to it (the other parts, the next chunks) are planned with its tokenizer's
//!   size and its real window, not ours and the configured one.
//!
//! A prompt refused as too long is not a failure of the server (the input is planned again
//! smaller, once per summary): it does not count towards the breaker.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::SummarizeError;

/// Failures of one kind that open the breaker.
pub const SAME_FAILURES_TO_OPEN: u32 = 2;

/// Per-operation state of every summarizer; see the module doc.
#[derive(Debug)]
pub struct Breaker {
    max_retries: u32,
    state: Mutex<HashMap<String, Record>>,
}

#[derive(Debug, Default)]
struct Record {
    retries: u32,
    failures: HashMap<String, u32>,
    open: Option<String>,
    token_ratio: Option<f64>,
    window: Option<u64>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::new(super::RetryPolicy::default().max_retries)
    }
}

impl Breaker {
    /// A closed breaker whose summarizers may retry `max_retries` times in all.
    pub fn new(max_retries: u32) -> Self {
        Breaker {
            max_retries,
            state: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Record>> {
        // Counters updated in one step each: a panic elsewhere leaves them consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why `summarizer` is no longer asked, if it is not.
    pub fn open_reason(&self, summarizer: &str) -> Option<String> {
        self.lock().get(summarizer).and_then(|r| r.open.clone())
    }

    /// Counts a failure of `summarizer`; returns the reason when this failure opened the
    /// breaker. Cancellation and a prompt refused as too long are not failures of the
    /// summarizer.
    pub fn record_failure(&self, summarizer: &str, error: &SummarizeError) -> Option<String> {
        if matches!(
            error,
            SummarizeError::Cancelled | SummarizeError::Overflow(_)
        ) {
            return None;
        }
        let mut state = self.lock();
        let record = state.entry(summarizer.to_owned()).or_default();
        if record.open.is_some() {
            return None;
        }
        let kind = error.failure_kind();
        let count = record.failures.entry(kind.clone()).or_default();
        *count += 1;
        let reason = if error.is_permanent() {
            format!("it failed in a way that will not change ({kind}): {error}")
        } else if *count >= SAME_FAILURES_TO_OPEN {
            format!("it failed the same way {count} times ({kind}); last: {error}")
        } else {
            return None;
        };
        record.open = Some(reason.clone());
        Some(reason)
    }

    /// Takes one retry from `summarizer`'s budget; `false` when it is spent or the breaker is
    /// open.
    pub fn take_retry(&self, summarizer: &str) -> bool {
        let mut state = self.lock();
        let record = state.entry(summarizer.to_owned()).or_default();
        if record.open.is_some() || record.retries >= self.max_retries {
            return false;
        }
        record.retries += 1;
        true
    }

    /// Remembers that `summarizer`'s server counts `ratio` times the tokens compactd counts
    /// (kept only when larger than 1 and larger than what was known).
    pub fn learn_token_ratio(&self, summarizer: &str, ratio: f64) {
        if !ratio.is_finite() || ratio <= 1.0 {
            return;
        }
        let mut state = self.lock();
        let record = state.entry(summarizer.to_owned()).or_default();
        record.token_ratio = Some(record.token_ratio.map_or(ratio, |r| r.max(ratio)));
    }

    /// How many of its tokens `summarizer`'s server counts per token compactd counts (1 until
    /// a refusal said otherwise).
    pub fn token_ratio(&self, summarizer: &str) -> f64 {
        self.lock()
            .get(summarizer)
            .and_then(|r| r.token_ratio)
            .unwrap_or(1.0)
    }

    /// Remembers that `summarizer`'s server has a window of `window` tokens (the smallest one
    /// it said is kept).
    pub fn learn_window(&self, summarizer: &str, window: u64) {
        if window == 0 {
            return;
        }
        let mut state = self.lock();
        let record = state.entry(summarizer.to_owned()).or_default();
        record.window = Some(record.window.map_or(window, |w| w.min(window)));
    }

    /// The window `summarizer`'s server said it has, if a refusal said it.
    pub fn window(&self, summarizer: &str) -> Option<u64> {
        self.lock().get(summarizer).and_then(|r| r.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> SummarizeError {
        SummarizeError::Http {
            status,
            message: format!("HTTP {status}"),
            body_excerpt: String::new(),
            retry_after: None,
        }
    }

    #[test]
    fn the_same_failure_twice_opens_the_breaker() {
        let b = Breaker::new(3);
        assert_eq!(b.record_failure("m", &http(503)), None);
        assert_eq!(
            b.record_failure("m", &SummarizeError::Timeout("t".into())),
            None
        );
        assert!(b.open_reason("m").is_none(), "two different failures");
        let reason = b.record_failure("m", &http(503)).expect("opens");
        assert!(reason.contains("2 times (http 503)"), "{reason}");
        assert_eq!(b.open_reason("m"), Some(reason));
        assert!(b.open_reason("other").is_none());
        assert!(!b.take_retry("m"), "an open breaker has no retries");
    }

    #[test]
    fn a_permanent_failure_opens_it_at_once_and_cancellation_never_does() {
        let b = Breaker::new(3);
        assert_eq!(b.record_failure("m", &SummarizeError::Cancelled), None);
        assert_eq!(b.record_failure("m", &SummarizeError::Cancelled), None);
        assert!(b.open_reason("m").is_none());
        assert!(b.record_failure("m", &http(401)).is_some());
    }

    #[test]
    fn the_retry_budget_is_per_summarizer_for_the_whole_operation() {
        let b = Breaker::new(2);
        assert!(b.take_retry("m"));
        assert!(b.take_retry("m"));
        assert!(!b.take_retry("m"));
        assert!(b.take_retry("n"));
    }

    #[test]
    fn the_token_ratio_only_grows() {
        let b = Breaker::new(1);
        assert_eq!(b.token_ratio("m"), 1.0);
        b.learn_token_ratio("m", 1.4);
        b.learn_token_ratio("m", 1.2);
        b.learn_token_ratio("m", 0.5);
        b.learn_token_ratio("m", f64::NAN);
        assert_eq!(b.token_ratio("m"), 1.4);
    }

    #[test]
    fn the_served_window_is_the_smallest_said_and_refusals_never_open_the_breaker() {
        let b = Breaker::new(1);
        assert_eq!(b.window("m"), None);
        b.learn_window("m", 1_024);
        b.learn_window("m", 4_096);
        b.learn_window("m", 0);
        assert_eq!(b.window("m"), Some(1_024));
        let refused = SummarizeError::Overflow("exceeds the available context size".into());
        for _ in 0..3 {
            assert_eq!(b.record_failure("m", &refused), None);
        }
        assert!(b.open_reason("m").is_none());
    }
}
