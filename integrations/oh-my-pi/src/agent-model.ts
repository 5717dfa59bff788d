/**
 * compactd's client summarizer answered by the agent's current model: compactd builds and
 * bounds the prompt, sends it as `summarizer/summarize`, and this calls the model through the
 * agent's own provider code (`completeSimple` of `@oh-my-pi/pi-ai`, resolved from the running
 * agent's installation), with the agent's credentials. compactd never sees an API key.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { SummarizeParams, SummarizeResponse } from "compactd-client";
import type { ExtensionContext, Model } from "./omp";

interface AssistantMessage {
  content: { type: string; text?: string }[];
  stopReason: string;
  errorMessage?: string;
}

interface PiAi {
  completeSimple(
    model: Model,
    context: {
      systemPrompt: string;
      messages: { role: "user"; content: { type: "text"; text: string }[]; timestamp: number }[];
    },
    options: { apiKey?: string; maxTokens?: number; signal?: AbortSignal },
  ): Promise<AssistantMessage>;
}

declare const Bun: { resolveSync(specifier: string, from: string): string } | undefined;

/** The agent's `@oh-my-pi/pi-ai`, resolved next to the agent's entry script. */
async function loadPiAi(): Promise<PiAi> {
  const entry = process.argv[1];
  if (!entry || typeof Bun === "undefined") throw new Error("not running inside the oh-my-pi agent under Bun");
  const from = path.dirname(fs.realpathSync(entry));
  const module = (await import(Bun.resolveSync("@oh-my-pi/pi-ai", from))) as Partial<PiAi>;
  if (typeof module.completeSimple !== "function") throw new Error("@oh-my-pi/pi-ai has no completeSimple");
  return module as PiAi;
}

export class AgentModel {
  #ctx: ExtensionContext | undefined;
  #piAi: Promise<PiAi> | undefined;
  #answered = new Set<string>();

  /** The context of the hook that is running: its model and credentials answer. */
  use(ctx: ExtensionContext): void {
    this.#ctx = ctx;
    this.#answered.clear();
  }

  /** The models (`provider/id`) that answered since `use`. */
  answered(): string[] {
    return [...this.#answered];
  }

  /** Whether the agent's provider code can be reached; the reason when not. */
  async check(): Promise<string | undefined> {
    try {
      await this.#load();
      return undefined;
    } catch (error) {
      return error instanceof Error ? error.message : String(error);
    }
  }

  /** Answers one `summarizer/summarize` request. */
  async summarize(params: SummarizeParams, signal: AbortSignal): Promise<SummarizeResponse> {
    const ctx = this.#ctx;
    const model = ctx?.model;
    if (!ctx || !model) throw new Error("the agent has no model selected");
    const piAi = await this.#load();
    const apiKey = await ctx.modelRegistry.getApiKey(model, ctx.sessionManager.getSessionId());
    const reply = await piAi.completeSimple(
      model,
      {
        systemPrompt: params.systemPrompt,
        messages: [{ role: "user", content: [{ type: "text", text: params.prompt }], timestamp: Date.now() }],
      },
      { apiKey, maxTokens: params.maxTokens, signal },
    );
    if (reply.stopReason === "error" || reply.stopReason === "aborted") {
      throw new Error(`${model.provider}/${model.id}: ${reply.errorMessage ?? reply.stopReason}`);
    }
    this.#answered.add(`${model.provider}/${model.id}`);
    const text = reply.content
      .filter(part => part.type === "text" && part.text)
      .map(part => part.text)
      .join("\n");
    return { text };
  }

  #load(): Promise<PiAi> {
    this.#piAi ??= loadPiAi();
    return this.#piAi;
  }
}
