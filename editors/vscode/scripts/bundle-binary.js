#!/usr/bin/env node
// Copies a compactd binary into bin/<platform>-<arch>/compactd (default: this machine's
// platform), stripped of debug info when `strip` is available, for a platform-specific .vsix
// (`vsce package --target linux-x64`). The extension prefers it to PATH (src/settings.ts).
// usage: node scripts/bundle-binary.js BINARY [--target linux-x64]
'use strict';
const cp = require('child_process');
const fs = require('fs');
const path = require('path');

const [binary] = process.argv.slice(2).filter((a, i, all) => !a.startsWith('--') && all[i - 1] !== '--target');
const i = process.argv.indexOf('--target');
const target = i >= 0 ? process.argv[i + 1] : `${process.platform}-${process.arch}`;
if (!binary || !fs.existsSync(binary)) {
  console.error(`bundle-binary: no compactd binary at ${binary} (build it first: cargo build --release)`);
  process.exit(1);
}
const binDir = path.join(__dirname, '..', 'bin');
fs.rmSync(binDir, { recursive: true, force: true });
const dest = path.join(binDir, target, target.startsWith('win32') ? 'compactd.exe' : 'compactd');
fs.mkdirSync(path.dirname(dest), { recursive: true });
fs.copyFileSync(binary, dest);
fs.chmodSync(dest, 0o755);
const strip = cp.spawnSync('strip', ['--strip-debug', dest]);
const size = (fs.statSync(dest).size / 1e6).toFixed(1);
console.log(`bundled ${binary} as ${path.relative(process.cwd(), dest)} (${size} MB${strip.status === 0 ? ', stripped' : ''})`);
