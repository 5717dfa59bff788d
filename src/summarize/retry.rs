//! The attempts on one rung of the ladder (spec §4.15): a request queued to its server's
//! slots, sent, retried with exponential back-off (raised to what the server asks for) while
//! the error is transient and the operation's retry budget lasts, its answer checked. A rung
//! gives up when a wait would be long and another rung remains, when the error is not worth
//! retrying or when the operation's breaker opened; cancellation ends it at once. Which rung
//! is tried when is the ladder's ([`super::ladder`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::breaker::Breaker;
use super::check::Verdict;
use super::{DeltaSink, SummarizeError, Summarizer, SummaryOutput, SummaryRequest, cancellable};
use crate::session::ids::days_from_civil;
use crate::settings::RetrySettings;

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

/// One step of the attempts on a rung, reported as it happens.
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
    /// The server's slots are busy: the request waits in compactd's queue (`ahead` requests
    /// were already waiting) before it is sent.
    Queued {
        ahead: usize,
    },
    /// The attempt begins (the request is sent); text streamed by an earlier attempt is void.
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
    /// The candidate is given up for this request; the next one (if any) is tried.
    Failed {
        error: String,
        /// The summarizer's context overflowed: the caller may shrink the input and try again.
        overflow: bool,
        /// Set when this failure opened the breaker: the candidate is not asked again in this
        /// operation, for this reason.
        breaker_opened: Option<String>,
    },
    /// The candidate is not asked: its breaker opened earlier in this operation.
    Skipped {
        reason: String,
    },
    Succeeded,
}

/// One rung of the candidate ladder.
#[derive(Clone, Copy)]
pub struct Rung<'a> {
    pub summarizer: &'a dyn Summarizer,
    /// Another rung follows (a long wait then moves on instead of sleeping).
    pub has_next: bool,
    /// The answer is model-written: fit the request to the summarizer's output limit, say the
    /// length in the prompt, and check the answer before keeping it. The extractive rung, built
    /// from the conversation itself, is not checked.
    pub checked: bool,
}

/// What every attempt of one request shares.
pub struct AttemptContext<'a> {
    pub policy: &'a RetryPolicy,
    /// The operation's breaker, retry budget and learned token ratios.
    pub breaker: &'a Breaker,
    pub cancel: &'a CancellationToken,
    pub on_delta: DeltaSink<'a>,
    pub on_attempt: &'a (dyn Fn(AttemptEvent) + Send + Sync),
}

/// A kept answer and what its checks found (`None` for an unchecked rung).
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub output: SummaryOutput,
    pub verdict: Option<Verdict>,
}

