/**
 * The extension inside the real pi (oh-my-pi's upstream, `--mode rpc`, under Node), with the
 * fake model on 127.0.0.1 as the agent's model and the real compactd. pi gives extensions no
 * `pi.pi.getAgentDir()`, stores `fromHook`, keeps only the four fields of its
 * `CompactionResult`, and runs under Node, where the agent's model cannot answer compactd's
 * prompts: compactd's own summarizer (here its OpenAI-compatible one, configured in the
 * `compactd.json` the extension finds in pi's agent dir) writes the summaries. Run by
 * `scripts/test.d/omp.sh`, which installs pi and sets PI_AGENT_PKG and COMPACTD_BIN.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Agent, type AgentSetup, MODEL, PROVIDER, piCommand, writeAgentDir } from "./agent";
import { FakeLlm, MODEL_SUMMARY_MARK, textOf } from "./fake-llm";
import { type Entry, compactd, count, entriesOf, expectSameContext, lastIs, required, settled } from "./session";

const PI_PKG = required("PI_AGENT_PKG");
const COMPACTD = required("COMPACTD_BIN");
const EXTENSION = path.resolve(import.meta.dir, "../src/index.ts");
const PROBE = path.resolve(import.meta.dir, "probe-extension.ts");
const PI_VERSION = JSON.parse(fs.readFileSync(path.join(PI_PKG, "package.json"), "utf8")).version as string;
const KEEP_RECENT = 1500;
const WINDOW = 64_000;
/** pi compacts when a turn's context passes the window less this: 40,000 here. */
const RESERVE = 24_000;
const TEST_TIMEOUT = 240_000;

