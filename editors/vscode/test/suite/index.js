// @ts-check
// The extension's test suite, run inside a real VS Code (code-server) by test/run-in-vscode.js:
// VS Code loads this module as `extensionTestsPath` and awaits `run()`. The tests start the real
// daemon through the extension, run each command on a temp session with the extractive
// summarizer, and check the tree view's items, the status bar text, the file afterwards, the
// progress events, and that Cancel on the progress notification aborts a (slow) compaction.
//
// The extension is the packaged .vsix installed into code-server (not this source folder), and
// it runs the binary bundled in it: the workspace's .vscode/settings.json (written by the
// runner) sets no `compactd.path`, only `compactd.settings.summarizer.kind = extractive`.
'use strict';
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const vscode = require('vscode');
const { makeSession, tempDir, waitFor, withTimeout } = require('../helpers');
const { startFakeOpenAI, slowSummarizerSettings } = require('../fake-openai');

/** Lines the runner (run-in-vscode.js) acts on. */
const DRIVER = '@@compactd-test';

/** @type {{ name: string, fn: () => Promise<void> }[]} */
const tests = [];
const test = (name, fn) => tests.push({ name, fn });

/** @type {any} */
let api;
/** @type {ReturnType<typeof makeSession>} */
let s;

const lines = (file) => fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const leafItem = () => api.treeItems().find((i) => i.kind === 'entry' && i.description.includes('◀ leaf'));
const cmd = (name, ...args) => withTimeout(Promise.resolve(vscode.commands.executeCommand(name, ...args)), 30_000, name);

test('activation starts the daemon bundled in the installed .vsix', async () => {
  const ext = vscode.extensions.getExtension('compactd.compactd');
  assert.ok(ext, 'the extension is installed');
  const installed = process.env.COMPACTD_TEST_EXTENSIONS_DIR;
  assert.ok(installed && ext.extensionPath.startsWith(installed + path.sep), `installed from the .vsix: ${ext.extensionPath}`);
  api = await ext.activate();
  await withTimeout(api.ready(), 30_000, 'daemon start');
  const init = await api.request('session/list', {});
  assert.ok(Array.isArray(init.sessions));
  assert.deepEqual(api.server(), { command: path.join(ext.extensionPath, 'bin/linux-x64/compactd'), source: 'bundled' });
});

test('compactd.path overrides the bundled binary; a wrong one is a clear error', async () => {
  const cfg = vscode.workspace.getConfiguration('compactd');
  const daemon = /** @type {string} */ (process.env.COMPACTD_TEST_DAEMON);
  await cfg.update('path', daemon, vscode.ConfigurationTarget.Global);
  await withTimeout(api.settled(), 30_000, 'restart');
  assert.deepEqual(api.server(), { command: daemon, source: 'setting' });
  assert.ok(Array.isArray((await api.request('session/list', {})).sessions), 'the daemon of the setting answers');

  await cfg.update('path', '/nonexistent/compactd', vscode.ConfigurationTarget.Global);
  await withTimeout(api.settled(), 30_000, 'restart').catch(() => undefined);
  await assert.rejects(api.request('session/list', {}), /could not start `\/nonexistent\/compactd serve`/);

  await cfg.update('path', undefined, vscode.ConfigurationTarget.Global);
  await withTimeout(api.settled(), 30_000, 'restart');
  await withTimeout(api.ready(), 30_000, 'daemon start');
  assert.equal(api.server()?.source, 'bundled', 'back to the bundled binary');
});

