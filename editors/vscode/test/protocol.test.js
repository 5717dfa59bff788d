// @ts-check
// Protocol tests: drive the real daemon (`compactd serve`) with vscode-jsonrpc, the JSON-RPC
// library under vscode-languageclient, speaking exactly what the extension speaks (LSP framing,
// LSP-style initialize, server-initiated progress).
'use strict';
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const cp = require('child_process');
const fs = require('fs');
const rpc = require('vscode-jsonrpc/node');
const { daemonPath, makeSession, tempDir, waitFor, withTimeout } = require('./helpers');
const { startFakeOpenAI, slowSummarizerSettings } = require('./fake-openai');

const T = 30_000; // per-request timeout: nothing here should take a fraction of that

/**
 * Starts `compactd serve` and initializes it like the extension does.
 * @param {{ settings?: object, summarizer?: (params: any) => any }} [opts]
 */
async function startDaemon(opts = {}) {
  const configDir = tempDir('compactd-config-');
  const proc = cp.spawn(daemonPath(), ['serve'], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, COMPACTD_CONFIG_DIR: configDir },
  });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const conn = rpc.createMessageConnection(new rpc.StreamMessageReader(proc.stdout), new rpc.StreamMessageWriter(proc.stdin));
  /** @type {{method: string, params: any}[]} */
  const notifications = [];
  /** @type {any[]} */
  const progress = [];
  /** @type {any[]} */
  const created = [];
  conn.onNotification((method, params) => notifications.push({ method, params }));
  conn.onNotification('$/progress', (params) => progress.push(params));
  conn.onUnhandledProgress((params) => progress.push(params));
  conn.onRequest('window/workDoneProgress/create', (params) => {
    created.push(params.token);
    return null;
  });
  if (opts.summarizer) conn.onRequest('summarizer/summarize', opts.summarizer);
  conn.listen();
  const init = await withTimeout(
    conn.sendRequest('initialize', {
      processId: process.pid,
      clientInfo: { name: 'compactd-protocol-test', version: '0' },
      rootUri: null,
      capabilities: { window: { workDoneProgress: true }, summarizer: !!opts.summarizer, workDoneProgress: true },
      initializationOptions: {
        settings: { summarizer: { kind: 'extractive' }, compaction: { keepRecentTokens: 2000 }, ...(opts.settings ?? {}) },
      },
    }),
    T,
    'initialize',
  );
  await conn.sendNotification('initialized', {});
  return {
    conn,
    proc,
    init,
    notifications,
    progress,
    created,
    stderr: () => stderr,
    /** @param {string} method @param {any} [params] */
    request: (method, params) => withTimeout(conn.sendRequest(method, params), T, method),
    async close() {
      try {
        await withTimeout(conn.sendRequest('shutdown'), 5000, 'shutdown');
        await conn.sendNotification('exit');
      } catch {
        /* the process may already be gone */
      }
      const exited = new Promise((r) => proc.once('exit', r));
      await withTimeout(exited, 5000, 'daemon exit').catch(() => proc.kill('SIGKILL'));
      conn.dispose();
    },
  };
}

/** The error's `data.kind`, or fails when the promise resolves. */
async function errorKindOf(promise) {
  try {
    await promise;
  } catch (err) {
    return /** @type {any} */ (err).data?.kind;
  }
  assert.fail('expected an error');
}

