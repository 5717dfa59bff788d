/**
 * compactd for oh-my-pi: the agent's compactions (manual, threshold and overflow alike) and
 * branch summaries come from compactd, which reads the agent's session file and writes
 * nothing; the agent stores what the hooks return. Load it with `-e <this file>` or list it
 * under `extensions` in the agent's `config.yml`. Options: `compactd.json` in the agent's
 * directory (see `options.ts`).
 */
import { Compactd } from "./compactd";
import type { ExtensionAPI, ExtensionContext } from "./omp";
import { loadOptions } from "./options";

export default function compactdExtension(pi: ExtensionAPI): void {
  let compactd: Compactd | undefined;
  let optionsError: string | undefined;
  try {
    compactd = new Compactd(loadOptions(pi.pi.getAgentDir(), process.env));
  } catch (error) {
    optionsError = error instanceof Error ? error.message : String(error);
  }
  let warned = false;
  const ready = (ctx: ExtensionContext): Compactd | undefined => {
    if (!compactd && !warned) {
      warned = true;
      ctx.ui.notify(`compactd: not used (${optionsError}); the agent compacts on its own`, "warning");
    }
    return compactd;
  };

  pi.on("session_start", async (_event, ctx) => {
    await ready(ctx)?.warmUp(ctx);
    return undefined;
  });
  pi.on("session_shutdown", () => {
    compactd?.stop();
    return undefined;
  });
  pi.on("session_before_compact", (event, ctx) => ready(ctx)?.compact(event, ctx));
  pi.on("session_before_tree", (event, ctx) => ready(ctx)?.branchSummary(event, ctx));
  pi.registerCommand("compactd", {
    description: "Show what a compaction would do now (compactd's plan; writes nothing)",
    handler: async (_args, ctx) => {
      const active = ready(ctx);
      if (!active) return;
      ctx.ui.notify(await active.plan(ctx, agentKeepRecentTokens(pi)), "info");
    },
  });
}

/** The agent's `compaction.keepRecentTokens` setting, when its settings can be read. */
function agentKeepRecentTokens(pi: ExtensionAPI): number | undefined {
  const settings = (pi.pi as { settings?: { get?: (key: string) => unknown } }).settings;
  const value = typeof settings?.get === "function" ? settings.get("compaction.keepRecentTokens") : undefined;
  return typeof value === "number" ? value : undefined;
}