test('a workspace cannot choose the program nor where data or credentials go', async () => {
  // What a cloned repository's .vscode/settings.json could hold, written as the repository
  // would (VS Code itself refuses to write machine-scoped settings to the workspace).
  const ws = /** @type {vscode.WorkspaceFolder} */ (vscode.workspace.workspaceFolders?.[0]).uri.fsPath;
  const file = path.join(ws, '.vscode/settings.json');
  const original = fs.readFileSync(file, 'utf8');
  const evil = path.join(ws, 'evil-sessions');
  fs.writeFileSync(file, JSON.stringify({
    ...JSON.parse(original),
    'compactd.path': '/nonexistent/evil-compactd',
    'compactd.settings.providers': { evil: { kind: 'openai', baseUrl: 'http://127.0.0.1:9/v1', apiKeyEnv: 'HOME' } },
    'compactd.settings.storage.sessionsDir': evil,
    // A harmless change beside them, so that the settings change event fires and restarts.
    'compactd.settings.compaction.keepRecentTokens': 2001,
  }, null, 2));
  try {
    const cfg = () => vscode.workspace.getConfiguration('compactd');
    await waitFor(() => cfg().inspect('settings.compaction.keepRecentTokens')?.workspaceValue === 2001, 30_000, 'VS Code to read the file');
    // VS Code drops a workspace's values of machine-scoped settings (package.json).
    for (const key of ['path', 'settings.providers', 'settings.storage.sessionsDir']) {
      assert.equal(cfg().inspect(key)?.workspaceValue, undefined, `a workspace value of compactd.${key}`);
    }
    await withTimeout(api.settled(), 30_000, 'restart');
    await withTimeout(api.ready(), 30_000, 'daemon start');
    await waitFor(async () => (await api.request('settings/get', {})).settings.compaction.keepRecentTokens === 2001, 30_000, 'the restart');
    assert.equal(api.server()?.source, 'bundled', 'the workspace path is not run');
    const got = await api.request('settings/get', {});
    assert.equal(got.settings.providers.evil, undefined, 'the workspace provider is not sent');
    assert.notEqual(got.settings.storage.sessionsDir, evil);
  } finally {
    fs.writeFileSync(file, original);
    await waitFor(() => vscode.workspace.getConfiguration('compactd').inspect('settings.compaction.keepRecentTokens')?.workspaceValue === 2000, 30_000, 'VS Code to read the file');
    await withTimeout(api.settled(), 30_000, 'restart');
    await withTimeout(api.ready(), 30_000, 'daemon start');
    await waitFor(async () => (await api.request('settings/get', {})).settings.compaction.keepRecentTokens === 2000, 30_000, 'the restart');
  }
  assert.equal(fs.existsSync(evil), false, 'nothing was stored where the workspace said');
});

test('Open Session shows the tree and the status bar', async () => {
  s = makeSession();
  const info = await cmd('compactd.openSession', { path: s.file });
  assert.equal(info.path, s.file);
  await vscode.commands.executeCommand('workbench.view.extension.compactd');
  const items = api.treeItems();
  const entries = items.filter((i) => i.kind === 'entry');
  assert.ok(entries.length >= 40, `entries shown (${entries.length})`);
  const first = items.find((i) => i.kind === 'entry' && i.id === s.firstUserId);
  assert.ok(first, 'the first user message is an item');
  assert.match(first.label, /ledger balance/);
  assert.equal(first.depth, 0);
  const branches = items.filter((i) => i.kind === 'branch');
  assert.equal(branches.length, 2, 'two branches');
  assert.equal(branches.filter((b) => b.description === 'active').length, 1, 'one active branch');
  const side = items.find((i) => i.id === s.branchUserId);
  assert.equal(side.depth, 1, 'the side branch nests under its branch item');
  assert.equal(leafItem()?.id, info.leafId);
  const model = items.find((i) => i.entryType === 'model_change');
  assert.equal(model.label, 'Model: anthropic/claude-sonnet-4-5');
  assert.match(api.statusText(), /^ctx \d+k \/ 184k$/);
});

test('Compact Session with preview writes nothing', async () => {
  const before = fs.readFileSync(s.file);
  const result = await cmd('compactd.compact', { preview: true });
  assert.equal(result.preview, true, JSON.stringify(result));
  assert.ok(result.summary.length > 0);
  assert.deepEqual(fs.readFileSync(s.file), before);
});

test('Compact Session compacts, reports progress and updates the view', async () => {
  const seen = api.progressEvents().length;
  const result = await cmd('compactd.compact', { instructions: 'Keep the overflow cause.', preview: false });
  assert.ok(result.entryId, JSON.stringify(result));
  const last = lines(s.file).pop();
  assert.equal(last.type, 'compaction');
  assert.equal(last.id, result.entryId);

  const item = api.treeItems().find((i) => i.id === result.entryId);
  assert.ok(item, 'the compaction is in the tree');
  assert.equal(item.entryType, 'compaction');
  assert.equal(item.label, 'Compaction');
  assert.ok(item.tooltip.includes(result.summary.split('\n')[0]), 'the hover shows the summary');
  assert.match(item.description, /◀ leaf/);
  // After a compaction the daemon has no usage yet: the status shows the estimate.
  assert.match(api.statusText(), /^ctx ~\d+k \/ 184k$/);

  const events = await waitFor(() => {
    const ev = api.progressEvents().slice(seen);
    return ev.some((e) => e.kind === 'end') && ev;
  }, 5000, 'progress end');
  const begin = events.find((e) => e.kind === 'begin');
  assert.ok(events.some((e) => e.kind === 'create'), 'the server created a progress token');
  assert.match(begin.title, /Compacting/);
  assert.equal(begin.cancellable, true);
  assert.equal(events.find((e) => e.kind === 'end').message, 'done');
});

