// The compactd extension: runs `compactd serve` as a language server (stdio, LSP framing), shows
// the open session as a tree and its context usage in the status bar, and offers compaction and
// tree navigation as commands.
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, StaticFeature, State } from 'vscode-languageclient/node';
import { ProgressEvent, ProgressUi } from './progress';
import {
  CompactResult,
  ErrorKind,
  errorKind,
  NavigateTreeResult,
  ServerNotifications,
  SessionInfo,
  SessionListResult,
  SessionTreeResult,
  SessionUsageResult,
  SummarizeParams,
} from 'compactd-client';
import { ServerChoice, resolveServer } from './server-path';
import { configuredPath, initializationSettings, useLanguageModel } from './settings';
import { statusText, statusTooltip } from './status';
import { summarizeWithLanguageModel } from './summarizer';
import { Item, ItemSnapshot, SessionTreeProvider } from './tree';

const LAST_SESSION_KEY = 'compactd.lastSessionPath';

/** Notifications that change what the tree view or the status bar show. */
const SESSION_EVENTS: (keyof ServerNotifications)[] = [
  'session/entriesAppended',
  'session/treeNavigated',
  'session/compactionStarted',
  'session/compactionFinished',
  'session/autoCompactionStarted',
  'session/autoCompactionFinished',
];

/** The error kind the extension shows as information, not as an error. */
const CANCELLED: ErrorKind = 'cancelled';

/** What a command that failed returns (its error was also shown to the user). */
export interface CommandError {
  error: { code?: number; kind?: string; message: string };
}

/** Returned by `activate()`: lets the extension's test suite look at what the UI shows. */
export interface TestApi {
  /** Every tree view item, depth first. */
  treeItems(): ItemSnapshot[];
  /** The status bar item's text (`ctx 142k / 184k`), or undefined when hidden. */
  statusText(): string | undefined;
  /** Every progress event seen since activation. */
  progressEvents(): ProgressEvent[];
  /** Fires on each progress event. */
  onProgress: vscode.Event<ProgressEvent>;
  /** The open session. */
  session(): SessionInfo | undefined;
  /** Waits until the client is running (after activation or a restart). */
  ready(): Promise<void>;
  /** Re-reads the tree and usage now. */
  refresh(): Promise<void>;
  /** Restarts the daemon (settings changes do this too) and reopens the session. */
  restart(): Promise<void>;
  /** Resolves once the restart that settings changes cause has finished. */
  settled(): Promise<void>;
  /** Sends a raw request to the daemon. */
  request<T>(method: string, params: unknown): Promise<T>;
  /** The daemon the extension started last, and where it came from (setting, bundled, PATH). */
  server(): ServerChoice | undefined;
}

/** Declares compactd's own client capabilities next to the LSP ones. */
class CompactdCapabilities implements StaticFeature {
  constructor(private readonly summarizer: boolean) {}
  fillClientCapabilities(capabilities: object): void {
    Object.assign(capabilities, { workDoneProgress: true, summarizer: this.summarizer });
  }
  initialize(): void {}
  getState() {
    return { kind: 'static' as const };
  }
  clear(): void {}
}

