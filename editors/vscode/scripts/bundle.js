#!/usr/bin/env node
// Bundles the extension and its runtime dependencies (vscode-languageclient, compactd-client)
// into out/extension.js with esbuild, so the .vsix needs no node_modules (`vsce package
// --no-dependencies`). `tsc -p .` type-checks the sources first.
'use strict';
const path = require('path');
const esbuild = require('esbuild');

esbuild
  .build({
    entryPoints: [path.join(__dirname, '../src/extension.ts')],
    outfile: path.join(__dirname, '../out/extension.js'),
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    external: ['vscode'],
    logLevel: 'warning',
  })
  .catch(() => process.exit(1));