test('Navigate Here with a summary summarizes the branch left and adds a branch summary node', async () => {
  // From the compaction (on the main branch) to the side branch's user message: the leaf moves
  // to that message's parent and the main branch's tail is summarized there.
  const target = s.entries.find((e) => e.id === s.branchUserId);
  const result = await cmd('compactd.navigateHere', { targetId: s.branchUserId, summarize: 'summarize' });
  assert.equal(result.cancelled, false, JSON.stringify(result));
  assert.equal(result.editorText, target.message.content);
  assert.ok(result.summaryEntry, 'a summary was written');
  assert.equal(result.summaryEntry.parentId, target.parentId);
  const item = api.treeItems().find((i) => i.id === result.summaryEntry.id);
  assert.equal(item.entryType, 'branch_summary');
  assert.equal(item.label, 'Branch summary');
  assert.ok(item.tooltip.includes(String(result.summaryEntry.summary).split('\n')[0]), 'the hover shows the summary');
  assert.equal(leafItem()?.id, result.summaryEntry.id);
  assert.equal(lines(s.file).pop().id, result.summaryEntry.id);
});

test('Navigate Here without a summary only moves the leaf', async () => {
  const compaction = lines(s.file).find((e) => e.type === 'compaction');
  const count = lines(s.file).filter((e) => e.type === 'branch_summary').length;
  const result = await cmd('compactd.navigateHere', { targetId: compaction.id, summarize: 'none' });
  assert.equal(result.cancelled, false, JSON.stringify(result));
  assert.equal(result.summaryEntry, undefined);
  assert.equal(result.leafId, compaction.id);
  assert.equal(leafItem()?.id, compaction.id);
  assert.equal(lines(s.file).filter((e) => e.type === 'branch_summary').length, count, 'no summary written');
});

test('Navigate Here with instructions passes them on', async () => {
  const result = await cmd('compactd.navigateHere', {
    targetId: s.branchUserId,
    summarize: 'instructions',
    instructions: 'Say which files changed.',
  });
  assert.equal(result.cancelled, false, JSON.stringify(result));
  assert.equal(result.summaryEntry?.type, 'branch_summary');
});

test('Fork Here shows a new session of the branch up to the entry; the source is unchanged', async () => {
  const before = fs.readFileSync(s.file, 'utf8');
  const target = lines(s.file).find((e) => e.id === s.branchUserId);
  const forked = await cmd('compactd.forkHere', { targetId: target.id });
  try {
    assert.notEqual(forked.path, s.file);
    const entries = lines(forked.path).slice(1).filter((e) => e.type !== 'label');
    assert.equal(entries[entries.length - 1].id, target.id, 'the branch ends at the entry');
    const shown = api.treeItems().filter((i) => i.kind === 'entry').map((i) => i.id);
    assert.ok(shown.includes(target.id), 'the view shows the fork');
    assert.ok(shown.every((id) => entries.some((e) => e.id === id)), 'and nothing of the source beyond it');
    assert.equal(fs.readFileSync(s.file, 'utf8'), before, 'the source is unchanged');
  } finally {
    await cmd('compactd.openSession', { path: s.file });
  }
});

test('Abort Compaction with nothing running aborts nothing', async () => {
  const result = await cmd('compactd.abortCompaction');
  assert.deepEqual(result, { aborted: false });
});

/** Opens a fresh copy of the demo session in the view; returns it with its session id. */
async function openFresh(name) {
  const session = makeSession(name);
  await cmd('compactd.openSession', { path: session.file });
  return { ...session, sessionId: api.session().sessionId };
}

/** The text of each context message, for comparing contexts. */
const contextTexts = async (sessionId) =>
  (await api.request('session/context', { sessionId })).messages.map((m) => JSON.stringify(m.content));

/** Asks the runner whether the workbench shows `selector` (a Playwright selector); fails if not. */
async function expectVisible(selector, what) {
  const done = path.join(tempDir('compactd-expect-'), 'done');
  console.log(`${DRIVER} expect-visible ${done} ${selector}`);
  await waitFor(() => fs.existsSync(done), 20_000, `the runner to look for ${what}`);
  assert.equal(fs.readFileSync(done, 'utf8'), 'visible', `${what} (${selector})`);
}

