// @ts-check
// Which binary the extension runs (src/server-path.ts, compiled by tsc into out/src): the
// setting first, then the binary bundled for this platform, then PATH, else a message that
// says what to do. Runs outside VS Code (node --test); the installed .vsix is tested in
// test/suite.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const { resolveServer, bundledBinary } = require('../out/src/server-path');

const ext = '/ext/compactd.compactd-0.1.0-linux-x64';
const bundled = path.join(ext, 'bin/linux-x64/compactd');
/** @param {string[]} files */
const only = (files) => (/** @type {string} */ f) => files.includes(f);

test('the setting wins, with ~ expanded', () => {
  const got = resolveServer({ configured: '~/bin/compactd', extensionPath: ext, home: '/home/u', isExecutable: only([bundled]) });
  assert.deepEqual(got, { command: '/home/u/bin/compactd', source: 'setting' });
});

test('without a setting, the bundled binary of this platform', () => {
  assert.equal(bundledBinary(ext, 'linux', 'x64'), bundled);
  const got = resolveServer({ extensionPath: ext, platform: 'linux', arch: 'x64', pathEnv: '/usr/bin', isExecutable: only([bundled, '/usr/bin/compactd']) });
  assert.deepEqual(got, { command: bundled, source: 'bundled' });
});

test('a blank setting is no setting', () => {
  const got = resolveServer({ configured: '  ', extensionPath: ext, platform: 'linux', arch: 'x64', isExecutable: only([bundled]) });
  assert.equal(got.source, 'bundled');
});

test('no bundled binary for this platform: compactd on PATH', () => {
  const got = resolveServer({ extensionPath: ext, platform: 'linux', arch: 'arm64', pathEnv: '/opt/a:/usr/local/bin', isExecutable: only([bundled, '/usr/local/bin/compactd']) });
  assert.deepEqual(got, { command: '/usr/local/bin/compactd', source: 'path' });
});

test('nothing fits: a message naming the platform and what to do', () => {
  assert.throws(
    () => resolveServer({ extensionPath: ext, platform: 'darwin', arch: 'arm64', pathEnv: '/usr/bin', isExecutable: only([bundled]) }),
    (err) => {
      const message = /** @type {Error} */ (err).message;
      assert.match(message, /no compactd binary fits this machine \(darwin-arm64\)/);
      assert.match(message, /cargo install/);
      assert.match(message, /compactd\.path/);
      return true;
    },
  );
});
