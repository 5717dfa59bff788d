// Server-initiated work-done progress (`window/workDoneProgress/create` + `$/progress`) shown as
// a VS Code notification with a Cancel button.
//
// vscode-languageclient already answers `window/workDoneProgress/create`, but it shows the
// progress in the status bar (`ProgressLocation.Window`), where VS Code offers no cancel. A
// compaction can run for a minute and the user must be able to stop it, so the extension
// replaces that handler: same protocol, a notification, and Cancel sends
// `window/workDoneProgress/cancel` for the token (which the daemon turns into an abort).
import * as vscode from 'vscode';
import {
  LanguageClient,
  ProgressToken,
  WorkDoneProgress,
  WorkDoneProgressBegin,
  WorkDoneProgressCancelNotification,
  WorkDoneProgressCreateRequest,
  WorkDoneProgressEnd,
  WorkDoneProgressReport,
} from 'vscode-languageclient/node';

/** One thing that happened to a progress token, as recorded for tests and logs. */
export interface ProgressEvent {
  token: ProgressToken;
  kind: 'create' | 'begin' | 'report' | 'end' | 'cancel';
  title?: string;
  message?: string;
  percentage?: number;
  cancellable?: boolean;
}

type Value = WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd;

class ProgressPart {
  private progress?: vscode.Progress<{ message?: string; increment?: number }>;
  private pending?: { message?: string; percentage?: number };
  private lastPercentage = 0;
  private finish!: () => void;
  private readonly done = new Promise<void>((resolve) => (this.finish = resolve));
  private readonly subscription: vscode.Disposable;
  private ended = false;

  constructor(
    private readonly client: LanguageClient,
    private readonly token: ProgressToken,
    private readonly record: (e: ProgressEvent) => void,
    private readonly onDone: (part: ProgressPart) => void,
  ) {
    this.subscription = client.onProgress(WorkDoneProgress.type, token, (value: Value) => this.handle(value));
  }

  private handle(value: Value): void {
    switch (value.kind) {
      case 'begin':
        this.record({ token: this.token, kind: 'begin', title: value.title, message: value.message, percentage: value.percentage, cancellable: value.cancellable });
        this.begin(value);
        break;
      case 'report':
        this.record({ token: this.token, kind: 'report', message: value.message, percentage: value.percentage });
        this.report(value.message, value.percentage);
        break;
      case 'end':
        this.record({ token: this.token, kind: 'end', message: value.message });
        this.end();
        break;
    }
  }

  private begin(value: WorkDoneProgressBegin): void {
    this.pending = { message: value.message, percentage: value.percentage };
    void vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: value.title, cancellable: value.cancellable ?? false },
      (progress, cancel) => {
        this.progress = progress;
        cancel.onCancellationRequested(() => {
          if (this.ended) return;
          this.record({ token: this.token, kind: 'cancel' });
          void this.client.sendNotification(WorkDoneProgressCancelNotification.type, { token: this.token });
        });
        const first = this.pending;
        this.pending = undefined;
        if (first) this.report(first.message, first.percentage);
        return this.done;
      },
    );
  }

  private report(message?: string, percentage?: number): void {
    if (!this.progress) {
      this.pending = { message: message ?? this.pending?.message, percentage: percentage ?? this.pending?.percentage };
      return;
    }
    let increment: number | undefined;
    if (percentage !== undefined && percentage > this.lastPercentage) {
      increment = percentage - this.lastPercentage;
      this.lastPercentage = percentage;
    }
    this.progress.report({ message, increment });
  }

  /** Closes the notification (the operation ended, or the client stopped). */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.subscription.dispose();
    this.finish();
    this.onDone(this);
  }
}

/** Answers `window/workDoneProgress/create` and keeps a log of every progress event. */
export class ProgressUi implements vscode.Disposable {
  /** Everything seen since activation, oldest first (read by the test API). */
  readonly events: ProgressEvent[] = [];
  private readonly parts = new Set<ProgressPart>();
  private readonly emitter = new vscode.EventEmitter<ProgressEvent>();
  /** Fires for each recorded event. */
  readonly onEvent = this.emitter.event;

  /**
   * Takes over `window/workDoneProgress/create` on a started client. It must run after
   * `client.start()`: the client's own progress feature registers its handler while starting,
   * and the last registration wins.
   */
  install(client: LanguageClient): vscode.Disposable {
    return client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
      this.record({ token, kind: 'create' });
      this.parts.add(new ProgressPart(client, token, (e) => this.record(e), (p) => this.parts.delete(p)));
    });
  }

  private record(event: ProgressEvent): void {
    this.events.push(event);
    this.emitter.fire(event);
  }

  /** Closes every open notification (the server stopped). */
  clear(): void {
    for (const part of [...this.parts]) part.end();
  }

  dispose(): void {
    this.clear();
    this.emitter.dispose();
  }
}
