/**
 * What the hooks ask compactd, and how its answers become the agent's. compactd opens the
 * agent's own session file read-only and computes a compaction or branch summary at the
 * agent's leaf without writing; the agent persists what the hook returns (`fromExtension:
 * true`). Whenever compactd cannot answer (missing, crashed, timed out, an error), the hook
 * returns nothing and the agent's own path runs, after one notice saying why.
 */
import { execFile } from "node:child_process";
import { type BackgroundCompaction, type CompactResult, type ProgressParams, CompactdError } from "compactd-client";
import { AgentModel } from "./agent-model";
import { Daemon, DaemonMissing, PeerClosed, RequestTimeout } from "./daemon";
import type {
  CompactionResult,
  ExtensionContext,
  SessionBeforeCompactEvent,
  SessionBeforeCompactResult,
  SessionBeforeTreeEvent,
  SessionBeforeTreeResult,
  TurnEndEvent,
} from "./omp";
import { type Options, isObject } from "./options";

const STATUS_KEY = "compactd";

/** The model's tool for compacted history. */
export const RECALL_TOOL = "recall";

/** The one line every compaction summary from compactd ends with, so the model knows. */
export const RECALL_HINT = `Earlier details of this session (exact text, full tool outputs) were compacted away but are kept: search them with the \`${RECALL_TOOL}\` tool.`;

/** The recall tool's arguments. */
export interface RecallParams {
  query?: string;
  regex?: boolean;
  scope?: "branch" | "session";
  cursor?: string;
  entryId?: string;
  offset?: number;
}

export const RECALL_PARAMETERS: Record<string, unknown> = {
  type: "object",
  properties: {
    query: { type: "string", description: "Text to find (case-insensitive), or a regex with regex: true." },
    regex: { type: "boolean" },
    scope: { type: "string", enum: ["branch", "session"], description: "branch (default) or every branch." },
    cursor: { type: "string", description: "The cursor a previous search gave, for more hits." },
    entryId: { type: "string", description: "Read this entry whole instead of searching." },
    offset: { type: "number", description: "Character offset when reading a long entry." },
  },
};

/** Characters of an entry the recall tool returns at once. */
const RECALL_PAGE_CHARS = 40_000;

/** The agent's compaction settings, as far as its settings can be read (oh-my-pi only). */
export interface AgentCompaction {
  keepRecentTokens?: number;
  reserveTokens?: number;
  thresholdTokens?: number;
  thresholdPercent?: number;
}

/** A turn waiting to be told to compactd. */
interface ObservedTurn {
  event: TurnEndEvent;
  ctx: ExtensionContext;
  agent: AgentCompaction;
}

/** The status line while compactd drafts the next compaction ahead of the threshold. */
const BACKGROUND_STATUS: Partial<Record<BackgroundCompaction["state"], string>> = {
  started: "compactd: drafting the next compaction",
  armed: "compactd: next compaction ready",
};

/** Which open compactd session holds which agent file, for the daemon that opened it. */
interface OpenSession {
  sessionId: string;
  generation: number;
}

export class Compactd {
  readonly options: Options;
  readonly daemon: Daemon;
  #model = new AgentModel();
  #useAgentModel: boolean;
  #sessions = new Map<string, OpenSession>();
  #ctx: ExtensionContext | undefined;
  #progressToken = 0;
  #progressLabel = new Map<string, string>();
  #noticesGiven = new Set<string>();
  #sentCompaction: string | undefined;
  #observing: Promise<void> | undefined;
  #nextTurn: ObservedTurn | undefined;

  constructor(options: Options) {
    this.options = options;
    this.#useAgentModel = options.summarizer === "agent";
    this.daemon = new Daemon({
      bin: options.bin,
      settings: this.#initialSettings(),
      handlers: this.#useAgentModel
        ? {
            "summarizer/summarize": (params, token) => {
              const abort = new AbortController();
              token.onCancellationRequested(() => abort.abort());
              return this.#model.summarize(params, abort.signal);
            },
          }
        : {},
      onProgress: params => this.#onProgress(params),
      onBackground: params => this.#onBackground(params),
    });
  }

