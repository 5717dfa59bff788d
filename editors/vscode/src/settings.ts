// Turns the `compactd.settings.*` VS Code settings into the partial settings object the daemon
// takes as `initializationOptions.settings` (a layer above its own settings files).
import * as vscode from 'vscode';

const PREFIX = 'compactd.settings.';

/** The settings keys the package contributes (generated from schema/settings.schema.json). */
function contributedKeys(extension: vscode.Extension<unknown>): string[] {
  const props = extension.packageJSON?.contributes?.configuration?.properties ?? {};
  return Object.keys(props).filter((k) => k.startsWith(PREFIX));
}

/**
 * The values the user set (in user, workspace or folder settings), nested as the daemon's
 * settings file is: `compactd.settings.compaction.keepRecentTokens` → `{compaction:
 * {keepRecentTokens}}`. Defaults are left out so that the daemon's own files still apply.
 */
export function explicitSettings(extension: vscode.Extension<unknown>): Record<string, unknown> {
  const config = vscode.workspace.getConfiguration();
  const out: Record<string, unknown> = {};
  for (const key of contributedKeys(extension)) {
    const info = config.inspect(key);
    const value = info?.workspaceFolderValue ?? info?.workspaceValue ?? info?.globalValue;
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

/** `compactd.path` if the user set it in any scope (its default means "not set"). */
export function configuredPath(): string | undefined {
  const info = vscode.workspace.getConfiguration('compactd').inspect<string>('path');
  return info?.workspaceFolderValue ?? info?.workspaceValue ?? info?.globalValue;
}