/** Asks the runner to click `selector` (a Playwright selector) with `button`; fails if it could not. */
async function click(button, selector, what) {
  const done = path.join(tempDir('compactd-click-'), 'done');
  console.log(`${DRIVER} click ${done} ${button} ${selector}`);
  await waitFor(() => fs.existsSync(done), 20_000, `the runner to click ${what}`);
  assert.equal(fs.readFileSync(done, 'utf8'), 'clicked', `${what} (${selector})`);
}

/** Asks the runner to press `key` (Playwright's name for it) in the workbench. */
async function press(key) {
  const done = path.join(tempDir('compactd-press-'), 'done');
  console.log(`${DRIVER} press ${done} ${key}`);
  await waitFor(() => fs.existsSync(done), 20_000, `the runner to press ${key}`);
  assert.equal(fs.readFileSync(done, 'utf8'), 'pressed', key);
}

/** Whether `file` records an undo of the compaction `compactionId`. */
const undid = (file, compactionId) => lines(file).some((e) => e.type === 'custom' && e.customType === 'compactd.undo' && e.data?.undid === compactionId);

/**
 * Opens a menu (`open`: button, selector, what), clicks one of its items (`item`, likewise) and
 * waits for `done`. A menu can close between Playwright finding its item and clicking it (the
 * workbench re-renders the view under it and the menu loses focus): the click then lands on
 * what was beneath and runs nothing, or the click may not take and leave the menu open. That
 * is retried (Escape first), twice at most, and only while the extension showed no message
 * (so a command that ran is never run again).
 */
async function fromMenu(open, item, done, what) {
  for (let attempt = 1; ; attempt++) {
    const seen = api.messages().length;
    await click(...open);
    // Let the menu settle (it fades in, and takes focus) before clicking in it.
    await new Promise((r) => setTimeout(r, 250));
    await click(...item);
    try {
      return await waitFor(done, 10_000, () => `${what} (messages: ${JSON.stringify(api.messages().slice(-3))})`);
    } catch (err) {
      if (attempt === 3 || api.messages().length > seen) throw err;
      console.log(`${item[2]}: the click ran nothing (attempt ${attempt}); Escape, and the menu again`);
      // A menu left open blocks clicks on the workbench beneath it.
      await press('Escape');
    }
  }
}

/** Replaces the whole text of `editor`'s document. */
async function replaceText(editor, text) {
  const doc = editor.document;
  const ok = await editor.edit((b) => b.replace(new vscode.Range(doc.positionAt(0), doc.positionAt(doc.getText().length)), text));
  assert.ok(ok, 'the edit applied');
}

const userEntry = (text) => ({ type: 'message', message: { role: 'user', content: text, timestamp: Date.now() } });
/** An assistant reply whose usage says the context had `tokens` tokens. */
const assistantEntry = (text, tokens) => ({
  type: 'message',
  message: {
    role: 'assistant',
    content: [{ type: 'text', text }],
    provider: 'anthropic',
    model: 'claude-sonnet-4-5',
    usage: { input: tokens, output: 10, cacheRead: 0, cacheWrite: 0, totalTokens: tokens + 10 },
    stopReason: 'stop',
    timestamp: Date.now(),
  },
});