  /** Starts the daemon early (at session start) so the first compaction does not wait. */
  async warmUp(ctx: ExtensionContext): Promise<void> {
    if (this.#useAgentModel) {
      const problem = await this.#model.check();
      if (problem) {
        this.#useAgentModel = false;
        this.#noticeOnce(ctx, "model", `compactd: the agent's model cannot write summaries (${problem}); compactd uses its own summarizer`);
      }
    }
    try {
      await this.daemon.client();
    } catch (error) {
      this.#fallbackNotice(ctx, error, "start");
    }
  }

  stop(): void {
    this.daemon.stop();
  }

  /**
   * `turn_end`: tells compactd about the turn (`session/observeTurn`: the agent's leaf, the
   * reply's context size, the agent's window and threshold), so that compactd drafts the next
   * compaction in the background once the context nears the threshold, and the compaction
   * hook then gets it at once. It does not hold up the agent (not awaited; a turn that ends
   * while the previous one is being observed is observed next, only the latest one) and says
   * nothing when it fails: the compaction hook reports compactd's problems. Only where the
   * agent's compaction settings can be read (oh-my-pi): a draft must cut as the agent's
   * compaction would.
   */
  observeTurn(event: TurnEndEvent, ctx: ExtensionContext, agent: AgentCompaction): void {
    if (!ctx.sessionManager.getSessionFile() || agent.keepRecentTokens === undefined || agent.reserveTokens === undefined) return;
    this.#nextTurn = { event, ctx, agent };
    this.#observing ??= this.#observeTurns().finally(() => {
      this.#observing = undefined;
    });
  }

  async #observeTurns(): Promise<void> {
    for (let turn = this.#nextTurn; turn; turn = this.#nextTurn) {
      this.#nextTurn = undefined;
      await this.#observe(turn).catch(() => undefined);
    }
  }

  async #observe({ event, ctx, agent }: ObservedTurn): Promise<void> {
    const file = ctx.sessionManager.getSessionFile();
    const { keepRecentTokens, reserveTokens } = agent;
    if (!file || keepRecentTokens === undefined || reserveTokens === undefined) return;
    const window = ctx.model?.contextWindow;
    this.#enter(ctx);
    const sessionId = await this.#open(file);
    await this.#syncCompactionSettings({ keepRecentTokens, reserveTokens });
    await this.daemon.request(
      "session/observeTurn",
      {
        sessionId,
        leafId: ctx.sessionManager.getLeafId() ?? undefined,
        contextTokens: replyContextTokens(event.message),
        contextWindow: window,
        thresholdTokens: agentThreshold(agent, window),
      },
      this.options.timeoutMs,
    );
  }

  /** `session_before_compact`: compactd's compaction of the agent's branch, or nothing. The
   * draft compactd armed ahead of the threshold (`observeTurn`) answers at once when it fits
   * the agent's leaf. */
  async compact(event: SessionBeforeCompactEvent, ctx: ExtensionContext): Promise<SessionBeforeCompactResult | undefined> {
    const file = ctx.sessionManager.getSessionFile();
    const leafId = event.branchEntries[event.branchEntries.length - 1]?.id;
    if (!file || !leafId) return undefined;
    // The turn's observation opens the session first (one compactd session per file).
    await this.#observing;
    this.#enter(ctx);
    const token = this.#newProgressToken("compacting");
    let sessionId: string | undefined;
    const onAbort = () => {
      if (sessionId) void this.daemon.request("session/abortCompaction", { sessionId }).catch(() => undefined);
    };
    event.signal.addEventListener("abort", onAbort, { once: true });
    try {
      sessionId = await this.#open(file);
      await this.#syncCompactionSettings(event.preparation.settings);
      const result = await this.daemon.request(
        "session/compact",
        {
          sessionId,
          preview: true,
          leafId,
          customInstructions: event.customInstructions,
          useArmed: true,
          workDoneToken: token,
        },
        this.options.timeoutMs,
      );
      return { compaction: toCompaction(result, this.#model.answered()) };
    } catch (error) {
      if (event.signal.aborted) return { cancel: true };
      if (error instanceof RequestTimeout) onAbort();
      // compactd agrees with the agent that there is nothing to do: let the agent say so.
      if (error instanceof CompactdError && (error.kind === "nothingToCompact" || error.kind === "alreadyCompacted")) {
        return undefined;
      }
      this.#fallbackNotice(ctx, error, "compaction");
      return undefined;
    } finally {
      event.signal.removeEventListener("abort", onAbort);
      this.#endProgress(token);
    }
  }

  /** `session_before_tree`: compactd's summary of the branch being left, when one is wanted. */
  async branchSummary(event: SessionBeforeTreeEvent, ctx: ExtensionContext): Promise<SessionBeforeTreeResult | undefined> {
    const { preparation } = event;
    const file = ctx.sessionManager.getSessionFile();
    if (!preparation.userWantsSummary || preparation.entriesToSummarize.length === 0 || !file) return undefined;
    this.#enter(ctx);
    const token = this.#newProgressToken("summarizing the branch");
    let sessionId: string | undefined;
    const onAbort = () => {
      if (sessionId) void this.daemon.request("session/abortBranchSummary", { sessionId }).catch(() => undefined);
    };
    event.signal.addEventListener("abort", onAbort, { once: true });
    try {
      sessionId = await this.#open(file);
      const result = await this.daemon.request(
        "session/navigateTree",
        {
          sessionId,
          targetId: preparation.targetId,
          leafId: preparation.oldLeafId,
          summarize: true,
          preview: true,
          workDoneToken: token,
        },
        this.options.timeoutMs,
      );
      if (result.cancelled || !result.summary) {
        return event.signal.aborted || result.aborted ? { cancel: true } : undefined;
      }
      const details = {
        ...(isObject(result.summary.details) ? result.summary.details : {}),
        compactd: compactdDetails(result.summary.summarizer, this.#model.answered()),
      };
      return { summary: { summary: result.summary.summary, details } };
    } catch (error) {
      if (event.signal.aborted) return { cancel: true };
      if (error instanceof RequestTimeout) onAbort();
      this.#fallbackNotice(ctx, error, "branch summary");
      return undefined;
    } finally {
      event.signal.removeEventListener("abort", onAbort);
      this.#endProgress(token);
    }
  }

  /** The recall tool: a search of the agent's session, or one entry read back whole. */
  async recall(params: RecallParams, ctx: ExtensionContext): Promise<string> {
    const file = ctx.sessionManager.getSessionFile();
    if (!file) return "This session has no file yet: there is no earlier history.";
    this.#ctx = ctx;
    const sessionId = await this.#open(file);
    if (params.entryId) {
      const read = await this.daemon.request("session/readEntry", { sessionId, entryId: params.entryId });
      return renderEntry(params.entryId, read, params.offset ?? 0);
    }
    if (!params.query) return "Give `query` to search, or `entryId` to read an entry.";
    const found = await this.daemon.request("session/search", {
      sessionId,
      query: params.query,
      regex: params.regex,
      scope: params.scope,
      cursor: params.cursor,
    });
    if (found.hits.length === 0) return `No entry matches ${JSON.stringify(params.query)}.`;
    const lines = found.hits.map(
      hit => `- entryId ${hit.entryId} | ${hit.role} | ${hit.timestamp}${hit.compacted ? " (compacted)" : ""}\n  ${hit.snippet}`,
    );
    if (found.nextCursor) lines.push(`More hits: call ${RECALL_TOOL} again with cursor ${JSON.stringify(found.nextCursor)}.`);
    return lines.join("\n");
  }

  /** `/compactd`: where a compaction would cut now and what it would summarise (writes nothing). */
  async plan(ctx: ExtensionContext, keepRecentTokens: number | undefined): Promise<string> {
    const file = ctx.sessionManager.getSessionFile();
    if (!file) return "compactd: this session has no file yet (nothing to plan)";
    await flushAgentWrites(ctx);
    const args = ["plan", file];
    if (keepRecentTokens !== undefined) args.push("--keep-recent-tokens", String(keepRecentTokens));
    return new Promise(resolve => {
      execFile(this.options.bin, args, { timeout: 30_000 }, (error, stdout, stderr) => {
        if (error) resolve(`compactd plan failed: ${(stderr || error.message).trim()}`);
        else resolve(`compactd plan for ${file}:\n${stdout.trim()}`);
      });
    });
  }

  /** The settings layer compactd starts with: the user's, plus the summarizer choice. */
  #initialSettings(): Record<string, unknown> {
    const settings = structuredClone(this.options.settings);
    if (this.#useAgentModel) {
      const summarizer = isObject(settings.summarizer) ? settings.summarizer : {};
      settings.summarizer = { ...summarizer, kind: "client" };
    }
    return settings;
  }

  /** The agent's `compaction.keepRecentTokens` and `reserveTokens` apply to compactd's cut too,
   * unless compactd.json sets them. */
  async #syncCompactionSettings(agent: { keepRecentTokens: number; reserveTokens: number }): Promise<void> {
    const own = isObject(this.options.settings.compaction) ? this.options.settings.compaction : {};
    const compaction = {
      keepRecentTokens: own.keepRecentTokens ?? agent.keepRecentTokens,
      reserveTokens: own.reserveTokens ?? agent.reserveTokens,
    };
    const key = `${this.daemon.generation}:${JSON.stringify(compaction)}`;
    if (key === this.#sentCompaction) return;
    await this.daemon.request("settings/update", { target: "session", patch: { compaction } });
    this.#sentCompaction = key;
  }

  /** Hands the hook's context to the summarizer and flushes the agent's pending writes, so the
   * file compactd reads ends at the agent's leaf. */
  #enter(ctx: ExtensionContext): void {
    this.#ctx = ctx;
    this.#model.use(ctx);
  }

  /** The compactd session of `file` (opened read-only: compactd never writes the agent's file). */
  async #open(file: string): Promise<string> {
    const ctx = this.#ctx;
    if (ctx) await flushAgentWrites(ctx);
    await this.daemon.client();
    const known = this.#sessions.get(file);
    if (known && known.generation === this.daemon.generation) return known.sessionId;
    const info = await this.daemon.request("session/open", { path: file, readOnly: true });
    this.#sessions.set(file, { sessionId: info.sessionId, generation: this.daemon.generation });
    return info.sessionId;
  }

  #onBackground(params: BackgroundCompaction): void {
    const known = [...this.#sessions.values()].some(s => s.sessionId === params.sessionId);
    if (known) this.#ctx?.ui.setStatus(STATUS_KEY, BACKGROUND_STATUS[params.state]);
  }

  #onProgress(params: ProgressParams): void {
    const label = this.#progressLabel.get(String(params.token));
    const value = params.value;
    if (label && value.kind !== "end" && typeof value.message === "string") {
      this.#ctx?.ui.setStatus(STATUS_KEY, `compactd: ${label} (${value.message})`);
    }
  }

  #newProgressToken(label: string): string {
    const token = `omp-${++this.#progressToken}`;
    this.#progressLabel.set(token, label);
    this.#ctx?.ui.setStatus(STATUS_KEY, `compactd: ${label}`);
    return token;
  }

  #endProgress(token: string): void {
    this.#progressLabel.delete(token);
    this.#ctx?.ui.setStatus(STATUS_KEY, undefined);
  }

  /** One notice per kind of failure and process: the agent's own path runs meanwhile. */
  #fallbackNotice(ctx: ExtensionContext, error: unknown, what: string): void {
    const message = describe(error, this.daemon.stderrTail());
    const kind = error instanceof DaemonMissing ? "missing" : `${what}:${message}`;
    this.#noticeOnce(ctx, kind, `compactd: ${what} failed (${message}); the agent's own ${what === "branch summary" ? "branch summary" : "compaction"} runs instead`);
  }

  #noticeOnce(ctx: ExtensionContext, kind: string, message: string): void {
    if (this.#noticesGiven.has(kind)) return;
    this.#noticesGiven.add(kind);
    ctx.ui.notify(message, "warning");
  }
}

