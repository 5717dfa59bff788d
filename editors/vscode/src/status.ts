// The status bar text: context size against the compaction threshold, e.g. `ctx 142k / 184k`.
import { SessionUsageResult } from 'compactd-client';

/** `950`, `12k`, `184k`, `1.2M`. */
export function formatTokens(n: number): string {
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(1).replace(/\.0$/, '')}M`;
  if (n >= 1000) return `${Math.round(n / 1000)}k`;
  return String(n);
}

/**
 * The status bar text. `estimate` is used when the daemon does not know the real size (after a
 * compaction, before the next reply reports usage) and is marked with `~`. Without a threshold
 * (auto-compaction off) the context window is the other number.
 */
export function statusText(usage: SessionUsageResult, estimate?: number): string {
  const limit = formatTokens(usage.thresholdTokens ?? usage.contextWindow);
  const size =
    usage.contextTokens != null ? formatTokens(usage.contextTokens) : estimate !== undefined ? `~${formatTokens(estimate)}` : '?';
  const busy = usage.isCompacting || usage.isSummarizingBranch ? '$(sync~spin) ' : '';
  return `${busy}ctx ${size} / ${limit}`;
}

/** The hover of the status bar item. */
export function statusTooltip(usage: SessionUsageResult, estimate?: number): string {
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
  lines.push('', 'Click to compact the session.');
  return lines.join('\n');
}
