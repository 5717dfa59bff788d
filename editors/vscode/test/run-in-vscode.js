// @ts-check
// Runs test/suite/index.js inside a real VS Code: code-server (npm) serves the workbench to
// headless Chromium driven by playwright-core. The extension under test is the packaged .vsix,
// installed with `code-server --install-extension` (the extension under development is only
// test/harness, an empty extension that carries the suite). Exit code = the suite's. The suite asks the runner for UI actions by logging
// `@@compactd-test <action>` lines (clicking a notification's Cancel button or any element;
// checking that the workbench shows an element; the screenshot).
//
// usage: node test/run-in-vscode.js --code-server BIN --vsix FILE [--screenshot FILE.png]
// env:   COMPACTD_BIN (the daemon), CHROMIUM (default /usr/bin/chromium)
'use strict';
const cp = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const util = require('util');
const { chromium } = require('playwright-core');
const { daemonPath } = require('./helpers');

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const codeServer = opt('--code-server');
const screenshot = opt('--screenshot');
const vsix = opt('--vsix');
const SUITE_TIMEOUT_MS = +(process.env.SUITE_TIMEOUT_MS || 300_000);
const NOISE = /Failed to load resource|ChatModelSelection|AgentHost|AccountPolicyGate|ENOTFOUND|ERR_NAME_NOT_RESOLVED|authentication provider 'github'|sandbox attribute|open-vsx|marketplace|ERR_CONNECTION/i;

const harness = path.join(__dirname, 'harness');
const suite = path.join(__dirname, 'suite/index.js');

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = /** @type {net.AddressInfo} */ (srv.address()).port;
      srv.close(() => resolve(port));
    });
  });
}

async function waitHealthy(url, ms, proc) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (proc.exitCode !== null) throw new Error(`code-server exited with ${proc.exitCode}`);
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      /* not listening yet */
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`code-server not healthy after ${ms} ms`);
}

function writeJson(file, value) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(value, null, 2));
}

