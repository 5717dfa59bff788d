/**
 * The parts of oh-my-pi's extension API (13.19 and 18.2, `extensibility/extensions/types.ts`)
 * that this extension uses, written out structurally so the extension typechecks without the
 * agent's sources. pi (oh-my-pi's upstream, 0.73) has the same hooks with fewer fields: no
 * `pi.pi`, and a `CompactionResult` without `shortSummary` / `preserveData` (it stores only the
 * four fields it knows). The real-agent tests (`scripts/test.d/omp.sh`) check them against each
 * agent itself.
 */

/** A session entry as the agent holds it (one line of its session file). */
export interface SessionEntry {
  type: string;
  id: string;
  parentId: string | null;
  timestamp: string;
  [field: string]: unknown;
}

/** The agent's `CompactionPreparation` (only what this extension reads). */
export interface CompactionPreparation {
  firstKeptEntryId: string;
  tokensBefore: number;
  isSplitTurn: boolean;
  previousSummary?: string;
  settings: { keepRecentTokens: number; reserveTokens: number };
}

/** The agent's `CompactionResult`: what `session_before_compact` may return to be persisted. */
export interface CompactionResult {
  summary: string;
  shortSummary?: string;
  firstKeptEntryId: string;
  tokensBefore: number;
  details?: unknown;
  preserveData?: Record<string, unknown>;
}

export interface SessionBeforeCompactEvent {
  type: "session_before_compact";
  preparation: CompactionPreparation;
  /** Root to leaf. */
  branchEntries: SessionEntry[];
  customInstructions?: string;
  signal: AbortSignal;
}

export interface SessionBeforeCompactResult {
  cancel?: boolean;
  compaction?: CompactionResult;
}

export interface TreePreparation {
  targetId: string;
  oldLeafId: string | null;
  commonAncestorId: string | null;
  entriesToSummarize: SessionEntry[];
  userWantsSummary: boolean;
}

export interface SessionBeforeTreeEvent {
  type: "session_before_tree";
  preparation: TreePreparation;
  signal: AbortSignal;
}

export interface SessionBeforeTreeResult {
  cancel?: boolean;
  summary?: { summary: string; details?: unknown };
}

/** The agent's `Model` (only what this extension reads or passes on). */
export interface Model {
  id: string;
  provider: string;
  api: string;
  contextWindow?: number;
  maxTokens?: number;
}

export interface ModelRegistry {
  getApiKey(model: Model, sessionId?: string): Promise<string | undefined>;
}

export interface ReadonlySessionManager {
  getSessionFile(): string | undefined;
  getSessionId(): string;
  getLeafId(): string | null;
  getCwd(): string;
}

export interface ExtensionUIContext {
  notify(message: string, type?: "info" | "warning" | "error"): void;
  setStatus(key: string, text: string | undefined): void;
}

export interface ExtensionContext {
  ui: ExtensionUIContext;
  hasUI: boolean;
  cwd: string;
  sessionManager: ReadonlySessionManager;
  modelRegistry: ModelRegistry;
  model: Model | undefined;
}

export interface ExtensionCommandContext extends ExtensionContext {
  navigateTree(targetId: string, options?: { summarize?: boolean }): Promise<{ cancelled: boolean }>;
}

type Handler<E, R = undefined> = (event: E, ctx: ExtensionContext) => Promise<R | undefined> | R | undefined;

/** A tool result the agent hands its model (`AgentToolResult`). */
export interface ToolResult {
  content: { type: "text"; text: string }[];
  details?: unknown;
}

/** The agent's `ToolDefinition` (only what this extension sets). `parameters` is a JSON
 * Schema object (TypeBox schemas are JSON Schema). */
export interface ToolDefinition<P> {
  name: string;
  label: string;
  description: string;
  parameters: Record<string, unknown>;
  /** oh-my-pi 18: how the tool is presented. An extension's tool defaults to `"discoverable"`
   * there (kept out of the model's tool list until discovered); `"essential"` lists it.
   * Older agents and pi ignore it. */
  loadMode?: "essential" | "discoverable";
  execute(toolCallId: string, params: P, signal: AbortSignal | undefined, onUpdate: unknown, ctx: ExtensionContext): Promise<ToolResult>;
}

/** `turn_end`: one model call and its tool results are done (the reply carries `usage`). */
export interface TurnEndEvent {
  type: "turn_end";
  turnIndex: number;
  message: unknown;
}

/** The `pi` object an extension factory receives. */
export interface ExtensionAPI {
  on(event: "session_before_compact", handler: Handler<SessionBeforeCompactEvent, SessionBeforeCompactResult>): void;
  on(event: "session_before_tree", handler: Handler<SessionBeforeTreeEvent, SessionBeforeTreeResult>): void;
  on(event: "session_start" | "session_switch" | "session_shutdown", handler: Handler<{ type: string }>): void;
  on(event: "turn_end", handler: Handler<TurnEndEvent>): void;
  registerTool<P>(tool: ToolDefinition<P>): void;
  registerCommand(
    name: string,
    options: { description?: string; handler: (args: string, ctx: ExtensionCommandContext) => Promise<void> },
  ): void;
  logger: { warn(message: string, meta?: Record<string, unknown>): void; debug(message: string, meta?: Record<string, unknown>): void };
  /** The agent package's own exports (oh-my-pi only: pi has no `pi.pi`). */
  pi?: { getAgentDir(): string; VERSION?: string; settings?: { get?(key: string): unknown } };
}
