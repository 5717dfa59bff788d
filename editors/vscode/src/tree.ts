// The session tree view. A session is a tree of entries that is mostly one long chain, so the
// view nests only where the conversation branches: a chain is a flat list of entries, and at a
// branch point each child chain becomes a collapsible "branch" item (the active one expanded).
import * as vscode from 'vscode';
import { SessionTreeResult, TreeNode } from 'compactd-client';

/** Entries that are bookkeeping, not conversation: walked through but not shown. */
const HIDDEN = new Set(['label', 'compactd_leaf']);

export type Item =
  | { kind: 'entry'; node: TreeNode }
  | { kind: 'branch'; node: TreeNode; index: number; count: number };

/** A tree item as the test API reports it. */
export interface ItemSnapshot {
  kind: Item['kind'];
  id: string;
  entryType: string;
  label: string;
  description: string;
  tooltip: string;
  contextValue: string;
  depth: number;
}

const ICONS: Record<string, string> = {
  user: 'account',
  assistant: 'hubot',
  toolResult: 'tools',
  bashExecution: 'terminal',
  pythonExecution: 'terminal',
  compaction: 'archive',
  branch_summary: 'git-merge',
  model_change: 'symbol-namespace',
  thinking_level_change: 'lightbulb',
  custom_message: 'extensions',
  custom: 'extensions',
  'compactd.undo': 'history',
  session_init: 'rocket',
  mode_change: 'settings',
};

function clip(text: string, max = 80): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? line.slice(0, max - 1) + '…' : line;
}

function entryLabel(node: TreeNode): string {
  const e: Record<string, unknown> = node.entry ?? {};
  switch (node.type) {
    case 'compaction':
      return 'Compaction';
    case 'branch_summary':
      return 'Branch summary';
    case 'model_change':
      return `Model: ${String(e.model ?? node.preview ?? '')}`;
    case 'thinking_level_change':
      return `Thinking: ${String(e.thinkingLevel ?? node.preview ?? '')}`;
    case 'message':
      return clip(node.preview || `(${node.role ?? 'message'})`);
    case 'custom':
      // `session/undoCompaction`'s record: the copies of what followed the compaction come after it.
      if (e.customType === 'compactd.undo') {
        const data = (e.data ?? {}) as { restored?: boolean; compactionId?: string };
        return `${data.restored ? 'Compaction restored' : 'Compaction undone'}${data.compactionId ? ` (${data.compactionId})` : ''}`;
      }
      return clip(node.preview || node.type);
    default:
      return clip(node.preview || node.type);
  }
}

function summaryOf(node: TreeNode): string | undefined {
  const e = node.entry;
  if (!e) return undefined;
  if (node.type === 'compaction' || node.type === 'branch_summary') {
    return typeof e.summary === 'string' ? e.summary : undefined;
  }
  return undefined;
}

export class SessionTreeProvider implements vscode.TreeDataProvider<Item> {
  private tree?: SessionTreeResult;
  private byId = new Map<string, TreeNode>();
  private readonly changed = new vscode.EventEmitter<Item | undefined | void>();
  readonly onDidChangeTreeData = this.changed.event;

  /** Replaces the shown tree (`undefined`: no session). */
  setTree(tree: SessionTreeResult | undefined): void {
    this.tree = tree;
    this.byId = new Map((tree?.nodes ?? []).map((n) => [n.id, n]));
    this.shownLeafId = this.findShownLeaf();
    this.changed.fire();
  }

  /** The leaf as shown: the nearest shown entry at or above the session's leaf. */
  private shownLeafId?: string;

  private findShownLeaf(): string | undefined {
    let node = this.tree?.leafId ? this.byId.get(this.tree.leafId) : undefined;
    while (node && HIDDEN.has(node.type) && node.parentId) node = this.byId.get(node.parentId);
    return node?.id;
  }

  getChildren(element?: Item): Item[] {
    if (!this.tree) return [];
    if (!element) {
      const roots = this.tree.roots.filter((id) => this.byId.has(id));
      if (roots.length === 1) return this.chain(roots[0]);
      return roots.map((id, index) => ({ kind: 'branch', node: this.byId.get(id)!, index, count: roots.length }));
    }
    return element.kind === 'branch' ? this.chain(element.node.id) : [];
  }

  /** The children that continue the conversation (see `chain`). */
  private realChildren(node: TreeNode): string[] {
    return node.children.filter((c) => {
      const child = this.byId.get(c);
      return child !== undefined && (!HIDDEN.has(child.type) || child.children.length > 0);
    });
  }

  getParent(item: Item): Item | undefined {
    // Walk up to the start of the chain holding `from`: a branch item, or the top level.
    let node = item.kind === 'entry' ? item.node : item.node.parentId ? this.byId.get(item.node.parentId) : undefined;
    while (node) {
      const parent = node.parentId ? this.byId.get(node.parentId) : undefined;
      if (!parent) {
        return this.tree && this.tree.roots.length > 1 ? { kind: 'branch', node, index: 0, count: this.tree.roots.length } : undefined;
      }
      const siblings = this.realChildren(parent);
      if (siblings.length > 1) return { kind: 'branch', node, index: siblings.indexOf(node.id), count: siblings.length };
      node = parent;
    }
    return undefined;
  }