/// The attempt loop on one rung: skipped when its breaker is open; otherwise queued to its
/// server's slots, sent, retried while the error is transient and the operation's retry
/// budget lasts, and its answer checked. A failure is counted by the breaker.
pub async fn try_summarizer(
    rung: Rung<'_>,
    req: &SummaryRequest,
    ctx: &AttemptContext<'_>,
) -> Result<Kept, SummarizeError> {
    let summarizer = rung.summarizer;
    let id = summarizer.id();
    let event = |attempt, outcome| {
        (ctx.on_attempt)(AttemptEvent {
            candidate: id.clone(),
            attempt,
            outcome,
        })
    };
    if let Some(reason) = ctx.breaker.open_reason(&id) {
        event(
            0,
            AttemptOutcome::Skipped {
                reason: reason.clone(),
            },
        );
        return Err(SummarizeError::Skipped(reason));
    }
    let fitted;
    let req = if rung.checked {
        fitted = req.for_output_limit(summarizer.max_output_tokens());
        &fitted
    } else {
        req
    };
    let mut attempt = 0;
    loop {
        let result = {
            let _slot = match summarizer.queue() {
                Some(queue) => Some(match queue.try_acquire() {
                    Some(slot) => slot,
                    None => {
                        event(
                            attempt,
                            AttemptOutcome::Queued {
                                ahead: queue.waiting(),
                            },
                        );
                        cancellable(ctx.cancel, async { Ok(queue.acquire().await) }).await?
                    }
                }),
                None => None,
            };
            event(attempt, AttemptOutcome::Started);
            cancellable(
                ctx.cancel,
                summarizer.summarize(req, ctx.cancel.clone(), ctx.on_delta),
            )
            .await
        };
        let result = match result {
            Ok(output) if rung.checked => check(req, output, false),
            Err(SummarizeError::Truncated { text }) if rung.checked => {
                check(req, SummaryOutput::cut(text, &id), true)
            }
            Ok(output) => Ok(Kept {
                output,
                verdict: None,
            }),
            Err(error) => Err(error),
        };
        let error = match result {
            Ok(kept) => {
                event(attempt, AttemptOutcome::Succeeded);
                return Ok(kept);
            }
            Err(_) if ctx.cancel.is_cancelled() => return Err(SummarizeError::Cancelled),
            Err(error) => error.reclassify_overflow(ctx.policy.is_overflow),
        };
        let retry_after = error.retry_after();
        // A server that says when to come back has not failed: only the budget bounds those.
        let opened = if retry_after.is_some() {
            None
        } else {
            ctx.breaker.record_failure(&id, &error)
        };
        let delay = ctx.policy.delay(attempt, retry_after);
        let retryable = opened.is_none()
            && !error.is_overflow()
            && ctx.policy.enabled
            && (retry_after.is_some() || is_transient(&error.to_string()))
            && !(delay > ctx.policy.move_on_after && rung.has_next)
            && ctx.breaker.take_retry(&id);
        if !retryable {
            event(
                attempt,
                AttemptOutcome::Failed {
                    error: error.to_string(),
                    overflow: error.is_overflow(),
                    breaker_opened: opened,
                },
            );
            return Err(error);
        }
        let sleep = ctx.policy.max_sleep.map_or(delay, |cap| delay.min(cap));
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
            _ = ctx.cancel.cancelled() => return Err(SummarizeError::Cancelled),
            _ = tokio::time::sleep(sleep) => {}
        }
        attempt += 1;
    }
}

