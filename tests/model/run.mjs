// The real-model check (scripts/test.d/model.sh): the compactd binary over pipes (LSP framing)
// against tests/model/server.mjs serving Gemma 3 270M. One scenario per invocation:
//
//   node run.mjs fits    URL  the server says its window: one compaction (history and turn
//                             prefix, one queued while the other waits for its first token,
//                             both statuses reported as $/progress) and one branch summary
//   node run.mjs refused URL  the server's window is smaller than configured and not said: the
//                             history prompt is refused, asked again smaller (planned to the
//                             window the refusal said), and the server accepts it; nothing
//                             else is refused
//   node run.mjs breaker URL  the server answers 503: the breaker stops asking after two
//
// Whatever the base model writes, the outcome must be one of two, and visible in the result:
// the model's summary kept (`summarizer` is the model, its checks in `details.summarizers`) or
// rejected with the reason (`details.summarizers[].failures`) and the offline extractive
// summary used. A kept part must name the session's first request, and so must the summary
// whoever wrote it. Exits non-zero on any failed check.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [scenario, url] = process.argv.slice(2);
const bin = process.env.COMPACTD_BIN;
assert.ok(bin && url && scenario, 'usage: COMPACTD_BIN=... node run.mjs SCENARIO URL');
const MODEL = 'local/gemma';
const OP_TIMEOUT_MS = 600_000;

const settingsFor = {
  // Configured bigger than served: the window is read from /v1/models.
  fits: { contextWindow: 32768, maxOutputTokens: 48, discover: true },
  // Configured bigger than served and the server does not say: the server refuses. The cut
  // falls at the last request (no split turn): the first turn, with its long test output, is
  // the history.
  refused: { contextWindow: 8192, maxOutputTokens: 48, discover: false, keepRecentTokens: 30 },
  breaker: { contextWindow: 8192, maxOutputTokens: 48, discover: false },
}[scenario];
assert.ok(settingsFor, `unknown scenario ${scenario}`);

const settings = {
  providers: { local: {
    kind: 'openai', baseUrl: `${url}/v1`, discoverLimits: settingsFor.discover,
    firstTokenTimeoutMs: OP_TIMEOUT_MS, idleTimeoutMs: 120_000,
    models: { gemma: { contextWindow: settingsFor.contextWindow, maxOutputTokens: settingsFor.maxOutputTokens } },
  } },
  summarizer: { kind: 'openai', model: MODEL },
  retry: { enabled: true, maxRetries: 3, baseDelayMs: 200 },
  tokenizer: 'chars4',
  compaction: { enabled: false, keepRecentTokens: settingsFor.keepRecentTokens ?? 120 },
};

