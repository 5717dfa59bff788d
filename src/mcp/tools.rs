//! The MCP tools: their descriptions and input schemas ([`list`]) and what each does
//! ([`call`]). Results are text the model reads, with entry ids; failures are tool errors
//! (`isError: true`), never protocol errors.

use serde::Deserialize;
use serde_json::{Value, json};

use super::McpServer;
use crate::engine::EngineError;
use crate::session::{SearchPage, SearchQuery, SearchScope, entry_texts};

/// Characters of an entry's text `read_history_entry` returns when `maxChars` is not given.
pub const DEFAULT_MAX_CHARS: usize = 50_000;

/// Every tool, as `tools/list` returns it.
pub fn list() -> Value {
    let session = json!({"type": "string",
        "description": "The session: its .jsonl file path or its stored session id."});
    json!([
        {
            "name": "search_history",
            "title": "Search session history",
            "annotations": {"readOnlyHint": true, "destructiveHint": false,
                "idempotentHint": true, "openWorldHint": false},
            "description": "Search the full history of a coding session, including what was \
                compacted away and full tool outputs, by literal text (case-insensitive) or \
                regex. Returns one line per matching entry: its id, role, timestamp, whether \
                it is compacted, and a snippet. Read a hit whole with read_history_entry.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "session": session,
                    "query": {"type": "string", "description": "Text to find (or a regex with regex: true)."},
                    "regex": {"type": "boolean", "description": "query is a regular expression."},
                    "caseSensitive": {"type": "boolean"},
                    "scope": {"type": "string", "enum": ["branch", "session"],
                        "description": "branch (default): the current branch; session: every branch."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 200,
                        "description": "Hits per page (default 20)."},
                    "cursor": {"type": "string", "description": "The previous page's next cursor."}
                },
                "required": ["session", "query"]
            }
        },
        {
            "name": "read_history_entry",
            "title": "Read a session entry",
            "annotations": {"readOnlyHint": true, "destructiveHint": false,
                "idempotentHint": true, "openWorldHint": false},
            "description": "Read one entry of a session as it was written, with full texts \
                restored (outputs stored in the blob store, pruned outputs). Long texts come in \
                pages: pass offset to continue.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "session": session,
                    "entryId": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 0,
                        "description": "Character offset into the entry's text (default 0)."},
                    "maxChars": {"type": "integer", "minimum": 1,
                        "description": format!("Most characters to return (default {DEFAULT_MAX_CHARS}).")}
                },
                "required": ["session", "entryId"]
            }
        },
        {
            "name": "context_usage",
            "title": "Context usage",
            "annotations": {"readOnlyHint": true, "destructiveHint": false,
                "idempotentHint": true, "openWorldHint": false},
            "description": "How full the session's context window is: tokens, window, \
                auto-compaction threshold.",
            "inputSchema": {
                "type": "object",
                "properties": {"session": session},
                "required": ["session"]
            }
        }
    ])
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SearchArgs {
    session: String,
    query: String,
    #[serde(default)]
    regex: bool,
    #[serde(default)]
    case_sensitive: bool,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReadArgs {
    session: String,
    entry_id: String,
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    max_chars: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionArgs {
    session: String,
}

/// The `tools/call` result of tool `name`; `None` for an unknown tool.
pub async fn call(server: &McpServer, name: &str, arguments: Value) -> Option<Value> {
    let outcome = match name {
        "search_history" => run(arguments, |a| search(server, a)).await,
        "read_history_entry" => run(arguments, |a| read(server, a)).await,
        "context_usage" => run(arguments, |a| usage(server, a)).await,
        _ => return None,
    };
    Some(match outcome {
        Ok(text) => json!({"content": [{"type": "text", "text": text}], "isError": false}),
        Err(message) => json!({"content": [{"type": "text", "text": message}], "isError": true}),
    })
}

async fn run<A, F, Fut>(arguments: Value, tool: F) -> Result<String, String>
where
    A: serde::de::DeserializeOwned,
    F: FnOnce(A) -> Fut,
    Fut: std::future::Future<Output = Result<String, EngineError>>,
{
    let args: A =
        serde_json::from_value(arguments).map_err(|e| format!("invalid arguments: {e}"))?;
    tool(args).await.map_err(|e| e.to_string())
}

async fn search(server: &McpServer, args: SearchArgs) -> Result<String, EngineError> {
    let scope = match args.scope.as_deref() {
        None | Some("branch") => SearchScope::Branch,
        Some("session") => SearchScope::Session,
        Some(other) => {
            return Err(EngineError::InvalidParams(format!(
                "scope must be \"branch\" or \"session\", not {other:?}"
            )));
        }
    };
    let id = server.session_id(&args.session).await?;
    let query = SearchQuery {
        text: args.query.clone(),
        regex: args.regex,
        case_sensitive: args.case_sensitive,
        scope,
        limit: args.limit.unwrap_or(crate::session::DEFAULT_SEARCH_LIMIT),
        after: args.cursor,
    };
    let page = server.engine.search(&id, query).await?;
    Ok(render_hits(&args.query, &page))
}

fn render_hits(query: &str, page: &SearchPage) -> String {
    if page.hits.is_empty() {
        return format!("No entry matches {query:?}.");
    }
    let mut text = format!("{} matching entries:\n", page.hits.len());
    for hit in &page.hits {
        let hidden = if hit.compacted { " (compacted)" } else { "" };
        text.push_str(&format!(
            "- entryId {} | {} | {}{hidden}\n  {}\n",
            hit.entry_id, hit.role, hit.timestamp, hit.snippet
        ));
    }
    if let Some(next) = &page.next_after {
        text.push_str(&format!(
            "More hits: call search_history again with cursor {next:?}.\n"
        ));
    }
    for blob in &page.missing_blobs {
        text.push_str(&format!(
            "Note: blob {blob} is missing from the blob store; only its head was searched.\n"
        ));
    }
    text
}

async fn read(server: &McpServer, args: ReadArgs) -> Result<String, EngineError> {
    let id = server.session_id(&args.session).await?;
    let recalled = server.engine.read_entry(&id, &args.entry_id).await?;
    let entry = &recalled.entry;
    let role = entry["message"]["role"]
        .as_str()
        .map(|r| format!("/{r}"))
        .unwrap_or_default();
    let mut body = String::new();
    for (pointer, value) in entry_texts(entry) {
        body.push_str(&format!("[{pointer}]\n{value}\n"));
    }
    let total = body.chars().count();
    let max = args.max_chars.unwrap_or(DEFAULT_MAX_CHARS).max(1);
    let page: String = body.chars().skip(args.offset).take(max).collect();
    let end = args.offset.saturating_add(page.chars().count());
    let mut text = format!(
        "Entry {} ({}{role}, {}){}: characters {}..{end} of {total}\n",
        args.entry_id,
        entry["type"].as_str().unwrap_or("?"),
        entry["timestamp"].as_str().unwrap_or(""),
        if recalled.compacted {
            ", compacted"
        } else {
            ""
        },
        args.offset.min(total),
    );
    text.push_str(&page);
    if end < total {
        text.push_str(&format!(
            "\n[{} more characters: call read_history_entry again with offset {end}]",
            total - end
        ));
    }
    Ok(text)
}

async fn usage(server: &McpServer, args: SessionArgs) -> Result<String, EngineError> {
    let id = server.session_id(&args.session).await?;
    let usage = server.engine.usage(&id).await?;
    let tokens = usage.context_tokens.map_or_else(
        || format!("about {}", usage.estimated_tokens),
        |t| t.to_string(),
    );
    let threshold = usage
        .threshold
        .map_or_else(|| "off".to_owned(), |t| t.to_string());
    Ok(format!(
        "Context: {tokens} tokens of a {} token window ({}); auto-compaction threshold: {threshold} tokens.",
        usage.context_window,
        usage
            .percent
            .map_or_else(|| "usage unknown".to_owned(), |p| format!("{p:.1}%")),
    ))
}
