//! A deterministic generator of realistic version-3 session files, for benchmarks and load tests.
//!
//! The output looks like a long coding-agent session: user prompts; assistant messages with
//! thinking, text, tool calls (`read`, `write`, `edit`, `bash`, `grep`, with paths) and a `usage`
//! that grows with the context and drops after a compaction; tool results from a few bytes to
//! megabytes (log-normal sizes, rare huge outputs); base64 images now and then; navigation back
//! to an earlier turn with `branch_summary` entries; `compaction` entries whose
//! `firstKeptEntryId` lies on the path inside the effective context; labels, model and
//! thinking-level changes, the odd `bashExecution`, `custom_message` and `custom` entry.
//!
//! The same options always give the same bytes: the random source is a splitmix64 seeded by
//! `seed`, and sizes use only integer and basic float arithmetic (no `exp`/`ln`, whose last bits
//! may differ between platforms). Entries are written one line at a time, so memory stays
//! bounded by the largest entry whatever the file size.
//!
//! On purpose, tool outputs may exceed the reference's 500,000-character persistence limit
//! (spec §1.4): files from other writers and crashed truncation must not break compactd either.
//! `GenerateOptions::max_output_bytes` bounds them.

use std::io::{self, Write};

use serde_json::{Value, json};

use compactd::session::iso_from_ms;
use compactd::session::{AgentMessage, Content, Entry, EntryKind, Usage};
use compactd::session::{
    AssistantMessage, ContentBlock, ExecutionMessage, Extra, ToolCall, ToolResultMessage,
    UserMessage,
};
use compactd::session::{BranchSummaryEntry, CompactionEntry};
use compactd::testkit::{CustomMessageEntry, ImageBlock, SessionHeader, TextBlock, ThinkingBlock};

mod text;

use text::{
    CRATES, IDENTS, MODULES, Rng, code, fake_png_base64, grep_output, log_output, mix32, prose,
    push_words,
};

/// Bumped whenever the output for a given seed changes, so cached files are regenerated.
/// 2: failed and aborted replies carry a zero `cost`, as the agents write them (the reference
/// reads `usage.cost.total` of every reply when it opens a file).
pub const GENERATOR_VERSION: u32 = 2;

/// The usage of a reply that failed or was aborted: all zeros, cost included.
fn no_usage() -> Usage {
    Usage {
        cost: Some(json!({
            "input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0,
        })),
        ..Usage::default()
    }
}

/// Named sizes used by the benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizePreset {
    /// About 100 KB: CI smoke runs.
    Xs,
    /// About 1 MB.
    S,
    /// About 50 MB.
    M,
    /// About 500 MB.
    L,
}

impl SizePreset {
    pub const ALL: [SizePreset; 4] = [SizePreset::Xs, SizePreset::S, SizePreset::M, SizePreset::L];

    pub fn target_bytes(self) -> u64 {
        match self {
            SizePreset::Xs => 100_000,
            SizePreset::S => 1_000_000,
            SizePreset::M => 50_000_000,
            SizePreset::L => 500_000_000,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SizePreset::Xs => "XS",
            SizePreset::S => "S",
            SizePreset::M => "M",
            SizePreset::L => "L",
        }
    }

    /// Parses `XS`, `S`, `M` or `L` (any case).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
    }
}

/// What to generate. [`GenerateOptions::for_target`] gives realistic defaults for a size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateOptions {
    pub seed: u64,
    /// Generation stops after the first turn that reaches this many bytes.
    pub target_bytes: u64,
    /// Navigate back to an earlier turn every this many turns (0: never).
    pub branch_every: u32,
    /// Compact every this many turns even below the threshold (0: only at the threshold).
    pub compaction_every: u32,
    /// About one image per this many tool results, and per this many user prompts (0: none).
    pub image_every: u32,
    /// A label every this many turns (0: none).
    pub label_every: u32,
    /// A model or thinking-level change every this many turns (0: none).
    pub model_change_every: u32,
    /// Simulated context window; a compaction follows the turn that passes
    /// `context_window - reserve_tokens`.
    pub context_window: u64,
    pub reserve_tokens: u64,
    /// Tokens kept verbatim by a simulated compaction (chars/4 estimate).
    pub keep_recent_tokens: u64,
    /// Largest tool output, in bytes.
    pub max_output_bytes: usize,
    /// Chance, per 10,000 tool results, of a huge (up to `max_output_bytes`) output.
    pub huge_outputs_per_10k: u32,
}

