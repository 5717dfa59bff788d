/**
 * One `compactd serve` per agent process, spoken to through compactd's typed client
 * (`compactd-client`, clients/typescript: the protocol's types generated from schema/, on
 * vscode-jsonrpc): started on first use, initialised with this agent's settings, restarted on
 * the next use after it died. Its stderr is kept by the client (the tail goes into error
 * messages), never shown on the agent's stdout.
 */
import {
  type BackgroundCompaction,
  type ClientRequests,
  CompactdClient,
  type ProgressParams,
  type ServerRequestHandlers,
} from "compactd-client";

export const CLIENT_NAME = "compactd-oh-my-pi";
export const CLIENT_VERSION = "0.1.0";
const INITIALIZE_TIMEOUT_MS = 15_000;
const STDERR_LINES = 20;

export interface DaemonConfig {
  bin: string;
  /** The `initialize` settings layer. */
  settings: Record<string, unknown>;
  /** The server-to-client requests this agent answers (`summarizer/summarize` when the agent's
   * model writes summaries); the client declares their capabilities. */
  handlers: ServerRequestHandlers;
  onProgress(params: ProgressParams): void;
  /** `session/backgroundCompaction`: a draft started, is armed, was used or dropped. */
  onBackground(params: BackgroundCompaction): void;
}

/** compactd could not be started at all (missing binary, no permission): retrying is futile. */
export class DaemonMissing extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DaemonMissing";
  }
}

/** The daemon went away while a request was open. */
export class PeerClosed extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "PeerClosed";
  }
}

export class RequestTimeout extends Error {
  constructor(method: string, ms: number) {
    super(`${method} got no answer in ${ms} ms`);
    this.name = "RequestTimeout";
  }
}

/** One started daemon: its client, and why it ended once it has. */
interface Running {
  client: CompactdClient;
  ended: string | undefined;
}

export class Daemon {
  #config: DaemonConfig;
  #running: Promise<Running> | undefined;
  #last: Running | undefined;
  #generation = 0;

  constructor(config: DaemonConfig) {
    this.#config = config;
  }

  /** Bumped on every start, so callers know their open sessions belong to an older daemon. */
  get generation(): number {
    return this.#generation;
  }

  get pid(): number | undefined {
    return this.#last?.client.process.pid;
  }

  /** The last lines compactd wrote to stderr. */
  stderrTail(): string {
    const text = this.#last?.client.stderr ?? "";
    return text.split("\n").filter(line => line.trim()).slice(-STDERR_LINES).join("\n");
  }

  /** The running daemon, started (and initialised) if it is not running. */
  async client(): Promise<CompactdClient> {
    if (this.#running) {
      const running = await this.#running.catch(() => undefined);
      if (running && running.ended === undefined) return running.client;
    }
    this.#running = this.#start();
    return (await this.#running).client;
  }

  /** A typed request to the running daemon (started if need be); rejects with the client's
   * `CompactdError`, with `PeerClosed` when the daemon died, or after `timeoutMs` with
   * `RequestTimeout`. */
  async request<M extends keyof ClientRequests>(
    method: M,
    params: ClientRequests[M]["params"],
    timeoutMs?: number,
  ): Promise<ClientRequests[M]["result"]> {
    await this.client();
    const running = this.#last as Running;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const answer = running.client.request(method, params).catch((error: unknown) => {
      if (running.ended !== undefined) throw new PeerClosed(running.ended);
      throw error;
    });
    if (timeoutMs === undefined) return answer;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new RequestTimeout(method, timeoutMs)), timeoutMs);
    });
    try {
      return await Promise.race([answer, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Ends the daemon (on agent shutdown). */
  stop(): void {
    this.#last?.client.process.kill();
    this.#running = undefined;
  }

  async #start(): Promise<Running> {
    this.#generation++;
    let client: CompactdClient;
    try {
      // The daemon must not outlive the agent: compactd also exits when this process dies
      // (the client sends this process's id in `initialize`).
      client = await CompactdClient.start({
        command: this.#config.bin,
        args: ["serve"],
        clientInfo: { name: CLIENT_NAME, version: CLIENT_VERSION },
        settings: this.#config.settings,
        handlers: this.#config.handlers,
        initializeTimeoutMs: INITIALIZE_TIMEOUT_MS,
      });
    } catch (error) {
      const code = ((error as Error).cause as NodeJS.ErrnoException | undefined)?.code;
      if (code === "ENOENT") throw new DaemonMissing(`cannot start ${this.#config.bin}: not found`);
      if (code === "EACCES") throw new DaemonMissing(`cannot start ${this.#config.bin}: not executable`);
      throw error;
    }
    const running: Running = { client, ended: undefined };
    this.#last = running;
    client.onProgress(params => this.#config.onProgress(params));
    client.onNotification("session/backgroundCompaction", params => this.#config.onBackground(params));
    void client.exited.then(how => {
      running.ended = `compactd exited (${typeof how === "string" ? how : `code ${how}`})`;
    });
    return running;
  }
}
