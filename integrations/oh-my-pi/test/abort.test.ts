/**
 * The extension's hook against the real compactd, without the agent (whose RPC mode cannot
 * abort a compaction): an abort of the hook's signal reaches compactd's summarizer request,
 * and a compaction that outlives `timeoutMs` is abandoned for the agent's own path, with one
 * notice. compactd summarises with its own OpenAI-compatible summarizer against the fake model.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Compactd } from "../src/compactd";
import type { ExtensionContext, SessionBeforeCompactEvent, SessionEntry } from "../src/omp";
import { FakeLlm } from "./fake-llm";

const COMPACTD = process.env.COMPACTD_BIN;
if (!COMPACTD) throw new Error("COMPACTD_BIN is not set (scripts/test.d/omp.sh sets it)");
const DEMO = path.resolve(import.meta.dir, "../../../examples/demo-session.jsonl");

let llm: FakeLlm;
let baseUrl: string;
let dir: string;

beforeAll(() => {
  llm = new FakeLlm();
  baseUrl = llm.start();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "compactd-omp-abort-"));
});
afterAll(() => {
  llm.stop();
  if (!process.env.COMPACTD_KEEP_TMP) fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
});

/** Waits until no held request is left: each was given up by its client. */
async function abandonedAll(): Promise<void> {
  for (let i = 0; i < 100 && llm.heldNow > 0; i++) await Bun.sleep(100);
  expect(llm.heldNow).toBe(0);
}

function setup(timeoutMs: number) {
  const file = path.join(dir, `session-${timeoutMs}.jsonl`);
  fs.copyFileSync(DEMO, file);
  const lines = fs.readFileSync(file, "utf8").trim().split("\n").slice(1);
  const branchEntries = lines.map(l => JSON.parse(l) as SessionEntry);
  const notices: string[] = [];
  const ctx: ExtensionContext = {
    ui: { notify: message => notices.push(message), setStatus: () => undefined },
    hasUI: false,
    cwd: dir,
    sessionManager: {
      getSessionFile: () => file,
      getSessionId: () => "demo",
      getLeafId: () => branchEntries[branchEntries.length - 1].id,
      getCwd: () => dir,
    },
    modelRegistry: { getApiKey: async () => undefined },
    model: undefined,
  };
  const compactd = new Compactd({
    bin: COMPACTD!,
    summarizer: "compactd",
    timeoutMs,
    source: "test",
    settings: {
      summarizer: { kind: "openai", model: "fake/fake-model" },
      providers: { fake: { kind: "openai", baseUrl, apiKey: "fake-key", models: { "fake-model": { contextWindow: 64000 } } } },
    },
  });
  const abort = new AbortController();
  const event: SessionBeforeCompactEvent = {
    type: "session_before_compact",
    preparation: { firstKeptEntryId: branchEntries[0].id, tokensBefore: 0, isSplitTurn: false, settings: { keepRecentTokens: 2000, reserveTokens: 2000 } },
    branchEntries,
    signal: abort.signal,
  };
  return { file, ctx, compactd, abort, event, notices, before: fs.readFileSync(file) };
}

test("an abort of the hook's signal cancels compactd's summarizer request", async () => {
  const t = setup(60_000);
  llm.hold();
  const abandonedBefore = llm.abandoned;
  const result = t.compactd.compact(t.event, t.ctx);
  await llm.whenHeld();
  t.abort.abort();
  expect(await result).toEqual({ cancel: true });
  // compactd dropped the HTTP requests it was waiting on (history and turn prefix run at once).
  await abandonedAll();
  expect(llm.abandoned).toBeGreaterThan(abandonedBefore);
  expect(t.notices).toEqual([]);
  expect(fs.readFileSync(t.file)).toEqual(t.before);
  llm.release();
  t.compactd.stop();
}, 120_000);

test("a compaction that outlives timeoutMs falls back to the agent, with one notice", async () => {
  const t = setup(120_000);
  // A first compaction warms compactd up (tokenizer, daemon) and shows who summarised.
  const answered = await t.compactd.compact(t.event, t.ctx);
  expect(answered?.compaction?.details).toMatchObject({ compactd: { summarizer: "fake/fake-model" } });
  t.compactd.options.timeoutMs = 3_000;
  llm.hold();
  const first = t.compactd.compact(t.event, t.ctx);
  const held = await Promise.race([llm.whenHeld().then(() => true), first.then(() => false)]);
  expect(held).toBe(true);
  expect(await first).toBeUndefined();
  // On the timeout the extension aborts compactd's run, which drops its model requests.
  await abandonedAll();
  expect(await t.compactd.compact(t.event, t.ctx)).toBeUndefined();
  expect(t.notices.length).toBe(1);
  expect(t.notices[0]).toContain("no answer in 3000 ms");
  llm.release();
  expect(fs.readFileSync(t.file)).toEqual(t.before);
  t.compactd.stop();
}, 120_000);