impl GenerateOptions {
    /// Realistic defaults for a file of about `target_bytes`.
    pub fn for_target(seed: u64, target_bytes: u64) -> Self {
        // Huge outputs scale with the file so a small file is not one giant line.
        let max_output = (target_bytes / 8).clamp(4_096, 4 << 20) as usize;
        // A turn is ~40 KB and a tool result ~8 KB on average: small files get every feature
        // more often so a smoke run still sees branches, compactions, labels and images.
        let turns = (target_bytes / 40_000).max(1) as u32;
        let tool_results = (target_bytes / 8_000).max(1) as u32;
        GenerateOptions {
            seed,
            target_bytes,
            branch_every: (turns / 4).clamp(3, 25),
            compaction_every: if turns < 100 { (turns / 3).max(3) } else { 0 },
            image_every: (tool_results / 3).clamp(5, 60),
            label_every: (turns / 4).clamp(3, 40),
            model_change_every: (turns / 4).clamp(3, 30),
            context_window: 200_000,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
            max_output_bytes: max_output,
            huge_outputs_per_10k: 5,
        }
    }

    pub fn for_size(preset: SizePreset, seed: u64) -> Self {
        Self::for_target(seed, preset.target_bytes())
    }
}

/// What [`generate_session`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerateStats {
    pub bytes: u64,
    /// Lines, the header included.
    pub lines: u64,
    pub turns: u64,
    /// `message` entries of every role.
    pub messages: u64,
    pub tool_results: u64,
    pub images: u64,
    pub branches: u64,
    pub branch_summaries: u64,
    pub compactions: u64,
    pub labels: u64,
    pub largest_line: u64,
    /// Id of the last entry written (the leaf on load).
    pub leaf_id: String,
    /// Entries on the root-to-leaf path.
    pub path_len: u64,
}

/// Writes one session to `out`, line by line, and reports what it wrote.
pub fn generate_session<W: Write>(out: W, opts: &GenerateOptions) -> io::Result<GenerateStats> {
    let mut g = Generator::new(out, opts.clone());
    g.run()?;
    g.out.flush()?;
    g.stats.path_len = g.path.len() as u64;
    Ok(g.stats)
}

// ---------------------------------------------------------------------------------------------
// The session simulation

/// What an entry on the current path is, as far as the simulation cares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeKind {
    User,
    Assistant,
    /// An assistant message that ended a turn: a place to navigate back to.
    TurnEnd,
    ToolResult,
    Other,
}

struct Node {
    id: u32,
    kind: NodeKind,
    /// Estimated tokens of the path up to and including this entry.
    cum_tokens: u64,
}

/// A compaction on the current path.
struct CompactionMark {
    node: usize,
    kept_from: usize,
    summary_tokens: u64,
}

const SYSTEM_PROMPT_TOKENS: u64 = 9_000;
const IMAGE_TOKENS: u64 = 1_200;

struct Generator<W: Write> {
    out: W,
    opts: GenerateOptions,
    rng: Rng,
    stats: GenerateStats,
    line: Vec<u8>,
    path: Vec<Node>,
    compactions: Vec<CompactionMark>,
    id_counter: u32,
    id_salt: u32,
    clock_ms: i64,
    files: Vec<String>,
    touched_read: Vec<usize>,
    touched_modified: Vec<usize>,
    provider: &'static str,
    model: &'static str,
    thinking_level: &'static str,
    last_prompt_tokens: u64,
    last_context_tokens: u64,
    turns_since_compaction: u32,
    call_counter: u64,
}

impl<W: Write> Generator<W> {
    fn new(out: W, opts: GenerateOptions) -> Self {
        let mut rng = Rng(opts.seed ^ 0x5eed_c0de_0000_0000);
        let id_salt = rng.next() as u32;
        let files = project_files(&mut rng);
        // 2026-01-01T08:00:00Z plus up to a year, so seeds differ in time too.
        let clock_ms = 1_767_254_400_000 + rng.below(365 * 86_400_000) as i64;
        Generator {
            out,
            opts,
            rng,
            stats: GenerateStats::default(),
            line: Vec::with_capacity(1 << 16),
            path: Vec::new(),
            compactions: Vec::new(),
            id_counter: 0,
            id_salt,
            clock_ms,
            files,
            touched_read: Vec::new(),
            touched_modified: Vec::new(),
            provider: "anthropic",
            model: "claude-sonnet-4-5",
            thinking_level: "medium",
            last_prompt_tokens: 0,
            last_context_tokens: 0,
            turns_since_compaction: 0,
            call_counter: 0,
        }
    }

    fn run(&mut self) -> io::Result<()> {
        let header = SessionHeader {
            version: Some(3),
            id: format!("{:016x}", self.rng.next()),
            title: None,
            timestamp: iso_from_ms(self.clock_ms),
            cwd: format!("/home/dev/{}", self.rng.pick_str(CRATES)),
            parent_session: None,
            extra: Extra::new(),
            title_line: None,
        };
        self.write_value(&header.to_value())?;
        self.emit_model_change()?;
        self.emit(
            EntryKind::ThinkingLevelChange {
                thinking_level: self.thinking_level.into(),
            },
            NodeKind::Other,
            0,
        )?;
        while self.stats.bytes < self.opts.target_bytes {
            self.turn()?;
        }
        Ok(())
    }

