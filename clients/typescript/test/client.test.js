// @ts-check
// The client against the real daemon (`compactd serve`, $COMPACTD_BIN or the repository's debug
// build) over real pipes: initialize, typed requests, progress and session events, cancellation
// by request token and by progress token, a client-side summarizer, errors with their kind, and
// the generated types' staleness check. A fake OpenAI-compatible model on 127.0.0.1 keeps a
// compaction running long enough to cancel it.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const cp = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { CompactdClient, CompactdError, CancellationTokenSource, errorKind, PROTOCOL_VERSION, ERROR_CODES } = require('..');

const repo = path.resolve(__dirname, '../../..');
const bin = process.env.COMPACTD_BIN || path.join(repo, 'target/debug/compactd');
/** @type {string[]} Temp dirs made here, removed when the run passes (kept on failure, for a look). */
const made = [];
process.on('exit', (code) => {
  if (code !== 0 || process.env.COMPACTD_KEEP_TMP) return;
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
});
/** @param {string} prefix */
function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(dir);
  return dir;
}
const configDir = tempDir('compactd-ts-config-');
const env = { ...process.env, COMPACTD_CONFIG_DIR: configDir };

/** A fresh copy of the demo session (with its own id: one file per id is open at a time). */
function demoCopy() {
  const dir = tempDir('compactd-ts-');
  const file = path.join(dir, 'session.jsonl');
  const lines = fs.readFileSync(path.join(repo, 'examples/demo-session.jsonl'), 'utf8').trim().split('\n');
  lines[0] = JSON.stringify({ ...JSON.parse(lines[0]), id: crypto.randomBytes(8).toString('hex') });
  fs.writeFileSync(file, lines.join('\n') + '\n');
  return file;
}
/** @param {string} file */
const lastEntry = (file) => JSON.parse(fs.readFileSync(file, 'utf8').trim().split('\n').pop() ?? 'null');

/** An OpenAI-compatible server that streams a summary very slowly; counts requests and hang-ups. */
function slowModel() {
  const state = { requests: 0, hangups: 0, baseUrl: '', server: /** @type {http.Server | undefined} */ (undefined) };
  state.server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      state.requests++;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const timer = setInterval(() => res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'slow ' } }] })}\n\n`), 200);
      res.on('close', () => {
        clearInterval(timer);
        if (!res.writableFinished) state.hangups++;
      });
    });
  });
  return new Promise((resolve) =>
    state.server?.listen(0, '127.0.0.1', () => {
      state.baseUrl = `http://127.0.0.1:${/** @type {any} */ (state.server?.address()).port}/v1`;
      resolve(state);
    }),
  );
}

/** @param {() => boolean} check @param {number} ms @param {string} what */
async function until(check, ms, what) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** @type {CompactdClient} */
let client;
before(async () => {
  client = await CompactdClient.start({ command: bin, env, settings: { summarizer: { kind: 'extractive' }, compaction: { keepRecentTokens: 2000 } } });
});
after(async () => {
  assert.equal(await client.close(), 0, 'a clean shutdown exits 0');
});

test('the generated types are current, and the check notices a changed schema', () => {
  const gen = path.join(__dirname, '../scripts/generate.js');
  const fresh = cp.spawnSync(process.execPath, [gen, '--check'], { encoding: 'utf8' });
  assert.equal(fresh.status, 0, fresh.stderr);

  const schema = JSON.parse(fs.readFileSync(path.join(repo, 'schema/protocol.schema.json'), 'utf8'));
  schema.$defs.SessionInfo.properties.addedByTheTest = { type: 'string' };
  const changed = path.join(configDir, 'changed.schema.json');
  fs.writeFileSync(changed, JSON.stringify(schema));
  const stale = cp.spawnSync(process.execPath, [gen, '--check', '--schema', changed], { encoding: 'utf8' });
  assert.equal(stale.status, 1, 'a schema change makes src/protocol.ts stale');
  assert.match(stale.stderr, /stale/);
});

test('initialize reports the server and the protocol version of the generated types', () => {
  assert.equal(client.initializeResult.serverInfo.name, 'compactd');
  assert.equal(client.initializeResult.capabilities.protocolVersion, PROTOCOL_VERSION);
});

test('typed requests: open, context, tree, usage', async () => {
  const file = demoCopy();
  const info = await client.request('session/open', { path: file });
  assert.equal(info.path, file);
  assert.equal(info.version, 3);
  const context = await client.request('session/context', { sessionId: info.sessionId });
  assert.ok(context.messages.length > 10, `messages: ${context.messages.length}`);
  assert.ok(context.tokens > 0);
  const tree = await client.request('session/tree', { sessionId: info.sessionId });
  assert.equal(tree.leafId, info.leafId);
  assert.equal(tree.nodes.length, info.entryCount);
  const usage = await client.request('session/usage', { sessionId: info.sessionId });
  assert.ok(usage.contextWindow > 0);
  await client.request('session/close', { sessionId: info.sessionId });
});

