//! The engine's hooks and the client summarizer, answered by the client through
//! server-to-client requests (`hooks/*`, `summarizer/summarize`).
//!
//! Each is used only when the client declared it in `initialize`. A timeout (from settings),
//! an error answer or a disconnect means "no answer": the engine takes the default path.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::convert::{wire_entry, wire_message};
use crate::engine::{
    BeforeCompactReply, BeforeCompactRequest, BeforeTreeReply, BeforeTreeRequest, CompactingReply,
    CompactingRequest, Engine, EngineHooks, HookCompaction, Summarizer,
};
use crate::protocol::method::*;
use crate::protocol::{
    BeforeCompactParams, BeforeCompactResponse, BeforeTreeParams, BeforeTreeResponse,
    CompactingParams, CompactingResponse, CompactionPreparation, CompactionReason, FileOps,
    HookCapabilities, Method, SummarizeParams, SummarizeResponse, SummaryPurpose, TreePreparation,
};
use crate::rpc::Client;
use crate::session::AgentMessage;
use crate::settings::Settings;
use crate::summarize::Purpose;
use crate::summarize::client::{ClientCallback, ClientSummarizer};

/// The hooks the client declared, asked with server-to-client requests.
pub struct ClientHooks {
    pub client: Client,
    pub declared: HookCapabilities,
    pub engine: std::sync::Weak<Engine>,
}

impl ClientHooks {
    fn settings(&self) -> Settings {
        self.engine
            .upgrade()
            .and_then(|engine| engine.settings().effective().ok())
            .unwrap_or_default()
    }

    async fn ask<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        params: P,
        timeout: Duration,
    ) -> Option<R> {
        match self.client.request(method, params, timeout).await {
            Ok(answer) => Some(answer),
            Err(error) => {
                tracing::warn!(%error, "no answer from a hook; taking the default path");
                None
            }
        }
    }
}

fn messages(messages: &[AgentMessage]) -> Vec<crate::protocol::WireMessage> {
    messages.iter().map(wire_message).collect()
}

fn object(value: Option<serde_json::Map<String, Value>>) -> Option<Value> {
    value.map(Value::Object)
}

impl EngineHooks for ClientHooks {
    fn before_compact<'a>(
        &'a self,
        req: BeforeCompactRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeCompactReply>> {
        Box::pin(async move {
            if !self.declared.before_compact {
                return None;
            }
            let params = BeforeCompactParams {
                session_id: req.session_id.to_owned(),
                operation_id: req.operation_id.to_owned(),
                reason: match req.reason {
                    crate::engine::CompactReason::Manual => CompactionReason::Manual,
                    crate::engine::CompactReason::Threshold => CompactionReason::Threshold,
                    crate::engine::CompactReason::Overflow => CompactionReason::Overflow,
                },
                preparation: CompactionPreparation {
                    first_kept_entry_id: req.first_kept_entry_id.to_owned(),
                    messages_to_summarize: messages(req.messages_to_summarize),
                    turn_prefix_messages: messages(req.turn_prefix_messages),
                    recent_messages: messages(req.recent_messages),
                    is_split_turn: req.is_split_turn,
                    tokens_before: req.tokens_before,
                    previous_summary: req.previous_summary.map(str::to_owned),
                    file_ops: FileOps {
                        read: req.file_ops.read.iter().cloned().collect(),
                        written: req.file_ops.written.iter().cloned().collect(),
                        edited: req.file_ops.edited.iter().cloned().collect(),
                    },
                },
                branch_entries: req.branch_entries.iter().map(wire_entry).collect(),
                custom_instructions: req.custom_instructions.map(str::to_owned),
            };
            let timeout = self.settings().hooks.before_compact_timeout();
            let answer: BeforeCompactResponse =
                self.ask(HooksBeforeCompact::NAME, params, timeout).await?;
            Some(BeforeCompactReply {
                cancel: answer.cancel.unwrap_or(false),
                compaction: answer.compaction.map(|c| HookCompaction {
                    summary: c.summary,
                    short_summary: c.short_summary,
                    first_kept_entry_id: c.first_kept_entry_id,
                    tokens_before: Some(c.tokens_before),
                    details: c.details,
                    preserve_data: object(c.preserve_data),
                }),
            })
        })
    }

    fn compacting<'a>(
        &'a self,
        req: CompactingRequest<'a>,
    ) -> BoxFuture<'a, Option<CompactingReply>> {
        Box::pin(async move {
            if !self.declared.compacting {
                return None;
            }
            let params = CompactingParams {
                session_id: req.session_id.to_owned(),
                operation_id: req.operation_id.to_owned(),
                messages: messages(req.messages),
            };
            let timeout = self.settings().hooks.compacting_timeout();
            let answer: CompactingResponse =
                self.ask(HooksCompacting::NAME, params, timeout).await?;
            Some(CompactingReply {
                context: answer.context.unwrap_or_default(),
                prompt: answer.prompt,
                preserve_data: object(answer.preserve_data),
            })
        })
    }

    fn before_tree<'a>(
        &'a self,
        req: BeforeTreeRequest<'a>,
    ) -> BoxFuture<'a, Option<BeforeTreeReply>> {
        Box::pin(async move {
            if !self.declared.before_tree {
                return None;
            }
            let params = BeforeTreeParams {
                session_id: req.session_id.to_owned(),
                preparation: TreePreparation {
                    target_id: req.target_id.to_owned(),
                    old_leaf_id: req.old_leaf_id.map(str::to_owned),
                    common_ancestor_id: req.common_ancestor_id.map(str::to_owned),
                    entries_to_summarize: req.entries_to_summarize.iter().map(wire_entry).collect(),
                    user_wants_summary: req.user_wants_summary,
                },
            };
            let timeout = self.settings().hooks.before_tree_timeout();
            let answer: BeforeTreeResponse =
                self.ask(HooksBeforeTree::NAME, params, timeout).await?;
            Some(BeforeTreeReply {
                cancel: answer.cancel.unwrap_or(false),
                summary: answer.summary.map(|s| (s.summary, s.details)),
            })
        })
    }
}

/// The client summarizer of `session_id`: `summarizer/summarize` sent to the client, naming
/// the session. Its own timeout is applied by [`ClientSummarizer`]; the request's is a backstop
/// slightly longer.
pub fn client_summarizer(
    client: Client,
    timeout: Duration,
    session_id: &str,
) -> Arc<dyn Summarizer> {
    let session_id = session_id.to_owned();
    let callback: ClientCallback = Box::new(move |req| {
        let client = client.clone();
        let params = SummarizeParams {
            session_id: session_id.clone(),
            purpose: match req.purpose {
                Purpose::History => SummaryPurpose::History,
                Purpose::TurnPrefix => SummaryPurpose::TurnPrefix,
                Purpose::Short => SummaryPurpose::Short,
                Purpose::Branch => SummaryPurpose::Branch,
            },
            system_prompt: req.system_prompt,
            prompt: req.prompt,
            max_tokens: u64::from(req.max_tokens),
        };
        Box::pin(async move {
            client
                .request::<_, SummarizeResponse>(
                    SummarizerSummarize::NAME,
                    params,
                    timeout + Duration::from_secs(1),
                )
                .await
                .map(|answer| Some(answer.text))
                .map_err(|error| error.to_string())
        })
    });
    Arc::new(ClientSummarizer::new(callback, timeout))
}
