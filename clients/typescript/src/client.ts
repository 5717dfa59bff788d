// A typed client for `compactd serve` over stdio, on vscode-jsonrpc (LSP framing). It spawns
// the daemon, runs `initialize` / `initialized`, and types every request, notification and
// server-to-client request by the method tables generated from the schema (./protocol).
import * as cp from 'child_process';
import * as rpc from 'vscode-jsonrpc/node';
import type {
  ClientCapabilities,
  ClientInfo,
  ClientNotifications,
  ClientRequests,
  ErrorKind,
  InitializeResult,
  ProgressParams,
  ProgressToken,
  ServerNotifications,
  ServerRequests,
} from './protocol';
import { ERROR_CODES } from './protocol';

export { CancellationToken, CancellationTokenSource, Disposable } from 'vscode-jsonrpc/node';

/** Answers one server-to-client request. */
export type ServerRequestHandler<M extends keyof ServerRequests> = (
  params: ServerRequests[M]['params'],
  token: rpc.CancellationToken,
) => ServerRequests[M]['result'] | Promise<ServerRequests[M]['result']>;

/** The server-to-client requests a client answers; each one given is declared in `initialize`. */
export type ServerRequestHandlers = {
  [M in Exclude<keyof ServerRequests, 'window/workDoneProgress/create'>]?: ServerRequestHandler<M>;
};

export interface StartOptions {
  /** The executable (default `compactd` on `PATH`). */
  command?: string;
  /** Its arguments (default `["serve"]`). */
  args?: string[];
  cwd?: string;
  /** The daemon's environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Sent as `initialize.clientInfo` (default `compactd-client`). */
  clientInfo?: ClientInfo;
  /** This connection's settings layer (`initializationOptions.settings`), e.g. `{ summarizer: { kind: "extractive" } }`. */
  settings?: Record<string, unknown>;
  /** Answers for `summarizer/summarize` and the hooks; their capabilities are declared for you. */
  handlers?: ServerRequestHandlers;
  /** Notification methods the daemon should not send (e.g. `session/compactionDelta`). */
  optOutNotifications?: (keyof ServerNotifications)[];
  /** What to do with the daemon's stderr (its logs): keep the last 64 KiB (default), or pass it on. */
  stderr?: 'keep' | 'inherit' | 'ignore';
  /** Milliseconds to wait for the `initialize` answer (default 30 000). */
  initializeTimeoutMs?: number;
}

/** An error answer from the daemon, with the protocol's `data.kind` (docs/protocol.md, errors). */
export class CompactdError extends Error {
  constructor(
    readonly method: string,
    readonly code: number,
    message: string,
    readonly kind: ErrorKind | undefined,
    readonly data: unknown,
  ) {
    super(message);
    this.name = 'CompactdError';
  }
}

/** The `data.kind` of a compactd error (or of a raw JSON-RPC error object), if it has one. */
export function errorKind(err: unknown): ErrorKind | undefined {
  if (err instanceof CompactdError) return err.kind;
  const kind = (err as { data?: { kind?: unknown } } | undefined)?.data?.kind;
  return typeof kind === 'string' && kind in ERROR_CODES ? (kind as ErrorKind) : undefined;
}

const STDERR_KEEP = 64 * 1024;

/** One `compactd serve` child process and its JSON-RPC connection. */
export class CompactdClient {
  private stderrText = '';
  private closing = false;

  private constructor(
    readonly process: cp.ChildProcessWithoutNullStreams,
    readonly connection: rpc.MessageConnection,
    /** Resolves with the exit code (or the signal's name) when the daemon exits. */
    readonly exited: Promise<number | string>,
  ) {}

  /** The `initialize` result: server info, capabilities, protocol version. */
  initializeResult!: InitializeResult;

