// The status bar text: context size against the compaction threshold, e.g. `ctx 142k / 184k`,
// and what a background compaction is doing (drafting, ready, committed, handed over, discarded).
import { BackgroundCompactionState, BackgroundDiscardReason, SessionUsageResult } from 'compactd-client';

/** `950`, `12k`, `184k`, `1.2M`. */
export function formatTokens(n: number): string {
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(1).replace(/\.0$/, '')}M`;
  if (n >= 1000) return `${Math.round(n / 1000)}k`;
  return String(n);
}

/**
 * What the status item shows of the session's background compaction: `running` and `armed`
 * while `session/usage` (or the latest `session/backgroundCompaction` event) says so,
 * `committed`, `previewed` and `discarded` for a few seconds after the event.
 */
export interface BackgroundView {
  state: 'running' | 'armed' | 'committed' | 'previewed' | 'discarded';
  operationId: string;
  /** While running: `preparing`, `summarizing`. */
  phase?: string;
  /** While running: the summarizer request it is at, of `chunks`. */
  chunk?: number;
  chunks?: number;
  /** Discarded: why. */
  reason?: BackgroundDiscardReason;
  /** Discarded: the daemon's message (e.g. the summarizer's error). */
  message?: string;
}

/** The background compaction `session/usage` reports, as the status item shows it. */
export function backgroundFromUsage(usage: SessionUsageResult): BackgroundView | undefined {
  const b = usage.backgroundCompaction;
  if (!b) return undefined;
  if (b.armed) return { state: 'armed', operationId: b.operationId };
  return { state: 'running', operationId: b.operationId, phase: b.phase ?? undefined, chunk: b.chunk ?? undefined, chunks: b.chunks ?? undefined };
}

/** An end state, shown for a few seconds after its event: `committed`, `previewed`, `discarded`. */
export function isFlash(state?: BackgroundView['state']): boolean {
  return state === 'committed' || state === 'previewed' || state === 'discarded';
}

/** The state a `session/backgroundCompaction` event puts the view in. */
export function backgroundFromEvent(e: {
  operationId: string;
  state: BackgroundCompactionState;
  reason?: BackgroundDiscardReason | null;
  message?: string | null;
}): BackgroundView {
  const state = e.state === 'started' ? 'running' : e.state;
  return { state, operationId: e.operationId, reason: e.reason ?? undefined, message: e.message ?? undefined };
}

const REASONS: Record<BackgroundDiscardReason, string> = {
  leafLeftBranch: 'the leaf left its branch',
  compactedSince: 'compacted since',
  doesNotFit: 'too much appended since',
  aborted: 'aborted',
  failed: 'the summarizer failed',
  manualCompaction: 'manual compaction',
};

/** `the leaf left its branch`, for a discard reason. */
export function discardReasonText(reason?: BackgroundDiscardReason): string {
  return reason ? REASONS[reason] ?? reason : 'no reason given';
}

/** The short part of the status text about the background compaction (`drafting 2/5`, …). */
export function backgroundText(b: BackgroundView): string {
  switch (b.state) {
    case 'running': {
      const chunk = b.chunk != null && b.chunks != null && b.chunks > 1 ? ` ${b.chunk}/${b.chunks}` : '';
      const phase = b.phase && b.phase !== 'summarizing' ? ` (${b.phase})` : '';
      return `$(loading~spin) drafting${chunk}${phase}`;
    }
    case 'armed':
      return '$(check) summary ready';
    case 'committed':
      return '$(pass-filled) compacted';
    case 'previewed':
      return '$(eye) summary handed over';
    case 'discarded':
      return `$(circle-slash) discarded: ${discardReasonText(b.reason)}`;
  }
}

/** The tooltip lines about the background compaction. */
export function backgroundTooltip(b: BackgroundView): string {
  switch (b.state) {
    case 'running': {
      const where = [b.phase, b.chunk != null && b.chunks != null ? `request ${b.chunk} of ${b.chunks}` : undefined].filter(Boolean).join(', ');
      return `Background compaction: drafting the summary${where ? ` (${where})` : ''}; appends go on meanwhile.`;
    }
    case 'armed':
      return 'Background compaction: the summary is ready; the reply that crosses the threshold writes it at once.';
    case 'committed':
      return 'Background compaction: written.';
    case 'previewed':
      return 'Background compaction: its summary was handed out as a preview; nothing is written until it is committed (or the agent writes it).';
    case 'discarded':
      return `Background compaction: discarded, nothing written (${discardReasonText(b.reason)})${b.message ? `: ${b.message}` : ''}.`;
  }
}

/**
 * The status bar text. `estimate` is used when the daemon does not know the real size (after a
 * compaction, before the next reply reports usage) and is marked with `~`. Without a threshold
 * (auto-compaction off) the context window is the other number.
 */
export function statusText(usage: SessionUsageResult, estimate?: number, background?: BackgroundView): string {
  const limit = formatTokens(usage.thresholdTokens ?? usage.contextWindow);
  const size =
    usage.contextTokens != null ? formatTokens(usage.contextTokens) : estimate !== undefined ? `~${formatTokens(estimate)}` : '?';
  const busy = usage.isCompacting || usage.isSummarizingBranch ? '$(sync~spin) ' : '';
  const bg = background ? ` · ${backgroundText(background)}` : '';
  return `${busy}ctx ${size} / ${limit}${bg}`;
}

/** The hover of the status bar item. */
export function statusTooltip(usage: SessionUsageResult, estimate?: number, background?: BackgroundView): string {
  const lines = [
    usage.contextTokens != null
      ? `Context: ${usage.contextTokens.toLocaleString('en-US')} tokens (from the latest reply's usage)`
      : estimate !== undefined
        ? `Context: about ${estimate.toLocaleString('en-US')} tokens (estimated; no usage since the latest compaction)`
        : 'Context: unknown',
    usage.thresholdTokens != null
      ? `Auto-compaction above ${usage.thresholdTokens.toLocaleString('en-US')} tokens`
      : 'Auto-compaction is off',
    `Context window: ${usage.contextWindow.toLocaleString('en-US')} tokens`,
  ];
  if (usage.isCompacting) lines.push('Compacting…');
  if (usage.isSummarizingBranch) lines.push('Summarizing a branch…');
  if (background) lines.push(backgroundTooltip(background));
  lines.push('', 'Click to compact the session.');
  return lines.join('\n');
}
