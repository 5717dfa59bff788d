//! The message model of spec §2: the LLM roles (`user`, `assistant`, `toolResult`), the coding
//! agent's custom roles, and their content blocks, as typed values.
//!
//! Every struct keeps the fields it does not know in `extra`, so a rewrite never loses data a
//! newer writer added. An unknown role or content-block type is kept whole as JSON.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod fast;

/// Fields a struct does not model, kept as they were read.
pub type Extra = Map<String, Value>;

/// What is left of a parsed object once its modelled members are taken out, in an allocation
/// of its own size. The object's table was sized for every member, and a parsed entry keeps
/// its `extra`s (the entry's, the message's, each block's and the usage's) as long as it
/// lives: such leftover tables, mostly empty, were a third of a compaction's peak memory
/// (issue 35 item 7). Usually empty, and then nothing is allocated.
pub(crate) fn leftover(map: Extra) -> Extra {
    if map.is_empty() {
        Extra::new()
    } else {
        map.into_iter().collect()
    }
}

/// One block of message content (spec §2.1).
#[derive(Clone, Debug, PartialEq)]
pub enum ContentBlock {
    Text(TextBlock),
    Thinking(ThinkingBlock),
    Image(ImageBlock),
    ToolCall(ToolCall),
    /// A block type this version does not know; kept verbatim.
    Unknown(Map<String, Value>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextBlock {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_signature: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThinkingBlock {
    pub thinking: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_signature: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageBlock {
    /// Base64 bytes (or a `blob:sha256:<hex>` reference written by the reference agent).
    pub data: String,
    pub mime_type: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            text_signature: None,
            extra: Extra::new(),
        })
    }

    /// The block's text if it is a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text(t) => Some(&t.text),
            _ => None,
        }
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let (kind, body) = match self {
            ContentBlock::Text(b) => ("text", serde_json::to_value(b)),
            ContentBlock::Thinking(b) => ("thinking", serde_json::to_value(b)),
            ContentBlock::Image(b) => ("image", serde_json::to_value(b)),
            ContentBlock::ToolCall(b) => ("toolCall", serde_json::to_value(b)),
            ContentBlock::Unknown(m) => return m.serialize(s),
        };
        let body = body.map_err(S::Error::custom)?;
        tagged("type", kind, body).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map = Map::<String, Value>::deserialize(d)?;
        let kind = map.get("type").and_then(Value::as_str).map(str::to_owned);
        let known = matches!(
            kind.as_deref(),
            Some("text" | "thinking" | "image" | "toolCall")
        );
        if !known {
            return Ok(ContentBlock::Unknown(map));
        }
        map.remove("type");
        let value = Value::Object(map);
        Ok(match kind.as_deref() {
            Some("text") => {
                ContentBlock::Text(serde_json::from_value(value).map_err(D::Error::custom)?)
            }
            Some("thinking") => {
                ContentBlock::Thinking(serde_json::from_value(value).map_err(D::Error::custom)?)
            }
            Some("image") => {
                ContentBlock::Image(serde_json::from_value(value).map_err(D::Error::custom)?)
            }
            _ => ContentBlock::ToolCall(serde_json::from_value(value).map_err(D::Error::custom)?),
        })
    }
}

/// `content` of user and custom messages: a plain string or a list of blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Blocks(Vec::new())
    }
}

impl Content {
    /// The content as blocks (a string becomes one text block).
    pub fn blocks(&self) -> Vec<ContentBlock> {
        match self {
            Content::Text(t) => vec![ContentBlock::text(t.clone())],
            Content::Blocks(b) => b.clone(),
        }
    }

    /// The text blocks (or the string) joined with `sep`.
    pub fn joined_text(&self, sep: &str) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Blocks(b) => join_text(b, sep),
        }
    }
}

/// Joins the text of the text blocks in `blocks` with `sep`.
pub fn join_text(blocks: &[ContentBlock], sep: &str) -> String {
    let texts: Vec<&str> = blocks.iter().filter_map(ContentBlock::as_text).collect();
    texts.join(sep)
}

