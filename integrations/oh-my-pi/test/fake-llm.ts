/**
 * An OpenAI-compatible chat completions server on 127.0.0.1 that plays the agent's model in the
 * real-agent test. It streams like the real API (SSE, usage in the last chunk) and answers three
 * kinds of request, told apart by their system prompt:
 *
 * - the agent's turns: a user message `read <path>` gets a `read` tool call, a tool result gets
 *   a short answer naming the file, anything else an acknowledgement. `usage.prompt_tokens` is
 *   the request's characters / 4, so the context grows as a real model's would;
 * - compactd's summaries (its system prompt, asked through the extension's client
 *   summarizer): a structured summary that deliberately leaves out the user's last request and
 *   the file paths, so compactd's retention guard has facts to put back;
 * - the agent's own summaries (its fallback path): a summary marked `AGENT-OWN-SUMMARY`.
 *
 * A user message containing `BIG` gets a final answer (once) whose usage says `bigPromptTokens`,
 * so a test can push the agent over its compaction threshold on the turn it chooses. `hold()` makes
 * compactd's summary requests hang until released, so a test can kill compactd in the middle
 * of a compaction.
 */

export interface ChatRequest {
  messages: { role: string; content: unknown; tool_calls?: unknown[]; tool_call_id?: string }[];
  tools?: unknown[];
  stream?: boolean;
  model?: string;
}

export type RequestKind = "turn" | "compactd-summary" | "agent-summary";

export interface Received {
  kind: RequestKind;
  body: ChatRequest;
}

/** compactd's summarization system prompt starts with this (prompts/summarization-system.md). */
const COMPACTD_SYSTEM = "You summarise conversations between a user and an AI coding assistant";
/** The agent's own summarization system prompt mentions this. */
const AGENT_SUMMARY_HINT = "summar";

export const AGENT_OWN_SUMMARY = "AGENT-OWN-SUMMARY";
export const MODEL_SUMMARY_MARK = "FAKE-MODEL-SUMMARY";

export class FakeLlm {
  readonly received: Received[] = [];
  /** `usage.prompt_tokens` reported for a turn whose last user message contains `BIG`. */
  bigPromptTokens = 0;
  /** Held requests whose client went away before they were released. */
  abandoned = 0;
  #server: ReturnType<typeof Bun.serve> | undefined;
  #held = false;
  #waiters: (() => void)[] = [];
  #heldCount = 0;
  #onHeld: (() => void)[] = [];
  #bigAnswered = new Set<string>();