// --- a minimal LSP-framed JSON-RPC client -----------------------------------------------
const home = fs.mkdtempSync(path.join(os.tmpdir(), 'compactd-model-'));
for (const d of ['config', 'data', 'project']) fs.mkdirSync(path.join(home, d));
fs.writeFileSync(path.join(home, 'config', 'settings.json'), JSON.stringify(settings));
const stderrPath = path.join(home, 'stderr.log');
const child = spawn(bin, ['serve'], {
  env: { ...process.env, COMPACTD_CONFIG_DIR: path.join(home, 'config'), COMPACTD_DATA_DIR: path.join(home, 'data'), COMPACTD_LOG: 'compactd=info' },
  stdio: ['pipe', 'pipe', fs.openSync(stderrPath, 'w')],
});
const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
let buffer = Buffer.alloc(0);
let nextId = 1;
const pending = new Map();
const progress = [];
const notifications = [];
child.stdout.on('data', (data) => {
  buffer = Buffer.concat([buffer, data]);
  for (;;) {
    const end = buffer.indexOf('\r\n\r\n');
    if (end < 0) return;
    const length = Number(/Content-Length: *(\d+)/i.exec(buffer.subarray(0, end).toString())[1]);
    if (buffer.length < end + 4 + length) return;
    const message = JSON.parse(buffer.subarray(end + 4, end + 4 + length).toString());
    buffer = buffer.subarray(end + 4 + length);
    if (message.id !== undefined && pending.has(message.id)) {
      pending.get(message.id)(message);
      pending.delete(message.id);
    } else if (message.method === '$/progress') {
      progress.push(message.params.value);
    } else if (message.method) {
      notifications.push(message);
    }
  }
});
function write(message) {
  const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', ...message }));
  child.stdin.write(`Content-Length: ${body.length}\r\n\r\n`);
  child.stdin.write(body);
}
function call(method, params) {
  const id = nextId++;
  const answer = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out: ${method}`)), OP_TIMEOUT_MS);
    pending.set(id, (m) => { clearTimeout(timer); resolve(m); });
  });
  write({ id, method, params });
  return answer;
}
async function ok(method, params) {
  const m = await call(method, params);
  assert.ok(!m.error, `${method}: ${JSON.stringify(m.error)}`);
  return m.result;
}
const stats = async () => (await fetch(`${url}/stats`)).json();
const log = () => fs.readFileSync(stderrPath, 'utf8');
const show = (what, value) => console.log(`model.${scenario}: ${what}: ${typeof value === 'string' ? value : JSON.stringify(value)}`);

// --- a small session: two turns, then a turn long enough that the cut falls inside it -----
function message(role, text) {
  return role === 'user'
    ? { type: 'message', message: { role, content: text, timestamp: Date.now() } }
    : { type: 'message', message: { role, content: [{ type: 'text', text }], provider: 'test', model: 'm',
      stopReason: 'stop', timestamp: Date.now(), usage: { input: 100, output: 10, cacheRead: 0, cacheWrite: 0, totalTokens: 110 } } };
}
function toolCall(id, command) {
  return { type: 'message', message: { role: 'assistant', content: [{ type: 'toolCall', id, name: 'bash', arguments: { command } }],
    provider: 'test', model: 'm', stopReason: 'toolUse', timestamp: Date.now(), usage: { input: 100, output: 10, cacheRead: 0, cacheWrite: 0, totalTokens: 110 } } };
}
function toolResult(id, text) {
  return { type: 'message', message: { role: 'toolResult', toolCallId: id, toolName: 'bash', content: [{ type: 'text', text }], isError: false, timestamp: Date.now() } };
}
// `refused`: a test run's long output (cut to 2,000 characters in the transcript) makes the
// history prompt larger than the served window; planned again, the output is clipped harder
// (head and tail) and the prompt fits. The cut falls at the last request: no split turn.
const refusedEntries = [
  message('user', 'Please make the date parser in src/date.rs accept RFC 3339 timestamps with a "Z" suffix. Never change the public API.'),
  message('assistant', 'I added a branch for "Z" in parse_date and a unit test parse_z_suffix. Running the tests.'),
  toolCall('call_1', 'cargo test date::'),
  toolResult('call_1', Array.from({ length: 130 }, (_, i) => `test date::tests::case_${i} ... ok`).join('\n')
    + '\n\ntest result: ok. 130 passed; 0 failed; 0 ignored; finished in 0.42s'),
  message('assistant', 'All 130 date tests pass, parse_z_suffix included.'),
  message('user', 'Now document the accepted formats in README.md.'),
  message('assistant', 'I added a "Date formats" section to README.md listing RFC 3339 with "Z" or a numeric offset.'),
  message('user', 'Good, thanks.'),
];
const entries = scenario === 'refused' ? refusedEntries : [
  message('user', 'Please make the date parser in src/date.rs accept RFC 3339 timestamps with a "Z" suffix. Never change the public API.'),
  message('assistant', 'I read src/date.rs. parse_date only accepted "+00:00" offsets, so I added a branch for "Z" and a unit test parse_z_suffix. cargo test passes.'),
  message('user', 'Good. Now also reject dates before 1970 with a clear error message.'),
  message('assistant', 'Added DateError::BeforeEpoch and a check in parse_date; the error message says "dates before 1970-01-01 are not supported". Two new tests pass.'),
  message('user', 'Finally, document the accepted formats in README.md and run the whole test suite.'),
  message('assistant', 'I added a "Date formats" section to README.md listing RFC 3339 with "Z" or a numeric offset.'),
  message('assistant', 'Running cargo test: 48 tests, all passing. cargo clippy reports no warnings.'),
  message('assistant', 'Everything is done: the parser accepts "Z", rejects pre-1970 dates, and README.md documents it.'),
];

// Every part the model was asked for, kept with its checks or rejected with the reason, as the
// result says it (`details.summarizers`: part, summarizer, checks, failures).
const tally = { kept: 0, rejected: 0 };
// Both sessions open with the same request; a compaction summary that names none of it (its
// file, its function, its format or its subject) says nothing of the session, whoever wrote
// it. The branch left by navigation holds the later requests (pre-1970 dates, README.md).
const NAMES_THE_REQUEST = /src\/date\.rs|parse_date|RFC 3339|date parser/i;
const NAMES_THE_BRANCH = /parse_date|BeforeEpoch|1970|README\.md/i;
function outcome(summarizer, summary, details, what, shortSummary, names = NAMES_THE_REQUEST) {
  assert.ok(typeof summary === 'string' && summary.trim().length > 0, `${what}: a summary`);
  assert.match(summary, names, `${what}: the summary names what was asked: ${summary}`);
  const reports = details?.summarizers;
  assert.ok(Array.isArray(reports) && reports.length > 0, `${what}: the result says who wrote each part: ${JSON.stringify(details)}`);
  for (const report of reports) {
    if (report.summarizer === MODEL) {
      assert.match(report.checks ?? '', /checks passed/, `${what}: a kept model summary passed its checks: ${JSON.stringify(report)}`);
      tally.kept += 1;
      const text = report.part === 'short' ? shortSummary : summary;
      // A kept part that names nothing of what was asked is a useless keep (issue 37: a
      // `Format:` line and one checkbox about README.md): the checks must have rejected it.
      assert.match(String(text), names, `${what}: the kept ${report.part} names what was asked: ${JSON.stringify(text)}`);
      show(`${what}: ${report.part} kept (the model's: ${report.checks})`, String(text).slice(0, 300));
    } else {
      assert.equal(report.summarizer, 'extractive', `${what}: the model's or the offline fallback's: ${JSON.stringify(report)}`);
      const failure = report.failures.find((f) => f.summarizer === MODEL);
      assert.ok(failure && failure.reason.length > 0, `${what}: ${report.part} fell back with no reason in the result: ${JSON.stringify(report)}`);
      tally.rejected += 1;
      show(`${what}: ${report.part} rejected, extractive used; reason in the result`, failure.reason.slice(0, 400));
    }
  }
  const first = reports[0];
  assert.equal(summarizer, first.summarizer, `${what}: \`summarizer\` names who wrote the ${first.part}`);
}

