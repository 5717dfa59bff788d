// The compactd extension: runs `compactd serve` as a language server (stdio, LSP framing), shows
// the open session as a tree and its context usage in the status bar, and offers compaction and
// tree navigation as commands.
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, StaticFeature, State } from 'vscode-languageclient/node';
import { ProgressEvent, ProgressUi } from './progress';
import {
  BackgroundCompaction,
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
  UndoCompactionResult,
} from 'compactd-client';
import { ServerChoice, resolveServer } from './server-path';
import { configuredPath, initializationSettings, useLanguageModel } from './settings';
import { PreviewDocuments } from './preview';
import { BackgroundView, backgroundFromEvent, backgroundFromUsage, discardReasonText, isFlash, statusText, statusTooltip } from './status';
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

/** Error kinds the extension shows as information, not as an error. */
const INFORMATIONAL: ErrorKind[] = ['cancelled', 'nothingToUndo'];

/** How long the status item shows that a background compaction was committed or discarded. */
const BACKGROUND_FLASH_MS = 10_000;

/** How often the status item re-reads `session/usage` while a background compaction drafts. */
const BACKGROUND_POLL_MS = 1000;

/** A message the extension showed (kept for the test API). */
export interface ShownMessage {
  level: 'info' | 'warning' | 'error';
  text: string;
}

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
  /** The status bar item's hover text. */
  statusTooltip(): string | undefined;
  /** Every status bar text shown since activation, oldest first (each change once). */
  statusHistory(): string[];
  /** Every message the extension showed since activation, oldest first. */
  messages(): ShownMessage[];
  /** Whether an editor tab shows the document with this URI. */
  isShown(uri: string): boolean;
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
  readonly previews = new PreviewDocuments();
  /** The status item's texts so far, and the messages shown (for the test API). */
  readonly statusLog: string[] = [];
  readonly shown: ShownMessage[] = [];
  private usage?: { usage: SessionUsageResult; estimate?: number };
  private background?: BackgroundView;
  /** Counts `session/backgroundCompaction` events: a usage read older than the latest event does not override it. */
  private backgroundEvents = 0;
  private backgroundFlashTimer?: NodeJS.Timeout;
  private backgroundPollTimer?: NodeJS.Timeout;

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
    this.clientDisposables.push(
      client.onNotification('session/backgroundCompaction', (params: BackgroundCompaction) => {
        if (params?.sessionId === this.sessionInfo?.sessionId) this.backgroundEvent(params);
      }),
    );
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
    if (previous?.sessionId !== info.sessionId) this.setBackground(undefined);
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
    const events = this.backgroundEvents;
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
    this.usage = { usage, estimate };
    if (events === this.backgroundEvents) {
      // No event since the read began: the usage is the latest word on the background compaction.
      const current = backgroundFromUsage(usage);
      const flashing = isFlash(this.background?.state);
      if (current || !flashing) this.setBackground(current);
    }
    this.renderStatus();
    await vscode.commands.executeCommand('setContext', 'compactd.busy', usage.isCompacting || usage.isSummarizingBranch);
  }

  // ---- status item ----------------------------------------------------------------------

  /** Shows the latest usage with the background compaction's state. */
  private renderStatus(): void {
    if (!this.usage || !this.sessionInfo) return;
    const { usage, estimate } = this.usage;
    const text = statusText(usage, estimate, this.background);
    this.status.text = text;
    this.status.tooltip = statusTooltip(usage, estimate, this.background);
    this.status.show();
    if (this.statusLog[this.statusLog.length - 1] !== text) {
      this.statusLog.push(text);
      if (this.statusLog.length > 500) this.statusLog.shift();
    }
  }

  private setBackground(view: BackgroundView | undefined): void {
    this.background = view;
    clearTimeout(this.backgroundPollTimer);
    this.backgroundPollTimer = undefined;
    if (!isFlash(view?.state)) {
      clearTimeout(this.backgroundFlashTimer);
      this.backgroundFlashTimer = undefined;
    }
    // `session/usage` has the phase and chunk of a drafting compaction: read it again soon.
    if (view?.state === 'running') this.backgroundPollTimer = setTimeout(() => this.scheduleRefresh(), BACKGROUND_POLL_MS);
  }

  /** `session/backgroundCompaction`: show the new state now, then re-read the usage. */
  private backgroundEvent(event: BackgroundCompaction): void {
    this.backgroundEvents++;
    const view = backgroundFromEvent(event);
    this.setBackground(view);
    if (isFlash(view.state)) {
      this.output.appendLine(
        `background compaction ${event.operationId} ${view.state}${view.state === 'discarded' ? `: ${discardReasonText(view.reason)}${view.message ? ` (${view.message})` : ''}` : ''}`,
      );
      clearTimeout(this.backgroundFlashTimer);
      this.backgroundFlashTimer = setTimeout(() => {
        this.backgroundFlashTimer = undefined;
        if (this.background === view) {
          this.setBackground(undefined);
          this.renderStatus();
        }
      }, BACKGROUND_FLASH_MS);
    }
    this.renderStatus();
    this.scheduleRefresh();
  }

  /** Shows a message and keeps it for the test API. */
  show(level: ShownMessage['level'], text: string, ...actions: string[]): Thenable<string | undefined> {
    this.shown.push({ level, text });
    if (this.shown.length > 500) this.shown.shift();
    const fn =
      level === 'error' ? vscode.window.showErrorMessage : level === 'warning' ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
    return fn(text, ...actions);
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
    return (await this.previewCommand({ instructions }))?.result;
  }

  /**
   * `compactd.previewCompaction [{instructions?}]`: summarises without writing and opens the
   * summary as an editable document, to commit (with the user's edits) or discard. Without
   * arguments it asks for optional instructions first.
   */
  async previewCommand(args?: { instructions?: string }): Promise<{ uri: string; previewId: string; result: CompactResult } | undefined> {
    const session = this.requireSession();
    let instructions = args?.instructions;
    if (!args) {
      instructions = await vscode.window.showInputBox({
        title: 'Preview Compaction',
        prompt: 'Focus for the summary (optional). Press Enter to continue.',
        placeHolder: 'e.g. Keep the list of failing tests',
      });
      if (instructions === undefined) return undefined;
    }
    const result = await this.compact(session, instructions, true);
    const doc = await this.previews.open(session.sessionId, result);
    return { uri: doc.uri.toString(), previewId: result.previewId!, result };
  }

  /**
   * `compactd.commitCompaction [uri]`: writes the preview shown in the document (the active
   * editor's, or `uri`'s) with the document's text as the summary when the user changed it.
   * A preview the session moved past is refused by the daemon: the document stays, marked stale.
   */
  async commitCommand(arg?: vscode.Uri | string): Promise<CompactResult> {
    const doc = this.previews.find(arg);
    const preview = this.previews.get(doc);
    if (!doc || !preview) throw new UserError('The active editor is no compaction preview (compactd: Preview Compaction opens one).');
    const text = doc.getText();
    if (!text.trim()) throw new UserError('The summary is empty: write one, or discard the preview.');
    const edited = text.trim() !== preview.original.trim();
    let result: CompactResult;
    try {
      result = await this.request<CompactResult>('session/commitCompaction', {
        sessionId: preview.sessionId,
        previewId: preview.previewId,
        summary: edited ? text : undefined,
      });
    } catch (err) {
      const kind = errorKind(err);
      if (kind !== 'leafMoved' && kind !== 'previewNotFound') throw err;
      const why =
        kind === 'leafMoved'
          ? 'the session changed since this preview (an append, a navigation or another compaction)'
          : 'the preview expired, was committed already, or its session was closed';
      this.previews.markStale(doc, why);
      void this.show('warning', `compactd: nothing was written: ${why}. Preview again to compact the session as it is now.`, 'Preview Again').then(
        (pick) => pick && vscode.commands.executeCommand('compactd.previewCompaction'),
      );
      throw new ShownError(err);
    }
    await this.previews.close(doc);
    if (preview.sessionId === this.sessionInfo?.sessionId) {
      await this.refresh();
      await this.revealLeaf();
    }
    const after = result.tokensAfter != null ? ` → ~${result.tokensAfter.toLocaleString('en-US')}` : '';
    void this.show('info', `Compacted${edited ? ' with your summary' : ''}: ${result.tokensBefore.toLocaleString('en-US')}${after} tokens.`);
    return result;
  }

  /** `compactd.discardPreview [uri]`: closes the preview document; nothing is written. */
  async discardCommand(arg?: vscode.Uri | string): Promise<{ discarded: boolean }> {
    const doc = this.previews.find(arg);
    if (!doc) throw new UserError('The active editor is no compaction preview.');
    await this.previews.close(doc);
    return { discarded: true };
  }

  /**
   * `compactd.undoCompaction [item | {entryId?}]`: undoes the latest compaction on the branch
   * (or the one given); the summarised messages come back into the context. The answer offers
   * Redo, which undoes the undo.
   */
  async undoCommand(arg?: Item | { entryId?: string }): Promise<UndoCompactionResult> {
    const { sessionId } = this.requireSession();
    const entryId = arg && 'kind' in arg ? arg.node.id : arg?.entryId;
    const result = await this.request<UndoCompactionResult>('session/undoCompaction', { sessionId, entryId });
    await this.refresh();
    await this.revealLeaf();
    const what = result.restored ? 'Put the compaction back' : 'Undid the compaction: its summarised messages are back in the context';
    void this.show('info', `${what} (${result.entryIds.length - 1} entries copied).`, 'Redo').then(async (pick) => {
      if (pick) await vscode.commands.executeCommand('compactd.undoCompaction', { entryId: result.undoEntryId });
    });
    return result;
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
    clearTimeout(this.backgroundFlashTimer);
    clearTimeout(this.backgroundPollTimer);
    void this.stop();
    this.previews.dispose();
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

/** An error already shown to the user: the command returns it without showing it again. */
class ShownError extends Error {
  constructor(readonly original: unknown) {
    super(errorMessage(original));
  }
}

/** Runs a command body; errors are shown and returned as `{error}` so callers can check them. */
function command<A extends unknown[], R>(controller: Controller, body: (...args: A) => Promise<R>) {
  return async (...args: A): Promise<R | CommandError> => {
    try {
      return await body(...args);
    } catch (thrown) {
      const shown = thrown instanceof ShownError;
      const err = shown ? thrown.original : thrown;
      const kind = errorKind(err);
      const code = (err as { code?: number }).code;
      const message = errorMessage(err);
      controller.output.appendLine(`command failed: ${message}${kind ? ` (${kind})` : ''}`);
      if (shown) {
        // Its own message was shown already.
      } else if (kind && INFORMATIONAL.includes(kind)) void controller.show('info', message);
      else void controller.show('error', `compactd: ${message}`);
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
    vscode.commands.registerCommand('compactd.previewCompaction', command(controller, (a?: { instructions?: string }) => controller.previewCommand(a))),
    vscode.commands.registerCommand('compactd.commitCompaction', command(controller, (a?: vscode.Uri | string) => controller.commitCommand(a))),
    vscode.commands.registerCommand('compactd.discardPreview', command(controller, (a?: vscode.Uri | string) => controller.discardCommand(a))),
    vscode.commands.registerCommand('compactd.undoCompaction', command(controller, (a?: { entryId?: string }) => controller.undoCommand(a))),
    vscode.commands.registerCommand('compactd.undoThisCompaction', command(controller, (a?: Item) => controller.undoCommand(a))),
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
    statusTooltip: () => (controller.session ? String(controller.status.tooltip ?? '') : undefined),
    statusHistory: () => [...controller.statusLog],
    messages: () => [...controller.shown],
    isShown: (uri: string) => controller.previews.isShown(uri),
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