/// Token usage reported by a provider for one assistant message (spec §2.1).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Usage {
    /// `calculateContextTokens` of spec §4.7.
    pub fn context_tokens(&self) -> u64 {
        if self.total_tokens > 0 {
            self.total_tokens
        } else {
            self.input + self.output + self.cache_read + self.cache_write
        }
    }

    /// `calculatePromptTokens` of spec §4.7.
    pub fn prompt_tokens(&self) -> u64 {
        let sum = self.input + self.cache_read + self.cache_write;
        if sum > 0 { sum } else { self.context_tokens() }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    #[serde(default)]
    pub content: Content,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// `stop` | `length` | `toolUse` | `error` | `aborted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl AssistantMessage {
    /// The tool calls in this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    pub fn is_error(&self) -> bool {
        self.stop_reason.as_deref() == Some("error")
    }

    pub fn is_aborted(&self) -> bool {
        self.stop_reason.as_deref() == Some("aborted")
    }
}

/// Field of a pruned tool result that keeps its original `content` (compactd's pruning keeps
/// it recoverable; the reference ignores the field). It is never part of what the model sees.
pub const ORIGINAL_CONTENT_FIELD: &str = "originalContent";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultMessage {
    #[serde(default)]
    pub tool_call_id: String,
    #[serde(default)]
    pub tool_name: String,
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default)]
    pub is_error: bool,
    /// Set by pruning (ms epoch): the content was replaced by a notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned_at: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `bashExecution` (`command`) and `pythonExecution` (`code`) share this shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub cancelled: bool,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_from_context: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ExecutionMessage {
    /// The command (bash) or code (python) that ran.
    pub fn source(&self) -> &str {
        self.command
            .as_deref()
            .or(self.code.as_deref())
            .unwrap_or("")
    }
}

/// `custom` (and the legacy `hookMessage`): extension-injected content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomMessage {
    #[serde(default)]
    pub custom_type: String,
    #[serde(default)]
    pub content: Content,
    #[serde(default)]
    pub display: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchSummaryMessage {
    pub summary: String,
    #[serde(default)]
    pub from_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionSummaryMessage {
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_summary: Option<String>,
    #[serde(default)]
    pub tokens_before: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MentionedFile {
    pub path: String,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageBlock>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileMentionMessage {
    #[serde(default)]
    pub files: Vec<MentionedFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An agent message: the pi-ai roles plus the coding agent's custom roles (spec §2).
#[derive(Clone, Debug, PartialEq)]
pub enum AgentMessage {
    User(UserMessage),
    Assistant(AssistantMessage),
    ToolResult(ToolResultMessage),
    BashExecution(ExecutionMessage),
    PythonExecution(ExecutionMessage),
    /// `custom`; `hookMessage` (the v2 name) is read into this and written back as `custom`.
    Custom(CustomMessage),
    BranchSummary(BranchSummaryMessage),
    CompactionSummary(CompactionSummaryMessage),
    FileMention(FileMentionMessage),
    /// A role this version does not know; kept verbatim (including `role`).
    Unknown(Map<String, Value>),
}

impl AgentMessage {
    /// The wire name of the role.
    pub fn role(&self) -> &str {
        match self {
            AgentMessage::User(_) => "user",
            AgentMessage::Assistant(_) => "assistant",
            AgentMessage::ToolResult(_) => "toolResult",
            AgentMessage::BashExecution(_) => "bashExecution",
            AgentMessage::PythonExecution(_) => "pythonExecution",
            AgentMessage::Custom(_) => "custom",
            AgentMessage::BranchSummary(_) => "branchSummary",
            AgentMessage::CompactionSummary(_) => "compactionSummary",
            AgentMessage::FileMention(_) => "fileMention",
            AgentMessage::Unknown(m) => m.get("role").and_then(Value::as_str).unwrap_or(""),
        }
    }

    pub fn as_assistant(&self) -> Option<&AssistantMessage> {
        match self {
            AgentMessage::Assistant(a) => Some(a),
            _ => None,
        }
    }

    /// A user message with the given text.
    pub fn user_text(text: impl Into<String>, timestamp_ms: i64) -> Self {
        AgentMessage::User(UserMessage {
            content: Content::Text(text.into()),
            synthetic: None,
            timestamp: Some(Value::from(timestamp_ms)),
            extra: Extra::new(),
        })
    }

    /// Parses a message from JSON, keeping unknown roles and fields.
    pub fn from_value(value: Value) -> Result<Self, serde_json::Error> {
        if fast::accepts(&value) {
            return Ok(fast::convert(value));
        }
        serde_json::from_value(value)
    }

    /// Whether [`AgentMessage::from_value`] surely succeeds on `value`: it is a message of a
    /// common role in the usual shape (then it is also converted without serde's overhead).
    pub(crate) fn surely_parses(value: &Value) -> bool {
        fast::accepts(value)
    }

    /// [`AgentMessage::from_value`] of a value [`AgentMessage::surely_parses`] took, without
    /// checking it again.
    pub(crate) fn from_checked(value: Value) -> Self {
        debug_assert!(fast::accepts(&value));
        fast::convert(value)
    }

    pub fn to_value(&self) -> Value {
        // Serialising these types cannot fail: every map key is a string.
        serde_json::to_value(self).expect("message serialises")
    }
}

impl Serialize for AgentMessage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let body = match self {
            AgentMessage::User(m) => serde_json::to_value(m),
            AgentMessage::Assistant(m) => serde_json::to_value(m),
            AgentMessage::ToolResult(m) => serde_json::to_value(m),
            AgentMessage::BashExecution(m) | AgentMessage::PythonExecution(m) => {
                serde_json::to_value(m)
            }
            AgentMessage::Custom(m) => serde_json::to_value(m),
            AgentMessage::BranchSummary(m) => serde_json::to_value(m),
            AgentMessage::CompactionSummary(m) => serde_json::to_value(m),
            AgentMessage::FileMention(m) => serde_json::to_value(m),
            AgentMessage::Unknown(m) => return m.serialize(s),
        }
        .map_err(S::Error::custom)?;
        tagged("role", self.role(), body).serialize(s)
    }
}

impl<'de> Deserialize<'de> for AgentMessage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map = Map::<String, Value>::deserialize(d)?;
        let role = map
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let known = matches!(
            role.as_str(),
            "user"
                | "assistant"
                | "toolResult"
                | "bashExecution"
                | "pythonExecution"
                | "custom"
                | "hookMessage"
                | "branchSummary"
                | "compactionSummary"
                | "fileMention"
        );
        if !known {
            return Ok(AgentMessage::Unknown(map));
        }
        map.remove("role");
        let v = Value::Object(map);
        fn de<T: serde::de::DeserializeOwned, E: Error>(v: Value) -> Result<T, E> {
            serde_json::from_value(v).map_err(E::custom)
        }
        Ok(match role.as_str() {
            "user" => AgentMessage::User(de(v)?),
            "assistant" => AgentMessage::Assistant(de(v)?),
            "toolResult" => AgentMessage::ToolResult(de(v)?),
            "bashExecution" => AgentMessage::BashExecution(de(v)?),
            "pythonExecution" => AgentMessage::PythonExecution(de(v)?),
            "custom" | "hookMessage" => AgentMessage::Custom(de(v)?),
            "branchSummary" => AgentMessage::BranchSummary(de(v)?),
            "compactionSummary" => AgentMessage::CompactionSummary(de(v)?),
            _ => AgentMessage::FileMention(de(v)?),
        })
    }
}

