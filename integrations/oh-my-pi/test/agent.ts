/**
 * Drives the real oh-my-pi agent, or pi, in `--mode rpc` (one JSON object a line on
 * stdin/stdout): commands with ids matched to their responses, every other line kept as an
 * event. Also writes the agent's directory (models, config or settings) for a run against the
 * fake model.
 */
import { type Subprocess, spawn } from "bun";
import * as fs from "node:fs";
import * as path from "node:path";

/** How to start the agent, before `--mode rpc` and the extensions. */
export interface AgentCommand {
  argv: string[];
}

/** oh-my-pi: its `src/cli.ts` (of the installed `@oh-my-pi/pi-coding-agent`) run by `bun`. */
export function ompCommand(agentPkg: string, bun: string): AgentCommand {
  return { argv: [bun, path.join(agentPkg, "src/cli.ts")] };
}

/** pi: its `dist/cli.js` (of the installed `@mariozechner/pi-coding-agent`) run by Node, offline. */
export function piCommand(piPkg: string): AgentCommand {
  return { argv: [process.env.NODE ?? "node", path.join(piPkg, "dist/cli.js"), "--offline"] };
}

export interface AgentSetup {
  baseUrl: string;
  contextWindow: number;
  /** `compaction` settings of the agent's config.yml. */
  compaction: Record<string, number | boolean>;
  /** Extension files loaded with `-e`. */
  extensions: string[];
  /** Environment added to the agent's (e.g. where compactd is). */
  env?: Record<string, string>;
  /** The extension's options file (`compactd.json` in the agent dir), when given. */
  compactdOptions?: Record<string, unknown>;
}

export type AgentEvent = Record<string, unknown> & { type: string };

export interface RpcResponse {
  id?: string;
  type: "response";
  command: string;
  success: boolean;
  data?: unknown;
  error?: string;
}

export const PROVIDER = "fake";
export const MODEL = "fake-model";

/** Writes the agent dir: models.json (the fake provider) and config.yml. */
export function writeAgentDir(dir: string, setup: AgentSetup): void {
  fs.mkdirSync(dir, { recursive: true });
  const models = {
    providers: {
      [PROVIDER]: {
        baseUrl: setup.baseUrl,
        apiKey: "fake-key",
        api: "openai-completions",
        models: [
          {
            id: MODEL,
            name: "Fake model",
            reasoning: false,
            input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
            contextWindow: setup.contextWindow,
            maxTokens: 2048,
          },
        ],
      },
    },
  };
  fs.writeFileSync(path.join(dir, "models.json"), JSON.stringify(models, null, 2));
  const compaction = Object.entries(setup.compaction)
    .map(([k, v]) => `  ${k}: ${v}`)
    .join("\n");
  const config = [`modelRoles:`, `  default: ${PROVIDER}/${MODEL}`, `compaction:`, compaction, ""].join("\n");
  fs.writeFileSync(path.join(dir, "config.yml"), config);
  // pi reads settings.json instead (and has no thresholdTokens: it compacts at window - reserve).
  const settings = { defaultProvider: PROVIDER, defaultModel: MODEL, compaction: setup.compaction };
  fs.writeFileSync(path.join(dir, "settings.json"), JSON.stringify(settings, null, 2));
  if (setup.compactdOptions) {
    fs.writeFileSync(path.join(dir, "compactd.json"), JSON.stringify(setup.compactdOptions, null, 2));
  }
}

export class Agent {
  readonly events: AgentEvent[] = [];
  readonly stderr: string[] = [];
  #proc: Subprocess<"pipe", "pipe", "pipe">;
  #pending = new Map<string, (r: RpcResponse) => void>();
  #nextId = 0;
  #eventWaiters: { test: (e: AgentEvent) => boolean; resolve: (e: AgentEvent) => void }[] = [];
  #exited: Promise<number>;