test('Preview Compaction opens the summary to edit; Commit writes the edited text', async () => {
  const session = await openFresh('preview-commit.jsonl');
  const before = fs.readFileSync(session.file);
  const preview = await cmd('compactd.previewCompaction', {});
  assert.ok(preview.previewId, JSON.stringify(preview));
  assert.deepEqual(fs.readFileSync(session.file), before, 'a preview writes nothing');
  const editor = vscode.window.activeTextEditor;
  assert.equal(editor?.document.uri.toString(), preview.uri, 'the preview is the active editor');
  assert.equal(editor.document.getText(), preview.result.summary);
  assert.equal(editor.document.isUntitled, true);
  const lenses = await vscode.commands.executeCommand('vscode.executeCodeLensProvider', editor.document.uri);
  const commands = lenses.map((l) => l.command?.command);
  assert.ok(commands.includes('compactd.commitCompaction') && commands.includes('compactd.discardPreview'), JSON.stringify(commands));
  await expectVisible('.editor-actions .action-label[aria-label^="Commit Compaction"]', 'the Commit button in the editor title');
  await expectVisible('.editor-actions .action-label[aria-label^="Discard Compaction Preview"]', 'the Discard button in the editor title');
  await expectVisible('.codelens-decoration a:has-text("Commit Compaction")', 'the Commit CodeLens');

  await replaceText(editor, `## Goal\n- EDITED-BY-THE-USER: keep the overflow cause.\n\n${editor.document.getText()}`);
  const result = await cmd('compactd.commitCompaction');
  assert.ok(result.entryId, JSON.stringify(result));
  const last = lines(session.file).pop();
  assert.equal(last.type, 'compaction');
  assert.equal(last.id, result.entryId);
  assert.match(last.summary, /EDITED-BY-THE-USER/);
  assert.equal(last.details?.edited, true);
  const context = await api.request('session/context', { sessionId: session.sessionId });
  assert.match(JSON.stringify(context.messages), /EDITED-BY-THE-USER/, 'the context carries the edited summary');
  await waitFor(() => !api.isShown(preview.uri), 5000, 'the preview to close');
  assert.equal(leafItem()?.id, result.entryId, 'the view shows the compaction as the leaf');
});

test('Discard Compaction Preview closes the document and writes nothing', async () => {
  const session = await openFresh('preview-discard.jsonl');
  const before = fs.readFileSync(session.file);
  const preview = await cmd('compactd.previewCompaction', { instructions: 'Keep the overflow cause.' });
  assert.ok(preview.previewId, JSON.stringify(preview));
  await replaceText(vscode.window.activeTextEditor, 'a summary the user thought better of');
  const result = await cmd('compactd.discardPreview', preview.uri);
  assert.deepEqual(result, { discarded: true });
  await waitFor(() => !api.isShown(preview.uri), 5000, 'the preview to close');
  assert.deepEqual(fs.readFileSync(session.file), before, 'nothing was written');
  const again = await cmd('compactd.commitCompaction', preview.uri);
  assert.ok(again.error, 'a discarded preview is no longer committable');
  assert.deepEqual(fs.readFileSync(session.file), before, 'still nothing written');
});

test('Commit of a preview the session moved past is refused with a visible message', async () => {
  const session = await openFresh('preview-stale.jsonl');
  const preview = await cmd('compactd.previewCompaction', {});
  assert.ok(preview.previewId, JSON.stringify(preview));
  await api.request('session/append', { sessionId: session.sessionId, entries: [userEntry('one more message after the preview')] });
  const after = fs.readFileSync(session.file);
  const seen = api.messages().length;
  const result = await cmd('compactd.commitCompaction', preview.uri);
  assert.equal(result.error?.kind, 'leafMoved', JSON.stringify(result));
  const shown = api.messages().slice(seen);
  assert.equal(shown.length, 1, JSON.stringify(shown));
  assert.equal(shown[0].level, 'warning');
  assert.match(shown[0].text, /nothing was written: the session changed since this preview.*Preview again/);
  // Toasts may not show in this headless workbench: look in the notification center.
  await vscode.commands.executeCommand('notifications.showList');
  await expectVisible('.notifications-center .notification-list-item:has-text("the session changed since this preview")', 'the warning notification');
  await vscode.commands.executeCommand('notifications.hideList');
  assert.deepEqual(fs.readFileSync(session.file), after, 'nothing was written');
  assert.ok(api.isShown(preview.uri), 'the document stays, with the user text');
  const lenses = await vscode.commands.executeCommand('vscode.executeCodeLensProvider', vscode.Uri.parse(preview.uri));
  assert.ok(lenses.some((l) => /Stale/.test(l.command?.title ?? '')), 'the CodeLens marks it stale');
  assert.deepEqual(await cmd('compactd.discardPreview', preview.uri), { discarded: true });
});

