/**
 * One `compactd serve` per agent process: started on first use, initialised with this agent's
 * settings, restarted on the next use after it died. Its stderr is kept (the tail goes into
 * error messages), never shown on the agent's stdout.
 */
import { spawn } from "node:child_process";
import { JsonRpcPeer, PeerClosed } from "./jsonrpc";

export const CLIENT_NAME = "compactd-oh-my-pi";
export const CLIENT_VERSION = "0.1.0";
const INITIALIZE_TIMEOUT_MS = 15_000;
const STDERR_LINES = 20;

export interface DaemonConfig {
  bin: string;
  /** The `initialize` settings layer. */
  settings: Record<string, unknown>;
  /** Declare the `summarizer/summarize` capability (the agent's model answers). */
  clientSummarizer: boolean;
  onNotification(method: string, params: unknown): void;
  onRequest(method: string, params: unknown, id: number | string): Promise<unknown>;
}

/** compactd could not be started at all (missing binary, no permission): retrying is futile. */
export class DaemonMissing extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DaemonMissing";
  }
}

export class Daemon {
  #config: DaemonConfig;
  #peer: Promise<JsonRpcPeer> | undefined;
  #pid: number | undefined;
  #stderr: string[] = [];
  #generation = 0;
  #kill: (() => void) | undefined;

  constructor(config: DaemonConfig) {
    this.#config = config;
  }

  /** Bumped on every start, so callers know their open sessions belong to an older daemon. */
  get generation(): number {
    return this.#generation;
  }

  get pid(): number | undefined {
    return this.#pid;
  }

  /** The last lines compactd wrote to stderr. */
  stderrTail(): string {
    return this.#stderr.join("\n");
  }

  /** The running daemon, started (and initialised) if it is not running. */
  async peer(): Promise<JsonRpcPeer> {
    if (this.#peer) {
      const peer = await this.#peer.catch(() => undefined);
      if (peer && !peer.closed) return peer;
    }
    this.#peer = this.#start();
    return this.#peer;
  }

  /** Ends the daemon (on agent shutdown). */
  stop(): void {
    this.#kill?.();
    this.#peer = undefined;
  }

  async #start(): Promise<JsonRpcPeer> {
    this.#generation++;
    this.#stderr = [];
    const proc = spawn(this.#config.bin, ["serve"], { stdio: ["pipe", "pipe", "pipe"] });
    const spawned = new Promise<void>((resolve, reject) => {
      proc.once("spawn", () => resolve());
      proc.once("error", error => {
        const code = (error as NodeJS.ErrnoException).code;
        const why = code === "ENOENT" ? "not found" : code === "EACCES" ? "not executable" : error.message;
        reject(new DaemonMissing(`cannot start ${this.#config.bin}: ${why}`));
      });
    });
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", (chunk: string) => {
      for (const line of chunk.split("\n")) {
        if (!line.trim()) continue;
        this.#stderr.push(line);
        if (this.#stderr.length > STDERR_LINES) this.#stderr.shift();
      }
    });
    const peer = new JsonRpcPeer(proc, {
      onNotification: (method, params) => this.#config.onNotification(method, params),
      onRequest: (method, params, id) => this.#config.onRequest(method, params, id),
    });
    this.#kill = () => proc.kill();
    await spawned;
    this.#pid = proc.pid;
    // The daemon must not outlive the agent: compactd also exits when this process dies.
    await peer.request(
      "initialize",
      {
        processId: process.pid,
        clientInfo: { name: CLIENT_NAME, version: CLIENT_VERSION },
        capabilities: { summarizer: this.#config.clientSummarizer, workDoneProgress: false },
        initializationOptions: { settings: this.#config.settings },
      },
      INITIALIZE_TIMEOUT_MS,
    ).catch(error => {
      proc.kill();
      const tail = this.stderrTail();
      throw error instanceof PeerClosed && tail ? new PeerClosed(`${error.message}: ${tail}`) : error;
    });
    peer.notify("initialized", {});
    return peer;
  }
}