/// The checked answer, or the rejection.
fn check(req: &SummaryRequest, output: SummaryOutput, cut: bool) -> Result<Kept, SummarizeError> {
    let checked = super::check::check_answer(req, &output.text, cut)?;
    Ok(Kept {
        output: SummaryOutput {
            text: checked.text,
            ..output
        },
        verdict: Some(checked.verdict),
    })
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
    use std::sync::Arc;

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

    fn ctx<'a>(
        policy: &'a RetryPolicy,
        breaker: &'a Breaker,
        cancel: &'a CancellationToken,
    ) -> AttemptContext<'a> {
        AttemptContext {
            policy,
            breaker,
            cancel,
            on_delta: &|_| {},
            on_attempt: &|_| {},
        }
    }

    fn rung(s: &dyn Summarizer, checked: bool) -> Rung<'_> {
        Rung {
            summarizer: s,
            has_next: true,
            checked,
        }
    }

    #[tokio::test]
    async fn one_operation_shares_one_breaker_and_one_retry_budget() {
        let policy = fast();
        let breaker = Breaker::new(1);
        let cancel = CancellationToken::new();
        let ctx = ctx(&policy, &breaker, &cancel);
        let req = SummaryRequest::new(super::super::Purpose::History, "", "", 10);
        // Request 1: a 502, retried (the whole budget), then a 503.
        let a = Scripted::new(
            "a",
            vec![
                Err(http(502, None)),
                Err(http(503, None)),
                Err(http(503, None)),
            ],
        );
        let first = try_summarizer(rung(a.as_ref(), true), &req, &ctx).await;
        assert_eq!(first.unwrap_err(), http(503, None));
        assert_eq!(a.calls(), 2);
        // Request 2 (another chunk or part): no retry left, and its 503 opens the breaker.
        let second = try_summarizer(rung(a.as_ref(), true), &req, &ctx).await;
        assert_eq!(second.unwrap_err(), http(503, None));
        assert_eq!(a.calls(), 3);
        assert!(breaker.open_reason("a").is_some());
        // Request 3: not asked at all.
        let third = try_summarizer(rung(a.as_ref(), true), &req, &ctx).await;
        assert!(
            matches!(third, Err(SummarizeError::Skipped(_))),
            "{third:?}"
        );
        assert_eq!(a.calls(), 3);
    }

    #[tokio::test]
    async fn model_answers_are_checked_and_the_extractive_rung_is_not() {
        let policy = fast();
        let breaker = Breaker::new(3);
        let cancel = CancellationToken::new();
        let ctx = ctx(&policy, &breaker, &cancel);
        let req = SummaryRequest::new(super::super::Purpose::History, "", "", 10);
        let looping: &'static str = "- Fix the parser.\n".repeat(10).leak();
        let a = Scripted::new("a", vec![Ok(looping), Ok(looping)]);
        let rejected = try_summarizer(rung(a.as_ref(), true), &req, &ctx).await;
        assert!(
            matches!(&rejected, Err(SummarizeError::Rejected { reason }) if reason.contains("repeats the line")),
            "{rejected:?}"
        );
        assert_eq!(a.calls(), 1, "a rejected answer is not retried");
        let unchecked = try_summarizer(rung(a.as_ref(), false), &req, &ctx)
            .await
            .unwrap();
        assert_eq!(unchecked.verdict, None);
        assert_eq!(unchecked.output.text, *looping);
    }

    #[tokio::test]
    async fn a_checked_request_carries_the_output_limit_and_says_it() {
        struct Limited(std::sync::Mutex<Option<SummaryRequest>>);
        impl Summarizer for Limited {
            fn id(&self) -> String {
                "limited".into()
            }
            fn context_window(&self) -> u64 {
                4_096
            }
            fn max_output_tokens(&self) -> Option<u32> {
                Some(300)
            }
            fn summarize<'a>(
                &'a self,
                req: &'a SummaryRequest,
                _cancel: CancellationToken,
                _on_delta: DeltaSink<'a>,
            ) -> futures::future::BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
                *self.0.lock().unwrap() = Some(req.clone());
                Box::pin(async { Ok(SummaryOutput::cut("## Goal\n- ok".into(), "limited")) })
            }
        }
        let policy = fast();
        let breaker = Breaker::new(3);
        let cancel = CancellationToken::new();
        let limited = Limited(Default::default());
        let req = SummaryRequest::new(super::super::Purpose::History, "", "PROMPT", 13_107);
        try_summarizer(rung(&limited, true), &req, &ctx(&policy, &breaker, &cancel))
            .await
            .unwrap();
        let sent = limited.0.lock().unwrap().clone().unwrap();
        assert_eq!(sent.max_tokens, 300);
        assert!(
            sent.prompt.starts_with("PROMPT\n\nLength:"),
            "{}",
            sent.prompt
        );
        assert!(sent.prompt.contains("300 tokens"));
    }

    #[tokio::test]
    async fn an_overflow_is_never_retried_on_the_same_input() {
        let policy = fast();
        let breaker = Breaker::new(3);
        let cancel = CancellationToken::new();
        let events = std::sync::Mutex::new(Vec::new());
        let ctx = AttemptContext {
            on_attempt: &|e| events.lock().unwrap().push(e.outcome),
            ..ctx(&policy, &breaker, &cancel)
        };
        let req = SummaryRequest::new(super::super::Purpose::History, "", "", 10);
        let a = Scripted::new(
            "a",
            vec![Err(SummarizeError::Other(
                "prompt is too long: 300000 tokens".into(),
            ))],
        );
        let out = try_summarizer(rung(a.as_ref(), true), &req, &ctx).await;
        assert!(out.unwrap_err().is_overflow());
        assert_eq!(a.calls(), 1);
        let events = events.into_inner().unwrap();
        assert!(
            matches!(
                &events[1],
                AttemptOutcome::Failed {
                    overflow: true,
                    breaker_opened: None,
                    ..
                }
            ),
            "{events:?}"
        );
        assert_eq!(
            breaker.open_reason("a"),
            None,
            "an overflow is not the server's failure"
        );
    }
}