/** The agent's `CompactionResult` from compactd's. `details` keeps compactd's file lists and
 * `retainedFacts`, and says under `compactd` which summarizer wrote the summary. */
function toCompaction(result: CompactResult, models: string[]): CompactionResult {
  // compactd ran this as a request of its client; why the agent compacted is the agent's to say.
  const { reason: _trigger, ...details } = result.details;
  const compaction: CompactionResult = {
    summary: `${result.summary.trimEnd()}\n\n${RECALL_HINT}`,
    firstKeptEntryId: result.firstKeptEntryId,
    tokensBefore: result.tokensBefore,
    details: { ...details, compactd: compactdDetails(result.summarizer ?? undefined, models, result.tokensAfter ?? undefined) },
  };
  // Drafted ahead of the threshold (`session/observeTurn`) and handed over at once.
  if (result.backgroundOperationId) (compaction.details as { compactd: Record<string, unknown> }).compactd.background = result.backgroundOperationId;
  if (result.shortSummary) compaction.shortSummary = result.shortSummary;
  if (result.preserveData) compaction.preserveData = result.preserveData;
  return compaction;
}

/** `details.compactd`: which compactd summarizer wrote the summary (`client` when the agent's
 * model answered compactd's prompts, then `models` names it; `extractive` for compactd's
 * offline one, …) and compactd's estimate of the context after. */
