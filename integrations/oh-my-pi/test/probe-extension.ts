/**
 * A test-only extension loaded after compactd's: it records what the agent itself would have
 * done and exposes the agent's memory, through two commands (the agent's RPC mode has no tree
 * command of its own):
 * - `/goto <entryId>` navigates the tree there with a branch summary
 *   (`ctx.navigateTree(id, {summarize: true})`), which fires `session_before_tree`;
 * - `/dump-entries <file>` writes the entries and leaf the agent holds in memory to `file`
 *   (not `/dump`: oh-my-pi 18 has a `/dump` of its own).
 * Every `session_before_compact` preparation (the agent's own cut) is appended to
 * `$OMP_TEST_RECORD`; the handler returns nothing, so compactd's answer stands.
 */
import * as fs from "node:fs";
import type { ExtensionAPI } from "../src/omp";

interface FullSessionManager {
  getEntries(): unknown[];
  getLeafId(): string | null;
}

export default function probeExtension(pi: ExtensionAPI): void {
  pi.on("session_before_compact", event => {
    const record = process.env.OMP_TEST_RECORD;
    const leafId = event.branchEntries[event.branchEntries.length - 1]?.id;
    if (record) {
      const line = { firstKeptEntryId: event.preparation.firstKeptEntryId, leafId, customInstructions: event.customInstructions };
      fs.appendFileSync(record, `${JSON.stringify(line)}\n`);
    }
    return undefined;
  });
  pi.registerCommand("goto", {
    description: "Navigate the session tree to an entry, summarising the branch left",
    handler: async (args, ctx) => {
      const result = await ctx.navigateTree(args.trim(), { summarize: true });
      ctx.ui.notify(`goto: ${result.cancelled ? "cancelled" : "done"}`, "info");
    },
  });
  pi.registerCommand("dump-entries", {
    description: "Write the agent's entries and leaf to a file",
    handler: async (args, ctx) => {
      const manager = ctx.sessionManager as unknown as FullSessionManager;
      fs.writeFileSync(args.trim(), JSON.stringify({ entries: manager.getEntries(), leafId: manager.getLeafId() }));
      ctx.ui.notify("dump: done", "info");
    },
  });
}