async function main() {
  await ok('initialize', { processId: process.pid, clientInfo: { name: 'model-suite' }, capabilities: { workDoneProgress: true } });
  write({ method: 'initialized', params: {} });
  const { sessionId } = await ok('session/create', { cwd: path.join(home, 'project') });
  const appended = await ok('session/append', { sessionId, entries });
  const ids = appended.appended.map((e) => (typeof e === 'string' ? e : e.id));

  if (scenario === 'breaker') {
    await fetch(`${url}/mode`, { method: 'POST', body: JSON.stringify({ mode: 'busy' }) });
  }
  const before = await stats();
  const started = Date.now();
  const result = await ok('session/compact', { sessionId, workDoneToken: 'model-1' });
  const after = await stats();
  const asked = after.requests - before.requests;
  show('compaction', { summarizer: result.summarizer, seconds: (Date.now() - started) / 1000, requests: asked,
    served: after.log.slice(before.log.length) });
  assert.ok(result.entryId, 'a compaction entry was written');
  outcome(result.summarizer, result.summary, result.details, 'compaction', result.shortSummary);
  const messages = progress.map((p) => p.message ?? '').filter(Boolean);
  const distinct = [...new Set(messages.map((m) => m.replace(/\d+/g, 'N')))];
  show('progress messages', { count: messages.length, distinct });
  const answered = after.log.slice(before.log.length).filter((e) => e.completionTokens !== undefined);
  const streamed = answered.reduce((n, e) => n + e.completionTokens, 0);
  // Throttled: never more reports than streamed tokens plus the statuses and phases.
  assert.ok(messages.length <= streamed + 20, `${messages.length} progress messages for ${streamed} streamed tokens`);

  if (scenario === 'fits') {
    // The window came from /v1/models: nothing refused, every prompt fits the served window.
    assert.equal(after.refused, 0, JSON.stringify(after.log));
    assert.ok(asked >= 2, `history and turn prefix were both asked: ${asked}`);
    // Queued to the declared parallelism (1 for a server on this machine), and the client told.
    assert.equal(after.maxOpen, 1, 'never more than one request open at the one-slot server');
    assert.ok(messages.some((m) => /: queued for local\/gemma while its server is busy/.test(m)), JSON.stringify(distinct));
    assert.ok(messages.some((m) => /^history: waiting for the model local\/gemma/.test(m)), JSON.stringify(distinct));
    assert.ok(messages.some((m) => /^turn prefix: waiting for the model local\/gemma/.test(m)), JSON.stringify(distinct));

    // One branch summary: back to the first answer, summarising the rest.
    const target = ids[1];
    // A preview: its result says which summarizer wrote the summary (`summary.summarizer`); the
    // written entry of a non-preview navigation does not.
    const nav = await ok('session/navigateTree', { sessionId, targetId: target, summarize: true, preview: true });
    const branch = nav.summary ?? {};
    const text = branch.summary ?? nav.summaryEntry?.summary;
    const by = branch.summarizer ?? nav.summaryEntry?.summarizer;
    const afterBranch = await stats();
    show('branch summary', { summarizer: by, requests: afterBranch.requests - after.requests,
      served: afterBranch.log.slice(after.log.length) });
    outcome(by, text, branch.details, 'branch summary', undefined, NAMES_THE_BRANCH);
  }
  if (scenario === 'refused') {
    const served = after.log.slice(before.log.length);
    const history = served.filter((e) => e.purpose === 'history');
    // The prompt planned for the configured window is refused; asked again, planned to the
    // window the refusal said (n_ctx) with the server's count (n_prompt_tokens), it is smaller
    // and the server accepts it (answers it, whatever the answer is worth).
    assert.equal(history[0]?.outcome, 'refused', `the served window is smaller than configured: ${JSON.stringify(served)}`);
    assert.ok(history.length >= 2, `asked again after the refusal: ${JSON.stringify(served)}`);
    assert.ok(history[1].promptTokens < history[0].promptTokens, `the retry is smaller: ${JSON.stringify(served)}`);
    assert.notEqual(history[1].outcome, 'refused', `the smaller retry is accepted: ${JSON.stringify(served)}`);
    // The window holds for the rest of the compaction: nothing else is refused.
    assert.equal(served.filter((e) => e.outcome === 'refused').length, 1, JSON.stringify(served));
  }
  if (scenario === 'breaker') {
    assert.equal(result.summarizer, 'extractive');
    // Without the breaker: history and turn prefix, 1 + 3 retries each.
    assert.ok(asked >= 2 && asked <= 3, `the breaker stopped asking after two same failures: ${asked} requests`);
    assert.match(log(), /breaker|not asked again|failed the same way/i);
  }

  // Whether a part of this 270M base model's is kept depends on the CPU's rounding (its answers
  // differ between machines, docs/models.md): a keep is not required, but every keep must name
  // the request (above), and with every part rejected the offline summary carries the files.
  if (tally.kept === 0) {
    // What both sessions' summarised parts hold (the README.md request is in the kept part).
    for (const file of ['src/date.rs', 'parse_date']) {
      assert.ok(result.summary.includes(file), `every part rejected: the offline summary names ${file}: ${result.summary}`);
    }
  }
  show('model summaries', tally);
  await ok('shutdown');
  write({ method: 'exit' });
  assert.equal(await exited, 0);
  fs.rmSync(home, { recursive: true, force: true });
  console.log(`model.${scenario}: ok`);
}

main().catch((error) => {
  console.error(error);
  try { console.error(`--- compactd stderr ---\n${log()}`); } catch {}
  child.kill();
  process.exit(1);
});