function compactdDetails(summarizer: string | undefined, models: string[], tokensAfter?: number): Record<string, unknown> {
  const details: Record<string, unknown> = { summarizer: summarizer ?? "unknown" };
  if (summarizer === "client" && models.length > 0) details.models = models;
  if (tokensAfter !== undefined) details.tokensAfter = tokensAfter;
  return details;
}

/** An entry's texts (as `session/readEntry` restored them), a page of them from `offset`. */
function renderEntry(entryId: string, read: { entry: Record<string, unknown>; compacted: boolean }, offset: number): string {
  const texts: string[] = [];
  const walk = (value: unknown, key: string): void => {
    if (typeof value === "string") {
      if (!value.startsWith("blob:sha256:")) texts.push(value);
    } else if (Array.isArray(value)) {
      value.forEach(item => walk(item, key));
    } else if (isObject(value)) {
      const image = value.type === "image";
      for (const [k, v] of Object.entries(value)) if (!(image && k === "data")) walk(v, k);
    }
  };
  const { type, id: _id, parentId: _parent, timestamp, ...fields } = read.entry;
  walk(fields, "");
  const body = texts.join("\n");
  const page = body.slice(offset, offset + RECALL_PAGE_CHARS);
  const end = offset + page.length;
  let text = `Entry ${entryId} (${String(type)}, ${String(timestamp)}${read.compacted ? ", compacted" : ""}), characters ${offset}..${end} of ${body.length}:\n${page}`;
  if (end < body.length) text += `\n[${body.length - end} more characters: call ${RECALL_TOOL} with entryId ${entryId} and offset ${end}]`;
  return text;
}

