// Compaction previews as documents the user can edit: `session/compact {preview: true}` opens
// its summary in an untitled Markdown document, remembered with its session and `previewId`, so
// that "Commit Compaction" can write the document's text (`session/commitCompaction`) and
// "Discard Compaction Preview" can close it with nothing written. While such a document is the
// active editor, the context key `compactd.previewActive` shows both as editor title buttons;
// a CodeLens on its first line offers them too.
import * as vscode from 'vscode';
import { CompactResult } from 'compactd-client';

/** A preview document: what to commit it as, and what the daemon generated. */
export interface PreviewDocument {
  sessionId: string;
  previewId: string;
  result: CompactResult;
  /** The summary as generated: the text is sent as `summary` only when the user changed it. */
  original: string;
  /** Set when the daemon refused the commit (the session changed, the preview expired). */
  stale?: string;
}

export const PREVIEW_CONTEXT_KEY = 'compactd.previewActive';

export class PreviewDocuments implements vscode.CodeLensProvider, vscode.Disposable {
  private readonly docs = new Map<string, PreviewDocument>();
  private readonly lensesChanged = new vscode.EventEmitter<void>();
  readonly onDidChangeCodeLenses = this.lensesChanged.event;
  private readonly disposables: vscode.Disposable[] = [];

  constructor() {
    this.disposables.push(
      vscode.languages.registerCodeLensProvider({ scheme: 'untitled' }, this),
      vscode.window.onDidChangeActiveTextEditor(() => this.updateContext()),
      vscode.workspace.onDidCloseTextDocument((doc) => {
        if (this.docs.delete(doc.uri.toString())) this.updateContext();
      }),
    );
  }

  /** Opens `result`'s summary as an editable document and remembers it. */
  async open(sessionId: string, result: CompactResult): Promise<vscode.TextDocument> {
    if (!result.previewId) throw new Error('the daemon kept no preview to commit (a read-only session?)');
    const doc = await vscode.workspace.openTextDocument({ language: 'markdown', content: result.summary });
    this.docs.set(doc.uri.toString(), { sessionId, previewId: result.previewId, result, original: result.summary });
    await vscode.window.showTextDocument(doc, { preview: false });
    this.updateContext();
    this.lensesChanged.fire();
    return doc;
  }

  /** The preview of `doc`, if it is one. */
  get(doc: vscode.TextDocument | undefined): PreviewDocument | undefined {
    return doc ? this.docs.get(doc.uri.toString()) : undefined;
  }

  /** The preview document `arg` names (a URI, its string, or nothing: the active editor's). */
  find(arg?: vscode.Uri | string): vscode.TextDocument | undefined {
    const uri = arg === undefined ? vscode.window.activeTextEditor?.document.uri.toString() : arg.toString();
    if (uri === undefined || !this.docs.has(uri)) return undefined;
    return vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
  }

  markStale(doc: vscode.TextDocument, why: string): void {
    const p = this.get(doc);
    if (!p) return;
    p.stale = why;
    this.lensesChanged.fire();
  }

  /** Forgets the preview and closes its editor without asking to save it. */
  async close(doc: vscode.TextDocument): Promise<void> {
    this.docs.delete(doc.uri.toString());
    this.updateContext();
    if (doc.isClosed) return;
    await vscode.window.showTextDocument(doc, { preview: false });
    await vscode.commands.executeCommand('workbench.action.revertAndCloseActiveEditor');
  }

  /** Whether an editor tab still shows `doc` (for the tests). */
  isShown(uri: string): boolean {
    return vscode.window.tabGroups.all.some((g) =>
      g.tabs.some((t) => t.input instanceof vscode.TabInputText && t.input.uri.toString() === uri),
    );
  }

  private updateContext(): void {
    const active = this.get(vscode.window.activeTextEditor?.document) !== undefined;
    void vscode.commands.executeCommand('setContext', PREVIEW_CONTEXT_KEY, active);
  }

  provideCodeLenses(doc: vscode.TextDocument): vscode.CodeLens[] {
    const p = this.get(doc);
    if (!p) return [];
    const top = new vscode.Range(0, 0, 0, 0);
    const uri = doc.uri.toString();
    const r = p.result;
    const after = r.tokensAfter != null ? ` → ~${r.tokensAfter.toLocaleString('en-US')}` : '';
    const lenses = [
      new vscode.CodeLens(top, { title: '$(check) Commit Compaction', command: 'compactd.commitCompaction', arguments: [uri] }),
      new vscode.CodeLens(top, { title: '$(discard) Discard', command: 'compactd.discardPreview', arguments: [uri] }),
    ];
    if (p.stale) {
      lenses.push(new vscode.CodeLens(top, { title: `$(warning) Stale: ${p.stale}`, command: 'compactd.previewCompaction', tooltip: 'Preview again' }));
    } else {
      lenses.push(
        new vscode.CodeLens(top, {
          title: `Preview: ${r.tokensBefore.toLocaleString('en-US')}${after} tokens, keeps from entry ${r.firstKeptEntryId}; edit the summary, then commit`,
          command: '',
        }),
      );
    }
    return lenses;
  }

  dispose(): void {
    for (const d of this.disposables.splice(0)) d.dispose();
    this.lensesChanged.dispose();
  }
}
