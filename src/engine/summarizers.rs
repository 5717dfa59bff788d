//! The summarizer candidates built from settings (spec §4.15, DESIGN §5): configured models
//! first, the extractive summarizer as the last rung.

use std::sync::Arc;

use crate::settings::Settings;

use super::{EngineError, RetryPolicy, Summarizer};

/// The summarizers a session uses, in the order they are tried.
#[derive(Clone, Default)]
pub struct SummarizerSet {
    pub candidates: Vec<Arc<dyn Summarizer>>,
    /// The extractive summarizer, tried when every candidate failed.
    pub fallback: Option<Arc<dyn Summarizer>>,
    pub retry: RetryPolicy,
}

/// Builds the candidates from `settings`; `client` is the RPC client's summarizer when the
/// client declared one.
pub fn summarizers_from_settings(
    settings: &Settings,
    client: Option<Arc<dyn Summarizer>>,
) -> Result<SummarizerSet, EngineError> {
    let _ = (settings, client);
    Err(EngineError::InvalidParams("not implemented yet".into()))
}
