// Which compactd binary the extension runs. No `vscode` import, so the rules are tested
// outside VS Code too (test/server-path.test.js).
import * as fs from 'fs';
import * as path from 'path';

/** Where the daemon comes from: the setting, the binary bundled in the .vsix, or PATH. */
export type ServerSource = 'setting' | 'bundled' | 'path';

export interface ServerChoice {
  command: string;
  source: ServerSource;
}

/** What `resolveServer` looks at; the defaults are this extension host's. */
export interface ResolveInput {
  /** `compactd.path` when the user set it (in any scope), else undefined. */
  configured?: string;
  extensionPath: string;
  platform?: string;
  arch?: string;
  pathEnv?: string;
  home?: string;
  isExecutable?: (file: string) => boolean;
}

/** The bundled binary's place in the extension: `bin/<platform>-<arch>/compactd`. */
export function bundledBinary(extensionPath: string, platform: string = process.platform, arch: string = process.arch): string {
  return path.join(extensionPath, 'bin', `${platform}-${arch}`, platform === 'win32' ? 'compactd.exe' : 'compactd');
}

function executable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * The daemon to run: `compactd.path` when the user set it; else the binary bundled for this
 * platform (a platform-specific .vsix has one); else `compactd` on PATH. Throws a message for
 * the user when none fits.
 */
export function resolveServer(input: ResolveInput): ServerChoice {
  const isExecutable = input.isExecutable ?? executable;
  const home = input.home ?? process.env.HOME ?? '';
  const configured = input.configured?.trim();
  if (configured) {
    const command = configured.startsWith('~/') ? home + configured.slice(1) : configured;
    return { command, source: 'setting' };
  }
  const platform = input.platform ?? process.platform;
  const arch = input.arch ?? process.arch;
  const bundled = bundledBinary(input.extensionPath, platform, arch);
  if (isExecutable(bundled)) return { command: bundled, source: 'bundled' };
  for (const dir of (input.pathEnv ?? process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = dir && path.join(dir, platform === 'win32' ? 'compactd.exe' : 'compactd');
    if (candidate && isExecutable(candidate)) return { command: candidate, source: 'path' };
  }
  throw new Error(
    `no compactd binary fits this machine (${platform}-${arch}): this extension bundles one only in its ` +
      'platform-specific package (linux-x64), and `compactd` is not on PATH. Install it ' +
      '(`cargo install --locked --path .` in the compactd repository) or set `compactd.path`.',
  );
}
