/**
 * The extension inside the real oh-my-pi agent (`--mode rpc`), with the fake model on
 * 127.0.0.1 as the agent's own model, and the real compactd. Assertions are on the agent's own
 * session file and state. Run by `scripts/test.d/omp.sh`, which installs the agent and Bun and
 * sets OMP_AGENT_PKG, OMP_BUN and COMPACTD_BIN.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { CompactdClient } from "compactd-client";
import { Agent, type AgentSetup, MODEL, PROVIDER, ompCommand, writeAgentDir } from "./agent";
import { AGENT_OWN_SUMMARY, FakeLlm, MODEL_SUMMARY_MARK, textOf } from "./fake-llm";
import { type Entry, compactd, count, entriesOf, expectSameContext, lastIs, norm, pathTo, required, settled } from "./session";

const AGENT_PKG = required("OMP_AGENT_PKG");
const BUN = required("OMP_BUN");
const COMPACTD = required("COMPACTD_BIN");
const EXTENSION = path.resolve(import.meta.dir, "../src/index.ts");
const PROBE = path.resolve(import.meta.dir, "probe-extension.ts");
const AGENT_VERSION = JSON.parse(fs.readFileSync(path.join(AGENT_PKG, "package.json"), "utf8")).version as string;
const AGENT_MAJOR = Number(AGENT_VERSION.split(".")[0]);
/** The synthetic prompt after a threshold compaction (13.19's). */
const CONTINUE_PROMPT = /^Continue if you have next steps\./;
const KEEP_RECENT = 1500;
const TEST_TIMEOUT = 240_000;

/** A piece of a message that any summary input holding the message contains. */
function probeText(message: any): string {
  if (message.role === "assistant") {
    const text = (message.content as any[]).filter(p => p.type === "text").map(p => p.text).join("");
    if (text) return text.slice(0, 40);
    const call = (message.content as any[]).find(p => p.type === "toolCall");
    return String(call?.arguments?.path ?? "");
  }
  return textOf(message.content).slice(0, 40);
}

/** Child processes of `pid` whose command name is `name`. */
function childrenNamed(pid: number, name: string): number[] {
  const found: number[] = [];
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    const children = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim();
    for (const child of children ? children.split(/\s+/).map(Number) : []) {
      if (fs.readFileSync(`/proc/${child}/comm`, "utf8").trim() === name) found.push(child);
    }
  }
  return found;
}

class World {
  readonly llm = new FakeLlm();
  readonly root = fs.mkdtempSync(path.join(os.tmpdir(), "compactd-omp-"));
  readonly cwd = path.join(this.root, "project");
  readonly record = path.join(this.root, "preparations.jsonl");
  readonly baseUrl = this.llm.start();

  constructor() {
    fs.mkdirSync(path.join(this.cwd, "src"), { recursive: true });
    for (let i = 1; i <= 9; i++) {
      const body = Array.from({ length: 120 }, (_, n) => `fn step_${i}_${n}() -> u32 { ${n} }`).join("\n");
      fs.writeFileSync(path.join(this.cwd, `src/mod${i}.rs`), `// module ${i}\n${body}\n`);
    }
    // A turn whose usage says this is over the threshold (40,000 of a 64,000 window).
    this.llm.bigPromptTokens = 45_000;
  }

  async agent(name: string, env: Record<string, string>): Promise<Agent> {
    const setup: AgentSetup = {
      baseUrl: this.baseUrl,
      contextWindow: 64_000,
      compaction: { thresholdTokens: 40_000, keepRecentTokens: KEEP_RECENT, reserveTokens: 2_000 },
      extensions: [EXTENSION, PROBE],
      env: { ...env, OMP_TEST_RECORD: this.record },
    };
    const dir = path.join(this.root, name);
    writeAgentDir(dir, setup);
    const agent = new Agent(ompCommand(AGENT_PKG, BUN), dir, this.cwd, setup);
    await agent.waitForEvent(e => e.type === "ready", 90_000, 0);
    return agent;
  }

  stop(): void {
    this.llm.stop();
    // The agents' sessions and the record are kept only when asked for.
    if (!process.env.COMPACTD_KEEP_TMP) fs.rmSync(this.root, { recursive: true, force: true, maxRetries: 3 });
  }
}