class Controller implements vscode.Disposable {
  private client?: LanguageClient;
  private clientDisposables: vscode.Disposable[] = [];
  private starting?: Promise<void>;
  private sessionInfo?: SessionInfo;
  readonly tree = new SessionTreeProvider();
  readonly view: vscode.TreeView<Item>;
  readonly status = vscode.window.createStatusBarItem('compactd.context', vscode.StatusBarAlignment.Left, 50);
  readonly progress = new ProgressUi();
  readonly output = vscode.window.createOutputChannel('compactd', { log: true });
  private refreshing?: Promise<void>;
  private refreshAgain = false;
  private refreshTimer?: NodeJS.Timeout;
  private restarting?: Promise<void>;
  private revealPending = false;
  private restartTimer?: NodeJS.Timeout;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.view = vscode.window.createTreeView('compactd.session', { treeDataProvider: this.tree, showCollapseAll: true });
    this.view.onDidChangeVisibility((e) => {
      if (e.visible && this.revealPending) void this.revealLeaf();
    });
    this.status.name = 'compactd context';
    this.status.command = 'compactd.compact';
  }

  get session(): SessionInfo | undefined {
    return this.sessionInfo;
  }

  /** Starts the daemon once; concurrent callers share the start. */
  ensureStarted(): Promise<void> {
    if (this.client?.state === State.Running) return Promise.resolve();
    this.starting ??= this.start().finally(() => (this.starting = undefined));
    return this.starting;
  }

  /** The daemon started last (for the test API and the log). */
  server?: ServerChoice;

  private async start(): Promise<void> {
    let choice: ServerChoice;
    try {
      choice = resolveServer({ configured: configuredPath(), extensionPath: this.context.extensionPath });
    } catch (err) {
      const message = `compactd: ${errorMessage(err)}`;
      this.output.appendLine(message);
      void vscode.window.showErrorMessage(message, 'Open Settings').then((pick) => {
        if (pick) void vscode.commands.executeCommand('workbench.action.openSettings', 'compactd.path');
      });
      throw new Error(message);
    }
    this.server = choice;
    const command = choice.command;
    this.output.appendLine(`starting ${command} serve (${choice.source})`);
    if (choice.source === 'bundled') ensureExecutable(command);
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const serverOptions: ServerOptions = { command, args: ['serve'], options: { cwd: folder } };
    const useLm = useLanguageModel();
    const clientOptions: LanguageClientOptions = {
      documentSelector: [],
      outputChannel: this.output,
      initializationOptions: { settings: initializationSettings(this.context.extension) },
      initializationFailedHandler: (err) => {
        this.output.appendLine(`initialize failed: ${String(err)}`);
        return false;
      },
    };
    const client = new LanguageClient('compactd', 'compactd', serverOptions, clientOptions);
    client.registerFeature(new CompactdCapabilities(useLm));
    this.client = client;
    try {
      await client.start();
    } catch (err) {
      this.client = undefined;
      void client.dispose().catch(() => undefined);
      const message = `compactd: could not start \`${command} serve\`: ${errorMessage(err)}`;
      void vscode.window.showErrorMessage(message, 'Open Settings').then((choice) => {
        if (choice) void vscode.commands.executeCommand('workbench.action.openSettings', 'compactd.path');
      });
      throw new Error(message);
    }
    this.installProgress(client);
    for (const method of SESSION_EVENTS) {
      this.clientDisposables.push(
        client.onNotification(method, (params: { sessionId?: string }) => {
          if (params?.sessionId === this.sessionInfo?.sessionId) this.scheduleRefresh();
        }),
      );
    }
    if (useLm) {
      this.clientDisposables.push(
        client.onRequest('summarizer/summarize', (params: SummarizeParams, token) => summarizeWithLanguageModel(params, token)),
      );
    }
    this.clientDisposables.push(
      client.onDidChangeState((e) => {
        if (e.newState === State.Stopped) this.progress.clear();
        // The client restarted the daemon by itself after a crash: its progress feature took
        // `window/workDoneProgress/create` back, and the new daemon has no session open.
        if (e.newState === State.Running && !this.starting && this.client === client) {
          this.installProgress(client);
          const open = this.sessionInfo?.path;
          if (open) void this.open({ path: open }).catch((err) => this.output.appendLine(`reopen: ${errorMessage(err)}`));
        }
      }),
    );
  }

  private progressHandler?: vscode.Disposable;

  private installProgress(client: LanguageClient): void {
    this.progressHandler?.dispose();
    this.progressHandler = this.progress.install(client);
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    for (const d of this.clientDisposables.splice(0)) d.dispose();
    this.progressHandler?.dispose();
    this.progressHandler = undefined;
    this.progress.clear();
    if (client) {
      try {
        await client.stop(5000);
      } catch (err) {
        this.output.appendLine(`stop: ${errorMessage(err)}`);
      }
    }
  }

  /** Restarts the daemon and reopens the session (settings are only read at `initialize`). */
  restart(): Promise<void> {
    // One restart at a time: a second request waits for the first, then restarts again.
    const run = async () => {
      const open = this.sessionInfo?.path;
      await this.stop();
      await this.ensureStarted();
      if (open) await this.open({ path: open });
    };
    const next = (this.restarting ?? Promise.resolve()).catch(() => undefined).then(run);
    this.restarting = next;
    void next.catch(() => undefined).finally(() => {
      if (this.restarting === next) this.restarting = undefined;
    });
    return next;
  }

  /** Restarts after settings changes, once the burst of changes is over. */
  settingsChanged(): void {
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      void this.restart().catch((err) => this.output.appendLine(`restart: ${errorMessage(err)}`));
    }, 250);
  }

  /** Resolves when no settings restart is pending or running. */
  async settled(): Promise<void> {
    while (this.restartTimer || this.restarting) {
      await (this.restarting?.catch(() => undefined) ?? new Promise((r) => setTimeout(r, 50)));
    }
  }

  async request<T>(method: string, params: unknown, token?: vscode.CancellationToken): Promise<T> {
    await this.ensureStarted();
    // An undefined token would be sent as a second positional param.
    return token ? this.client!.sendRequest<T>(method, params, token) : this.client!.sendRequest<T>(method, params);
  }

  // ---- session ------------------------------------------------------------------------

  /** Opens a session by path or id and shows it. */
  async open(params: { path?: string; sessionId?: string }): Promise<SessionInfo> {
    const info = await this.request<SessionInfo>('session/open', params);
    const previous = this.sessionInfo;
    this.sessionInfo = info;
    if (previous && previous.sessionId !== info.sessionId) {
      // Only one session is shown; keeping the old one open would keep its file locked.
      void this.request('session/close', { sessionId: previous.sessionId }).catch(() => undefined);
    }
    await this.context.workspaceState.update(LAST_SESSION_KEY, info.path);
    await vscode.commands.executeCommand('setContext', 'compactd.hasSession', true);
    this.view.title = 'Session';
    this.view.description = info.title ?? path.basename(info.path);
    await this.refresh();
    await this.revealLeaf();
    return info;
  }

  /** Reopens the session this workspace had open last, if its file still exists. */
  async reopenLast(): Promise<void> {
    const last = this.context.workspaceState.get<string>(LAST_SESSION_KEY);
    if (!last) return;
    try {
      await vscode.workspace.fs.stat(vscode.Uri.file(last));
    } catch {
      return;
    }
    await this.open({ path: last });
  }

  /** Scrolls the tree to the leaf and selects it (when the view is visible). */
  async revealLeaf(): Promise<void> {
    const leaf = this.tree.leafItem();
    // A hidden view cannot reveal: do it when it is next shown.
    this.revealPending = !this.view.visible;
    if (!leaf || this.revealPending) return;
    try {
      await this.view.reveal(leaf, { select: true, focus: false, expand: true });
    } catch (err) {
      this.output.appendLine(`reveal: ${errorMessage(err)}`);
    }
  }

  /** Re-reads the tree and usage; concurrent calls coalesce into at most one more read. */
  refresh(): Promise<void> {
    if (this.refreshing) {
      this.refreshAgain = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        await this.readOnce();
      } while (this.refreshAgain);
    })().finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private scheduleRefresh(): void {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => void this.refresh().catch((e) => this.output.appendLine(`refresh: ${errorMessage(e)}`)), 50);
  }

  private async readOnce(): Promise<void> {
    const session = this.sessionInfo;
    if (!session) {
      this.tree.setTree(undefined);
      this.status.hide();
      return;
    }
    const sessionId = session.sessionId;
    const [tree, usage] = await Promise.all([
      this.request<SessionTreeResult>('session/tree', { sessionId, includeEntries: true }),
      this.request<SessionUsageResult>('session/usage', { sessionId }),
    ]);
    let estimate: number | undefined;
    if (usage.contextTokens == null) {
      const context = await this.request<{ tokens: number }>('session/context', { sessionId });
      estimate = context.tokens;
    }
    if (this.sessionInfo?.sessionId !== sessionId) return;
    this.tree.setTree(tree);
    this.status.text = statusText(usage, estimate);
    this.status.tooltip = statusTooltip(usage, estimate);
    this.status.show();
    await vscode.commands.executeCommand('setContext', 'compactd.busy', usage.isCompacting || usage.isSummarizingBranch);
  }

  private requireSession(): SessionInfo {
    if (!this.sessionInfo) throw new UserError('Open a session first (compactd: Open Session).');
    return this.sessionInfo;
  }

  // ---- commands -----------------------------------------------------------------------

  /** `compactd.openSession [{path} | {sessionId}]`: without arguments, pick from a list. */
  async openSessionCommand(args?: { path?: string; sessionId?: string }): Promise<SessionInfo | undefined> {
    if (args?.path || args?.sessionId) return this.open(args);
    const { sessions } = await this.request<SessionListResult>('session/list', {});
    type Pick = vscode.QuickPickItem & { path?: string; browse?: boolean };
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const items: Pick[] = [
      { label: '$(file) Open a session file…', browse: true },
      ...sessions
        .sort((a, b) => Number(b.cwd === folder) - Number(a.cwd === folder))
        .map((s) => ({ label: s.title ?? s.sessionId, description: s.cwd, detail: `modified ${s.modified}`, path: s.path })),
    ];
    const choice = await vscode.window.showQuickPick(items, { title: 'Open a compactd session', matchOnDescription: true });
    if (!choice) return undefined;
    if (choice.browse) {
      const files = await vscode.window.showOpenDialog({
        canSelectMany: false,
        filters: { 'Session files': ['jsonl'] },
        openLabel: 'Open Session',
      });
      if (!files?.length) return undefined;
      return this.open({ path: files[0].fsPath });
    }
    return this.open({ path: choice.path });
  }

  /**
   * `compactd.compact [{instructions?, preview?}]`. With arguments it runs without asking
   * (`preview: true` returns the preview and writes nothing). Without, it asks for optional
   * instructions and whether to preview first.
   */
  async compactCommand(args?: { instructions?: string; preview?: boolean }): Promise<CompactResult | undefined> {
    const session = this.requireSession();
    if (args) return this.compact(session, args.instructions, args.preview ?? false);
    const instructions = await vscode.window.showInputBox({
      title: 'Compact Session',
      prompt: 'Focus for the summary (optional). Press Enter to continue.',
      placeHolder: 'e.g. Keep the list of failing tests',
    });
    if (instructions === undefined) return undefined;
    const how = await vscode.window.showQuickPick(
      [
        { label: 'Compact now', preview: false },
        { label: 'Preview the summary first', preview: true },
      ],
      { title: 'Compact Session' },
    );
    if (!how) return undefined;
    if (!how.preview) return this.compact(session, instructions, false);
    const preview = await this.compact(session, instructions, true);
    const doc = await vscode.workspace.openTextDocument({ language: 'markdown', content: previewText(preview) });
    await vscode.window.showTextDocument(doc, { preview: true });
    const ok = await vscode.window.showInformationMessage(
      'Compact the session now?',
      { modal: true, detail: 'The summary is written again when compacting, so the stored one may differ from this preview.' },
      'Compact',
    );
    return ok ? this.compact(session, instructions, false) : preview;
  }

  private async compact(session: SessionInfo, instructions: string | undefined, preview: boolean): Promise<CompactResult> {
    const result = await this.request<CompactResult>('session/compact', {
      sessionId: session.sessionId,
      customInstructions: instructions?.trim() || undefined,
      preview,
    });
    await this.refresh();
    if (!preview) {
      await this.revealLeaf();
      const after = result.tokensAfter != null ? ` → ~${result.tokensAfter.toLocaleString('en-US')}` : '';
      void vscode.window.showInformationMessage(
        `Compacted: ${result.tokensBefore.toLocaleString('en-US')}${after} tokens.${result.shortSummary ? ' ' + result.shortSummary : ''}`,
      );
    }
    return result;
  }

  /**
   * `compactd.navigateHere`: from the tree (the item), the palette (the selected item), or
   * with `{targetId, summarize: "none" | "summarize" | "instructions", instructions?}`.
   */
  async navigateCommand(arg?: Item | { targetId: string; summarize?: string; instructions?: string }): Promise<NavigateTreeResult | undefined> {
    const session = this.requireSession();
    let targetId: string | undefined;
    let choice: string | undefined;
    let instructions: string | undefined;
    if (arg && 'targetId' in arg) {
      targetId = arg.targetId;
      choice = arg.summarize ?? 'none';
      instructions = arg.instructions;
    } else {
      const item = arg && 'kind' in arg ? arg : this.view.selection[0];
      if (!item) throw new UserError('Select an entry in the compactd Session view first.');
      targetId = item.node.id;
    }
    if (choice === undefined) {
      const pick = await vscode.window.showQuickPick(
        [
          { label: 'No summary', description: 'just move the leaf', value: 'none' },
          { label: 'Summarize', description: 'summarize the branch being left', value: 'summarize' },
          { label: 'Summarize with instructions…', description: 'add a focus for the summary', value: 'instructions' },
        ],
        { title: 'Navigate Here' },
      );
      if (!pick) return undefined;
      choice = pick.value;
    }
    if (choice === 'instructions' && instructions === undefined) {
      instructions = await vscode.window.showInputBox({ title: 'Navigate Here', prompt: 'Instructions for the branch summary' });
      if (instructions === undefined) return undefined;
    }
    const result = await this.request<NavigateTreeResult>('session/navigateTree', {
      sessionId: session.sessionId,
      targetId,
      summarize: choice !== 'none',
      customInstructions: choice === 'instructions' ? instructions : undefined,
    });
    await this.refresh();
    await this.revealLeaf();
    if (result.cancelled) {
      void vscode.window.showInformationMessage(result.aborted ? 'Navigation aborted.' : 'Navigation cancelled.');
    } else if (result.editorText) {
      const text = result.editorText;
      void vscode.window
        .showInformationMessage(`Moved before the message "${text.length > 60 ? text.slice(0, 59) + '…' : text}".`, 'Copy Message')
        .then((c) => c && vscode.env.clipboard.writeText(text));
    }
    return result;
  }

  /**
   * `compactd.forkHere [item | {targetId?}]`: a new session of the branch up to the entry (the
   * selected one; a copy of the whole session when there is none), shown in the view instead of
   * the current one, which is not changed.
   */
  async forkCommand(arg?: Item | { targetId?: string }): Promise<SessionInfo> {
    const session = this.requireSession();
    const item = arg && 'kind' in arg ? arg : arg ? undefined : this.view.selection[0];
    const targetId = arg && 'targetId' in arg ? arg.targetId : item?.node.id;
    const forked = await this.request<SessionInfo>('session/fork', { sessionId: session.sessionId, entryId: targetId });
    const opened = await this.open({ path: forked.path });
    void vscode.window.showInformationMessage(`Forked into ${path.basename(forked.path)} (${forked.entryCount} entries).`);
    return opened;
  }

  /** `compactd.abortCompaction`: stops a running compaction, else a running branch summary. */
  async abortCommand(): Promise<{ aborted: boolean }> {
    const { sessionId } = this.requireSession();
    let result = await this.request<{ aborted: boolean }>('session/abortCompaction', { sessionId });
    if (!result.aborted) result = await this.request<{ aborted: boolean }>('session/abortBranchSummary', { sessionId });
    if (!result.aborted) void vscode.window.showInformationMessage('Nothing to abort.');
    return result;
  }

  dispose(): void {
    clearTimeout(this.refreshTimer);
    clearTimeout(this.restartTimer);
    void this.stop();
    this.view.dispose();
    this.status.dispose();
    this.progress.dispose();
    this.output.dispose();
  }
}

