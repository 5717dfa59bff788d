/**
 * The extension's options: `compactd.json` in the agent's directory (next to `config.yml`),
 * then the environment. Every option has a default, so the file is optional.
 *
 * ```json
 * {
 *   "bin": "/usr/local/bin/compactd",
 *   "summarizer": "agent",
 *   "timeoutMs": 180000,
 *   "settings": { "compaction": { "keepRecentTokens": 20000 } }
 * }
 * ```
 */
import * as fs from "node:fs";
import * as path from "node:path";

export type SummarizerChoice = "agent" | "compactd";

export interface Options {
  /** The compactd executable: `bin`, else `$COMPACTD_BIN`, else `compactd` on `PATH`. */
  bin: string;
  /**
   * Who writes the summaries inside compactd's rules (cut point, bounded input, retention
   * guard): `agent` (the default in oh-my-pi) the agent's current model, called through the agent's own
   * provider code, so every provider and login the agent has works and compactd needs no key;
   * `compactd` (the default in pi, which runs under Node where the agent's provider code cannot
   * be reached) whatever compactd's own settings say (its offline extractive summarizer when
   * nothing is configured).
   */
  summarizer: SummarizerChoice;
  /** How long one compaction or branch summary may take before the agent's own path runs. */
  timeoutMs: number;
  /** compactd settings for this agent (see compactd's `schema/settings.schema.json`), layered
   * above compactd's own settings files. */
  settings: Record<string, unknown>;
  /** Where the options came from, for messages. */
  source: string;
}

export const DEFAULT_TIMEOUT_MS = 180_000;
export const OPTIONS_FILE = "compactd.json";

/** Reads the options; an unreadable or invalid file is an error that names it. */
export function loadOptions(
  agentDir: string,
  env: Record<string, string | undefined>,
  defaultSummarizer: SummarizerChoice = "agent",
): Options {
  const file = path.join(agentDir, OPTIONS_FILE);
  let raw: Record<string, unknown> = {};
  let source = "defaults";
  if (fs.existsSync(file)) {
    source = file;
    try {
      const parsed: unknown = JSON.parse(fs.readFileSync(file, "utf8"));
      if (!isObject(parsed)) throw new Error("not a JSON object");
      raw = parsed;
    } catch (error) {
      throw new Error(`${file}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  const bin = optionalString(raw, "bin", file) ?? env.COMPACTD_BIN ?? "compactd";
  const summarizer = optionalString(raw, "summarizer", file) ?? defaultSummarizer;
  if (summarizer !== "agent" && summarizer !== "compactd") {
    throw new Error(`${file}: "summarizer" must be "agent" or "compactd", not ${JSON.stringify(summarizer)}`);
  }
  const timeoutMs = raw.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (typeof timeoutMs !== "number" || !(timeoutMs > 0)) {
    throw new Error(`${file}: "timeoutMs" must be a positive number of milliseconds`);
  }
  const settings = raw.settings ?? {};
  if (!isObject(settings)) throw new Error(`${file}: "settings" must be an object`);
  return { bin, summarizer, timeoutMs, settings, source };
}

function optionalString(raw: Record<string, unknown>, key: string, file: string): string | undefined {
  const value = raw[key];
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !value) throw new Error(`${file}: "${key}" must be a non-empty string`);
  return value;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
