/**
 * A small JSON-RPC 2.0 peer over a child process's stdio, newline-delimited (compactd answers
 * in NDJSON when the first byte it reads is `{`). Requests are matched to responses by id;
 * notifications and server-to-client requests go to the handlers given. When the process goes
 * away every pending request fails with `PeerClosed`.
 *
 * Kept in one file, with no dependencies, so it can be swapped for compactd's typed TypeScript
 * client once that package exists.
 */
import type { ChildProcessWithoutNullStreams } from "node:child_process";

export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: { kind?: string; [key: string]: unknown },
  ) {
    super(message);
    this.name = "RpcError";
  }

  get kind(): string | undefined {
    return this.data?.kind;
  }
}

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

type Params = Record<string, unknown> | undefined;

export interface PeerHandlers {
  onNotification?(method: string, params: unknown): void;
  /** Answers a server-to-client request; a throw becomes an error response. */
  onRequest?(method: string, params: unknown, id: number | string): Promise<unknown>;
}

interface Pending {
  method: string;
  resolve(value: unknown): void;
  reject(error: Error): void;
  timer?: ReturnType<typeof setTimeout>;
}

export class JsonRpcPeer {
  #proc: ChildProcessWithoutNullStreams;
  #handlers: PeerHandlers;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  #buffer = "";
  #closed: PeerClosed | undefined;

  constructor(proc: ChildProcessWithoutNullStreams, handlers: PeerHandlers) {
    this.#proc = proc;
    this.#handlers = handlers;
    proc.stdout.setEncoding("utf8");
    proc.stdout.on("data", (chunk: string) => this.#onData(chunk));
    proc.on("exit", (code, signal) => this.#close(`compactd exited (${signal ?? `code ${code}`})`));
    proc.on("error", error => this.#close(`compactd failed: ${error.message}`));
    proc.stdin.on("error", error => this.#close(`compactd's stdin failed: ${error.message}`));
  }

  get closed(): PeerClosed | undefined {
    return this.#closed;
  }

  /** Sends a request; rejects with `RpcError`, `PeerClosed` or (after `timeoutMs`) `RequestTimeout`. */
  request<T>(method: string, params?: Params, timeoutMs?: number): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closed);
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const pending: Pending = { method, resolve: value => resolve(value as T), reject };
      if (timeoutMs !== undefined) {
        pending.timer = setTimeout(() => {
          this.#pending.delete(id);
          reject(new RequestTimeout(method, timeoutMs));
        }, timeoutMs);
      }
      this.#pending.set(id, pending);
      this.#send({ jsonrpc: "2.0", id, method, params });
    });
  }

  notify(method: string, params?: Params): void {
    if (!this.#closed) this.#send({ jsonrpc: "2.0", method, params });
  }

  #send(message: object): void {
    this.#proc.stdin.write(`${JSON.stringify(message)}\n`);
  }

  #onData(chunk: string): void {
    this.#buffer += chunk;
    let newline = this.#buffer.indexOf("\n");
    while (newline >= 0) {
      const line = this.#buffer.slice(0, newline).trim();
      this.#buffer = this.#buffer.slice(newline + 1);
      if (line) this.#onLine(line);
      newline = this.#buffer.indexOf("\n");
    }
  }

  #onLine(line: string): void {
    let message: {
      id?: number | string | null;
      method?: string;
      params?: unknown;
      result?: unknown;
      error?: { code: number; message: string; data?: RpcError["data"] };
    };
    try {
      message = JSON.parse(line);
    } catch {
      // compactd writes only protocol messages to stdout; anything else is a bug to close on.
      this.#close(`compactd wrote a line that is not JSON: ${line.slice(0, 120)}`);
      this.#proc.kill();
      return;
    }
    if (message.method !== undefined && message.id !== undefined && message.id !== null) {
      void this.#answer(message.id, message.method, message.params);
    } else if (message.method !== undefined) {
      this.#handlers.onNotification?.(message.method, message.params);
    } else if (typeof message.id === "number") {
      const pending = this.#pending.get(message.id);
      if (!pending) return;
      this.#pending.delete(message.id);
      clearTimeout(pending.timer);
      if (message.error) {
        pending.reject(new RpcError(message.error.code, message.error.message, message.error.data));
      } else {
        pending.resolve(message.result);
      }
    }
  }

  async #answer(id: number | string, method: string, params: unknown): Promise<void> {
    try {
      const handler = this.#handlers.onRequest;
      if (!handler) throw new RpcError(-32601, `method not found: ${method}`);
      const result = await handler(method, params, id);
      this.#send({ jsonrpc: "2.0", id, result: result ?? null });
    } catch (error) {
      const code = error instanceof RpcError ? error.code : -32603;
      const text = error instanceof Error ? error.message : String(error);
      if (!this.#closed) this.#send({ jsonrpc: "2.0", id, error: { code, message: text } });
    }
  }

  #close(reason: string): void {
    if (this.#closed) return;
    this.#closed = new PeerClosed(reason);
    for (const pending of this.#pending.values()) {
      clearTimeout(pending.timer);
      pending.reject(this.#closed);
    }
    this.#pending.clear();
  }
}