test('Undo Last Compaction restores the compacted messages', async () => {
  const session = await openFresh('undo.jsonl');
  const original = await contextTexts(session.sessionId);
  const compacted = await cmd('compactd.compact', { preview: false });
  assert.ok(compacted.entryId, JSON.stringify(compacted));
  assert.ok((await contextTexts(session.sessionId)).length < original.length, 'the compaction shortened the context');
  const result = await cmd('compactd.undoCompaction');
  assert.equal(result.compactionId, compacted.entryId, JSON.stringify(result));
  assert.equal(result.restored, false);
  assert.deepEqual(await contextTexts(session.sessionId), original, 'the context is as before the compaction');
  assert.equal(lines(session.file).pop().id, result.leafId);
  assert.equal(leafItem()?.id, result.leafId, 'the view shows the restored branch');
  assert.equal(api.treeItems().find((i) => i.id === result.undoEntryId)?.label, `Compaction undone (${compacted.entryId})`);
  // Nothing left to undo on the branch: said as information.
  const seen = api.messages().length;
  const none = await cmd('compactd.undoCompaction');
  assert.equal(none.error?.kind, 'nothingToUndo', JSON.stringify(none));
  assert.equal(api.messages()[seen]?.level, 'info');

  // From the Session view: right-click the compaction (the selected leaf), Undo This Compaction.
  const again = await cmd('compactd.compact', { preview: false });
  assert.ok(again.entryId, JSON.stringify(again));
  await vscode.commands.executeCommand('workbench.view.extension.compactd');
  await waitFor(() => leafItem()?.id === again.entryId, 5000, 'the compaction as the leaf');
  // The view's data changes before its rows do: wait for the row of a compaction ("… tokens
  // summarized") that is the leaf, not an earlier (already undone) compaction the list may
  // still show selected, nor the undo record that was the leaf before. Not `.selected`
  // either: a click that missed its closed menu may have selected another row.
  await fromMenu(
    ['right', '.pane-body .monaco-list-row:has-text("tokens summarized"):has-text("◀ leaf")', 'the compaction item'],
    ['left', '.monaco-menu .action-item:has-text("Undo This Compaction")', 'Undo This Compaction in its context menu'],
    () => undid(session.file, again.entryId),
    'the undo entry',
  );
  assert.deepEqual(await contextTexts(session.sessionId), original, 'the context is as before the compaction, again');

  // From the Session view's title menu: ... > Undo Last Compaction.
  const third = await cmd('compactd.compact', { preview: false });
  assert.ok(third.entryId, JSON.stringify(third));
  await fromMenu(
    ['left', '.part.sidebar .title-actions .action-label.codicon-toolbar-more', 'the view title menu'],
    ['left', '.monaco-menu .action-item:has-text("Undo Last Compaction")', 'Undo Last Compaction in the view title menu'],
    () => undid(session.file, third.entryId),
    'the undo entry',
  );
  assert.deepEqual(await contextTexts(session.sessionId), original, 'the context is as before the compaction, a third time');
});

test('the status item shows a background compaction: drafting, ready, committed, discarded', async () => {
  const session = await openFresh('background.jsonl');
  const tokens = (await api.request('session/context', { sessionId: session.sessionId })).tokens;
  const cfg = vscode.workspace.getConfiguration('compactd');
  const keys = ['settings.compaction.thresholdTokens', 'settings.compaction.background', 'settings.compaction.autoContinue'];
  try {
    await cfg.update(keys[0], tokens + 1500, vscode.ConfigurationTarget.Workspace);
    await cfg.update(keys[1], { enabled: true, leadTokens: 1000 }, vscode.ConfigurationTarget.Workspace);
    await cfg.update(keys[2], false, vscode.ConfigurationTarget.Workspace);
    await withTimeout(api.settled(), 30_000, 'restart');
    const sessionId = api.session().sessionId;
    const usage = await api.request('session/usage', { sessionId });
    assert.equal(usage.thresholdTokens, tokens + 1500, JSON.stringify(usage));

    // A reply in the band [threshold - lead, threshold) starts it; the extractive summarizer arms it.
    const seen = api.statusHistory().length;
    await api.request('session/append', { sessionId, entries: [assistantEntry('in the band', tokens + 700)] });
    await waitFor(() => /summary ready/.test(api.statusText() ?? ''), 15_000, `"summary ready" in the status item (${api.statusText()})`);
    assert.ok(api.statusHistory().slice(seen).some((t) => /drafting/.test(t)), `drafting was shown: ${JSON.stringify(api.statusHistory().slice(seen))}`);
    assert.match(api.statusTooltip() ?? '', /summary is ready/);
    await expectVisible('.part.statusbar .statusbar-item:has-text("summary ready")', 'the status bar item showing the armed compaction');

    // The reply that crosses the threshold writes it at once.
    const crossing = await api.request('session/append', { sessionId, entries: [assistantEntry('over the threshold', tokens + 1600)] });
    assert.ok(crossing.autoCompaction?.result?.entryId, JSON.stringify(crossing));
    await waitFor(() => /compacted/.test(api.statusText() ?? ''), 15_000, `"compacted" in the status item (${api.statusText()})`);
    assert.equal(lines(session.file).filter((e) => e.type === 'compaction').pop()?.id, crossing.autoCompaction.result.entryId);

    // Armed again, then aborted: discarded, with the reason.
    await api.request('session/append', { sessionId, entries: [assistantEntry('in the band again', tokens + 700)] });
    await waitFor(() => /summary ready/.test(api.statusText() ?? ''), 15_000, `"summary ready" again (${api.statusText()})`);
    assert.deepEqual(await cmd('compactd.abortCompaction'), { aborted: true });
    await waitFor(() => /discarded: aborted/.test(api.statusText() ?? ''), 15_000, `"discarded: aborted" in the status item (${api.statusText()})`);
    assert.match(api.statusTooltip() ?? '', /discarded, nothing written \(aborted\)/);
  } finally {
    for (const key of keys) await cfg.update(key, undefined, vscode.ConfigurationTarget.Workspace);
    await withTimeout(api.settled(), 30_000, 'restart');
  }
});