describe('compactd serve over vscode-jsonrpc', () => {
  /** @type {Awaited<ReturnType<typeof startDaemon>>} */
  let d;
  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    await d?.close();
  });

  test('initialize answers with the protocol version and the methods', () => {
    const caps = /** @type {any} */ (d.init).capabilities;
    assert.equal(/** @type {any} */ (d.init).serverInfo.name, 'compactd');
    assert.equal(caps.protocolVersion, 1);
    for (const m of ['session/open', 'session/tree', 'session/usage', 'session/compact', 'session/navigateTree', 'session/abortCompaction']) {
      assert.ok(caps.methods.includes(m), `methods lists ${m}`);
    }
  });

  test('open, tree and usage describe the session file', async () => {
    const s = makeSession();
    const info = await d.request('session/open', { path: s.file });
    assert.equal(info.path, s.file);
    assert.equal(info.entryCount, s.entries.length);
    const tree = await d.request('session/tree', { sessionId: info.sessionId, includeEntries: true });
    assert.equal(tree.nodes.length, s.entries.length);
    assert.equal(tree.leafId, info.leafId);
    const branch = tree.nodes.find((n) => n.id === s.branchUserId);
    assert.ok(branch, 'the branch entry is in the tree');
    assert.equal(branch.onActivePath, false);
    assert.equal(branch.role, 'user');
    const parent = tree.nodes.find((n) => n.id === branch.parentId);
    assert.equal(parent.children.length, 2, 'the branch point has two children');
    const usage = await d.request('session/usage', { sessionId: info.sessionId });
    assert.equal(typeof usage.contextTokens, 'number');
    assert.equal(usage.contextWindow, 200000);
    assert.equal(usage.thresholdTokens, 200000 - 16384);
    assert.equal(usage.isCompacting, false);
  });

  test('compact reports server-initiated progress and appends one compaction entry', async () => {
    const s = makeSession();
    const info = await d.request('session/open', { path: s.file });
    const linesBefore = fs.readFileSync(s.file, 'utf8').trim().split('\n').length;
    const createdBefore = d.created.length;
    const result = await d.request('session/compact', { sessionId: info.sessionId, customInstructions: 'Keep the overflow cause.' });
    assert.ok(result.entryId, 'an entry was written');
    assert.equal(result.preview, false);
    assert.ok(result.summary.length > 0);
    const lines = fs.readFileSync(s.file, 'utf8').trim().split('\n');
    assert.equal(lines.length, linesBefore + 1);
    const last = JSON.parse(lines[lines.length - 1]);
    assert.equal(last.type, 'compaction');
    assert.equal(last.id, result.entryId);
    assert.equal(last.summary, result.summary);

    // Progress: a token was created and ran begin → … → end "done".
    assert.ok(d.created.length > createdBefore, 'window/workDoneProgress/create was sent');
    const token = d.created[d.created.length - 1];
    const values = await waitFor(() => {
      const v = d.progress.filter((p) => p.token === token).map((p) => p.value);
      return v.some((x) => x.kind === 'end') && v;
    }, 5000, 'progress end');
    assert.equal(values[0].kind, 'begin');
    assert.equal(values[0].cancellable, true);
    assert.match(values[0].title, /Compacting/);
    assert.equal(values[values.length - 1].message, 'done');

    // Events bracket it with one operation id.
    const started = d.notifications.find((n) => n.method === 'session/compactionStarted' && n.params.sessionId === info.sessionId);
    const finished = await waitFor(
      () => d.notifications.find((n) => n.method === 'session/compactionFinished' && n.params.sessionId === info.sessionId),
      5000,
      'compactionFinished',
    );
    assert.ok(started);
    assert.equal(started.params.reason, 'manual');
    assert.equal(finished.params.operationId, started.params.operationId);
    assert.equal(finished.params.aborted, false);

    // The tree shows the compaction as the leaf; compacting again is refused.
    const tree = await d.request('session/tree', { sessionId: info.sessionId, includeEntries: true });
    assert.equal(tree.leafId, result.entryId);
    assert.equal(tree.nodes.find((n) => n.id === result.entryId).entry.summary, result.summary);
    assert.equal(await errorKindOf(d.request('session/compact', { sessionId: info.sessionId })), 'alreadyCompacted');
  });

  test('preview compacts nothing', async () => {
    const s = makeSession();
    const before = fs.readFileSync(s.file);
    const info = await d.request('session/open', { path: s.file });
    const result = await d.request('session/compact', { sessionId: info.sessionId, preview: true });
    assert.equal(result.preview, true);
    assert.equal(result.entryId, undefined);
    assert.ok(result.summary.length > 0);
    assert.deepEqual(fs.readFileSync(s.file), before);
  });

  test('navigateTree to a user message moves the leaf to its parent and returns its text', async () => {
    const s = makeSession();
    const info = await d.request('session/open', { path: s.file });
    const result = await d.request('session/navigateTree', { sessionId: info.sessionId, targetId: s.branchUserId, summarize: false });
    assert.equal(result.cancelled, false);
    assert.equal(result.editorText, 'Try the other approach: widen the type in accounts.rs only.');
    const branch = s.entries.find((e) => e.id === s.branchUserId);
    assert.equal(result.leafId, branch.parentId);
    const tree = await d.request('session/tree', { sessionId: info.sessionId });
    assert.equal(tree.leafId, branch.parentId);
  });

  test('navigateTree with a summary appends a branch summary', async () => {
    const s = makeSession();
    const info = await d.request('session/open', { path: s.file });
    const result = await d.request('session/navigateTree', {
      sessionId: info.sessionId,
      targetId: s.branchUserId,
      summarize: true,
      customInstructions: 'Mention the overflow.',
    });
    assert.equal(result.cancelled, false);
    assert.ok(result.summaryEntry, 'a branch summary was written');
    assert.equal(result.summaryEntry.type, 'branch_summary');
    assert.ok(String(result.summaryEntry.summary).length > 0);
    const lines = fs.readFileSync(s.file, 'utf8').trim().split('\n');
    assert.equal(JSON.parse(lines[lines.length - 1]).id, result.summaryEntry.id);
  });
});

