/**
 * What the real-agent tests share: reading the agent's session file, running the compactd CLI
 * on it, and comparing the agent's rebuilt messages with compactd's context of the same file.
 */
import { expect } from "bun:test";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import type { Agent } from "./agent";
import { textOf } from "./fake-llm";

export function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (scripts/test.d/omp.sh sets it)`);
  return value;
}

export type Entry = Record<string, any> & { type: string; id: string; parentId: string | null };

/** The entries of a session file (oh-my-pi 18's title line and the header excluded). */
export function entriesOf(file: string): Entry[] {
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter(line => line.trim())
    .map(line => JSON.parse(line) as Entry)
    .filter(entry => entry.type !== "title" && entry.type !== "session");
}

/** The file's entries once `ready` holds of them: the agent writes its file asynchronously, so a
 * command's response can arrive before the entry it made is on disk. */
export async function settled(file: string, ready: (entries: Entry[]) => boolean): Promise<Entry[]> {
  for (let i = 0; i < 100; i++) {
    const entries = entriesOf(file);
    if (ready(entries)) return entries;
    await Bun.sleep(100);
  }
  return entriesOf(file);
}

export const lastIs = (type: string) => (entries: Entry[]) => entries[entries.length - 1]?.type === type;
export const count = (type: string, n: number) => (entries: Entry[]) => entries.filter(e => e.type === type).length >= n;

/** Root-to-leaf path ending at `leafId`. */
export function pathTo(entries: Entry[], leafId: string): Entry[] {
  const byId = new Map(entries.map(e => [e.id, e]));
  const out: Entry[] = [];
  for (let e = byId.get(leafId); e; e = e.parentId ? byId.get(e.parentId) : undefined) out.unshift(e);
  return out;
}

/** Runs the compactd CLI (`$COMPACTD_BIN`). */
export function compactd(...args: string[]): string {
  return execFileSync(required("COMPACTD_BIN"), args, { encoding: "utf8" });
}

/** compactd's context shows summaries as the user messages the LLM reads; the agent keeps them
 * as `compactionSummary` / `branchSummary` messages (its own `convertToLlm` wraps them later). */
const COMPACTD_WRAPPERS: [string, string][] = [
  ["compactionSummary", fs.readFileSync(path.resolve(import.meta.dir, "../../../prompts/compaction-summary-context.md"), "utf8")],
  ["branchSummary", fs.readFileSync(path.resolve(import.meta.dir, "../../../prompts/branch-summary-context.md"), "utf8")],
];

/** A message reduced to what both views share: role and text. */
export function norm(message: any): string {
  const role = message.role;
  if (role === "compactionSummary" || role === "branchSummary") return `${role}: ${message.summary}`;
  if (role === "assistant") {
    const parts = (message.content as any[]).map(p =>
      p.type === "text" ? p.text : p.type === "toolCall" ? `call ${p.name} ${JSON.stringify(p.arguments)}` : "",
    );
    return `${role}: ${parts.join("")}`;
  }
  const text = textOf(message.content);
  if (role === "user") {
    for (const [summaryRole, template] of COMPACTD_WRAPPERS) {
      const [head, tail] = template.trim().split("{{summary}}");
      if (text.startsWith(head) && text.endsWith(tail)) return `${summaryRole}: ${text.slice(head.length, text.length - tail.length)}`;
    }
  }
  return `${role}: ${text}`;
}

/** The agent's rebuilt messages must be compactd's context of the same file. */
export async function expectSameContext(agent: Agent, file: string): Promise<void> {
  const { messages } = await agent.ok<{ messages: any[] }>({ type: "get_messages" });
  const ours = JSON.parse(compactd("context", file, "--json")) as { messages: any[] };
  expect(ours.messages.map(norm)).toEqual(messages.map(norm));
}

