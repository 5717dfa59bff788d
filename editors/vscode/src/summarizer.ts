// Answers the daemon's `summarizer/summarize` requests with VS Code's language-model API (e.g.
// Copilot), so summaries need no API key inside VS Code. Used when
// `compactd.useVSCodeLanguageModel` is on (the extension then declares the `summarizer`
// capability and sets `summarizer.kind = "client"`).
import * as vscode from 'vscode';
import { ResponseError } from 'vscode-languageclient/node';
import { SummarizeParams } from 'compactd-client';

/** JSON-RPC internal error: the daemon treats any error as "no answer" and falls back. */
const INTERNAL_ERROR = -32603;

export async function summarizeWithLanguageModel(
  params: SummarizeParams,
  token: vscode.CancellationToken,
): Promise<{ text: string }> {
  const family = vscode.workspace.getConfiguration('compactd').get<string>('languageModelFamily', '').trim();
  const models = await vscode.lm.selectChatModels(family ? { family } : {});
  const model = models[0];
  if (!model) {
    throw new ResponseError(INTERNAL_ERROR, `no VS Code language model available${family ? ` for family ${family}` : ''}`);
  }
  // The chat API has no system role: the instructions go first in the user turn.
  const messages = [vscode.LanguageModelChatMessage.User(`${params.systemPrompt}\n\n${params.prompt}`)];
  try {
    const response = await model.sendRequest(
      messages,
      { justification: 'compactd summarizes the conversation history so it fits the context window.' },
      token,
    );
    let text = '';
    for await (const chunk of response.text) text += chunk;
    return { text };
  } catch (err) {
    if (err instanceof vscode.LanguageModelError) {
      throw new ResponseError(INTERNAL_ERROR, `language model ${model.id}: ${err.message} (${err.code})`);
    }
    throw err;
  }
}
