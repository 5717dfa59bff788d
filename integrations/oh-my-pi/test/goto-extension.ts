/**
 * A test-only extension: `/goto <entryId>` navigates the agent's tree there with a branch
 * summary (`ctx.navigateTree(id, {summarize: true})`), which fires `session_before_tree`. The
 * agent's RPC mode has no tree command of its own.
 */
import type { ExtensionAPI } from "../src/omp";

export default function gotoExtension(pi: ExtensionAPI): void {
  pi.registerCommand("goto", {
    description: "Navigate the session tree to an entry, summarising the branch left",
    handler: async (args, ctx) => {
      const result = await ctx.navigateTree(args.trim(), { summarize: true });
      ctx.ui.notify(`goto: ${result.cancelled ? "cancelled" : "done"}`, "info");
    },
  });
}