describe(`compactd inside the real oh-my-pi agent ${AGENT_VERSION}`, () => {
  let world: World;
  let agent: Agent;
  let file: string;

  beforeAll(async () => {
    world = new World();
    agent = await world.agent("agent", { COMPACTD_BIN: COMPACTD });
  }, TEST_TIMEOUT);

  afterAll(async () => {
    await agent?.stop();
    world?.stop();
  }, 30_000);

  test(
    "a manual compaction with instructions comes from compactd",
    async () => {
      for (const n of [1, 2, 3]) await agent.prompt(`read src/mod${n}.rs`);
      const state = await agent.ok<{ sessionFile: string; model: { id: string } }>({ type: "get_state" });
      file = state.sessionFile;
      expect(state.model.id).toBe(MODEL);
      const firstLine = fs.readFileSync(file, "utf8").split("\n")[0];
      // oh-my-pi 18 starts every session file with a title line, before the header.
      expect(JSON.parse(firstLine).type).toBe(AGENT_MAJOR >= 18 ? "title" : "session");
      const before = fs.readFileSync(file, "utf8");
      const result = await agent.ok<any>({ type: "compact", customInstructions: "Keep the list of modules read." });

      const entries = await settled(file, lastIs("compaction"));
      const c1 = entries[entries.length - 1];
      expect(c1.type).toBe("compaction");
      expect(c1.fromExtension).toBe(true);
      expect(result.summary).toBe(c1.summary);
      // The agent's model wrote it inside compactd's layout, and compactd's retention guard put
      // back the last request the model's summary left out.
      expect(c1.summary).toContain(MODEL_SUMMARY_MARK);
      expect(c1.summary).toContain("## Goal");
      expect(c1.summary).toContain("<read-files>");
      expect(c1.summary).toContain("read src/mod3.rs");
      // One line tells the model that what was compacted can be searched.
      expect(c1.summary.trimEnd().split("\n").pop()).toContain("`recall` tool");
      const facts = c1.details.retainedFacts as { kind: string; text: string }[];
      expect(facts.some(f => f.kind === "lastUserRequest" && f.text.includes("read src/mod3.rs"))).toBe(true);
      expect(c1.details.compactd.summarizer).toBe("client");
      expect(c1.details.compactd.models).toContain(`${PROVIDER}/${MODEL}`);
      expect(c1.details.readFiles).toEqual(expect.arrayContaining(["src/mod1.rs"]));
      // The instructions reached compactd's history prompt.
      const prompts = world.llm.received.filter(r => r.kind === "compactd-summary").map(r => JSON.stringify(r.body.messages));
      expect(prompts.some(p => p.includes("Keep the list of modules read."))).toBe(true);

      // The first kept entry is compactd's cut (its plan of the file as it was, with the
      // agent's keepRecentTokens), whatever the agent's own cut was.
      const copy = path.join(world.root, "before-c1.jsonl");
      fs.writeFileSync(copy, before);
      const plan = JSON.parse(compactd("plan", copy, "--keep-recent-tokens", String(KEEP_RECENT), "--json"));
      expect(c1.firstKeptEntryId).toBe(plan.firstKeptEntryId);
      const agentsOwn = fs.readFileSync(world.record, "utf8").trim().split("\n").map(l => JSON.parse(l));
      expect(agentsOwn[0].customInstructions).toBe("Keep the list of modules read.");
      console.log(`first compaction: compactd kept from ${c1.firstKeptEntryId}, the agent would have kept from ${agentsOwn[0].firstKeptEntryId}`);

      await expectSameContext(agent, file);
    },
    TEST_TIMEOUT,
  );

  test(
    "a threshold compaction goes through compactd and keeps or summarises what the first kept",
    async () => {
      const c1 = entriesOf(file).filter(e => e.type === "compaction")[0];
      const summarisedBefore = world.llm.received.length;
      await agent.prompt("read src/mod4.rs");
      await agent.prompt("BIG read src/mod5.rs");
      expect(agent.events.some(e => e.type === "auto_compaction_start" && e.reason === "threshold")).toBe(true);

      const entries = await settled(file, count("compaction", 2));
      const compactions = entries.filter(e => e.type === "compaction");
      expect(compactions.length).toBe(2);
      const c2 = compactions[1];
      expect(c2.fromExtension).toBe(true);
      expect(c2.summary).toContain(MODEL_SUMMARY_MARK);
      expect(c2.details.compactd.summarizer).toBe("client");
      // 13.19 continues after a threshold compaction, with a synthetic prompt in the `developer`
      // role; 18 does not after a turn that ended in a text answer, as this one did.
      const after = entries.slice(entries.indexOf(c2) + 1);
      const continued = after.some(
        e => ["user", "developer"].includes(e.message?.role) && CONTINUE_PROMPT.test(textOf(e.message.content)),
      );
      expect(continued).toBe(AGENT_MAJOR < 18);

      // Every message the first compaction kept is kept again or was in the second's summary
      // input; the reference's window starts after the first compaction and drops them.
      const branch = pathTo(entries, c2.id);
      const c1At = branch.findIndex(e => e.id === c1.id);
      const kept1 = branch.slice(branch.findIndex(e => e.id === c1.firstKeptEntryId), c1At);
      const c2KeptAt = branch.findIndex(e => e.id === c2.firstKeptEntryId);
      const inputs = world.llm.received
        .slice(summarisedBefore)
        .filter(r => r.kind === "compactd-summary")
        .map(r => JSON.stringify(r.body.messages));
      const kept = kept1.filter(e => e.type === "message");
      expect(kept.length).toBeGreaterThan(0);
      for (const entry of kept) {
        const text = probeText(entry.message);
        const keptAgain = branch.indexOf(entry) >= c2KeptAt;
        const summarised = inputs.some(p => p.includes(JSON.stringify(text).slice(1, -1)));
        expect({ entry: entry.id, text, keptOrSummarised: keptAgain || summarised }).toEqual({
          entry: entry.id,
          text,
          keptOrSummarised: true,
        });
      }
      await expectSameContext(agent, file);
    },
    TEST_TIMEOUT,
  );

  test(
    "a later manual compaction and a branch summary come from compactd",
    async () => {
      await agent.prompt("read src/mod6.rs");
      await agent.ok({ type: "compact" });
      let entries = await settled(file, lastIs("compaction"));
      const c3 = entries[entries.length - 1];
      expect(c3.type).toBe("compaction");
      expect(c3.fromExtension).toBe(true);
      await expectSameContext(agent, file);

      await agent.prompt("read src/mod7.rs");
      const target = entries.find(e => e.message?.role === "user" && textOf(e.message.content) === "read src/mod2.rs")!;
      await agent.runCommand(`/goto ${target.id}`, m => m.startsWith("goto:"));
      expect(agent.notices().some(n => n.message === "goto: done")).toBe(true);
      entries = await settled(file, lastIs("branch_summary"));
      const summary = entries[entries.length - 1];
      expect(summary.type).toBe("branch_summary");
      expect(summary.fromExtension).toBe(true);
      expect(summary.parentId).toBe(target.parentId);
      expect(summary.summary).toContain("The user explored a different branch of this conversation");
      expect(summary.summary).toContain(MODEL_SUMMARY_MARK);
      expect(summary.details.compactd.summarizer).toBe("client");
      await expectSameContext(agent, file);

      // `/compactd` shows compactd's plan of the file now, with the agent's keepRecentTokens.
      const lines = fs.readFileSync(file, "utf8");
      await agent.runCommand("/compactd", m => m.startsWith("compactd plan"));
      const plan = agent.notices().find(n => n.message.startsWith("compactd plan"))!;
      expect(plan.message).toContain("first kept entry:");
      expect(plan.message).toContain(`keep recent tokens: ${KEEP_RECENT}`);
      expect(fs.readFileSync(file, "utf8")).toBe(lines);
    },
    TEST_TIMEOUT,
  );

  test(
    "the agent's file holds only the agent's own lines",
    async () => {
      const dump = path.join(world.root, "dump.json");
      await agent.runCommand(`/dump-entries ${dump}`, m => m === "dump: done");
      const memory = JSON.parse(fs.readFileSync(dump, "utf8")) as { entries: Entry[]; leafId: string };
      const entries = entriesOf(file);
      // (18 keeps an `errorId` on assistant messages in memory that it does not write.)
      for (const entry of memory.entries) delete (entry as Entry).message?.errorId;
      expect(entries).toEqual(memory.entries);
      expect(entries.some(e => e.type === "compactd_leaf")).toBe(false);
      const lock = path.join(path.dirname(file), `.${path.basename(file)}.lock`);
      expect(fs.existsSync(lock)).toBe(false);
      // The progress showed in the agent's UI.
      const status = agent.events.filter(e => e.type === "extension_ui_request" && e.method === "setStatus" && e.statusKey === "compactd");
      expect(status.some(e => String(e.statusText).startsWith("compactd: compacting"))).toBe(true);
      expect(status.some(e => String(e.statusText).startsWith("compactd: summarizing the branch"))).toBe(true);
    },
    TEST_TIMEOUT,
  );

  test(
    "compactd killed mid-compaction: the agent compacts on its own, and the next one is compactd's again",
    async () => {
      await agent.prompt("read src/mod8.rs");
      world.llm.hold();
      const compaction = agent.command({ type: "compact" }, 120_000);
      await world.llm.whenHeld();
      const [daemon] = childrenNamed(agent.pid, "compactd");
      expect(daemon).toBeGreaterThan(0);
      process.kill(daemon, "SIGKILL");
      const response = await compaction;
      world.llm.release();
      expect(response.success).toBe(true);
      let entries = await settled(file, count("compaction", 4));
      const fallback = entries[entries.length - 1];
      expect(fallback.type).toBe("compaction");
      expect(fallback.fromExtension).not.toBe(true);
      expect(fallback.summary).toContain(AGENT_OWN_SUMMARY);
      const notices = agent.notices().filter(n => n.message.startsWith("compactd:"));
      expect(notices.length).toBe(1);
      expect(notices[0].notifyType).toBe("warning");
      expect(notices[0].message).toContain("exited");
      await expectSameContext(agent, file);

      // The session goes on, and compactd (started again) answers the next compaction.
      await agent.prompt("read src/mod9.rs");
      await agent.ok({ type: "compact" });
      entries = await settled(file, count("compaction", 5));
      expect(entries[entries.length - 1].type).toBe("compaction");
      expect(entries[entries.length - 1].fromExtension).toBe(true);
      expect(childrenNamed(agent.pid, "compactd").length).toBe(1);
      await expectSameContext(agent, file);
    },
    TEST_TIMEOUT,
  );

  test(
    "the model's recall tool finds what compactions hid",
    async () => {
      const offered = world.llm.received.some(r =>
        (r.body.tools ?? []).some((t: any) => (t.function?.name ?? t.name) === "recall"),
      );
      expect(offered).toBe(true);
      await agent.prompt("recall src/mod1.rs");
      const entries = await settled(file, e => e.some(x => x.message?.role === "toolResult" && x.message.toolName === "recall"));
      const result = entries.find(e => e.message?.role === "toolResult" && e.message.toolName === "recall");
      const text = textOf(result.message.content);
      expect(result.message.isError).not.toBe(true);
      expect(text).toContain("entryId ");
      expect(text).toContain("(compacted)");
      expect(text).toContain("src/mod1.rs");
    },
    TEST_TIMEOUT,
  );

  test(
    "a pin compactd wrote loads in the agent: the same context, and the next compaction carries it",
    async () => {
      const PIN = "Release branch release/2.x is frozen: never push to it";
      const pinned = JSON.parse(compactd("pin", file, PIN, "--json"));
      const pinEntry = entriesOf(file).find(e => e.id === pinned.pinId)!;
      expect(pinEntry.type).toBe("custom");
      expect(pinEntry.customType).toBe("compactd.pin");
      // The agent reads the file again, pin entry included, and rebuilds compactd's context.
      const switched = await agent.ok<{ cancelled: boolean }>({ type: "switch_session", sessionPath: file });
      expect(switched.cancelled).toBe(false);
      await expectSameContext(agent, file);

      // The session goes on from the pin, and the next compaction (compactd's, through the
      // extension) carries the pin verbatim whatever the model wrote.
      await agent.prompt("read src/mod2.rs");
      const entries = await settled(file, es => es.some(e => e.parentId === pinned.pinId));
      const next = entries.find(e => e.parentId === pinned.pinId);
      expect(next?.message?.role).toBe("user");
      const compactions = entries.filter(e => e.type === "compaction").length;
      await agent.ok({ type: "compact" });
      const after = await settled(file, count("compaction", compactions + 1));
      const c = after.filter(e => e.type === "compaction").pop()!;
      expect(c.fromExtension).toBe(true);
      expect(c.summary).toContain(PIN);
      expect(JSON.parse(compactd("ledger", file, "--json")).pins).toEqual([{ pinId: pinned.pinId, text: PIN }]);
      await expectSameContext(agent, file);
    },
    TEST_TIMEOUT,
  );
});