async function main() {
  if (!codeServer) throw new Error('--code-server BIN is required');
  if (!vsix) throw new Error('--vsix FILE is required');
  const t0 = Date.now();
  const bin = daemonPath();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'compactd-vscode-run-'));
  const ws = path.join(root, 'ws');
  // No `compactd.path`: the installed extension must find the binary bundled in the .vsix.
  writeJson(path.join(ws, '.vscode/settings.json'), {
    'compactd.settings.summarizer.kind': 'extractive',
    'compactd.settings.compaction.keepRecentTokens': 2000,
  });
  // Quiet workbench: no welcome page, no chat side bar, no trust prompt.
  writeJson(path.join(root, 'ud/User/settings.json'), {
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'security.workspace.trust.enabled': false,
    'workbench.secondarySideBar.defaultVisibility': 'hidden',
    'chat.disableAIFeatures': true,
    'extensions.autoCheckUpdates': false,
    'extensions.autoUpdate': false,
    'telemetry.telemetryLevel': 'off',
  });
  const port = await freePort();
  const authority = `127.0.0.1:${port}`;
  const env = {
    ...process.env,
    XDG_CONFIG_HOME: path.join(root, 'home/config'),
    XDG_DATA_HOME: path.join(root, 'home/data'),
    XDG_CACHE_HOME: path.join(root, 'home/cache'),
    COMPACTD_CONFIG_DIR: path.join(root, 'compactd-config'),
    // Everything code-server and the suite make in a temp dir (sessions, IPC sockets) lands in
    // `root`, which goes when the suite passes.
    TMPDIR: path.join(root, 'tmp'),
  };
  fs.mkdirSync(env.TMPDIR);
  const extensionsDir = path.join(root, 'ext');
  const install = cp.spawnSync(codeServer, ['--extensions-dir', extensionsDir, '--user-data-dir', path.join(root, 'ud'), '--install-extension', vsix], {
    env,
    encoding: 'utf8',
  });
  if (install.status !== 0) throw new Error(`code-server --install-extension failed:\n${install.stdout}\n${install.stderr}`);
  console.log(install.stdout.trim());
  const log = fs.openSync(path.join(root, 'code-server.log'), 'w');
  // detached: its own process group, so stopping it also stops the extension host and watchers.
  const cs = cp.spawn(
    codeServer,
    [
      '--auth', 'none', '--bind-addr', authority, '--config', path.join(root, 'cs-config.yaml'),
      '--extensions-dir', extensionsDir, '--user-data-dir', path.join(root, 'ud'),
      '--disable-telemetry', '--disable-update-check', '--disable-workspace-trust',
      '--disable-getting-started-override', '--vscode-option', 'enable-smoke-test-driver', ws,
    ],
    { env: { ...env, COMPACTD_TEST_EXTENSIONS_DIR: extensionsDir, COMPACTD_TEST_DAEMON: bin }, detached: true, stdio: ['ignore', log, log] },
  );
  const stopCodeServer = () => {
    try {
      process.kill(-(/** @type {number} */ (cs.pid)), 'SIGTERM');
    } catch {
      /* already gone */
    }
  };
  process.on('exit', stopCodeServer);

  let browser;
  let passed = false;
  try {
    await waitHealthy(`http://${authority}/healthz`, 60_000, cs);
    console.log(`code-server up after ${Date.now() - t0} ms (log: ${path.join(root, 'code-server.log')})`);
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      headless: true,
      env: { ...process.env, HOME: path.join(root, 'home') },
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    /** Screenshots while the suite waits (after it ends, the extension host is gone), then tells it by file. */
    const takeScreenshot = async (page, doneFile, hover) => {
      try {
        if (screenshot) {
          // A wider side bar, so the labels are readable: drag the sash at its right edge.
          const bar = await page.locator('.part.sidebar').boundingBox();
          if (bar) {
            await page.mouse.move(bar.x + bar.width + 1, bar.y + bar.height / 2);
            await page.mouse.down();
            await page.mouse.move(560, bar.y + bar.height / 2, { steps: 5 });
            await page.mouse.up();
          }
          if (hover) {
            // Show the hover of the tree row labelled `hover` (e.g. a compaction's summary).
            const row = page.locator('.monaco-list-row', { has: page.locator('.label-name', { hasText: new RegExp(`^${hover}$`) }) }).first();
            await row.hover({ timeout: 5000 }).catch((e) => console.log(`hover failed: ${e.message}`));
            await page.locator('.monaco-hover').first().waitFor({ state: 'visible', timeout: 5000 }).catch(() => console.log('no hover showed'));
          }
          await page.waitForTimeout(500); // let the view finish painting
          fs.mkdirSync(path.dirname(path.resolve(screenshot)), { recursive: true });
          await page.screenshot({ path: screenshot });
          console.log(`screenshot: ${screenshot}`);
        }
      } finally {
        report(doneFile, 'done');
      }
    };
    /** @type {Promise<void>[]} */
    const actions = [];
    page.on('console', async (m) => {
      let parts;
      try {
        parts = await Promise.all(m.args().map((a) => a.jsonValue()));
      } catch {
        parts = [m.text()];
      }
      if (typeof parts[0] === 'string' && parts[0].startsWith('%c')) {
        parts = [parts[0].replace(/^%c\s*/, '') + ' ' + util.format(...parts.slice(2))];
      }
      let text = util.format(...parts);
      if (!text.trim() || text.trim() === '{}') text = m.text();
      const action = /@@compactd-test (\S+)\s*(.*)/.exec(text);
      if (action) {
        if (action[1] === 'click-cancel') {
          actions.push(
            clickCancel(page, action[2].trim()).catch(async (err) => {
              // The suite then fails on its own timeout; leave evidence of what the page showed.
              const shot = path.join(root, 'click-cancel-failed.png');
              await page.screenshot({ path: shot }).catch(() => undefined);
              const html = await page.locator('.notifications-center').innerHTML({ timeout: 2000 }).catch((e) => String(e));
              console.log(`could not click Cancel: ${err.message}\nscreenshot: ${shot}\ntoasts: ${html.slice(0, 3000)}`);
            }),
          );
        }
        if (action[1] === 'screenshot') {
          const [doneFile, hover] = action[2].trim().split(/\s+/, 2);
          actions.push(takeScreenshot(page, doneFile, hover));
        }
        if (action[1] === 'click') {
          // `click FILE left|right SELECTOR`: clicks the first element it matches; `clicked` or why not, to FILE.
          const [, doneFile, button, selector] = /^(\S+)\s+(left|right)\s+(.*)$/.exec(action[2].trim()) ?? [];
          actions.push(click(page, doneFile, /** @type {'left' | 'right'} */ (button), selector));
        }
        if (action[1] === 'press') {
          // `press FILE KEY`: presses KEY (Playwright's name for it); `pressed` or why not, to FILE.
          const [doneFile, key] = action[2].trim().split(/\s+/, 2);
          actions.push(press(page, doneFile, key));
        }
        if (action[1] === 'expect-visible') {
          // `expect-visible FILE SELECTOR`: whether the workbench shows it, written to FILE.
          const [, doneFile, selector] = /^(\S+)\s+(.*)$/.exec(action[2].trim()) ?? [];
          actions.push(expectVisible(page, doneFile, selector));
        }
        return;
      }
      if (text.trim() && !NOISE.test(text)) console.log(`[vscode ${m.type()}] ${text}`);
    });
    const exited = new Promise((resolve) => page.exposeFunction('codeAutomationExit', (code) => resolve(code)));
    const payload = [
      ['extensionDevelopmentPath', `vscode-remote://${authority}${harness}`],
      ['extensionTestsPath', `vscode-remote://${authority}${suite}`],
    ];
    await page.goto(`http://${authority}/?folder=${encodeURIComponent(ws)}&payload=${encodeURIComponent(JSON.stringify(payload))}`);
    let timer;
    const code = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r('TIMEOUT'), SUITE_TIMEOUT_MS)))]);
    clearTimeout(timer);
    await Promise.allSettled(actions);
    console.log(`suite exit code ${code} after ${Date.now() - t0} ms`);
    if (code !== 0) {
      const tail = fs.readFileSync(path.join(root, 'code-server.log'), 'utf8').split('\n').slice(-30).join('\n');
      console.log(`--- code-server.log (tail) ---\n${tail}`);
    }
    passed = code === 0;
    return passed ? 0 : 1;
  } finally {
    await browser?.close().catch(() => undefined);
    stopCodeServer();
    // Kept on failure (the log and any screenshot are there); gone on success, once
    // code-server is no longer writing into it.
    if (passed && !process.env.COMPACTD_KEEP_TMP) {
      if (cs.exitCode === null && cs.signalCode === null) {
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, 10_000);
          cs.once('exit', () => {
            clearTimeout(timer);
            resolve(undefined);
          });
        });
      }
      fs.rmSync(root, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
    }
  }
}