test('a compaction reports $/progress and session events, and writes its entry', async () => {
  const file = demoCopy();
  const { sessionId } = await client.request('session/open', { path: file });
  /** @type {import('..').ProgressParams[]} */
  const progress = [];
  /** @type {string[]} */
  const events = [];
  const subs = [
    client.onProgress((p) => progress.push(p)),
    client.onNotification('session/compactionStarted', (p) => p.sessionId === sessionId && events.push('started')),
    client.onNotification('session/compactionFinished', (p) => p.sessionId === sessionId && events.push(p.aborted ? 'aborted' : 'finished')),
  ];
  const result = await client.request('session/compact', { sessionId, customInstructions: 'Keep the overflow cause.' });
  assert.ok(result.entryId);
  assert.equal(lastEntry(file).id, result.entryId);
  assert.equal(lastEntry(file).type, 'compaction');
  await until(() => events.includes('finished') && progress.some((p) => p.value.kind === 'end'), 5000, 'events');
  assert.deepEqual(events, ['started', 'finished']);
  assert.equal(progress[0].value.kind, 'begin');
  assert.equal(progress.at(-1)?.value.kind, 'end');
  assert.ok(progress.every((p) => p.token === progress[0].token), 'one token for the operation');
  subs.forEach((s) => s.dispose());
  await client.request('session/close', { sessionId });
});

test('errors reject with the protocol kind', async () => {
  const missing = path.join(configDir, 'no-such-session.jsonl');
  await assert.rejects(client.request('session/open', { path: missing }), (err) => {
    assert.ok(err instanceof CompactdError);
    assert.equal(err.method, 'session/open');
    assert.equal(err.kind, errorKind(err));
    assert.ok(err.kind && err.code === ERROR_CODES[err.kind], `kind ${err.kind}, code ${err.code}`);
    return true;
  });
  await assert.rejects(client.request('session/context', { sessionId: 'nope' }), (err) => errorKind(err) === 'sessionNotFound');
});

test('cancelling a request token and a progress token abort a running compaction, writing nothing', async () => {
  const model = /** @type {any} */ (await slowModel());
  const slow = await CompactdClient.start({
    command: bin,
    env,
    settings: {
      providers: { fake: { kind: 'openai', baseUrl: model.baseUrl, models: { slow: { contextWindow: 200000 } } } },
      summarizer: { kind: 'openai', model: 'fake/slow' },
      retry: { enabled: false },
      compaction: { keepRecentTokens: 2000 },
    },
  });
  try {
    // By the request's cancellation token ($/cancelRequest).
    let file = demoCopy();
    let before = fs.readFileSync(file);
    let { sessionId } = await slow.request('session/open', { path: file });
    const source = new CancellationTokenSource();
    const pending = slow.request('session/compact', { sessionId }, source.token);
    await until(() => model.requests >= 1, 15_000, 'the summarizer request');
    source.cancel();
    await assert.rejects(pending, (err) => errorKind(err) === 'cancelled');
    assert.deepEqual(fs.readFileSync(file), before, 'nothing written');
    await until(() => model.hangups >= 1, 5000, 'the HTTP request to be dropped');

    // By the progress token, as an editor's Cancel button does.
    file = demoCopy();
    before = fs.readFileSync(file);
    ({ sessionId } = await slow.request('session/open', { path: file }));
    /** @type {import('..').ProgressToken | undefined} */
    let token;
    const sub = slow.onProgress((p) => {
      if (p.value.kind === 'begin') token = p.token;
    });
    const asked = model.requests;
    const second = slow.request('session/compact', { sessionId });
    second.catch(() => undefined); // checked below; not an unhandled rejection meanwhile
    await until(() => model.requests > asked && token !== undefined, 15_000, 'the second summarizer request');
    await slow.cancelProgress(/** @type {any} */ (token));
    await assert.rejects(second, (err) => errorKind(err) === 'cancelled');
    assert.deepEqual(fs.readFileSync(file), before, 'nothing written');
    sub.dispose();
  } finally {
    await slow.close();
    model.server.close();
  }
});

test('a client summarizer answers summarizer/summarize (its capability declared for it)', async () => {
  /** @type {string[]} */
  const purposes = [];
  const own = await CompactdClient.start({
    command: bin,
    env,
    settings: { summarizer: { kind: 'client' }, compaction: { keepRecentTokens: 2000 } },
    handlers: {
      'summarizer/summarize': (params) => {
        purposes.push(params.purpose);
        return { text: `## Goal\nFix the overflow (summary by the TypeScript client, ${params.purpose}).` };
      },
    },
  });
  try {
    const file = demoCopy();
    const { sessionId } = await own.request('session/open', { path: file });
    const result = await own.request('session/compact', { sessionId });
    assert.ok(purposes.includes('history'), `purposes: ${purposes}`);
    assert.match(result.summary, /summary by the TypeScript client/);
    assert.match(String(lastEntry(file).summary), /summary by the TypeScript client/);
  } finally {
    assert.equal(await own.close(), 0);
  }
});

test('a daemon that cannot start is a clear error', async () => {
  await assert.rejects(CompactdClient.start({ command: path.join(configDir, 'no-such-compactd') }), /cannot start/);
});
