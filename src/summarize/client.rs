//! The client-supplied summarizer: the RPC client answers `summarizer/summarize` (e.g. an
//! editor using its own model access). No answer, an error or a timeout all fail the attempt so
//! the ladder falls through to the next summarizer.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{
    DeltaSink, Purpose, SummarizeError, Summarizer, SummaryOutput, SummaryRequest, cancellable,
};
use crate::settings::DEFAULT_CONTEXT_WINDOW;

/// What the client is asked to summarise.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSummaryRequest {
    pub purpose: Purpose,
    pub system_prompt: String,
    pub prompt: String,
    pub max_tokens: u32,
}

/// Sends a request to the client; `Ok(None)` means the client declined.
pub type ClientCallback = Box<
    dyn Fn(ClientSummaryRequest) -> BoxFuture<'static, Result<Option<String>, String>>
        + Send
        + Sync,
>;

/// Asks the RPC client for the summary.
pub struct ClientSummarizer {
    callback: ClientCallback,
    timeout: Duration,
    context_window: u64,
}

impl fmt::Debug for ClientSummarizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSummarizer")
            .field("timeout", &self.timeout)
            .field("context_window", &self.context_window)
            .finish_non_exhaustive()
    }
}

impl ClientSummarizer {
    /// A summarizer that calls `callback`, waiting at most `timeout` for each answer.
    pub fn new(callback: ClientCallback, timeout: Duration) -> Self {
        ClientSummarizer {
            callback,
            timeout,
            context_window: DEFAULT_CONTEXT_WINDOW,
        }
    }

    async fn run(&self, req: &SummaryRequest) -> Result<SummaryOutput, SummarizeError> {
        let ask = (self.callback)(ClientSummaryRequest {
            purpose: req.purpose,
            system_prompt: req.system_prompt.clone(),
            prompt: req.prompt.clone(),
            max_tokens: req.max_tokens,
        });
        let answer = tokio::time::timeout(self.timeout, ask).await.map_err(|_| {
            SummarizeError::Timeout(format!(
                "the client did not answer summarizer/summarize within {} ms",
                self.timeout.as_millis()
            ))
        })?;
        let text = match answer {
            Ok(Some(text)) => text,
            Ok(None) => {
                return Err(SummarizeError::Other(
                    "The client declined to summarise".to_owned(),
                ));
            }
            Err(message) => {
                return Err(SummarizeError::Other(format!(
                    "Client summarization failed: {message}"
                )));
            }
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(SummarizeError::Empty);
        }
        Ok(SummaryOutput {
            text: text.to_owned(),
            short_summary: None,
            usage: None,
            model: self.id(),
        })
    }
}

impl Summarizer for ClientSummarizer {
    fn id(&self) -> String {
        "client".to_owned()
    }

    fn context_window(&self) -> u64 {
        self.context_window
    }

    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        cancel: CancellationToken,
        _on_delta: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<SummaryOutput, SummarizeError>> {
        Box::pin(async move { cancellable(&cancel, self.run(req)).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summarizer(answer: Result<Option<&'static str>, &'static str>) -> ClientSummarizer {
        ClientSummarizer::new(
            Box::new(move |req: ClientSummaryRequest| {
                assert_eq!(req.prompt, "P");
                Box::pin(async move { answer.map(|a| a.map(str::to_owned)).map_err(str::to_owned) })
            }),
            Duration::from_secs(5),
        )
    }

    fn req() -> SummaryRequest {
        SummaryRequest::new(Purpose::History, "S", "P", 100)
    }

    #[tokio::test]
    async fn answers_declines_and_errors() {
        let cancel = CancellationToken::new();
        let ok = summarizer(Ok(Some(" ## Goal\nx ")))
            .summarize(&req(), cancel.clone(), &|_| {})
            .await;
        assert_eq!(ok.unwrap().text, "## Goal\nx");
        let none = summarizer(Ok(None))
            .summarize(&req(), cancel.clone(), &|_| {})
            .await;
        assert!(matches!(none, Err(SummarizeError::Other(_))));
        let err = summarizer(Err("boom"))
            .summarize(&req(), cancel.clone(), &|_| {})
            .await;
        assert_eq!(
            err.unwrap_err().to_string(),
            "Client summarization failed: boom"
        );
        let empty = summarizer(Ok(Some("  ")))
            .summarize(&req(), cancel, &|_| {})
            .await;
        assert_eq!(empty, Err(SummarizeError::Empty));
    }

    #[tokio::test]
    async fn a_silent_client_times_out_and_cancel_wins() {
        let hang = || {
            ClientSummarizer::new(
                Box::new(|_| Box::pin(futures::future::pending())),
                Duration::from_millis(20),
            )
        };
        let out = hang()
            .summarize(&req(), CancellationToken::new(), &|_| {})
            .await;
        assert!(matches!(out, Err(SummarizeError::Timeout(_))), "{out:?}");
        let cancel = CancellationToken::new();
        cancel.cancel();
        let slow = ClientSummarizer::new(
            Box::new(|_| Box::pin(futures::future::pending())),
            Duration::from_secs(60),
        );
        let out = slow.summarize(&req(), cancel, &|_| {}).await;
        assert_eq!(out, Err(SummarizeError::Cancelled));
    }
}