/** A .vsix may not keep the executable bit of the bundled binary: restore it. */
function ensureExecutable(file: string): void {
  try {
    fs.accessSync(file, fs.constants.X_OK);
  } catch {
    fs.chmodSync(file, 0o755);
  }
}

/** An error whose message is for the user as it is. */
class UserError extends Error {}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function previewText(r: CompactResult): string {
  const after = r.tokensAfter != null ? `, about ${r.tokensAfter} after` : '';
  return `<!-- compactd preview: nothing was written. ${r.tokensBefore} tokens before${after}; kept from entry ${r.firstKeptEntryId}. -->\n\n${r.summary}\n`;
}

/** Runs a command body; errors are shown and returned as `{error}` so callers can check them. */
function command<A extends unknown[], R>(controller: Controller, body: (...args: A) => Promise<R>) {
  return async (...args: A): Promise<R | CommandError> => {
    try {
      return await body(...args);
    } catch (err) {
      const kind = errorKind(err);
      const code = (err as { code?: number }).code;
      const message = errorMessage(err);
      controller.output.appendLine(`command failed: ${message}${kind ? ` (${kind})` : ''}`);
      if (kind === CANCELLED) void vscode.window.showInformationMessage(message);
      else void vscode.window.showErrorMessage(`compactd: ${message}`);
      return { error: { code, kind, message } };
    }
  };
}