    fn turn(&mut self) -> io::Result<()> {
        self.stats.turns += 1;
        let turn = self.stats.turns;
        let every = |n: u32| every_n(n, turn);
        if every(self.opts.branch_every) {
            self.navigate_back()?;
        }
        if every(self.opts.model_change_every) {
            if self.rng.percent(50) {
                self.switch_model();
                self.emit_model_change()?;
            } else {
                self.thinking_level = self.rng.pick_str(&["off", "low", "medium", "high"]);
                self.emit(
                    EntryKind::ThinkingLevelChange {
                        thinking_level: self.thinking_level.into(),
                    },
                    NodeKind::Other,
                    0,
                )?;
            }
        }
        if self.rng.one_in(40) {
            self.emit_bash_execution()?;
        }
        if self.rng.one_in(60) {
            self.emit_custom_message()?;
        }
        if self.rng.one_in(80) {
            let data = json!({"step": self.rng.below(100), "todo": ["review", "ship"]});
            self.emit(
                EntryKind::Custom {
                    custom_type: "todo-state".into(),
                    data: Some(data),
                },
                NodeKind::Other,
                0,
            )?;
        }
        self.emit_user()?;
        let steps = 1 + (0..24).take_while(|_| self.rng.percent(75)).count();
        for _ in 0..steps {
            if !self.tool_step()? {
                return self.end_turn();
            }
        }
        self.emit_final_answer()?;
        self.end_turn()
    }

    fn end_turn(&mut self) -> io::Result<()> {
        if every_n(self.opts.label_every, self.stats.turns) {
            let target = self.path[self.rng.below(self.path.len() as u64) as usize].id;
            let label = self
                .rng
                .pick_str(&["checkpoint", "good state", "before refactor", ""]);
            self.emit(
                EntryKind::Label {
                    target_id: self.id_string(target),
                    label: (!label.is_empty()).then(|| (*label).to_owned()),
                },
                NodeKind::Other,
                0,
            )?;
            self.stats.labels += 1;
        }
        self.turns_since_compaction += 1;
        let threshold = self
            .opts
            .context_window
            .saturating_sub(self.opts.reserve_tokens);
        let forced = self.opts.compaction_every > 0
            && self.turns_since_compaction >= self.opts.compaction_every;
        if self.context_tokens() + SYSTEM_PROMPT_TOKENS > threshold || forced {
            self.emit_compaction()?;
        }
        Ok(())
    }

    // --- simulation state -------------------------------------------------------------------

    fn id_string(&self, n: u32) -> String {
        format!("{:08x}", mix32(n.wrapping_add(self.id_salt)))
    }

    fn tick(&mut self, lo_ms: u64, hi_ms: u64) {
        self.clock_ms += self.rng.range(lo_ms, hi_ms) as i64;
    }

    /// Estimated tokens the next request would carry (the effective context, no system prompt).
    fn context_tokens(&self) -> u64 {
        let total = self.path.last().map_or(0, |n| n.cum_tokens);
        match self.compactions.last() {
            None => total,
            Some(c) => {
                let before = if c.kept_from == 0 {
                    0
                } else {
                    self.path[c.kept_from - 1].cum_tokens
                };
                c.summary_tokens + total - before
            }
        }
    }

    fn pick_file(&mut self) -> usize {
        // Skewed towards the first files: a session keeps coming back to a few.
        let n = self.files.len() as u64;
        let bound = self.rng.below(n) + 1;
        self.rng.below(bound) as usize
    }

    fn switch_model(&mut self) {
        let (provider, model) = *self.rng.pick(&[
            ("anthropic", "claude-sonnet-4-5"),
            ("anthropic", "claude-opus-4-1"),
            ("openai", "gpt-5.1"),
            ("google", "gemini-2.5-pro"),
        ]);
        self.provider = provider;
        self.model = model;
    }

    // --- writing ----------------------------------------------------------------------------