/** The context size an assistant reply reports (the agent's `calculateContextTokens`); none
 * for another message, an aborted or failed reply. */
function replyContextTokens(message: unknown): number | undefined {
  if (!isObject(message) || message.role !== "assistant" || !isObject(message.usage)) return undefined;
  if (message.stopReason === "aborted" || message.stopReason === "error") return undefined;
  const usage = message.usage as Record<string, unknown>;
  const n = (key: string) => (typeof usage[key] === "number" ? (usage[key] as number) : 0);
  return n("totalTokens") > 0 ? n("totalTokens") : n("input") + n("output") + n("cacheRead") + n("cacheWrite");
}

/** The agent's compaction threshold (oh-my-pi's `resolveThresholdTokens`): `thresholdTokens`,
 * else `thresholdPercent` of the window, else the window less the larger of 15% and
 * `reserveTokens`. */
export function agentThreshold(agent: AgentCompaction, window: number | undefined): number | undefined {
  const { thresholdTokens, thresholdPercent, reserveTokens } = agent;
  if (thresholdTokens !== undefined && thresholdTokens > 0) {
    return window ? Math.min(window - 1, thresholdTokens) : thresholdTokens;
  }
  if (!window) return undefined;
  if (thresholdPercent !== undefined && thresholdPercent > 0) {
    return Math.floor(window * (Math.min(99, Math.max(1, thresholdPercent)) / 100));
  }
  return window - Math.max(Math.floor(window * 0.15), reserveTokens ?? 0);
}

/** The agent writes its session file asynchronously; its session manager can flush. */
async function flushAgentWrites(ctx: ExtensionContext): Promise<void> {
  const manager = ctx.sessionManager as { flush?: () => Promise<void> };
  if (typeof manager.flush === "function") await manager.flush();
}

function describe(error: unknown, stderrTail: string): string {
  if (error instanceof PeerClosed) {
    const last = stderrTail.split("\n").filter(Boolean).pop();
    return last ? `${error.message}; last log line: ${last}` : error.message;
  }
  if (error instanceof Error) return error.message;
  return String(error);
}
