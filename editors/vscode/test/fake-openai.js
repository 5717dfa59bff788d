// @ts-check
// A tiny OpenAI-compatible chat completions server on 127.0.0.1 for tests: it streams a summary
// very slowly, so a test has time to cancel a compaction, and records whether the client hung
// up (cancellation must reach the HTTP request). Never a real LLM service.
'use strict';
const http = require('http');

/**
 * @param {{ chunkEveryMs?: number, chunks?: number }} [options]
 * @returns {Promise<{ baseUrl: string, requests: number, disconnects: number, close(): Promise<void>, onRequest(): Promise<void> }>}
 */
function startFakeOpenAI(options = {}) {
  const chunkEveryMs = options.chunkEveryMs ?? 200;
  const chunks = options.chunks ?? 1000; // ~200 s at the default pace: far longer than any test
  /** @type {Set<import('http').ServerResponse>} */
  const open = new Set();
  /** @type {(() => void)[]} */
  let waiting = [];
  const state = {
    baseUrl: '',
    requests: 0,
    disconnects: 0,
    close: () =>
      new Promise((resolve) => {
        for (const res of open) res.destroy();
        server.close(() => resolve());
      }),
    /** Resolves at the next request (or now, if one already came). */
    onRequest: () => (state.requests > 0 ? Promise.resolve() : new Promise((resolve) => waiting.push(resolve))),
  };
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      if (req.method !== 'POST' || !/\/chat\/completions$/.test(req.url ?? '')) {
        res.writeHead(404).end();
        return;
      }
      state.requests++;
      for (const w of waiting.splice(0)) w();
      open.add(res);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      let sent = 0;
      const timer = setInterval(() => {
        if (sent === chunks) {
          res.write('data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n');
          res.end('data: [DONE]\n\n');
          clearInterval(timer);
          return;
        }
        const chunk = { choices: [{ index: 0, delta: { content: sent === 0 ? '## Goal\n' : 'slow summary text ' } }] };
        res.write(`data: ${JSON.stringify(chunk)}\n\n`);
        sent++;
      }, chunkEveryMs);
      res.on('close', () => {
        clearInterval(timer);
        open.delete(res);
        if (!res.writableFinished) state.disconnects++;
      });
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const addr = /** @type {import('net').AddressInfo} */ (server.address());
      state.baseUrl = `http://127.0.0.1:${addr.port}/v1`;
      resolve(state);
    });
  });
}

/** compactd settings that make `fake/slow` at `baseUrl` the only summarizer (no retries). */
function slowSummarizerSettings(baseUrl) {
  return {
    providers: { fake: { kind: 'openai', baseUrl, models: { slow: { contextWindow: 200000 } } } },
    summarizer: { kind: 'openai', model: 'fake/slow' },
    retry: { enabled: false },
  };
}

module.exports = { startFakeOpenAI, slowSummarizerSettings };