describe(`compactd undo and the real oh-my-pi agent ${AGENT_VERSION}`, () => {
  test(
    "after `compactd undo` the agent resuming the file rebuilds compactd's context, compacted messages back",
    async () => {
      const world = new World();
      const agent = await world.agent("undo", { COMPACTD_BIN: COMPACTD });
      try {
        for (const n of [1, 2, 3]) await agent.prompt(`read src/mod${n}.rs`);
        await agent.ok({ type: "compact" });
        const state = await agent.ok<{ sessionFile: string }>({ type: "get_state" });
        await settled(state.sessionFile, lastIs("compaction"));
        await agent.prompt("read src/mod4.rs");
        const entries = await settled(state.sessionFile, e => {
          const asked = e.findIndex(x => x.message?.role === "user" && textOf(x.message.content) === "read src/mod4.rs");
          return asked >= 0 && e.slice(asked).some(x => x.message?.role === "assistant" && x.message.stopReason === "stop");
        });
        const compaction = entries.filter(e => e.type === "compaction").pop()!;
        expect(compaction.fromExtension).toBe(true);

        // A copy of the compacted and continued session, undone by the CLI.
        const copy = path.join(path.dirname(state.sessionFile), "undone.jsonl");
        fs.copyFileSync(state.sessionFile, copy);
        const before = (JSON.parse(compactd("context", copy, "--json")).messages as any[]).map(norm);
        const undone = JSON.parse(compactd("undo", copy, "--json"));
        expect(undone.compactionId).toBe(compaction.id);
        expect(undone.restored).toBe(false);
        const after = (JSON.parse(compactd("context", copy, "--json")).messages as any[]).map(norm);
        // The summary is gone, what it summarised is back, what followed is still there.
        expect(before[0]).toBe(`compactionSummary: ${compaction.summary}`);
        expect(after.some(m => m.startsWith("compactionSummary:"))).toBe(false);
        const branch = pathTo(entries, compaction.id);
        const summarised = branch
          .slice(0, branch.findIndex(e => e.id === compaction.firstKeptEntryId))
          .filter(e => e.type === "message")
          .map(e => norm(e.message));
        expect(summarised.length).toBeGreaterThan(0);
        expect(after.slice(0, summarised.length)).toEqual(summarised);
        expect(after.slice(after.length - (before.length - 1))).toEqual(before.slice(1));

        // The agent resumes the undone file: the same context as compactd's, and it goes on.
        const switched = await agent.ok<{ cancelled: boolean }>({ type: "switch_session", sessionPath: copy });
        expect(switched.cancelled).toBe(false);
        await expectSameContext(agent, copy);
        await agent.prompt("read src/mod5.rs");
        await settled(copy, e => e.some(x => x.message?.role === "user" && textOf(x.message.content) === "read src/mod5.rs"));
        await expectSameContext(agent, copy);

        // Undo of the undo (on another copy, the agent's file left alone): the summary is back.
        const again = path.join(path.dirname(state.sessionFile), "restored.jsonl");
        fs.copyFileSync(copy, again);
        const restored = JSON.parse(compactd("undo", again, "--entry", undone.undoEntryId, "--json"));
        expect(restored.restored).toBe(true);
        const back = (JSON.parse(compactd("context", again, "--json")).messages as any[]).map(norm);
        expect(back[0]).toBe(`compactionSummary: ${compaction.summary}`);
        expect(back.slice(1, before.length)).toEqual(before.slice(1));
        await agent.ok({ type: "switch_session", sessionPath: again });
        await expectSameContext(agent, again);
      } finally {
        await agent.stop();
        world.stop();
      }
    },
    TEST_TIMEOUT,
  );
});

