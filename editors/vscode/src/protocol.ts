// The parts of the compactd protocol (docs/protocol.md, schema/protocol.schema.json) the
// extension uses, as TypeScript types. The schema is the source of truth; these mirror it.

export type EntryId = string;

export interface SessionInfo {
  sessionId: string;
  path: string;
  cwd: string;
  title?: string;
  leafId: EntryId | null;
  entryCount: number;
  version: number;
}

export interface SessionListResult {
  sessions: SessionListItem[];
}

export interface SessionListItem {
  sessionId: string;
  path: string;
  cwd: string;
  title?: string;
  created: string;
  modified: string;
  open: boolean;
}

/** A stored entry as JSON; only the fields the tree view reads are typed. */
export interface WireEntry {
  type: string;
  id?: string;
  parentId?: string | null;
  summary?: string;
  shortSummary?: string;
  tokensBefore?: number;
  fromId?: string;
  [key: string]: unknown;
}

export interface TreeNode {
  id: EntryId;
  parentId: EntryId | null;
  type: string;
  role?: string;
  timestamp: string;
  preview?: string;
  label?: string;
  children: EntryId[];
  onActivePath: boolean;
  entry?: WireEntry;
}

export interface SessionTreeResult {
  leafId: EntryId | null;
  roots: EntryId[];
  nodes: TreeNode[];
}

export interface SessionUsageResult {
  contextTokens: number | null;
  contextWindow: number;
  thresholdTokens: number | null;
  percent: number | null;
  isCompacting: boolean;
  isSummarizingBranch: boolean;
  autoCompactionEnabled: boolean;
}

export interface CompactResult {
  entryId?: EntryId;
  summary: string;
  shortSummary?: string;
  firstKeptEntryId: EntryId;
  tokensBefore: number;
  tokensAfter?: number;
  details: { readFiles?: string[]; modifiedFiles?: string[] };
  preview: boolean;
  fromExtension: boolean;
}

export interface NavigateTreeResult {
  editorText?: string;
  cancelled: boolean;
  aborted?: boolean;
  summaryEntry?: WireEntry;
  leafId: EntryId | null;
}

export interface SummarizeParams {
  sessionId: string;
  purpose: 'history' | 'turnPrefix' | 'short' | 'branch';
  systemPrompt: string;
  prompt: string;
  maxTokens: number;
}

/** Notifications that change what the tree view or the status bar show. */
export const SESSION_EVENTS = [
  'session/entriesAppended',
  'session/treeNavigated',
  'session/compactionStarted',
  'session/compactionFinished',
  'session/autoCompactionStarted',
  'session/autoCompactionFinished',
] as const;

/** `data.kind` of the errors the extension reacts to (docs/protocol.md §6). */
export const ErrorKind = {
  cancelled: 'cancelled',
  alreadyCompacted: 'alreadyCompacted',
  nothingToCompact: 'nothingToCompact',
  compactionInProgress: 'compactionInProgress',
} as const;

/** The `data.kind` of a JSON-RPC error, if it is one of compactd's typed errors. */
export function errorKind(err: unknown): string | undefined {
  const data = (err as { data?: { kind?: unknown } } | undefined)?.data;
  return typeof data?.kind === 'string' ? data.kind : undefined;
}