describe('cancellation with a slow summarizer', () => {
  /** @type {Awaited<ReturnType<typeof startFakeOpenAI>>} */
  let fake;
  /** @type {Awaited<ReturnType<typeof startDaemon>>} */
  let d;
  before(async () => {
    fake = await startFakeOpenAI();
    d = await startDaemon({ settings: slowSummarizerSettings(fake.baseUrl) });
  });
  after(async () => {
    await d?.close();
    await fake?.close();
  });

  test('window/workDoneProgress/cancel aborts the compaction and leaves the file unchanged', async () => {
    const s = makeSession();
    const before = fs.readFileSync(s.file);
    const info = await d.request('session/open', { path: s.file });
    const requestsBefore = fake.requests;
    const createdBefore = d.created.length;
    const pending = d.request('session/compact', { sessionId: info.sessionId });
    await waitFor(() => fake.requests > requestsBefore, 10_000, 'the summarizer request');
    const token = d.created[createdBefore];
    assert.ok(token !== undefined, 'progress token created');
    const usage = await d.request('session/usage', { sessionId: info.sessionId });
    assert.equal(usage.isCompacting, true);
    await d.conn.sendNotification('window/workDoneProgress/cancel', { token });
    assert.equal(await errorKindOf(pending), 'cancelled');
    assert.deepEqual(fs.readFileSync(s.file), before, 'nothing was written');
    await waitFor(() => fake.disconnects > 0, 5000, 'the HTTP request to be dropped');
    const end = await waitFor(() => d.progress.find((p) => p.token === token && p.value.kind === 'end'), 5000, 'progress end');
    assert.equal(end.value.message, 'cancelled');
  });

  test('session/abortCompaction aborts it too', async () => {
    const s = makeSession();
    const before = fs.readFileSync(s.file);
    const info = await d.request('session/open', { path: s.file });
    const requestsBefore = fake.requests;
    const pending = d.request('session/compact', { sessionId: info.sessionId });
    await waitFor(() => fake.requests > requestsBefore, 10_000, 'the summarizer request');
    const abort = await d.request('session/abortCompaction', { sessionId: info.sessionId });
    assert.equal(abort.aborted, true);
    assert.equal(await errorKindOf(pending), 'cancelled');
    assert.deepEqual(fs.readFileSync(s.file), before);
  });
});

describe('client summarizer', () => {
  test('summarizer/summarize is answered by the client and its text becomes the summary', async () => {
    /** @type {any[]} */
    const asked = [];
    const d = await startDaemon({
      settings: { summarizer: { kind: 'client' } },
      summarizer: (params) => {
        asked.push(params);
        return { text: `## Goal\nSummary written by the client for ${params.purpose}.` };
      },
    });
    try {
      const s = makeSession();
      const info = await d.request('session/open', { path: s.file });
      const result = await d.request('session/compact', { sessionId: info.sessionId });
      assert.ok(asked.length > 0, 'the client was asked');
      assert.equal(asked[0].sessionId, info.sessionId);
      assert.ok(asked[0].prompt.length > 0 && asked[0].systemPrompt.length > 0);
      assert.match(result.summary, /Summary written by the client for history/);
    } finally {
      await d.close();
    }
  });
});