  start(): string {
    this.#server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: req => this.#handle(req),
    });
    return `http://127.0.0.1:${this.#server.port}/v1`;
  }

  stop(): void {
    this.release();
    this.#server?.stop(true);
  }

  /** From now on compactd's summary requests wait until `release()`. */
  hold(): void {
    this.#held = true;
  }

  release(): void {
    this.#held = false;
    for (const wake of this.#waiters.splice(0)) wake();
  }

  /** Resolves once a compactd summary request is being held. */
  whenHeld(): Promise<void> {
    if (this.#heldCount > 0) return Promise.resolve();
    return new Promise(resolve => this.#onHeld.push(resolve));
  }

  /** compactd summary requests being held right now. */
  get heldNow(): number {
    return this.#heldCount;
  }

  count(kind: RequestKind): number {
    return this.received.filter(r => r.kind === kind).length;
  }

  async #handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    if (req.method !== "POST" || !url.pathname.endsWith("/chat/completions")) {
      return new Response(JSON.stringify({ error: { message: `no route ${url.pathname}` } }), {
        status: 404,
        headers: { "content-type": "application/json" },
      });
    }
    const body = (await req.json()) as ChatRequest;
    const kind = classify(body);
    this.received.push({ kind, body });
    if (kind === "compactd-summary" && this.#held) {
      this.#heldCount++;
      for (const notify of this.#onHeld.splice(0)) notify();
      await new Promise<void>(resolve => {
        this.#waiters.push(resolve);
        req.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      this.#heldCount--;
      if (req.signal.aborted) this.abandoned++;
    }
    const reply = answer(kind, body);
    const tokens = usage(body, reply);
    const prompt = lastUserText(body);
    // Once per prompt, on its final answer: oh-my-pi 18 also checks the threshold between the
    // requests of a turn (mid-turn compaction), and a turn's later requests still end with the
    // same user message.
    if (kind === "turn" && this.bigPromptTokens > 0 && !reply.toolCall && prompt.includes("BIG") && !this.#bigAnswered.has(prompt)) {
      this.#bigAnswered.add(prompt);
      tokens.prompt_tokens = this.bigPromptTokens;
      tokens.total_tokens = tokens.prompt_tokens + tokens.completion_tokens;
    }
    return body.stream === false ? jsonResponse(reply, body, tokens) : sseResponse(reply, body, tokens);
  }
}

function lastUserText(body: ChatRequest): string {
  const users = body.messages.filter(m => m.role === "user");
  return users.length ? textOf(users[users.length - 1].content) : "";
}

function systemText(body: ChatRequest): string {
  const system = body.messages.find(m => m.role === "system" || m.role === "developer");
  return system ? textOf(system.content) : "";
}

function classify(body: ChatRequest): RequestKind {
  const system = systemText(body);
  if (system.startsWith(COMPACTD_SYSTEM)) return "compactd-summary";
  if (!body.tools?.length && system.toLowerCase().includes(AGENT_SUMMARY_HINT)) return "agent-summary";
  return "turn";
}

export function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map(part => (part && typeof part === "object" && "text" in part ? String(part.text) : ""))
      .join("");
  }
  return "";
}

interface Reply {
  text: string;
  toolCall?: { id: string; name: string; arguments: string };
}

let toolCallSeq = 0;

/** Numbers compactd's summaries, so that no answer repeats an earlier one word for word: a
 * branch summary's input holds the earlier compaction summaries, and compactd rejects an answer
 * that copies its input. */
let summaryCount = 0;

function answer(kind: RequestKind, body: ChatRequest): Reply {
  if (kind === "compactd-summary") {
    const n = ++summaryCount;
    return {
      text: [
        "## Goal",
        `- Work through the project's modules one at a time (${MODEL_SUMMARY_MARK}, summary ${n}).`,
        "",
        "## Progress",
        "### Done",
        `- [x] Read several modules and reported on each, as of summary ${n}.`,
        "",
        "## Next Steps",
        `1. Continue with the remaining modules after summary ${n}.`,
      ].join("\n"),
    };
  }
  if (kind === "agent-summary") {
    return { text: `## Goal\n- ${AGENT_OWN_SUMMARY}: the user is reading modules.` };
  }
  const last = body.messages[body.messages.length - 1];
  if (last?.role === "tool") {
    const result = textOf(last.content);
    return { text: `I read it: ${result.length} characters, starting "${result.slice(0, 40)}".` };
  }
  const prompt = last ? textOf(last.content) : "";
  const recall = /^recall (\S+)/.exec(prompt.trim());
  if (recall) {
    toolCallSeq++;
    return {
      text: "",
      toolCall: { id: `call_${toolCallSeq}`, name: "recall", arguments: JSON.stringify({ query: recall[1] }) },
    };
  }
  const read = /read (\S+)/.exec(prompt.trim());
  if (read) {
    toolCallSeq++;
    return {
      text: "",
      toolCall: { id: `call_${toolCallSeq}`, name: "read", arguments: JSON.stringify({ path: read[1] }) },
    };
  }
  return { text: `Noted: ${prompt.slice(0, 60)}` };
}

type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number };

function usage(body: ChatRequest, reply: Reply): Usage {
  const promptChars = JSON.stringify(body.messages).length + JSON.stringify(body.tools ?? []).length;
  const prompt_tokens = Math.ceil(promptChars / 4);
  const completion_tokens = Math.max(1, Math.ceil((reply.text.length + (reply.toolCall?.arguments.length ?? 0)) / 4));
  return { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
}

function jsonResponse(reply: Reply, body: ChatRequest, tokens: Usage): Response {
  const message: Record<string, unknown> = { role: "assistant", content: reply.text };
  if (reply.toolCall) {
    message.tool_calls = [
      { id: reply.toolCall.id, type: "function", function: { name: reply.toolCall.name, arguments: reply.toolCall.arguments } },
    ];
  }
  return Response.json({
    id: "chatcmpl-fake",
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: body.model ?? "fake",
    choices: [{ index: 0, message, finish_reason: reply.toolCall ? "tool_calls" : "stop" }],
    usage: tokens,
  });
}

function sseResponse(reply: Reply, body: ChatRequest, tokens: Usage): Response {
  const base = { id: "chatcmpl-fake", object: "chat.completion.chunk", created: Math.floor(Date.now() / 1000), model: body.model ?? "fake" };
  const chunks: unknown[] = [];
  chunks.push({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] });
  // The text in a few pieces, as a model streams it.
  const pieces = reply.text.match(/[\s\S]{1,80}/g) ?? [];
  for (const piece of pieces) {
    chunks.push({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] });
  }
  if (reply.toolCall) {
    chunks.push({
      ...base,
      choices: [
        {
          index: 0,
          delta: {
            tool_calls: [
              {
                index: 0,
                id: reply.toolCall.id,
                type: "function",
                function: { name: reply.toolCall.name, arguments: reply.toolCall.arguments },
              },
            ],
          },
          finish_reason: null,
        },
      ],
    });
  }
  chunks.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: reply.toolCall ? "tool_calls" : "stop" }] });
  chunks.push({ ...base, choices: [], usage: tokens });
  const text = `${chunks.map(c => `data: ${JSON.stringify(c)}\n\n`).join("")}data: [DONE]\n\n`;
  return new Response(text, { headers: { "content-type": "text/event-stream" } });
}