describe(`a compactd preview committed with an edited summary, and the real oh-my-pi agent ${AGENT_VERSION}`, () => {
  test(
    "the agent resuming the file rebuilds compactd's context, the edited summary first, and goes on",
    async () => {
      const EDITED = "EDITED-SUMMARY-MARK: the user rewrote this summary before committing it.";
      const world = new World();
      const agent = await world.agent("commit", { COMPACTD_BIN: COMPACTD });
      let daemon: CompactdClient | undefined;
      try {
        for (const n of [1, 2, 3]) await agent.prompt(`read src/mod${n}.rs`);
        const state = await agent.ok<{ sessionFile: string }>({ type: "get_state" });
        await settled(state.sessionFile, e => {
          const asked = e.findIndex(x => x.message?.role === "user" && textOf(x.message.content) === "read src/mod3.rs");
          return asked >= 0 && e.slice(asked).some(x => x.message?.role === "assistant" && x.message.stopReason === "stop");
        });
        // A copy of the agent's session (its own file left to it), previewed and committed by a
        // compactd daemon over pipes, with its offline summarizer and the agent's keepRecentTokens.
        const copy = path.join(path.dirname(state.sessionFile), "committed.jsonl");
        fs.copyFileSync(state.sessionFile, copy);
        const original = fs.readFileSync(copy, "utf8");
        daemon = await CompactdClient.start({
          command: COMPACTD,
          env: { ...process.env, HOME: world.root },
          settings: { summarizer: { kind: "extractive" }, compaction: { keepRecentTokens: KEEP_RECENT } },
        });
        const { sessionId } = await daemon.request("session/open", { path: copy });
        const preview = await daemon.request("session/compact", { sessionId, preview: true });
        expect(preview.preview).toBe(true);
        expect(preview.previewId).toBeTruthy();
        expect(preview.summary).not.toContain(EDITED);
        expect(fs.readFileSync(copy, "utf8")).toBe(original);
        const committed = await daemon.request("session/commitCompaction", {
          sessionId,
          previewId: preview.previewId!,
          summary: EDITED,
        });
        expect(committed.entryId).toBeTruthy();
        expect(committed.firstKeptEntryId).toBe(preview.firstKeptEntryId);
        const context = await daemon.request("session/context", { sessionId });
        await daemon.close();
        daemon = undefined;

        // One compaction entry appended after the agent's lines, which are kept byte for byte
        // (18's title line included).
        const text = fs.readFileSync(copy, "utf8");
        expect(text.startsWith(original)).toBe(true);
        const entries = entriesOf(copy);
        const compaction = entries[entries.length - 1];
        expect(compaction.type).toBe("compaction");
        expect(compaction.id).toBe(committed.entryId!);
        expect(compaction.summary.startsWith(EDITED)).toBe(true);
        expect(compaction.details.edited).toBe(true);
        const ours = (context.messages as any[]).map(norm);
        expect(ours[0]).toBe(`compactionSummary: ${compaction.summary}`);

        // The agent resumes the file: the daemon's context, and the CLI's, summary first.
        const switched = await agent.ok<{ cancelled: boolean }>({ type: "switch_session", sessionPath: copy });
        expect(switched.cancelled).toBe(false);
        const { messages } = await agent.ok<{ messages: any[] }>({ type: "get_messages" });
        expect(messages.map(norm)).toEqual(ours);
        expect(messages[0].role).toBe("compactionSummary");
        expect(messages[0].summary).toContain(EDITED);
        await expectSameContext(agent, copy);

        // It goes on from there, and its model reads the edited summary.
        const turns = world.llm.received.length;
        await agent.prompt("read src/mod4.rs");
        const after = await settled(copy, e => {
          const asked = e.findIndex(x => x.message?.role === "user" && textOf(x.message.content) === "read src/mod4.rs");
          return asked >= 0 && e.slice(asked).some(x => x.message?.role === "assistant" && x.message.stopReason === "stop");
        });
        expect(pathTo(after, after[after.length - 1].id).some(e => e.id === compaction.id)).toBe(true);
        const sent = world.llm.received.slice(turns).filter(r => r.kind === "turn");
        expect(sent.length).toBeGreaterThan(0);
        expect(JSON.stringify(sent[0].body.messages)).toContain(EDITED);
        await expectSameContext(agent, copy);
      } finally {
        await daemon?.close();
        await agent.stop();
        world.stop();
      }
    },
    TEST_TIMEOUT,
  );
});