  constructor(command: AgentCommand, agentDir: string, cwd: string, setup: AgentSetup) {
    const args = [...command.argv, "--mode", "rpc"];
    for (const ext of setup.extensions) args.push("-e", ext);
    this.#proc = spawn(args, {
      cwd,
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, ...setup.env, PI_CODING_AGENT_DIR: agentDir, NO_COLOR: "1" },
    });
    this.#exited = this.#proc.exited;
    void this.#readLines(this.#proc.stdout, line => this.#onLine(line));
    void this.#readLines(this.#proc.stderr, line => this.stderr.push(line));
  }

  get pid(): number {
    return this.#proc.pid;
  }

  async #readLines(stream: ReadableStream<Uint8Array>, onLine: (line: string) => void): Promise<void> {
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of stream) {
      buf += decoder.decode(chunk, { stream: true });
      let nl = buf.indexOf("\n");
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) onLine(line);
        nl = buf.indexOf("\n");
      }
    }
  }

  #onLine(line: string): void {
    let msg: AgentEvent;
    try {
      msg = JSON.parse(line) as AgentEvent;
    } catch {
      this.stderr.push(`[non-JSON stdout] ${line}`);
      return;
    }
    if (msg.type === "response") {
      // A command that throws is answered without its id (`command: "parse"`); commands are
      // handled one at a time, so it belongs to the oldest pending one.
      const id = typeof msg.id === "string" && this.#pending.has(msg.id) ? msg.id : this.#pending.keys().next().value;
      if (id !== undefined) {
        const resolve = this.#pending.get(id)!;
        this.#pending.delete(id);
        resolve(msg as unknown as RpcResponse);
        return;
      }
    }
    this.events.push(msg);
    for (const waiter of [...this.#eventWaiters]) {
      if (waiter.test(msg)) {
        this.#eventWaiters.splice(this.#eventWaiters.indexOf(waiter), 1);
        waiter.resolve(msg);
      }
    }
  }

  /** Sends a command and waits for its response (at most `timeoutMs`). */
  async command(cmd: Record<string, unknown> & { type: string }, timeoutMs = 60_000): Promise<RpcResponse> {
    const id = `t${++this.#nextId}`;
    const response = new Promise<RpcResponse>(resolve => this.#pending.set(id, resolve));
    this.#proc.stdin.write(`${JSON.stringify({ ...cmd, id })}\n`);
    this.#proc.stdin.flush();
    return withTimeout(response, timeoutMs, `agent command ${cmd.type}`, () => this.diagnostics());
  }

  /** Like `command`, but fails unless the response is a success; returns its data. */
  async ok<T = unknown>(cmd: Record<string, unknown> & { type: string }, timeoutMs = 60_000): Promise<T> {
    const r = await this.command(cmd, timeoutMs);
    if (!r.success) throw new Error(`agent ${cmd.type} failed: ${r.error}\n${this.diagnostics()}`);
    return r.data as T;
  }

  /** The next event (from now on, or already seen when `since` is given) matching `test`. */
  waitForEvent(test: (e: AgentEvent) => boolean, timeoutMs = 60_000, since?: number): Promise<AgentEvent> {
    if (since !== undefined) {
      const seen = this.events.slice(since).find(test);
      if (seen) return Promise.resolve(seen);
    }
    const found = new Promise<AgentEvent>(resolve => this.#eventWaiters.push({ test, resolve }));
    return withTimeout(found, timeoutMs, "agent event", () => this.diagnostics());
  }

  /** Waits until the agent is neither streaming nor compacting (a threshold compaction and its
   * "continue" turn may follow a turn's `agent_end`). */
  async waitIdle(timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let quiet = 0;
    while (Date.now() < deadline) {
      const state = await this.ok<{ isStreaming: boolean; isCompacting: boolean }>({ type: "get_state" });
      quiet = !state.isStreaming && !state.isCompacting ? quiet + 1 : 0;
      // Twice in a row, 150 ms apart: a compaction's follow-up turn starts on a timer.
      if (quiet >= 2) return;
      await Bun.sleep(150);
    }
    throw new Error(`the agent did not become idle in ${timeoutMs} ms\n${this.diagnostics()}`);
  }

  /** Sends a prompt and waits for the run (and whatever compaction follows) to finish. */
  async prompt(message: string, timeoutMs = 60_000): Promise<void> {
    const since = this.events.length;
    await this.ok({ type: "prompt", message }, timeoutMs);
    await this.waitForEvent(e => e.type === "agent_end", timeoutMs, since);
    await this.waitIdle(timeoutMs);
  }

  /** Runs an extension command (`/name args`); it ends with a notification matching `done`. */
  async runCommand(text: string, done: (message: string) => boolean, timeoutMs = 60_000): Promise<void> {
    const since = this.events.length;
    await this.ok({ type: "prompt", message: text }, timeoutMs);
    await this.waitForEvent(e => e.type === "extension_ui_request" && e.method === "notify" && done(String(e.message)), timeoutMs, since);
    await this.waitIdle(timeoutMs);
  }

  /** The notifications extensions showed (`ctx.ui.notify`), in order. */
  notices(): { message: string; notifyType?: string }[] {
    return this.events
      .filter(e => e.type === "extension_ui_request" && e.method === "notify")
      .map(e => ({ message: String(e.message), notifyType: e.notifyType as string | undefined }));
  }

  diagnostics(): string {
    const tail = this.events.slice(-15).map(e => JSON.stringify(e).slice(0, 400));
    return `--- last agent events ---\n${tail.join("\n")}\n--- agent stderr ---\n${this.stderr.slice(-30).join("\n")}`;
  }

  async stop(): Promise<void> {
    try {
      this.#proc.stdin.end();
    } catch {
      // already closed
    }
    const exited = await Promise.race([this.#exited, Bun.sleep(5_000).then(() => undefined)]);
    if (exited === undefined) this.#proc.kill("SIGKILL");
    await this.#exited;
  }
}

export async function withTimeout<T>(p: Promise<T>, ms: number, what: string, detail?: () => string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}\n${detail?.() ?? ""}`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
