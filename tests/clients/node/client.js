// Drives `compactd serve` with the real vscode-jsonrpc library (LSP framing over pipes):
// initialize -> session/create -> session/append -> session/compact (extractive, with
// $/progress) -> session/context -> shutdown/exit. Exits non-zero on any failed check.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const rpc = require('vscode-jsonrpc/node');

const TIMEOUT_MS = 30000;

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function turns(n) {
  const bulk = 'lorem ipsum dolor sit amet '.repeat(40);
  const entries = [];
  for (let i = 0; i < n; i++) {
    entries.push({ type: 'message', message: { role: 'user', content: `Step ${i}: edit src/file${i}.rs. ${bulk}`, timestamp: Date.now() } });
    entries.push({ type: 'message', message: {
      role: 'assistant', content: [{ type: 'text', text: `Done with step ${i}. ${bulk}` }],
      provider: 'anthropic', model: 'claude-sonnet-4-5', stopReason: 'stop', timestamp: Date.now(),
      usage: { input: 1000, output: 10, cacheRead: 0, cacheWrite: 0, totalTokens: 1010 } } });
  }
  return entries;
}

async function main() {
  const bin = process.env.COMPACTD_BIN;
  assert.ok(bin, 'set COMPACTD_BIN to the compactd binary');
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'compactd-node-'));
  const project = path.join(home, 'project');
  fs.mkdirSync(project);
  const child = spawn(bin, ['serve'], {
    env: { ...process.env, COMPACTD_CONFIG_DIR: path.join(home, 'config'), COMPACTD_DATA_DIR: path.join(home, 'data') },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  const conn = rpc.createMessageConnection(
    new rpc.StreamMessageReader(child.stdout),
    new rpc.StreamMessageWriter(child.stdin),
  );
  const progress = [];
  const notifications = [];
  const token = 'node-compact-1';
  conn.onProgress(new rpc.ProgressType(), token, (value) => progress.push(value));
  conn.onUnhandledProgress((params) => progress.push(params.value));
  conn.onNotification((method, params) => notifications.push({ method, params }));
  conn.listen();

  const init = await withTimeout(conn.sendRequest('initialize', {
    processId: process.pid,
    clientInfo: { name: 'vscode-jsonrpc-test' },
    capabilities: {},
    initializationOptions: { settings: { summarizer: { kind: 'extractive' }, compaction: { keepRecentTokens: 200 } } },
  }), 'initialize');
  assert.equal(init.serverInfo.name, 'compactd');
  assert.ok(init.capabilities.methods.includes('session/compact'));
  await conn.sendNotification('initialized', {});

  const info = await withTimeout(conn.sendRequest('session/create', { cwd: project }), 'session/create');
  const sessionId = info.sessionId;
  assert.match(sessionId, /^[A-Za-z0-9_-]+$/);

  const appended = await withTimeout(conn.sendRequest('session/append', { sessionId, entries: turns(6) }), 'session/append');
  assert.equal(appended.appended.length, 12);
  assert.equal(appended.action, 'continue');

  const compacted = await withTimeout(conn.sendRequest('session/compact', { sessionId, workDoneToken: token }), 'session/compact');
  assert.ok(compacted.entryId, 'a compaction entry was written');
  assert.ok(compacted.summary.length > 0);
  assert.equal(compacted.preview, false);
  assert.ok(compacted.tokensAfter < compacted.tokensBefore, JSON.stringify(compacted));
  const kinds = progress.map((p) => p.kind);
  assert.equal(kinds[0], 'begin', JSON.stringify(progress));
  assert.equal(kinds[kinds.length - 1], 'end', JSON.stringify(progress));
  assert.equal(progress[progress.length - 1].message, 'done');
  const started = notifications.find((n) => n.method === 'session/compactionStarted');
  const finished = notifications.find((n) => n.method === 'session/compactionFinished');
  assert.ok(started && finished, JSON.stringify(notifications.map((n) => n.method)));
  assert.equal(started.params.operationId, finished.params.operationId);
  assert.equal(finished.params.result.entryId, compacted.entryId);

  const context = await withTimeout(conn.sendRequest('session/context', { sessionId }), 'session/context');
  assert.equal(context.leafId, compacted.entryId);
  assert.match(JSON.stringify(context.messages[0].content), /<summary>/);
  assert.ok(context.tokens > 0);

  await withTimeout(conn.sendRequest('shutdown'), 'shutdown');
  await conn.sendNotification('exit');
  const code = await withTimeout(exited, 'exit');
  assert.equal(code, 0);
  conn.dispose();
  fs.rmSync(home, { recursive: true, force: true });
  console.log('vscode-jsonrpc client: ok');
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