export async function activate(context: vscode.ExtensionContext): Promise<TestApi> {
  const controller = new Controller(context);
  context.subscriptions.push(
    controller,
    vscode.commands.registerCommand('compactd.openSession', command(controller, (a?: { path?: string; sessionId?: string }) => controller.openSessionCommand(a))),
    vscode.commands.registerCommand('compactd.compact', command(controller, (a?: { instructions?: string; preview?: boolean }) => controller.compactCommand(a))),
    vscode.commands.registerCommand('compactd.navigateHere', command(controller, (a?: Item | { targetId: string; summarize?: string; instructions?: string }) => controller.navigateCommand(a))),
    vscode.commands.registerCommand('compactd.forkHere', command(controller, (a?: Item | { targetId?: string }) => controller.forkCommand(a))),
    vscode.commands.registerCommand('compactd.abortCompaction', command(controller, () => controller.abortCommand())),
    vscode.commands.registerCommand('compactd.refresh', command(controller, () => controller.refresh())),
    vscode.commands.registerCommand('compactd.restartServer', command(controller, () => controller.restart())),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('compactd')) controller.settingsChanged();
    }),
  );
  const started = controller
    .ensureStarted()
    .then(() => controller.reopenLast())
    .catch((err) => controller.output.appendLine(errorMessage(err)));

  return {
    treeItems: () => controller.tree.snapshot(),
    statusText: () => (controller.session ? controller.status.text : undefined),
    progressEvents: () => [...controller.progress.events],
    onProgress: controller.progress.onEvent,
    session: () => controller.session,
    ready: async () => {
      await started;
      await controller.ensureStarted();
    },
    refresh: () => controller.refresh(),
    restart: () => controller.restart(),
    settled: () => controller.settled(),
    request: <T>(method: string, params: unknown) => controller.request<T>(method, params),
    server: () => controller.server,
  };
}

export function deactivate(): void {}
