//! `compactd context SESSION`: the messages an LLM would see at the leaf, with token figures.

use std::fmt::Write;
use std::path::PathBuf;

use crate::engine::usage::{ContextView, context_view};
use crate::protocol::ContextReport;
use crate::server::to_proto;
use crate::session::{AgentMessage, ContentBlock};
use crate::tokens::TokenCache;

use super::common::{self, CliError, TokenizerArg};

/// Arguments of `compactd context`.
#[derive(Debug, clap::Args)]
pub struct ContextArgs {
    /// The session file (`.jsonl`); it is only read.
    pub session: PathBuf,
    /// Print JSON instead of text: `session/context`'s result with per-message counts, the
    /// counter used and `session/usage` (`ContextReport` in the schema).
    #[arg(long)]
    pub json: bool,
    /// Token counter (default: the `tokenizer` setting).
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
}

pub fn run(args: &ContextArgs) -> Result<(), CliError> {
    let session = common::open_readable(&args.session)?;
    let settings = common::settings_of(&session);
    let cache = TokenCache::new(common::counter(args.tokenizer, &settings)?);
    let view = context_view(&session, &settings, &cache);
    if args.json {
        common::print_json(&ContextReport {
            context: to_proto::context_result(&view, true),
            tokenizer: view.tokenizer.clone(),
            usage: to_proto::usage_result(
                &view.usage,
                crate::engine::SessionActivity {
                    auto_compaction_enabled: settings.compaction.enabled,
                    ..Default::default()
                },
            ),
        })
    } else {
        common::print(&render(&view))
    }
}

fn preview(msg: &AgentMessage) -> String {
    let text = match msg {
        AgentMessage::User(u) => u.content.joined_text(" "),
        AgentMessage::Assistant(a) => a
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.clone(),
                ContentBlock::Thinking(t) => format!("(thinking) {}", t.thinking),
                ContentBlock::ToolCall(c) => format!("{}({})", c.name, c.arguments),
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        AgentMessage::ToolResult(r) => format!(
            "{}: {}",
            r.tool_name,
            crate::session::message::join_text(&r.content, " ")
        ),
        other => other.to_value().to_string(),
    };
    common::one_line(&text, 90)
}

fn render(view: &ContextView) -> String {
    let mut out = String::new();
    for (i, m) in view.messages.iter().enumerate() {
        let _ = writeln!(
            out,
            "{i:>4} {:<9} {:>7} tok  {}  {}",
            m.message.role(),
            m.tokens,
            m.entry_id,
            preview(&m.message)
        );
    }
    let u = &view.usage;
    let _ = writeln!(out, "---");
    let _ = writeln!(
        out,
        "messages: {}   leaf: {}   model: {}",
        view.messages.len(),
        view.leaf_id.as_deref().unwrap_or("(none)"),
        view.model.as_deref().unwrap_or("(unknown)")
    );
    let _ = writeln!(
        out,
        "estimated tokens ({}): {}",
        view.tokenizer, view.total_tokens
    );
    let _ = writeln!(
        out,
        "usage tokens: {}",
        u.context_tokens.map_or(
            "unknown (no usage since the last compaction)".to_owned(),
            |t| t.to_string()
        )
    );
    let _ = writeln!(
        out,
        "context window: {}   threshold: {}{}",
        view.context_window,
        view.threshold.map_or("none".to_owned(), |t| t.to_string()),
        u.percent
            .map_or(String::new(), |p| format!("   used: {p:.1}%"))
    );
    out
}