  /** Spawns the daemon and initializes it. Rejects if it cannot start or `initialize` fails. */
  static async start(options: StartOptions = {}): Promise<CompactdClient> {
    const command = options.command ?? 'compactd';
    const proc = cp.spawn(command, options.args ?? ['serve'], {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['pipe', 'pipe', options.stderr === 'inherit' ? 'inherit' : 'pipe'],
    }) as cp.ChildProcessWithoutNullStreams;
    const spawned = new Promise<void>((resolve, reject) => {
      proc.once('spawn', resolve);
      // `cause` keeps the spawn error's `code` (ENOENT, EACCES) for callers that tell them apart.
      proc.once('error', (err) => reject(new Error(`cannot start \`${command}\`: ${err.message}`, { cause: err })));
    });
    const exited = new Promise<number | string>((resolve) =>
      proc.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
    );
    await spawned;
    const connection = rpc.createMessageConnection(
      new rpc.StreamMessageReader(proc.stdout),
      new rpc.StreamMessageWriter(proc.stdin),
    );
    const client = new CompactdClient(proc, connection, exited);
    if (proc.stderr) {
      proc.stderr.on('data', (chunk: Buffer) => {
        if (options.stderr === 'ignore') return;
        client.stderrText = (client.stderrText + chunk.toString('utf8')).slice(-STDERR_KEEP);
      });
    }
    // The daemon asks before it reports server-initiated progress; `onProgress` shows it.
    connection.onRequest('window/workDoneProgress/create', () => null);
    const capabilities: ClientCapabilities = {
      workDoneProgress: true,
      window: { workDoneProgress: true },
      hooks: {},
      optOutNotifications: options.optOutNotifications,
    };
    for (const [method, handler] of Object.entries(options.handlers ?? {})) {
      if (!handler) continue;
      connection.onRequest(method, handler as rpc.GenericRequestHandler<unknown, unknown>);
      if (method === 'summarizer/summarize') capabilities.summarizer = true;
      else if (method.startsWith('hooks/')) (capabilities.hooks as Record<string, boolean>)[method.slice(6)] = true;
    }
    void exited.then(() => connection.dispose());
    connection.listen();
    try {
      const init = client.request('initialize', {
        processId: process.pid,
        clientInfo: options.clientInfo ?? { name: 'compactd-client', version: '0.1.0' },
        capabilities,
        initializationOptions: options.settings ? { settings: options.settings } : undefined,
      });
      client.initializeResult = await withTimeout(init, options.initializeTimeoutMs ?? 30_000, () => {
        return `compactd did not answer initialize${client.stderrText ? `; stderr: ${client.stderrText.slice(-2000)}` : ''}`;
      });
      await client.notify('initialized', {});
    } catch (err) {
      proc.kill('SIGKILL');
      throw err;
    }
    return client;
  }

  /** Sends a request; a `token` cancels it (`$/cancelRequest`). Errors reject as `CompactdError`. */
  async request<M extends keyof ClientRequests>(
    method: M,
    params: ClientRequests[M]['params'],
    token?: rpc.CancellationToken,
  ): Promise<ClientRequests[M]['result']> {
    try {
      // An undefined token would be sent as a second positional parameter.
      return token
        ? await this.connection.sendRequest(method, params, token)
        : await this.connection.sendRequest(method, params);
    } catch (err) {
      if (err instanceof rpc.ResponseError) {
        throw new CompactdError(method, err.code, err.message, errorKind(err), err.data);
      }
      throw err;
    }
  }

  /** Sends a notification. */
  notify<M extends keyof ClientNotifications>(method: M, params: ClientNotifications[M]): Promise<void> {
    return this.connection.sendNotification(method, params);
  }

  /** Calls `handler` for every `method` notification (session events). */
  onNotification<M extends keyof ServerNotifications>(
    method: M,
    handler: (params: ServerNotifications[M]) => void,
  ): rpc.Disposable {
    if (method === '$/progress') return this.onProgress(handler as (params: ProgressParams) => void);
    return this.connection.onNotification(method, handler as rpc.NotificationHandler<unknown>);
  }

  /** Calls `handler` for every `$/progress` (begin, report, end of compactions and branch summaries). */
  onProgress(handler: (params: ProgressParams) => void): rpc.Disposable {
    return this.connection.onUnhandledProgress((params) => handler(params as ProgressParams));
  }

  /** Cancels the operation behind a progress token, as an editor's Cancel button does. */
  cancelProgress(token: ProgressToken): Promise<void> {
    return this.notify('window/workDoneProgress/cancel', { token });
  }

  /** The last 64 KiB of the daemon's stderr (its logs). */
  get stderr(): string {
    return this.stderrText;
  }

  /**
   * `shutdown` then `exit`, and waits for the process to end (killing it after `timeoutMs`).
   * Resolves with its exit code (0 after a clean shutdown).
   */
  async close(timeoutMs = 5000): Promise<number | string> {
    if (!this.closing) {
      this.closing = true;
      try {
        await withTimeout(this.request('shutdown', null), timeoutMs, () => 'shutdown timed out');
        await this.notify('exit', null);
      } catch {
        // Already gone, or not answering: the kill below ends it.
      }
    }
    const timer = setTimeout(() => this.process.kill('SIGKILL'), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
      this.connection.dispose();
    }
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, message: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message())), ms))),
  ]);
}