    fn write_value(&mut self, value: &Value) -> io::Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, value)?;
        self.line.push(b'\n');
        self.out.write_all(&self.line)?;
        self.stats.bytes += self.line.len() as u64;
        self.stats.lines += 1;
        self.stats.largest_line = self.stats.largest_line.max(self.line.len() as u64);
        Ok(())
    }

    /// Appends an entry at the leaf and returns its index on the path.
    fn emit(&mut self, kind: EntryKind, node_kind: NodeKind, tokens: u64) -> io::Result<usize> {
        self.tick(50, 1_500);
        let id = self.id_counter;
        self.id_counter += 1;
        if matches!(kind, EntryKind::Message(_)) {
            self.stats.messages += 1;
        }
        let entry = Entry::new(
            self.id_string(id),
            self.path.last().map(|n| self.id_string(n.id)),
            iso_from_ms(self.clock_ms),
            kind,
        );
        self.write_value(&entry.to_value())?;
        self.stats.leaf_id = entry.id;
        let cum_tokens = self.path.last().map_or(0, |n| n.cum_tokens) + tokens;
        self.path.push(Node {
            id,
            kind: node_kind,
            cum_tokens,
        });
        Ok(self.path.len() - 1)
    }

    fn emit_model_change(&mut self) -> io::Result<()> {
        let model = format!("{}/{}", self.provider, self.model);
        self.emit(
            EntryKind::ModelChange {
                model: Some(model),
                role: None,
            },
            NodeKind::Other,
            0,
        )?;
        Ok(())
    }

    fn image_block(&mut self) -> ContentBlock {
        self.stats.images += 1;
        let len = self.rng.log_normal(16.5, 1.0, 600_000);
        ContentBlock::Image(ImageBlock {
            data: fake_png_base64(&mut self.rng, len),
            mime_type: "image/png".into(),
            extra: Extra::new(),
        })
    }

    fn emit_user(&mut self) -> io::Result<()> {
        self.tick(5_000, 180_000);
        let mut text = String::new();
        let len = self.rng.log_normal(8.0, 1.5, 20_000);
        prose(&mut self.rng, &mut text, len, &self.files);
        let tokens = text.len() as u64 / 4 + 1;
        let with_image = self.rng.one_in(self.opts.image_every);
        let content = if with_image {
            Content::Blocks(vec![ContentBlock::text(text), self.image_block()])
        } else {
            Content::Text(text)
        };
        let message = AgentMessage::User(UserMessage {
            content,
            synthetic: None,
            timestamp: Some(Value::from(self.clock_ms)),
            extra: Extra::new(),
        });
        let extra_tokens = if with_image { IMAGE_TOKENS } else { 0 };
        self.emit(
            EntryKind::Message(message),
            NodeKind::User,
            tokens + extra_tokens,
        )?;
        Ok(())
    }

    fn emit_bash_execution(&mut self) -> io::Result<()> {
        let mut output = String::new();
        let len = self.rng.log_normal(10.0, 1.5, self.opts.max_output_bytes);
        log_output(&mut self.rng, &mut output, len, &self.files);
        let command = format!("cargo test -p {}", self.rng.pick_str(MODULES));
        let tokens = (command.len() + output.len()) as u64 / 4 + 1;
        let message = AgentMessage::BashExecution(ExecutionMessage {
            command: Some(command),
            code: None,
            output,
            exit_code: Some(if self.rng.one_in(4) { 101 } else { 0 }),
            cancelled: false,
            truncated: false,
            meta: None,
            exclude_from_context: self.rng.one_in(5).then_some(true),
            timestamp: Some(Value::from(self.clock_ms)),
            extra: Extra::new(),
        });
        self.emit(EntryKind::Message(message), NodeKind::User, tokens)?;
        Ok(())
    }

    fn emit_custom_message(&mut self) -> io::Result<()> {
        let mut text = String::from("<system-reminder>");
        prose(&mut self.rng, &mut text, 300, &self.files);
        text.push_str("</system-reminder>");
        let tokens = text.len() as u64 / 4;
        self.emit(
            EntryKind::CustomMessage(CustomMessageEntry {
                custom_type: "reminder".into(),
                content: Content::Text(text),
                display: false,
                details: None,
                extra: Extra::new(),
            }),
            NodeKind::Other,
            tokens,
        )?;
        Ok(())
    }

    fn usage(&mut self, output_tokens: u64) -> Usage {
        // (A failed or aborted reply gets `no_usage`.)
        let prompt = SYSTEM_PROMPT_TOKENS + self.context_tokens();
        let cache_read = if self.last_prompt_tokens <= prompt {
            self.last_prompt_tokens
        } else {
            0
        };
        self.last_prompt_tokens = prompt;
        let fresh = prompt - cache_read;
        let input = fresh.min(self.rng.range(1, 40));
        let cache_write = fresh - input;
        let total = prompt + output_tokens;
        self.last_context_tokens = total;
        let cost = |tokens: u64, per_million: f64| tokens as f64 * per_million / 1e6;
        let costs = [
            cost(input, 3.0),
            cost(output_tokens, 15.0),
            cost(cache_read, 0.3),
            cost(cache_write, 3.75),
        ];
        Usage {
            input,
            output: output_tokens,
            cache_read,
            cache_write,
            total_tokens: total,
            cost: Some(json!({
                "input": costs[0], "output": costs[1], "cacheRead": costs[2],
                "cacheWrite": costs[3], "total": costs.iter().sum::<f64>(),
            })),
            extra: Extra::new(),
        }
    }

    fn assistant(
        &mut self,
        content: Vec<ContentBlock>,
        stop_reason: &str,
        output_tokens: u64,
    ) -> AgentMessage {
        let (usage, error_message) = match stop_reason {
            "error" => (
                no_usage(),
                Some("529 Overloaded: the service is temporarily overloaded".to_owned()),
            ),
            "aborted" => (no_usage(), None),
            _ => (self.usage(output_tokens), None),
        };
        let api = match self.provider {
            "anthropic" => "anthropic-messages",
            "openai" => "openai-responses",
            _ => "google-generative-ai",
        };
        let mut extra = Extra::new();
        extra.insert("duration".into(), Value::from(self.rng.range(800, 90_000)));
        extra.insert("ttft".into(), Value::from(self.rng.range(200, 4_000)));
        AgentMessage::Assistant(AssistantMessage {
            content,
            api: Some(api.into()),
            provider: Some(self.provider.into()),
            model: Some(self.model.into()),
            usage: Some(usage),
            stop_reason: Some(stop_reason.into()),
            error_message,
            timestamp: Some(Value::from(self.clock_ms)),
            extra,
        })
    }

    fn thinking_block(&mut self) -> Option<ContentBlock> {
        if self.thinking_level == "off" || !self.rng.percent(70) {
            return None;
        }
        let mut thinking = String::new();
        let len = self.rng.log_normal(9.0, 1.2, 30_000);
        prose(&mut self.rng, &mut thinking, len, &self.files);
        let sig_len = self.rng.usize_in(200, 600);
        Some(ContentBlock::Thinking(ThinkingBlock {
            thinking,
            thinking_signature: Some(fake_png_base64(&mut self.rng, sig_len)),
            extra: Extra::new(),
        }))
    }

    /// One assistant message with tool calls and their results. `false` when the turn ended
    /// early (an aborted or failed request).
    fn tool_step(&mut self) -> io::Result<bool> {
        self.tick(1_000, 30_000);
        let mut content = Vec::new();
        content.extend(self.thinking_block());
        if self.rng.percent(60) {
            let mut text = String::new();
            let len = self.rng.log_normal(7.5, 1.0, 4_000);
            prose(&mut self.rng, &mut text, len, &self.files);
            content.push(ContentBlock::text(text));
        }
        if self.rng.one_in(300) {
            let stop = if self.rng.percent(50) {
                "aborted"
            } else {
                "error"
            };
            let message = self.assistant(content, stop, 0);
            self.emit(EntryKind::Message(message), NodeKind::TurnEnd, 0)?;
            return Ok(false);
        }
        let n_calls = match self.rng.below(10) {
            0..=6 => 1,
            7..=8 => 2,
            _ => 3,
        };
        let calls: Vec<ToolCall> = (0..n_calls).map(|_| self.tool_call()).collect();
        content.extend(calls.iter().cloned().map(ContentBlock::ToolCall));
        let tokens = estimate_blocks(&content);
        let message = self.assistant(content, "toolUse", tokens);
        self.emit(EntryKind::Message(message), NodeKind::Assistant, tokens)?;
        for call in &calls {
            self.tool_result(call)?;
        }
        Ok(true)
    }

    fn tool_call(&mut self) -> ToolCall {
        self.call_counter += 1;
        let file = self.pick_file();
        let path = self.files[file].clone();
        let (name, arguments) = match self.rng.below(20) {
            0..=7 => {
                self.touched_read.push(file);
                ("read", json!({ "path": path }))
            }
            8..=11 => {
                let cmd = match self.rng.below(4) {
                    0 => format!("cargo test -p {}", self.rng.pick_str(MODULES)),
                    1 => "cargo build --release 2>&1 | tail -n 200".to_owned(),
                    2 => format!("git diff -- {path}"),
                    _ => "cargo clippy --all-targets -- -D warnings".to_owned(),
                };
                ("bash", json!({ "command": cmd, "timeout": 120 }))
            }
            12..=14 => (
                "grep",
                json!({ "pattern": self.rng.pick_str(IDENTS), "path": path }),
            ),
            15..=17 => {
                self.touched_modified.push(file);
                let mut old_text = String::new();
                let mut new_text = String::new();
                let old_len = self.rng.usize_in(40, 900);
                let new_len = self.rng.usize_in(40, 900);
                code(&mut self.rng, &mut old_text, old_len, false);
                code(&mut self.rng, &mut new_text, new_len, false);
                (
                    "edit",
                    json!({ "path": path, "oldText": old_text, "newText": new_text }),
                )
            }
            _ => {
                self.touched_modified.push(file);
                let mut body = String::new();
                let len = self.rng.log_normal(11.0, 1.2, 60_000);
                code(&mut self.rng, &mut body, len, false);
                ("write", json!({ "path": path, "content": body }))
            }
        };
        let id = if self.provider == "anthropic" {
            format!("toolu_{:016x}{:08x}", self.rng.next(), self.call_counter)
        } else {
            format!("call_{:012x}", self.rng.next() >> 16)
        };
        let Value::Object(arguments) = arguments else {
            unreachable!("json! object literal")
        };
        ToolCall {
            id,
            name: name.into(),
            arguments: Value::Object(arguments),
            thought_signature: None,
            extra: Extra::new(),
        }
    }

    fn output_len(&mut self, median_log2: f64) -> usize {
        let max = self.opts.max_output_bytes;
        if self.rng.below(10_000) < u64::from(self.opts.huge_outputs_per_10k) {
            return self.rng.usize_in(max / 4, max.max(2));
        }
        self.rng.log_normal(median_log2, 1.7, max / 2)
    }

    fn tool_result(&mut self, call: &ToolCall) -> io::Result<()> {
        self.tick(100, 20_000);
        self.stats.tool_results += 1;
        let path = call.arguments["path"].as_str().unwrap_or("").to_owned();
        let mut text = String::new();
        let mut image = None;
        let mut is_error = false;
        match call.name.as_str() {
            "read" if self.rng.one_in(self.opts.image_every) => {
                text.push_str("Read image file [image/png]");
                image = Some(self.image_block());
            }
            "read" => {
                let len = self.output_len(11.5);
                code(&mut self.rng, &mut text, len, true);
            }
            "bash" => {
                let len = self.output_len(10.5);
                log_output(&mut self.rng, &mut text, len, &self.files);
                if self.rng.one_in(6) {
                    is_error = true;
                    text.push_str("\n\nCommand exited with code 101");
                }
            }
            "grep" => {
                let len = self.output_len(9.0);
                let pattern = call.arguments["pattern"].as_str().unwrap_or("x").to_owned();
                grep_output(&mut self.rng, &mut text, len, &self.files, &pattern);
            }
            "edit" if self.rng.one_in(8) => {
                is_error = true;
                text = format!(
                    "Could not find the exact text in {path}. The old text must match exactly."
                );
            }
            "edit" => text = format!("Successfully replaced text in {path}."),
            _ => {
                let n = call.arguments["content"].as_str().map_or(0, str::len);
                text = format!("Successfully wrote {n} bytes to {path}");
            }
        }
        let mut tokens = text.len() as u64 / 4 + 1;
        let mut content = vec![ContentBlock::text(text)];
        if let Some(image) = image {
            content.push(image);
            tokens += IMAGE_TOKENS;
        }
        let message = AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content,
            details: None,
            is_error,
            pruned_at: None,
            timestamp: Some(Value::from(self.clock_ms)),
            extra: Extra::new(),
        });
        self.emit(EntryKind::Message(message), NodeKind::ToolResult, tokens)?;
        Ok(())
    }

    fn emit_final_answer(&mut self) -> io::Result<()> {
        self.tick(1_000, 30_000);
        let mut content = Vec::new();
        content.extend(self.thinking_block());
        let mut text = String::new();
        let len = self.rng.log_normal(9.5, 1.0, 12_000);
        prose(&mut self.rng, &mut text, len, &self.files);
        content.push(ContentBlock::Text(TextBlock {
            text,
            text_signature: None,
            extra: Extra::new(),
        }));
        let tokens = estimate_blocks(&content);
        let message = self.assistant(content, "stop", tokens);
        self.emit(EntryKind::Message(message), NodeKind::TurnEnd, tokens)?;
        Ok(())
    }

    fn file_details(&mut self) -> Value {
        let mut read: Vec<&str> = Vec::new();
        let mut modified: Vec<&str> = Vec::new();
        for &i in &self.touched_modified {
            if !modified.contains(&self.files[i].as_str()) {
                modified.push(&self.files[i]);
            }
        }
        for &i in &self.touched_read {
            let f = self.files[i].as_str();
            if !read.contains(&f) && !modified.contains(&f) {
                read.push(f);
            }
        }
        read.sort_unstable();
        modified.sort_unstable();
        let details = json!({ "readFiles": read, "modifiedFiles": modified });
        self.touched_read.clear();
        self.touched_modified.clear();
        details
    }

    fn structured_summary(&mut self, bytes: usize) -> String {
        let mut s = String::from("## Goal\n");
        prose(&mut self.rng, &mut s, 200, &self.files);
        s.push_str("\n\n## Constraints & Preferences\n- ");
        push_words(&mut self.rng, &mut s, 12, 13);
        s.push_str("\n\n## Progress\n### Done\n");
        let sections = ["### In Progress\n", "## Key Decisions\n", "## Next Steps\n"];
        let per_section = bytes / 5;
        for heading in sections {
            for _ in 0..(per_section / 120).max(1) {
                s.push_str("- ");
                push_words(&mut self.rng, &mut s, 8, 20);
                s.push('\n');
            }
            s.push('\n');
            s.push_str(heading);
        }
        s.push_str("- ");
        push_words(&mut self.rng, &mut s, 15, 16);
        s.push_str("\n\n## Critical Context\n");
        prose(&mut self.rng, &mut s, per_section, &self.files);
        s
    }

    fn emit_compaction(&mut self) -> io::Result<()> {
        let lower = self.compactions.last().map_or(0, |c| c.kept_from);
        let mut i = self.path.len() - 1;
        let mut acc = 0;
        while i > lower {
            let before = self.path[i - 1].cum_tokens;
            acc += self.path[i].cum_tokens - before;
            if acc >= self.opts.keep_recent_tokens {
                break;
            }
            i -= 1;
        }
        let is_cut = |n: &Node| matches!(n.kind, NodeKind::User | NodeKind::Assistant);
        let kept_from = (i..self.path.len())
            .chain(lower..i)
            .find(|&j| is_cut(&self.path[j]))
            .unwrap_or(lower);
        let summary_len = self.rng.usize_in(1_500, 9_000);
        let summary = self.structured_summary(summary_len);
        let summary_tokens = summary.len() as u64 / 4;
        let mut short = String::from("I ");
        push_words(&mut self.rng, &mut short, 14, 15);
        short.push('.');
        let details = self.file_details();
        let entry = CompactionEntry {
            summary,
            short_summary: Some(short),
            first_kept_entry_id: self.id_string(self.path[kept_from].id),
            tokens_before: self.last_context_tokens,
            details: Some(details),
            preserve_data: None,
            from_extension: Some(false),
            extra: Extra::new(),
        };
        let node = self.emit(EntryKind::Compaction(entry), NodeKind::Other, 0)?;
        self.compactions.push(CompactionMark {
            node,
            kept_from,
            summary_tokens,
        });
        self.stats.compactions += 1;
        self.turns_since_compaction = 0;
        Ok(())
    }

    /// Moves the leaf back to the end of an earlier turn and sometimes records a
    /// `branch_summary` of the branch left behind.
    fn navigate_back(&mut self) -> io::Result<()> {
        let ends: Vec<usize> = self
            .path
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, n)| n.kind == NodeKind::TurnEnd)
            .map(|(i, _)| i)
            .skip(1)
            .take(8)
            .collect();
        if ends.is_empty() {
            return Ok(());
        }
        let target = *self.rng.pick(&ends);
        self.path.truncate(target + 1);
        while self.compactions.last().is_some_and(|c| c.node > target) {
            self.compactions.pop();
        }
        self.stats.branches += 1;
        self.tick(2_000, 60_000);
        if self.rng.percent(50) {
            let target_id = self.id_string(self.path[target].id);
            let mut summary = String::from("The user explored a different approach: ");
            let len = self.rng.usize_in(300, 2_000);
            prose(&mut self.rng, &mut summary, len, &self.files);
            let tokens = summary.len() as u64 / 4;
            let details = self.file_details();
            self.emit(
                EntryKind::BranchSummary(BranchSummaryEntry {
                    from_id: target_id,
                    summary,
                    details: Some(details),
                    from_extension: Some(false),
                    extra: Extra::new(),
                }),
                NodeKind::Other,
                tokens,
            )?;
            self.stats.branch_summaries += 1;
        }
        Ok(())
    }
}