describe(`compactd drafts the next compaction ahead of the threshold in the real oh-my-pi agent ${AGENT_VERSION}`, () => {
  test(
    "a turn near the threshold arms a draft, and the threshold compaction's hook gets it at once",
    async () => {
      const world = new World();
      const agent = await world.agent("armed", { COMPACTD_BIN: COMPACTD });
      const summaries = () => world.llm.received.filter(r => r.kind === "compactd-summary").length;
      try {
        for (const n of [1, 2]) await agent.prompt(`read src/mod${n}.rs`);
        const { sessionFile: file } = await agent.ok<{ sessionFile: string }>({ type: "get_state" });
        expect(summaries()).toBe(0);

        // A reply whose usage (35,000) is in compactd's lead band below the agent's threshold
        // (40,000; the lead is 8,000): the extension tells compactd about the turn, and compactd
        // drafts the compaction in the background (through the agent's model) while the agent
        // waits for the user.
        const since = agent.events.length;
        world.llm.bigPromptTokens = 35_000;
        await agent.prompt("BIG read src/mod3.rs", 180_000);
        const ready = (e: any) =>
          e.type === "extension_ui_request" && e.method === "setStatus" && e.statusText === "compactd: next compaction ready";
        await agent.waitForEvent(ready, 180_000, since);
        expect(agent.events.slice(since).some(e => e.type === "auto_compaction_start")).toBe(false);
        expect(entriesOf(file).some(e => e.type === "compaction")).toBe(false);
        const drafted = summaries();
        expect(drafted).toBeGreaterThan(0);

        // The next reply crosses the threshold: the agent's compaction hook asks compactd, which
        // hands over the armed draft with no summary written after the crossing.
        world.llm.bigPromptTokens = 45_000;
        const crossing = agent.events.length;
        await agent.prompt("BIG read src/mod4.rs", 180_000);
        const start = agent.events.slice(crossing).find(e => e.type === "auto_compaction_start");
        expect(start?.reason).toBe("threshold");
        const entries = await settled(file, count("compaction", 1));
        const c = entries.find(e => e.type === "compaction")!;
        expect(c.fromExtension).toBe(true);
        expect(String(c.details.compactd.background)).toStartWith("background");
        expect(c.summary).toContain(MODEL_SUMMARY_MARK);
        expect(summaries()).toBe(drafted);
        // What the agent did after the draft's snapshot is kept after the summary.
        const branch = pathTo(entries, c.id);
        const asked = branch.findIndex(e => e.message?.role === "user" && textOf(e.message.content) === "BIG read src/mod4.rs");
        expect(asked).toBeGreaterThan(branch.findIndex(e => e.id === c.firstKeptEntryId) - 1);
        await expectSameContext(agent, file);

        // The agent goes on from the compacted context.
        await agent.prompt("read src/mod5.rs", 180_000);
        await settled(file, e => e.some(x => x.message?.role === "user" && textOf(x.message.content) === "read src/mod5.rs"));
        await expectSameContext(agent, file);
      } finally {
        await agent.stop();
        world.stop();
      }
    },
    TEST_TIMEOUT,
  );
});

describe("without compactd", () => {
  test(
    "the agent compacts on its own, after one clear notice",
    async () => {
      const world = new World();
      const agent = await world.agent("no-compactd", { COMPACTD_BIN: path.join(world.root, "no-such-compactd") });
      try {
        for (const n of [1, 2]) await agent.prompt(`read src/mod${n}.rs`);
        await agent.ok({ type: "compact" });
        await agent.prompt("read src/mod3.rs");
        await agent.ok({ type: "compact" });
        const state = await agent.ok<{ sessionFile: string }>({ type: "get_state" });
        const compactions = (await settled(state.sessionFile, count("compaction", 2))).filter(e => e.type === "compaction");
        expect(compactions.length).toBe(2);
        for (const c of compactions) {
          expect(c.fromExtension).not.toBe(true);
          expect(c.summary).toContain(AGENT_OWN_SUMMARY);
        }
        const notices = agent.notices().filter(n => n.message.startsWith("compactd:"));
        expect(notices.length).toBe(1);
        expect(notices[0].message).toContain("not found");
      } finally {
        await agent.stop();
        world.stop();
      }
    },
    TEST_TIMEOUT,
  );
});
