//! The candidate loop of spec §4.15: try each summarizer in order, retry transient failures
//! with exponential back-off (raised to what the server asks for), move on when a wait would be
//! long or the error is not worth retrying, and end at once on cancellation.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::{DeltaSink, SummarizeError, Summarizer, SummaryOutput, SummaryRequest, cancellable};
use crate::session::ids::days_from_civil;
use crate::settings::RetrySettings;

/// The error when there is nothing to try (spec §9).
pub const NO_AVAILABLE_MODEL: &str = "Compaction failed: no available model";

/// How failures are retried.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub enabled: bool,
    /// Retries per candidate (so up to `max_retries + 1` attempts).
    pub max_retries: u32,
    /// Back-off base: the delay before retry `n` (0-based) is `base_delay * 2^n`.
    pub base_delay: Duration,
    /// A delay longer than this moves on to the next candidate when there is one (30 s).
    pub move_on_after: Duration,
    /// Longest sleep actually taken; `None` sleeps as long as asked. Tests set it small so a
    /// server's `retry-after: 1` does not cost a second.
    pub max_sleep: Option<Duration>,
    /// Recognises a summarizer context overflow in an error message; overflows are never
    /// retried on the same input.
    pub is_overflow: fn(&str) -> bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::from(&RetrySettings::default())
    }
}

impl From<&RetrySettings> for RetryPolicy {
    fn from(settings: &RetrySettings) -> Self {
        RetryPolicy {
            enabled: settings.enabled,
            max_retries: settings.max_retries,
            base_delay: Duration::from_millis(settings.base_delay_ms),
            move_on_after: Duration::from_secs(30),
            max_sleep: None,
            is_overflow: super::is_overflow_message,
        }
    }
}

impl RetryPolicy {
    /// The back-off before retry number `attempt` (0-based), raised to `retry_after`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        let backoff = self.base_delay.saturating_mul(factor);
        retry_after.map_or(backoff, |asked| backoff.max(asked))
    }
}

/// One step of the candidate loop, reported as it happens.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptEvent {
    /// The candidate's [`Summarizer::id`].
    pub candidate: String,
    /// 0 for the first attempt on this candidate.
    pub attempt: u32,
    pub outcome: AttemptOutcome,
}

/// What happened in an [`AttemptEvent`].
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    /// The attempt begins; text streamed by an earlier attempt is void.
    Started,
    /// The attempt failed and will be retried on this candidate after `sleep`.
    Retrying {
        error: String,
        /// The back-off, raised to the server's retry-after.
        delay: Duration,
        /// What the server asked for, if anything.
        retry_after: Option<Duration>,
        /// The time actually slept (`delay` capped by [`RetryPolicy::max_sleep`]).
        sleep: Duration,
    },
    /// The candidate is given up; the next one (if any) is tried.
    Failed {
        error: String,
        /// The summarizer's context overflowed: the caller may shrink the input and try again.
        overflow: bool,
    },
    Succeeded,
}

/// Summarises `req` with the first candidate that succeeds, then `fallback` (typically the
/// extractive summarizer) if every candidate failed.
///
/// Errors: [`SummarizeError::Cancelled`] as soon as `cancel` fires; otherwise, when all fail,
/// an overflow if any candidate overflowed (the input must shrink), else the last error;
/// `Compaction failed: no available model` when there was nothing to try.
pub async fn summarize_with_candidates(
    candidates: &[Arc<dyn Summarizer>],
    fallback: Option<Arc<dyn Summarizer>>,
    req: &SummaryRequest,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    on_delta: DeltaSink<'_>,
    on_attempt: &(dyn Fn(AttemptEvent) + Send + Sync),
) -> Result<SummaryOutput, SummarizeError> {
    let all: Vec<&Arc<dyn Summarizer>> = candidates.iter().chain(fallback.as_ref()).collect();
    let mut last_error = None;
    let mut overflow = None;
    for (index, candidate) in all.iter().enumerate() {
        let has_next = index + 1 < all.len();
        let id = candidate.id();
        match try_candidate(
            candidate.as_ref(),
            &id,
            has_next,
            req,
            policy,
            cancel,
            on_delta,
            on_attempt,
        )
        .await
        {
            Ok(output) => return Ok(output),
            Err(SummarizeError::Cancelled) => return Err(SummarizeError::Cancelled),
            Err(error) => {
                if error.is_overflow() {
                    overflow = Some(error.clone());
                }
                last_error = Some(error);
            }
        }
    }
    Err(overflow
        .or(last_error)
        .unwrap_or_else(|| SummarizeError::Other(NO_AVAILABLE_MODEL.to_owned())))
}