/** Writes `visible` to `doneFile` once `selector` (Playwright) shows in the workbench, else why not. */
async function expectVisible(page, doneFile, selector) {
  let outcome = 'visible';
  try {
    await page.locator(selector).first().waitFor({ state: 'visible', timeout: 10_000 });
  } catch (err) {
    outcome = `not visible: ${err.message.split('\n')[0]}`;
    const shot = `${doneFile}.png`;
    await page.screenshot({ path: shot }).catch(() => undefined);
    console.log(`${selector} not visible; screenshot: ${shot}`);
  }
  report(doneFile, outcome);
}

/** Writes an action's outcome whole (the suite polls for the file, and must not read it half written). */
function report(doneFile, text) {
  fs.writeFileSync(`${doneFile}.part`, text);
  fs.renameSync(`${doneFile}.part`, doneFile);
}

/** Clicks `selector` (Playwright) with `button`; writes `clicked` to `doneFile`, else why not. */
async function click(page, doneFile, button, selector) {
  let outcome = 'clicked';
  try {
    await page.locator(selector).first().click({ button, timeout: 10_000 });
  } catch (err) {
    outcome = `not clicked: ${err.message.split('\n')[0]}`;
    const shot = `${doneFile}.png`;
    await page.screenshot({ path: shot }).catch(() => undefined);
    console.log(`${selector} not clicked; screenshot: ${shot}`);
  }
  report(doneFile, outcome);
}

/** Presses `key` in the page; writes `pressed` to `doneFile`, else why not. */
async function press(page, doneFile, key) {
  let outcome = 'pressed';
  try {
    await page.keyboard.press(key);
  } catch (err) {
    outcome = `not pressed: ${err.message.split('\n')[0]}`;
  }
  report(doneFile, outcome);
}

/** Clicks Cancel on the progress notification whose text contains `text`. */
async function clickCancel(page, text) {
  // The suite opens the notification center first, so the item is there whether or not a
  // toast is showing.
  const item = page.locator('.notifications-center .notification-list-item', { hasText: text });
  const button = item.locator('.monaco-button', { hasText: 'Cancel' }).first();
  await button.click({ timeout: 15_000 });
  console.log(`clicked Cancel on the "${text}" notification`);
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error('RUNNER FAILED', err);
    process.exit(1);
  },
);