/** @type {Awaited<ReturnType<typeof startFakeOpenAI>> | undefined} */
let fake;

test('settings changes restart the daemon with the new settings', async () => {
  fake = await startFakeOpenAI();
  const cfg = vscode.workspace.getConfiguration('compactd');
  const slow = slowSummarizerSettings(fake.baseUrl);
  await cfg.update('settings.providers', slow.providers, vscode.ConfigurationTarget.Global);
  await cfg.update('settings.summarizer.kind', slow.summarizer.kind, vscode.ConfigurationTarget.Workspace);
  await cfg.update('settings.summarizer.model', slow.summarizer.model, vscode.ConfigurationTarget.Workspace);
  await cfg.update('settings.retry.enabled', false, vscode.ConfigurationTarget.Workspace);
  await withTimeout(api.settled(), 30_000, 'restart');
  const got = await api.request('settings/get', { sessionId: api.session().sessionId });
  assert.equal(got.settings.summarizer.model, 'fake/slow');
  assert.equal(got.settings.retry.enabled, false);
});

/** Starts a compaction on a fresh session; resolves once the slow summarizer was asked. */
async function startSlowCompaction() {
  const session = makeSession();
  await cmd('compactd.openSession', { path: session.file });
  const before = fs.readFileSync(session.file);
  const requests = fake.requests;
  const seen = api.progressEvents().length;
  const pending = Promise.resolve(vscode.commands.executeCommand('compactd.compact', { preview: false }));
  await waitFor(() => fake.requests > requests, 15_000, 'the summarizer request');
  const begin = await waitFor(() => api.progressEvents().slice(seen).find((e) => e.kind === 'begin'), 10_000, 'progress begin');
  return { session, before, pending, token: begin.token, seen };
}

test('Cancel on the progress notification aborts the compaction', async () => {
  const { session, before, pending, token, seen } = await startSlowCompaction();
  // Tokens are the daemon's and restart with it: look only at events since this compaction began.
  const since = () => api.progressEvents().slice(seen).filter((e) => e.token === token);
  // The runner clicks the notification's Cancel button when it sees this line.
  await vscode.commands.executeCommand('notifications.showList');
  console.log(`${DRIVER} click-cancel Compacting`);
  const result = await withTimeout(pending, 30_000, 'the cancelled compaction');
  assert.equal(result?.error?.kind, 'cancelled', JSON.stringify(result));
  assert.ok(since().some((e) => e.kind === 'cancel'), 'Cancel was clicked');
  const end = await waitFor(() => since().find((e) => e.kind === 'end'), 5000, 'progress end');
  assert.equal(end.message, 'cancelled');
  assert.deepEqual(fs.readFileSync(session.file), before, 'the file is unchanged');
  await waitFor(() => fake.disconnects > 0, 5000, 'the summarizer request to be dropped');
});

test('Abort Compaction aborts a running compaction', async () => {
  const { session, before, pending } = await startSlowCompaction();
  const abort = await cmd('compactd.abortCompaction');
  assert.deepEqual(abort, { aborted: true });
  const result = await withTimeout(pending, 30_000, 'the aborted compaction');
  assert.equal(result?.error?.kind, 'cancelled', JSON.stringify(result));
  assert.deepEqual(fs.readFileSync(session.file), before, 'the file is unchanged');
});

