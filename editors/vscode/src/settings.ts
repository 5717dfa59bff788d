// Turns the `compactd.settings.*` VS Code settings into the partial settings object the daemon
// takes as `initializationOptions.settings` (a layer above its own settings files).
import * as vscode from 'vscode';

const PREFIX = 'compactd.settings.';

type Contributed = Record<string, { scope?: string }>;

function contributed(extension: vscode.Extension<unknown>): Contributed {
  return extension.packageJSON?.contributes?.configuration?.properties ?? {};
}

/** The settings keys the package contributes (generated from schema/settings.schema.json). */
function contributedKeys(extension: vscode.Extension<unknown>): string[] {
  return Object.keys(contributed(extension)).filter((k) => k.startsWith(PREFIX));
}

/**
 * Whether only the user's own value of `key` counts: the machine-scoped settings
 * (scripts/gen-config.js marks those that decide where the conversation or credentials go, and
 * `compactd.path`, the program the extension runs). VS Code drops a workspace's value of such a
 * setting; it is also left out here, so that no host that reports it can pass it on.
 */
function userOnly(props: Contributed, key: string): boolean {
  const scope = props[key]?.scope;
  return scope === 'machine' || scope === 'application';
}

/** The value that counts: the folder's, then the workspace's, then the user's; the user's only for user-only keys. */
function effective(props: Contributed, key: string): unknown {
  const info = vscode.workspace.getConfiguration().inspect(key);
  if (!info) return undefined;
  if (userOnly(props, key)) return info.globalValue;
  return info.workspaceFolderValue ?? info.workspaceValue ?? info.globalValue;
}

/**
 * The values the user set (in user, workspace or folder settings), nested as the daemon's
 * settings file is: `compactd.settings.compaction.keepRecentTokens` → `{compaction:
 * {keepRecentTokens}}`. Defaults are left out so that the daemon's own files still apply.
 * Of the user-only keys, only the user's values are taken.
 */
export function explicitSettings(extension: vscode.Extension<unknown>): Record<string, unknown> {
  const props = contributed(extension);
  const out: Record<string, unknown> = {};
  for (const key of contributedKeys(extension)) {
    const value = effective(props, key);
    if (value === undefined) continue;
    const path = key.slice(PREFIX.length).split('.');
    let node = out;
    for (const part of path.slice(0, -1)) {
      node = (node[part] ??= {}) as Record<string, unknown>;
    }
    node[path[path.length - 1]] = value;
  }
  return out;
}

/** The settings sent at `initialize`: the user's values, plus what the extension's own options imply. */
export function initializationSettings(extension: vscode.Extension<unknown>): Record<string, unknown> {
  const settings = explicitSettings(extension);
  if (useLanguageModel()) {
    const summarizer = (settings.summarizer ??= {}) as Record<string, unknown>;
    summarizer.kind = 'client';
  }
  return settings;
}

/** `compactd.useVSCodeLanguageModel`. */
export function useLanguageModel(): boolean {
  return vscode.workspace.getConfiguration('compactd').get<boolean>('useVSCodeLanguageModel', false);
}

/**
 * `compactd.path` if the user set it in user settings (its default means "not set"). A
 * workspace's value never counts: a cloned repository must not choose the program the
 * extension runs.
 */
export function configuredPath(): string | undefined {
  return vscode.workspace.getConfiguration('compactd').inspect<string>('path')?.globalValue;
}