/// The attempt loop on one candidate.
#[allow(clippy::too_many_arguments)]
async fn try_candidate(
    candidate: &dyn Summarizer,
    id: &str,
    has_next: bool,
    req: &SummaryRequest,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    on_delta: DeltaSink<'_>,
    on_attempt: &(dyn Fn(AttemptEvent) + Send + Sync),
) -> Result<SummaryOutput, SummarizeError> {
    let event = |attempt, outcome| {
        on_attempt(AttemptEvent {
            candidate: id.to_owned(),
            attempt,
            outcome,
        })
    };
    let mut attempt = 0;
    loop {
        event(attempt, AttemptOutcome::Started);
        let result = cancellable(cancel, candidate.summarize(req, cancel.clone(), on_delta)).await;
        let error = match result {
            Ok(output) => {
                event(attempt, AttemptOutcome::Succeeded);
                return Ok(output);
            }
            Err(_) if cancel.is_cancelled() => return Err(SummarizeError::Cancelled),
            Err(error) => error.reclassify_overflow(policy.is_overflow),
        };
        let retry_after = error.retry_after();
        let retryable = !error.is_overflow()
            && !matches!(error, SummarizeError::Cancelled)
            && policy.enabled
            && attempt < policy.max_retries
            && (retry_after.is_some() || is_transient(&error.to_string()));
        let delay = policy.delay(attempt, retry_after);
        if !retryable || (delay > policy.move_on_after && has_next) {
            event(
                attempt,
                AttemptOutcome::Failed {
                    error: error.to_string(),
                    overflow: error.is_overflow(),
                },
            );
            return Err(error);
        }
        let sleep = policy.max_sleep.map_or(delay, |cap| delay.min(cap));
        event(
            attempt,
            AttemptOutcome::Retrying {
                error: error.to_string(),
                delay,
                retry_after,
                sleep,
            },
        );
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(SummarizeError::Cancelled),
            _ = tokio::time::sleep(sleep) => {}
        }
        attempt += 1;
    }
}

/// Whether an error message looks temporary (spec §4.15's case-insensitive pattern list).
pub fn is_transient(message: &str) -> bool {
    const PLAIN: &[&str] = &[
        "overloaded",
        "too many requests",
        "429",
        "500",
        "502",
        "503",
        "504",
        "server error",
        "internal error",
        "fetch failed",
        "retry delay",
    ];
    // `a.?b` in the reference's regex: `a`, at most one character, then `b`.
    const GAPPED: &[(&str, &str)] = &[
        ("rate", "limit"),
        ("usage", "limit"),
        ("service", "unavailable"),
        ("connection", "error"),
    ];
    let lower = message.to_lowercase();
    PLAIN.iter().any(|p| lower.contains(p))
        || GAPPED.iter().any(|(a, b)| contains_gapped(&lower, a, b))
}

fn contains_gapped(hay: &str, first: &str, second: &str) -> bool {
    hay.match_indices(first).any(|(at, _)| {
        let rest = &hay[at + first.len()..];
        rest.starts_with(second)
            || rest
                .chars()
                .next()
                .is_some_and(|c| rest[c.len_utf8()..].starts_with(second))
    })
}

