// @ts-check
// Shared by the protocol tests and the in-VS-Code suite: where the daemon binary is, and a temp
// copy of the demo session with a second branch.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');

const repoRoot = path.resolve(__dirname, '../../..');

/** @type {string[]} Temp dirs this process made, removed when it exits with 0 (kept on failure, for a look). */
const made = [];
process.on('exit', (code) => {
  if (code !== 0 || process.env.COMPACTD_KEEP_TMP) return;
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
});

/**
 * A fresh temp dir named `prefix`…, removed when the process exits with 0.
 * @param {string} prefix
 */
function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(dir);
  return dir;
}

/** The daemon under test: $COMPACTD_BIN, else the repository's debug build. */
function daemonPath() {
  const bin = process.env.COMPACTD_BIN || path.join(repoRoot, 'target/debug/compactd');
  if (!fs.existsSync(bin)) throw new Error(`compactd binary not found at ${bin}: run \`cargo build\` first`);
  return bin;
}

/**
 * Copies examples/demo-session.jsonl into a fresh temp dir. The copy gets one extra user message
 * branching off an early entry, so the session has two branches.
 * @returns {{ dir: string, file: string, entries: any[], branchUserId: string, firstUserId: string }}
 */
function makeSession(name = 'session.jsonl') {
  const dir = tempDir('compactd-vscode-');
  const file = path.join(dir, name);
  const lines = fs.readFileSync(path.join(repoRoot, 'examples/demo-session.jsonl'), 'utf8').trim().split('\n');
  const entries = lines.slice(1).map((l) => JSON.parse(l));
  const firstUser = entries.find((e) => e.type === 'message' && e.message.role === 'user');
  const firstAssistant = entries.find((e) => e.type === 'message' && e.message.role === 'assistant');
  // A second user message after the first assistant reply: a branch the active path does not take.
  const branchUser = {
    type: 'message',
    id: 'b0a1b2c3',
    parentId: firstAssistant.id,
    timestamp: '2026-01-01T07:59:00.000Z',
    message: { role: 'user', content: 'Try the other approach: widen the type in accounts.rs only.', timestamp: 1767254300000 },
  };
  // Insert it before the active path's last entry so the file's last entry stays the leaf.
  // A fresh session id per copy: the daemon refuses two open files with one id.
  const header = { ...JSON.parse(lines[0]), id: crypto.randomBytes(8).toString('hex') };
  const out = [JSON.stringify(header), ...lines.slice(1, -1), JSON.stringify(branchUser), lines[lines.length - 1]];
  fs.writeFileSync(file, out.join('\n') + '\n');
  return { dir, file, sessionId: header.id, entries: [...entries, branchUser], branchUserId: branchUser.id, firstUserId: firstUser.id };
}

/** Polls `check` until it returns a truthy value or `ms` pass; `what` (or what it returns) names it in the error. */
async function waitFor(check, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Rejects after `ms` with a message naming `what`. */
function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms))),
  ]);
}

module.exports = { repoRoot, daemonPath, makeSession, tempDir, waitFor, withTimeout };
