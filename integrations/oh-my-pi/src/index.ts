/**
 * compactd for oh-my-pi (13 and 18) and pi: the agent's compactions (manual, threshold and
 * overflow alike) and branch summaries come from compactd, which reads the agent's session file
 * and writes nothing; the agent stores what the hooks return. The `recall` tool lets the
 * agent's model search and read back what compactions hid. Load it with `-e <this file>` or
 * list it under `extensions` in the agent's config. Options: `compactd.json` in the agent's
 * directory (see `options.ts`).
 */
import * as os from "node:os";
import * as path from "node:path";
import { type AgentCompaction, Compactd, RECALL_PARAMETERS, RECALL_TOOL, type RecallParams } from "./compactd";
import type { ExtensionAPI, ExtensionContext } from "./omp";
import { type SummarizerChoice, loadOptions } from "./options";

export default function compactdExtension(pi: ExtensionAPI): void {
  let compactd: Compactd | undefined;
  let optionsError: string | undefined;
  try {
    compactd = new Compactd(loadOptions(agentDir(pi, process.env), process.env, defaultSummarizer()));
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
  pi.on("turn_end", (event, ctx) => {
    ready(ctx)?.observeTurn(event, ctx, agentCompaction(pi));
    return undefined;
  });
  pi.on("session_before_compact", (event, ctx) => ready(ctx)?.compact(event, ctx));
  pi.on("session_before_tree", (event, ctx) => ready(ctx)?.branchSummary(event, ctx));
  pi.registerTool<RecallParams>({
    name: RECALL_TOOL,
    label: "Recall",
    description:
      "Search this session's earlier history, including what compaction summarised away and full tool outputs. " +
      "With `query`: the matching entries (id, role, whether compacted, a snippet). With `entryId`: that entry's full text " +
      "(long texts in pages: pass `offset`).",
    parameters: RECALL_PARAMETERS,
    // oh-my-pi 18 would otherwise keep it out of the model's tools (an extension tool is
    // "discoverable" by default there), and the summary's pointer to it would lead nowhere.
    loadMode: "essential",
    execute: async (_id, params, _signal, _onUpdate, ctx) => {
      const active = ready(ctx);
      if (!active) throw new Error(`compactd is not available (${optionsError})`);
      return { content: [{ type: "text", text: await active.recall(params, ctx) }] };
    },
  });
  pi.registerCommand("compactd", {
    description: "Show what a compaction would do now (compactd's plan; writes nothing)",
    handler: async (_args, ctx) => {
      const active = ready(ctx);
      if (!active) return;
      ctx.ui.notify(await active.plan(ctx, agentKeepRecentTokens(pi)), "info");
    },
  });
}

/** The agent's directory: oh-my-pi hands it to extensions; pi does not, and takes it from
 * `PI_CODING_AGENT_DIR` (a leading `~/` is the home directory), else `~/.pi/agent`. */
export function agentDir(pi: ExtensionAPI, env: Record<string, string | undefined>): string {
  if (typeof pi.pi?.getAgentDir === "function") return pi.pi.getAgentDir();
  const dir = env.PI_CODING_AGENT_DIR;
  if (!dir) return path.join(os.homedir(), ".pi", "agent");
  if (dir === "~") return os.homedir();
  return dir.startsWith("~/") ? path.join(os.homedir(), dir.slice(2)) : dir;
}

declare const Bun: unknown;

/** The agent's model can answer compactd's prompts only inside oh-my-pi, which runs under Bun;
 * elsewhere (pi, under Node) compactd's own summarizer is the default, without a warning. */
function defaultSummarizer(): SummarizerChoice {
  return typeof Bun === "undefined" ? "compactd" : "agent";
}

/** The agent's `compaction.<key>` setting, when its settings can be read (oh-my-pi). */
function agentSetting(pi: ExtensionAPI, key: string): number | undefined {
  const settings = pi.pi?.settings;
  const value = typeof settings?.get === "function" ? settings.get(`compaction.${key}`) : undefined;
  return typeof value === "number" ? value : undefined;
}

function agentKeepRecentTokens(pi: ExtensionAPI): number | undefined {
  return agentSetting(pi, "keepRecentTokens");
}

/** The agent's compaction settings that decide where and when it compacts. */
function agentCompaction(pi: ExtensionAPI): AgentCompaction {
  return {
    keepRecentTokens: agentSetting(pi, "keepRecentTokens"),
    reserveTokens: agentSetting(pi, "reserveTokens"),
    thresholdTokens: agentSetting(pi, "thresholdTokens"),
    thresholdPercent: agentSetting(pi, "thresholdPercent"),
  };
}