test('the status item shows a background compaction drafting with a slow summarizer, and its discard when aborted', async () => {
  // The slow fake summarizer of the tests above is still configured: the background run stays
  // in its drafting phase until it is aborted.
  const session = await openFresh('background-slow.jsonl');
  const tokens = (await api.request('session/context', { sessionId: session.sessionId })).tokens;
  const cfg = vscode.workspace.getConfiguration('compactd');
  const keys = ['settings.compaction.thresholdTokens', 'settings.compaction.background'];
  try {
    await cfg.update(keys[0], tokens + 1500, vscode.ConfigurationTarget.Workspace);
    await cfg.update(keys[1], { enabled: true, leadTokens: 1000 }, vscode.ConfigurationTarget.Workspace);
    await withTimeout(api.settled(), 30_000, 'restart');
    const sessionId = api.session().sessionId;
    const requests = fake.requests;
    await api.request('session/append', { sessionId, entries: [assistantEntry('in the band', tokens + 700)] });
    await waitFor(() => fake.requests > requests, 15_000, 'the background summarizer request');
    // Still drafting after a poll of session/usage (the phase comes from there).
    await new Promise((r) => setTimeout(r, 1500));
    assert.match(api.statusText() ?? '', /drafting/);
    assert.match(api.statusTooltip() ?? '', /Background compaction: drafting the summary \(\w+/);
    const usage = await api.request('session/usage', { sessionId });
    assert.equal(usage.backgroundCompaction?.armed, false, JSON.stringify(usage));
    await expectVisible('.part.statusbar .statusbar-item:has-text("drafting")', 'the status bar item showing the drafting compaction');
    assert.deepEqual(await cmd('compactd.abortCompaction'), { aborted: true });
    await waitFor(() => /discarded: aborted/.test(api.statusText() ?? ''), 15_000, `"discarded: aborted" (${api.statusText()})`);
    await waitFor(() => fake.disconnects > 0, 5000, 'the summarizer request to be dropped');
  } finally {
    for (const key of keys) await cfg.update(key, undefined, vscode.ConfigurationTarget.Workspace);
    await withTimeout(api.settled(), 30_000, 'restart');
  }
});

test('the view ends on the compacted session (for the screenshot)', async () => {
  const cfg = vscode.workspace.getConfiguration('compactd');
  // The model first: without its provider it would be invalid settings for a moment.
  for (const key of ['settings.summarizer.model', 'settings.summarizer.kind', 'settings.retry.enabled']) {
    await cfg.update(key, undefined, vscode.ConfigurationTarget.Workspace);
  }
  await cfg.update('settings.providers', undefined, vscode.ConfigurationTarget.Global);
  await withTimeout(api.settled(), 30_000, 'restart');
  await fake?.close();
  await cmd('compactd.openSession', { path: s.file });
  await vscode.commands.executeCommand('notifications.clearAll');
  await vscode.commands.executeCommand('workbench.view.extension.compactd');
  // End on the compaction: the view reveals the leaf, with the branches below it.
  const compaction = lines(s.file).find((e) => e.type === 'compaction');
  await cmd('compactd.navigateHere', { targetId: compaction.id, summarize: 'none' });
  assert.equal(leafItem()?.id, compaction.id);
  await vscode.commands.executeCommand('notifications.clearAll');
  // The runner takes the screenshot (when asked to) and then writes this file.
  const done = path.join(s.dir, 'screenshot.done');
  console.log(`${DRIVER} screenshot ${done} Compaction`);
  await waitFor(() => fs.existsSync(done), 20_000, 'the runner');
});

async function run() {
  let passed = 0;
  let failed = 0;
  // COMPACTD_TEST_GREP narrows the run while debugging (the first test always runs: it activates).
  const grep = process.env.COMPACTD_TEST_GREP ? new RegExp(process.env.COMPACTD_TEST_GREP) : undefined;
  for (const t of tests) {
    if (grep && t !== tests[0] && !grep.test(t.name)) continue;
    const t0 = Date.now();
    try {
      await t.fn();
      passed++;
      console.log(`ok - ${t.name} (${Date.now() - t0} ms)`);
    } catch (err) {
      failed++;
      console.log(`not ok - ${t.name}\n${err && err.stack ? err.stack : err}`);
    }
  }
  await fake?.close().catch(() => undefined);
  console.log(`${passed} passed, ${failed} failed`);
  if (failed > 0) throw new Error(`${failed} test(s) failed`);
}

module.exports = { run };