  /** The item of the shown leaf, for `TreeView.reveal`. */
  leafItem(): Item | undefined {
    const node = this.shownLeafId ? this.byId.get(this.shownLeafId) : undefined;
    return node ? { kind: 'entry', node } : undefined;
  }

  /** The entries from `startId` down its single-child chain, then one item per branch. */
  private chain(startId: string): Item[] {
    const items: Item[] = [];
    let id: string | undefined = startId;
    const seen = new Set<string>();
    while (id !== undefined && !seen.has(id)) {
      seen.add(id);
      const node = this.byId.get(id);
      if (!node) break;
      if (!HIDDEN.has(node.type)) items.push({ kind: 'entry', node });
      // A label or leaf-marker entry with nothing after it is bookkeeping hanging off an
      // entry, not a second line of conversation: it does not make a branch.
      const real = this.realChildren(node);
      if (real.length > 1) {
        real.forEach((c, index) => items.push({ kind: 'branch', node: this.byId.get(c)!, index, count: real.length }));
        break;
      }
      id = real[0];
    }
    return items;
  }

  /** The first shown entry of the chain starting at `id` (a branch's title). */
  private firstShown(id: string): TreeNode | undefined {
    let node = this.byId.get(id);
    while (node && HIDDEN.has(node.type) && node.children.length === 1) node = this.byId.get(node.children[0]);
    return node;
  }

  getTreeItem(item: Item): vscode.TreeItem {
    const node = item.node;
    if (item.kind === 'branch') {
      const first = this.firstShown(node.id) ?? node;
      const t = new vscode.TreeItem(
        `Branch ${item.index + 1}/${item.count}: ${entryLabel(first)}`,
        node.onActivePath ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed,
      );
      t.id = `branch:${node.id}`;
      t.description = node.onActivePath ? 'active' : undefined;
      t.iconPath = new vscode.ThemeIcon('git-branch');
      t.contextValue = 'branch';
      t.tooltip = `Branch starting at ${node.id}${node.onActivePath ? ' (active)' : ''}`;
      return t;
    }
    const isLeaf = this.shownLeafId === node.id;
    const t = new vscode.TreeItem(entryLabel(node), vscode.TreeItemCollapsibleState.None);
    t.id = node.id;
    const parts: string[] = [];
    if (node.label) parts.push(`🏷 ${node.label}`);
    if (node.type === 'compaction' && typeof node.entry?.tokensBefore === 'number') {
      parts.push(`${Math.round(node.entry.tokensBefore / 1000)}k tokens summarized`);
    }
    if (isLeaf) parts.push('◀ leaf');
    t.description = parts.join('  ');
    const customType = node.type === 'custom' ? node.entry?.customType : undefined;
    const iconName = ICONS[node.role ?? ''] ?? (typeof customType === 'string' ? ICONS[customType] : undefined) ?? ICONS[node.type] ?? 'circle-small';
    t.iconPath = isLeaf
      ? new vscode.ThemeIcon(iconName, new vscode.ThemeColor('charts.green'))
      : new vscode.ThemeIcon(iconName, node.onActivePath ? undefined : new vscode.ThemeColor('disabledForeground'));
    t.contextValue = `entry.${node.type}${node.role ? '.' + node.role : ''}${isLeaf ? '.leaf' : ''}`;
    t.tooltip = this.tooltip(node);
    return t;
  }

  private tooltip(node: TreeNode): vscode.MarkdownString {
    const md = new vscode.MarkdownString(undefined, true);
    const what = node.type === 'message' ? node.role ?? 'message' : node.type;
    md.appendMarkdown(`**${what}** · \`${node.id}\` · ${node.timestamp}`);
    if (node.label) md.appendMarkdown(` · 🏷 ${node.label}`);
    md.appendMarkdown('\n\n');
    const summary = summaryOf(node);
    if (summary !== undefined) {
      // Summaries are Markdown; the string is untrusted, so links to commands stay inert.
      md.appendMarkdown(summary);
    } else if (node.preview) {
      md.appendText(node.preview);
    }
    return md;
  }

  /** Every item, depth first, as plain data (for the test API). */
  snapshot(): ItemSnapshot[] {
    const out: ItemSnapshot[] = [];
    const walk = (items: Item[], depth: number) => {
      for (const item of items) {
        const t = this.getTreeItem(item);
        const label = typeof t.label === 'string' ? t.label : t.label?.label ?? '';
        const tooltip = typeof t.tooltip === 'string' ? t.tooltip : t.tooltip?.value ?? '';
        out.push({
          kind: item.kind,
          id: item.kind === 'branch' ? `branch:${item.node.id}` : item.node.id,
          entryType: item.node.type,
          label,
          description: typeof t.description === 'string' ? t.description : '',
          tooltip,
          contextValue: t.contextValue ?? '',
          depth,
        });
        walk(this.getChildren(item), depth + 1);
      }
    };
    walk(this.getChildren(), 0);
    return out;
  }
}
