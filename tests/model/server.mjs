// A small OpenAI-compatible server for the real-model suite (scripts/test.d/model.sh): one
// GGUF model loaded with node-llama-cpp, one slot, on 127.0.0.1 only.
//
//   node server.mjs --model FILE --context N [--report-window] [--name ID]
//
// * GET  /v1/models           lists the model; with --report-window its `context_length`
//                             (what compactd reads to fit its requests), without it nothing.
// * POST /v1/chat/completions streams (SSE) or answers at once. The model is a base model with
//                             no chat template, so the messages are joined as plain text. A
//                             prompt that does not fit the context is refused as llama.cpp's
//                             server does (400, "exceeds the available context size", with
//                             n_prompt_tokens and n_ctx).
// * GET  /stats               what the suite asserts on: requests, refusals, the most requests
//                             open at once, each request's purpose, prompt tokens, stop reason
//                             and answer.
// * POST /mode {"mode": "busy"|"serve"}: "busy" answers every chat request 503 (a server that
//                             is loading), for the breaker check.
//
// Prints `listening PORT` on stdout when ready.
import http from 'node:http';
import { getLlama, LlamaCompletion } from 'node-llama-cpp';

const args = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const modelPath = arg('--model');
const contextSize = Number(arg('--context', '2048'));
const reportWindow = args.includes('--report-window');
const name = arg('--name', 'gemma');
if (!modelPath) {
  console.error('server.mjs: --model FILE is required');
  process.exit(2);
}

const llama = await getLlama({ gpu: false, build: 'never' });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize, sequences: 1, threads: 2 });
const sequence = context.getSequence();
const completion = new LlamaCompletion({ contextSequence: sequence });

const stats = { requests: 0, refused: 0, busy: 0, completed: 0, open: 0, maxOpen: 0, log: [] };
let mode = 'serve';
let slot = Promise.resolve();

function promptOf(messages) {
  return messages
    .map((m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text ?? '').join('')))
    .join('\n\n') + '\n\n';
}

// Which summary a prompt asks for, from its instructions (for the suite's checks and logs).
function purposeOf(prompt) {
  if (prompt.includes('Describe the changes made')) return 'short';
  if (prompt.includes('first part of a single turn')) return 'turnPrefix';
  if (prompt.includes('branch of the conversation that the user is leaving')) return 'branch';
  return 'history';
}

function send(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function chat(req, res, body) {
  stats.requests += 1;
  if (mode === 'busy') {
    stats.busy += 1;
    return send(res, 503, { error: { code: 503, message: 'Loading model', type: 'unavailable_error' } });
  }
  const prompt = promptOf(body.messages ?? []);
  const tokens = model.tokenize(prompt);
  // The prompt's last line (the length it asks for) tells the suite which request this was.
  const entry = { promptTokens: tokens.length, maxTokens: body.max_tokens ?? body.max_completion_tokens ?? null,
    purpose: purposeOf(prompt) };
  stats.log.push(entry);
  if (tokens.length + 8 > contextSize) {
    stats.refused += 1;
    entry.outcome = 'refused';
    return send(res, 400, { error: {
      code: 400, type: 'exceed_context_size_error', n_prompt_tokens: tokens.length, n_ctx: contextSize,
      message: 'the request exceeds the available context size, try increasing it',
    } });
  }
  const maxTokens = Math.min(entry.maxTokens ?? 256, contextSize - tokens.length);
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  const id = `chatcmpl-${stats.requests}`;
  const chunk = (delta, finish) => ({ id, object: 'chat.completion.chunk', model: name,
    choices: [{ index: 0, delta, finish_reason: finish }] });
  if (body.stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write(`data: ${JSON.stringify(chunk({ role: 'assistant' }, null))}\n\n`);
  }
  await sequence.clearHistory();
  let result;
  try {
    result = await completion.generateCompletionWithMeta(tokens, {
      maxTokens, temperature: 0, signal: abort.signal, stopOnAbortSignal: true,
      onTextChunk: (text) => { if (body.stream && !res.writableEnded) res.write(`data: ${JSON.stringify(chunk({ content: text }, null))}\n\n`); },
    });
  } catch (e) {
    entry.outcome = `error: ${e.message}`;
    if (!res.headersSent) return send(res, 500, { error: { message: String(e.message) } });
    return res.end();
  }
  const finish = result.metadata.stopReason === 'maxTokens' ? 'length' : 'stop';
  entry.outcome = finish;
  entry.completionTokens = model.tokenize(result.response).length;
  entry.answer = result.response;
  stats.completed += 1;
  const usage = { prompt_tokens: tokens.length, completion_tokens: entry.completionTokens,
    total_tokens: tokens.length + entry.completionTokens };
  if (body.stream) {
    if (res.writableEnded) return;
    res.write(`data: ${JSON.stringify(chunk({}, finish))}\n\n`);
    res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', model: name, choices: [], usage })}\n\n`);
    res.write('data: [DONE]\n\n');
    return res.end();
  }
  send(res, 200, { id, object: 'chat.completion', model: name, usage,
    choices: [{ index: 0, message: { role: 'assistant', content: result.response }, finish_reason: finish }] });
}

const server = http.createServer((req, res) => {
  let raw = '';
  req.on('data', (d) => { raw += d; });
  req.on('end', () => {
    const url = req.url.split('?')[0];
    if (req.method === 'GET' && url === '/v1/models') {
      const entry = { id: name, object: 'model', owned_by: 'compactd-test' };
      if (reportWindow) entry.context_length = contextSize;
      return send(res, 200, { object: 'list', data: [entry] });
    }
    if (req.method === 'GET' && url === '/stats') return send(res, 200, stats);
    if (req.method === 'POST' && url === '/mode') {
      mode = JSON.parse(raw).mode;
      return send(res, 200, { mode });
    }
    if (req.method === 'POST' && url === '/v1/chat/completions') {
      let body;
      try { body = JSON.parse(raw); } catch { return send(res, 400, { error: { message: 'invalid JSON' } }); }
      // How many requests are open at once, counted on arrival: compactd's own queue keeps it
      // at the declared parallelism. The slot below serves them one at a time regardless.
      stats.open += 1;
      stats.maxOpen = Math.max(stats.maxOpen, stats.open);
      res.on('close', () => { stats.open -= 1; });
      const run = slot.then(() => chat(req, res, body)).catch((e) => {
        if (!res.headersSent) send(res, 500, { error: { message: String(e) } });
      });
      slot = run;
      return;
    }
    send(res, 404, { error: { message: `no route ${req.method} ${url}` } });
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