describe(`compactd inside the real pi ${PI_VERSION}`, () => {
  const llm = new FakeLlm();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "compactd-pi-"));
  const cwd = path.join(root, "project");
  let agent: Agent;
  let file: string;

  beforeAll(async () => {
    const baseUrl = llm.start();
    llm.bigPromptTokens = 45_000;
    fs.mkdirSync(path.join(cwd, "src"), { recursive: true });
    for (let i = 1; i <= 6; i++) {
      const body = Array.from({ length: 120 }, (_, n) => `fn step_${i}_${n}() -> u32 { ${n} }`).join("\n");
      fs.writeFileSync(path.join(cwd, `src/mod${i}.rs`), `// module ${i}\n${body}\n`);
    }
    const setup: AgentSetup = {
      baseUrl,
      contextWindow: WINDOW,
      compaction: { enabled: true, reserveTokens: RESERVE, keepRecentTokens: KEEP_RECENT },
      extensions: [EXTENSION, PROBE],
      env: { COMPACTD_BIN: COMPACTD, OMP_TEST_RECORD: path.join(root, "preparations.jsonl") },
      // No `summarizer`: under Node the extension defaults to compactd's own.
      compactdOptions: {
        settings: {
          summarizer: { kind: "openai", model: `${PROVIDER}/${MODEL}` },
          providers: { [PROVIDER]: { kind: "openai", baseUrl, apiKey: "fake-key", models: { [MODEL]: { contextWindow: WINDOW } } } },
        },
      },
    };
    // pi finds its agent dir (and the extension its compactd.json) through PI_CODING_AGENT_DIR.
    const dir = path.join(root, "agent");
    writeAgentDir(dir, setup);
    agent = new Agent(piCommand(PI_PKG), dir, cwd, setup);
    // pi sends no `ready` frame: it is ready once it answers.
    await agent.ok({ type: "get_state" }, 90_000);
  }, TEST_TIMEOUT);

  afterAll(async () => {
    await agent?.stop();
    llm.stop();
    if (!process.env.COMPACTD_KEEP_TMP) fs.rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  }, 30_000);

  test(
    "a manual compaction with instructions comes from compactd's own summarizer",
    async () => {
      for (const n of [1, 2, 3]) await agent.prompt(`read src/mod${n}.rs`);
      const state = await agent.ok<{ sessionFile: string; model: { id: string } }>({ type: "get_state" });
      file = state.sessionFile;
      expect(state.model.id).toBe(MODEL);
      // pi's header is line 1: no title line.
      expect(JSON.parse(fs.readFileSync(file, "utf8").split("\n")[0]).type).toBe("session");
      const before = fs.readFileSync(file, "utf8");
      const result = await agent.ok<any>({ type: "compact", customInstructions: "Keep the list of modules read." });

      const entries = await settled(file, lastIs("compaction"));
      const c1 = entries[entries.length - 1];
      expect(c1.type).toBe("compaction");
      expect(c1.fromHook).toBe(true);
      expect(result.summary).toBe(c1.summary);
      expect(c1.summary).toContain(MODEL_SUMMARY_MARK);
      expect(c1.summary).toContain("<read-files>");
      expect(c1.details.compactd.summarizer).toBe(`${PROVIDER}/${MODEL}`);
      // pi keeps only summary, firstKeptEntryId, tokensBefore and details.
      expect(c1.shortSummary).toBeUndefined();
      expect(c1.preserveData).toBeUndefined();
      const prompts = llm.received.filter(r => r.kind === "compactd-summary").map(r => JSON.stringify(r.body.messages));
      expect(prompts.some(p => p.includes("Keep the list of modules read."))).toBe(true);
      // No notice: the extension found its options and did not try the agent's model.
      expect(agent.notices().filter(n => n.message.startsWith("compactd:"))).toEqual([]);

      const copy = path.join(root, "before-c1.jsonl");
      fs.writeFileSync(copy, before);
      const plan = JSON.parse(compactd("plan", copy, "--keep-recent-tokens", String(KEEP_RECENT), "--json"));
      expect(c1.firstKeptEntryId).toBe(plan.firstKeptEntryId);
      await expectSameContext(agent, file);
    },
    TEST_TIMEOUT,
  );

  test(
    "a threshold compaction goes through compactd",
    async () => {
      const since = agent.events.length;
      await agent.prompt("read src/mod4.rs");
      await agent.prompt("BIG read src/mod5.rs");
      const started = agent.events.slice(since).filter(e => e.type === "compaction_start");
      expect(started.map(e => e.reason)).toEqual(["threshold"]);
      const compactions = (await settled(file, count("compaction", 2))).filter(e => e.type === "compaction");
      expect(compactions.length).toBe(2);
      expect(compactions[1].fromHook).toBe(true);
      expect(compactions[1].summary).toContain(MODEL_SUMMARY_MARK);
      await expectSameContext(agent, file);
    },
    TEST_TIMEOUT,
  );

  test(
    "a branch summary comes from compactd, and the file holds only pi's own lines",
    async () => {
      await agent.prompt("read src/mod6.rs");
      const target = entriesOf(file).find(e => e.message?.role === "user" && textOf(e.message.content) === "read src/mod2.rs")!;
      await agent.runCommand(`/goto ${target.id}`, m => m.startsWith("goto:"));
      expect(agent.notices().some(n => n.message === "goto: done")).toBe(true);
      const entries = await settled(file, lastIs("branch_summary"));
      const summary = entries[entries.length - 1];
      expect(summary.type).toBe("branch_summary");
      expect(summary.fromHook).toBe(true);
      expect(summary.summary).toContain(MODEL_SUMMARY_MARK);
      expect(summary.details.compactd.summarizer).toBe(`${PROVIDER}/${MODEL}`);
      await expectSameContext(agent, file);

      const dump = path.join(root, "dump.json");
      await agent.runCommand(`/dump-entries ${dump}`, m => m === "dump: done");
      const memory = JSON.parse(fs.readFileSync(dump, "utf8")) as { entries: Entry[] };
      expect(entriesOf(file)).toEqual(memory.entries);
      expect(agent.notices().filter(n => n.message.startsWith("compactd:"))).toEqual([]);
    },
    TEST_TIMEOUT,
  );
});