fn every_n(n: u32, turn: u64) -> bool {
    n > 0 && turn.is_multiple_of(u64::from(n))
}

/// chars/4 of the text the simulation counts for an assistant message.
fn estimate_blocks(blocks: &[ContentBlock]) -> u64 {
    let chars: usize = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) => t.text.len(),
            ContentBlock::Thinking(t) => t.thinking.len(),
            ContentBlock::ToolCall(c) => c.name.len() + c.arguments.to_string().len(),
            ContentBlock::Image(_) | ContentBlock::Unknown(_) => 0,
        })
        .sum();
    chars as u64 / 4 + 1
}

fn project_files(rng: &mut Rng) -> Vec<String> {
    let mut files = vec!["Cargo.toml".to_owned(), "README.md".to_owned()];
    let n = rng.range(30, 90);
    while (files.len() as u64) < n {
        let file = match rng.below(10) {
            0 => format!(
                "tests/{}_{}.rs",
                rng.pick_str(MODULES),
                rng.pick_str(IDENTS)
            ),
            1 => format!("docs/{}.md", rng.pick_str(MODULES)),
            2 if rng.one_in(4) => format!("assets/{}.png", rng.pick_str(IDENTS)),
            _ => format!("src/{}/{}.rs", rng.pick_str(MODULES), rng.pick_str(IDENTS)),
        };
        if !files.contains(&file) {
            files.push(file);
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    fn generate(opts: &GenerateOptions) -> (Vec<u8>, GenerateStats) {
        let mut out = Vec::new();
        let stats = generate_session(&mut out, opts).expect("writing to a Vec cannot fail");
        (out, stats)
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let opts = GenerateOptions::for_size(SizePreset::Xs, 7);
        let (a, sa) = generate(&opts);
        let (b, sb) = generate(&opts);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        let (c, _) = generate(&GenerateOptions::for_size(SizePreset::Xs, 8));
        assert_ne!(a, c);
        assert_eq!(sa.bytes, a.len() as u64);
        assert!(sa.bytes >= 100_000 && sa.bytes < 400_000, "{}", sa.bytes);
    }

    #[test]
    fn ids_do_not_collide() {
        let ids: HashSet<u32> = (0..200_000).map(mix32).collect();
        assert_eq!(ids.len(), 200_000);
    }

    /// Every line parses into a known entry type; parents exist; compactions keep an entry on
    /// their own path; the file has the features the benchmarks rely on.
    #[test]
    fn output_is_a_valid_tree_with_every_feature() {
        let mut opts = GenerateOptions::for_target(3, 1_500_000);
        opts.branch_every = 5;
        opts.compaction_every = 12;
        opts.image_every = 10;
        opts.label_every = 7;
        let (bytes, stats) = generate(&opts);
        let text = std::str::from_utf8(&bytes).unwrap();
        let mut lines = text.lines();
        let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let header = SessionHeader::from_value(header).expect("a v3 header");
        assert_eq!(header.version, Some(3));

        let mut parent_of: HashMap<String, Option<String>> = HashMap::new();
        let mut types: HashMap<String, usize> = HashMap::new();
        let mut compactions = Vec::new();
        for line in lines {
            let value: Value = serde_json::from_str(line).unwrap();
            let entry = Entry::from_value(value).unwrap();
            assert!(
                !matches!(entry.kind(), EntryKind::Unknown { .. }),
                "unknown entry: {line:.200}"
            );
            if let Some(p) = &entry.parent_id {
                assert!(parent_of.contains_key(p), "parent {p} precedes its child");
            }
            if let EntryKind::Compaction(c) = entry.kind() {
                compactions.push((entry.id.clone(), c.first_kept_entry_id.clone()));
            }
            *types.entry(entry.type_name().to_owned()).or_default() += 1;
            assert!(parent_of.insert(entry.id, entry.parent_id).is_none());
        }
        for (id, kept) in &compactions {
            let mut cur = parent_of[id].clone();
            let mut found = false;
            while let Some(c) = cur {
                if c == *kept {
                    found = true;
                    break;
                }
                cur = parent_of[&c].clone();
            }
            assert!(found, "firstKeptEntryId {kept} is not an ancestor of {id}");
        }
        for t in [
            "message",
            "compaction",
            "branch_summary",
            "label",
            "model_change",
            "thinking_level_change",
        ] {
            assert!(
                types.get(t).copied().unwrap_or(0) > 0,
                "no {t} in {types:?}"
            );
        }
        assert!(stats.images > 0 && stats.branches > 0);
        assert_eq!(stats.lines as usize, text.lines().count());
        assert_eq!(stats.compactions as usize, compactions.len());
        // The leaf is the last line.
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["id"], Value::from(stats.leaf_id.clone()));
    }

    /// The store loads a generated file whole: no skipped lines, no duplicate ids, the leaf at
    /// the last entry, and a context that starts with the latest compaction's summary.
    #[test]
    fn session_store_loads_generated_files_without_skipping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut opts = GenerateOptions::for_target(5, 600_000);
        opts.compaction_every = 6;
        let stats = generate_session(std::fs::File::create(&path).unwrap(), &opts).unwrap();
        let (session, report) = compactd::session::Session::open(&path).unwrap();
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        assert!(report.duplicate_ids.is_empty() && report.torn_tail.is_none());
        assert_eq!(session.entries().len() as u64, stats.lines - 1);
        assert_eq!(session.leaf_id(), Some(stats.leaf_id.as_str()));
        assert_eq!(session.path_to_leaf().len() as u64, stats.path_len);
        let ctx = session.context();
        assert_eq!(ctx.messages[0].role(), "compactionSummary");
    }

    #[test]
    fn usage_drops_after_a_compaction() {
        let mut opts = GenerateOptions::for_target(11, 3_000_000);
        opts.branch_every = 0;
        let (bytes, stats) = generate(&opts);
        assert!(stats.compactions > 0);
        let mut last_total = 0u64;
        let mut dropped = false;
        for line in std::str::from_utf8(&bytes).unwrap().lines().skip(1) {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["type"] == "compaction" {
                last_total = v["tokensBefore"].as_u64().unwrap();
            }
            if let Some(total) = v["message"]["usage"]["totalTokens"].as_u64() {
                if total > 0 && last_total > 0 && total < last_total / 2 {
                    dropped = true;
                }
                if total > 0 {
                    last_total = total;
                }
            }
        }
        assert!(dropped, "context usage never dropped after a compaction");
    }
}