/// How long the server asked us to wait, from the first header that parses, in the order of
/// spec §4.15: `retry-after-ms`, `retry-after` (seconds or an HTTP date),
/// `x-ratelimit-reset-ms` (absolute epoch ms if > 1e12), `x-ratelimit-reset` (seconds,
/// absolute epoch seconds if > 1e9). `header` looks a header up by lower-case name.
pub fn parse_retry_after<'h>(
    header: impl Fn(&str) -> Option<&'h str>,
    now: SystemTime,
) -> Option<Duration> {
    let number = |name: &str| {
        header(name)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    let now_ms = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0;
    let from_ms = |ms: f64| Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    if let Some(ms) = number("retry-after-ms") {
        return from_ms(ms);
    }
    if let Some(secs) = number("retry-after") {
        return from_ms(secs * 1000.0);
    }
    if let Some(date) = header("retry-after").and_then(parse_http_date) {
        return Some(date.duration_since(now).unwrap_or_default());
    }
    if let Some(ms) = number("x-ratelimit-reset-ms") {
        return from_ms(if ms > 1e12 { ms - now_ms } else { ms });
    }
    if let Some(secs) = number("x-ratelimit-reset") {
        let ms = secs * 1000.0;
        return from_ms(if secs > 1e9 { ms - now_ms } else { ms });
    }
    None
}

/// Parses an HTTP date (RFC 7231 §7.1.1.1): the preferred IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`) and the obsolete RFC 850 (`Sunday, 06-Nov-94 08:49:37
/// GMT`) and asctime (`Sun Nov  6 08:49:37 1994`) forms.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (day, month, year, time) = if let Some((_, rest)) = text.split_once(", ") {
        let parts: Vec<&str> = rest.split_whitespace().collect();
        match parts.as_slice() {
            [d, m, y, t, "GMT"] => (d.parse().ok()?, *m, y.parse().ok()?, *t),
            [dmy, t, "GMT"] => {
                let mut it = dmy.split('-');
                let (d, m, y) = (it.next()?, it.next()?, it.next()?);
                let y: i64 = y.parse().ok()?;
                // RFC 7231: a two-digit year more than 50 years ahead is in the past century.
                let y = if y < 100 {
                    if y < 70 { 2000 + y } else { 1900 + y }
                } else {
                    y
                };
                (d.parse().ok()?, m, y, *t)
            }
            _ => return None,
        }
    } else {
        let parts: Vec<&str> = text.split_whitespace().collect();
        match parts.as_slice() {
            [_, m, d, t, y] => (d.parse().ok()?, *m, y.parse().ok()?, *t),
            _ => return None,
        }
    };
    let month = 1 + [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|name| *name == month)? as i64;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, s) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day)
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0..=60).contains(&s)
    {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + s;
    u64::try_from(secs)
        .ok()
        .map(|secs| UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn transient_patterns_follow_the_reference() {
        for yes in [
            "HTTP 429 Too Many Requests",
            "Rate limit reached",
            "rate-limit",
            "ratelimited",
            "Usage limit",
            "Service Unavailable",
            "service_unavailable",
            "Overloaded",
            "connection error: reset",
            "Internal Server Error",
            "fetch failed",
        ] {
            assert!(is_transient(yes), "{yes}");
        }
        for no in [
            "HTTP 401 Unauthorized",
            "invalid api key",
            "rate  limit",
            "bad request",
        ] {
            assert!(!is_transient(no), "{no}");
        }
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        let expected = at(784_111_777);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(expected)
        );
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(expected)
        );
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Some(expected));
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(at(1_835_438_400))
        );
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn retry_after_headers_in_order() {
        let now = at(1_000_000_000);
        let from = |pairs: &'static [(&'static str, &'static str)]| {
            parse_retry_after(
                |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v),
                now,
            )
        };
        assert_eq!(
            from(&[("retry-after-ms", "250"), ("retry-after", "9")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(from(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(
            from(&[("retry-after", "Sun, 09 Sep 2001 01:46:50 GMT")]),
            Some(Duration::from_secs(10))
        );
        // A date in the past means "now".
        assert_eq!(
            from(&[("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")]),
            Some(Duration::ZERO)
        );
        assert_eq!(
            from(&[("x-ratelimit-reset-ms", "1500")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            from(&[("x-ratelimit-reset-ms", "1000000003000")]),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            from(&[("x-ratelimit-reset", "7")]),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            from(&[("x-ratelimit-reset", "1000000004")]),
            Some(Duration::from_secs(4))
        );
        assert_eq!(from(&[("retry-after", "soon")]), None);
        assert_eq!(from(&[]), None);
    }

    #[test]
    fn delay_doubles_and_honours_retry_after() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(0, None), Duration::from_secs(2));
        assert_eq!(policy.delay(2, None), Duration::from_secs(8));
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(
            policy.delay(3, Some(Duration::from_secs(5))),
            Duration::from_secs(16)
        );
        assert!(policy.delay(200, None) >= Duration::from_secs(2));
    }

    /// A summarizer that answers from a script and counts its calls.
    struct Scripted {
        id: &'static str,
        script: std::sync::Mutex<Vec<Result<&'static str, SummarizeError>>>,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl Scripted {
        fn new(
            id: &'static str,
            mut script: Vec<Result<&'static str, SummarizeError>>,
        ) -> Arc<Self> {
            script.reverse();
            Arc::new(Scripted {
                id,
                script: std::sync::Mutex::new(script),
                calls: Default::default(),
            })
        }

        fn calls(&self) -> usize {
            self.calls.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl Summarizer for Scripted {
        fn id(&self) -> String {
            self.id.to_owned()
        }

        fn context_window(&self) -> u64 {
            1_000
        }

        fn summarize<'a>(
            &'a self,
            _req: &'a SummaryRequest,
            _cancel: CancellationToken,
            _on_delta: DeltaSink<'a>,
        ) -> futures::future::BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let next = self
                .script
                .lock()
                .unwrap()
                .pop()
                .unwrap_or(Err(SummarizeError::Empty));
            Box::pin(async move {
                next.map(|text| SummaryOutput {
                    text: text.to_owned(),
                    short_summary: None,
                    usage: None,
                    model: self.id.to_owned(),
                })
            })
        }
    }

    fn http(status: u16, retry_after: Option<Duration>) -> SummarizeError {
        SummarizeError::Http {
            status,
            message: format!("HTTP {status}"),
            body_excerpt: String::new(),
            retry_after,
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_millis(1),
            max_sleep: Some(Duration::from_millis(5)),
            ..RetryPolicy::default()
        }
    }

    async fn run(
        candidates: &[Arc<dyn Summarizer>],
        policy: &RetryPolicy,
    ) -> (Result<SummaryOutput, SummarizeError>, Vec<AttemptEvent>) {
        let events = std::sync::Mutex::new(Vec::new());
        let req = SummaryRequest::new(super::super::Purpose::History, "", "", 10);
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            summarize_with_candidates(
                candidates,
                None,
                &req,
                policy,
                &CancellationToken::new(),
                &|_| {},
                &|e| events.lock().unwrap().push(e),
            ),
        )
        .await
        .expect("finishes");
        (out, events.into_inner().unwrap())
    }

    #[tokio::test]
    async fn permanent_errors_move_on_without_retrying() {
        let a = Scripted::new("a", vec![Err(http(401, None))]);
        let b = Scripted::new("b", vec![Ok("fine")]);
        let (out, _) = run(&[a.clone(), b.clone()], &fast()).await;
        assert_eq!(out.unwrap().model, "b");
        assert_eq!((a.calls(), b.calls()), (1, 1));
    }

    #[tokio::test]
    async fn retries_stop_at_the_limit_and_the_last_error_is_returned() {
        let a = Scripted::new("a", vec![Err(http(503, None)); 10]);
        let (out, events) = run(&[a.clone() as Arc<dyn Summarizer>], &fast()).await;
        assert_eq!(out.unwrap_err(), http(503, None));
        assert_eq!(a.calls(), 4, "one attempt and three retries");
        assert_eq!(
            events
                .iter()
                .filter(|e| e.outcome == AttemptOutcome::Started)
                .count(),
            4
        );

        let disabled = RetryPolicy {
            enabled: false,
            ..fast()
        };
        let a = Scripted::new("a", vec![Err(http(503, None)); 10]);
        run(&[a.clone() as Arc<dyn Summarizer>], &disabled)
            .await
            .0
            .unwrap_err();
        assert_eq!(a.calls(), 1);
    }

    #[tokio::test]
    async fn a_known_retry_after_makes_any_error_retryable() {
        let a = Scripted::new(
            "a",
            vec![Err(http(418, Some(Duration::from_millis(1)))), Ok("ok")],
        );
        assert_eq!(
            run(&[a.clone() as Arc<dyn Summarizer>], &fast())
                .await
                .0
                .unwrap()
                .text,
            "ok"
        );
        assert_eq!(a.calls(), 2);
    }

    #[tokio::test]
    async fn long_delays_move_on_only_when_another_candidate_remains() {
        let long = Some(Duration::from_secs(45));
        let a = Scripted::new("a", vec![Err(http(429, long)), Ok("a")]);
        let b = Scripted::new("b", vec![Ok("b")]);
        assert_eq!(run(&[a.clone(), b], &fast()).await.0.unwrap().text, "b");
        assert_eq!(a.calls(), 1);
        // Alone, it waits (the sleep is capped in tests) and retries.
        let a = Scripted::new("a", vec![Err(http(429, long)), Ok("a")]);
        let (out, events) = run(&[a.clone() as Arc<dyn Summarizer>], &fast()).await;
        assert_eq!(out.unwrap().text, "a");
        assert!(events.iter().any(|e| matches!(
            e.outcome,
            AttemptOutcome::Retrying { delay, sleep, .. }
                if delay == Duration::from_secs(45) && sleep == Duration::from_millis(5)
        )));
    }

    #[tokio::test]
    async fn an_overflow_is_never_retried_and_wins_as_the_final_error() {
        let a = Scripted::new(
            "a",
            vec![Err(SummarizeError::Other(
                "prompt is too long: 300000 tokens".into(),
            ))],
        );
        let b = Scripted::new("b", vec![Err(http(401, None))]);
        let (out, events) = run(&[a.clone(), b], &fast()).await;
        assert!(out.unwrap_err().is_overflow());
        assert_eq!(a.calls(), 1);
        assert!(matches!(
            &events[1].outcome,
            AttemptOutcome::Failed { overflow: true, .. }
        ));
    }
}