/// Puts `tag: name` first in an object produced by serialising a body struct.
pub(crate) fn tagged(tag: &str, name: &str, body: Value) -> Value {
    let mut out = Map::new();
    out.insert(tag.to_owned(), Value::from(name));
    if let Value::Object(fields) = body {
        out.extend(fields);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_roles_and_blocks_round_trip() {
        let raw = json!({"role":"assistant","content":[
            {"type":"text","text":"hi","future":1},
            {"type":"hologram","pixels":[1,2]},
            {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a.rs"}}],
            "provider":"p","model":"m","stopReason":"toolUse","newField":{"x":true}});
        let msg = AgentMessage::from_value(raw.clone()).unwrap();
        assert_eq!(msg.role(), "assistant");
        assert_eq!(msg.to_value(), raw);
        let odd = json!({"role":"telepathy","thought":"x"});
        assert_eq!(
            AgentMessage::from_value(odd.clone()).unwrap().to_value(),
            odd
        );
    }

    #[test]
    fn hook_message_reads_as_custom() {
        let msg = AgentMessage::from_value(
            json!({"role":"hookMessage","customType":"t","content":"x","display":true}),
        )
        .unwrap();
        assert_eq!(msg.role(), "custom");
    }

    #[test]
    fn usage_sums() {
        let u = Usage {
            input: 1,
            output: 2,
            cache_read: 3,
            cache_write: 4,
            ..Default::default()
        };
        assert_eq!(u.context_tokens(), 10);
        assert_eq!(u.prompt_tokens(), 8);
        let t = Usage {
            total_tokens: 99,
            ..u
        };
        assert_eq!(t.context_tokens(), 99);
    }
}
