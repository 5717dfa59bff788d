#!/usr/bin/env node
// Generates `contributes.configuration` in package.json from the daemon's settings schema
// (schema/settings.schema.json at the repository root), so the VS Code settings UI lists exactly
// the settings compactd accepts. Run at build time (`npm run build`); `--check` fails instead of
// writing when package.json is out of date (CI).
//
// Each group of the schema (compaction, summarizer, ...) becomes one `compactd.settings.<group>.<key>`
// setting; maps (`providers`, `modelRoles`) and plain values stay one setting each. The extension
// sends back only the values the user set (see src/settings.ts), so unset keys keep the daemon's
// own layering (user and project settings files).
'use strict';
const fs = require('fs');
const path = require('path');

const here = path.resolve(__dirname, '..');
const schemaPath = path.resolve(here, '../../schema/settings.schema.json');
const pkgPath = path.join(here, 'package.json');

const schema = JSON.parse(fs.readFileSync(schemaPath, 'utf8'));
const defs = schema.$defs || {};

function deref(node) {
  let seen = 0;
  while (node && node.$ref) {
    const name = node.$ref.replace('#/$defs/', '');
    if (!(name in defs)) throw new Error(`unknown $ref ${node.$ref}`);
    // The ref's own description (at the use site) is more specific than the definition's.
    const { $ref, ...rest } = node;
    node = { ...defs[name], ...rest };
    if (++seen > 20) throw new Error(`$ref cycle at ${$ref}`);
  }
  return node;
}

/** Inlines refs and turns the schema into what VS Code's configuration schema understands. */
function toVscode(node) {
  node = deref(node);
  const out = {};
  if (Array.isArray(node.oneOf) && node.oneOf.every((v) => 'const' in v)) {
    out.type = 'string';
    out.enum = node.oneOf.map((v) => v.const);
    out.markdownEnumDescriptions = node.oneOf.map((v) => v.description || '');
  } else if (Array.isArray(node.anyOf)) {
    // `X | null` (e.g. an optional secret): VS Code wants one type list.
    const types = new Set();
    for (const alt of node.anyOf.map(deref)) {
      for (const t of [].concat(alt.type || [])) types.add(t);
    }
    out.type = [...types];
  } else if (node.type !== undefined) {
    out.type = node.type;
  }
  for (const key of ['minimum', 'maximum', 'default', 'enum']) {
    if (key in node && !(key in out)) out[key] = node[key];
  }
  if (node.items) out.items = toVscode(node.items);
  if (node.properties) {
    out.properties = {};
    for (const [k, v] of Object.entries(node.properties)) out.properties[k] = toVscode(v);
  }
  if (node.additionalProperties !== undefined) {
    out.additionalProperties =
      typeof node.additionalProperties === 'object' ? toVscode(node.additionalProperties) : node.additionalProperties;
  }
  if (node.description) out.markdownDescription = node.description.replace(/\n/g, ' ');
  return out;
}

// Keys that decide where the conversation or the user's credentials go (the schema's
// `x-compactd-userOnly`, from the daemon's project-trust rules). A VS Code setting holding one
// of them is machine-scoped: a workspace's `.vscode/settings.json` (a cloned repository's)
// cannot set it, and src/settings.ts reads only the user's value.
const userOnly = (schema['x-compactd-userOnly'] || []).map((p) => p.split('.'));
const USER_ONLY_NOTE =
  ' Read from user settings only: a workspace cannot set it, as it decides where the conversation or credentials go.';

/** Whether the setting at `path` (e.g. `['providers']`) holds a user-only key. */
function holdsUserOnly(path) {
  return userOnly.some((p) => path.every((seg, i) => i < p.length && (p[i] === '*' || p[i] === seg)));
}

function markUserOnly(prop, path) {
  if (!holdsUserOnly(path)) return prop;
  prop.scope = 'machine';
  prop.markdownDescription = (prop.markdownDescription || '') + USER_ONLY_NOTE;
  return prop;
}

function generate() {
  const properties = {};
  let order = 100;
  for (const [group, raw] of Object.entries(schema.properties)) {
    const node = deref(raw);
    const isGroup = node.type === 'object' && node.properties && Object.keys(node.properties).length > 0;
    if (isGroup) {
      for (const [key, sub] of Object.entries(node.properties)) {
        const prop = markUserOnly(toVscode(sub), [group, key]);
        prop.order = order++;
        properties[`compactd.settings.${group}.${key}`] = prop;
      }
    } else {
      const prop = markUserOnly(toVscode(raw), [group]);
      prop.order = order++;
      properties[`compactd.settings.${group}`] = prop;
    }
  }
  return properties;
}

const extensionOwn = {
  'compactd.path': {
    type: 'string',
    default: '',
    order: 0,
    // The program the extension runs: a workspace must not choose it.
    scope: 'machine',
    markdownDescription:
      'The `compactd` executable (absolute path, or a name looked up on `PATH`). Empty: the binary bundled in the extension for this platform, else `compactd` on `PATH`. The extension runs `compactd serve`. Read from user settings only: a workspace cannot set it.',
  },
  'compactd.useVSCodeLanguageModel': {
    type: 'boolean',
    default: false,
    order: 1,
    markdownDescription:
      "Write summaries with VS Code's language-model API (e.g. Copilot) instead of a configured provider: the daemon asks the extension (`summarizer/summarize`), so no API key is needed. Sets `summarizer.kind` to `client` for this window.",
  },
  'compactd.languageModelFamily': {
    type: 'string',
    default: '',
    order: 2,
    markdownDescription:
      'With `#compactd.useVSCodeLanguageModel#`: the model family to ask for (e.g. `gpt-4o`); empty takes the first available model.',
  },
};

function main() {
  const pkgText = fs.readFileSync(pkgPath, 'utf8');
  const pkg = JSON.parse(pkgText);
  pkg.contributes = pkg.contributes || {};
  pkg.contributes.configuration = {
    title: 'compactd',
    properties: { ...extensionOwn, ...generate() },
  };
  const next = JSON.stringify(pkg, null, 2) + '\n';
  if (process.argv.includes('--check')) {
    if (next !== pkgText) {
      console.error('package.json is out of date with schema/settings.schema.json: run `npm run gen-config`');
      process.exit(1);
    }
    return;
  }
  if (next !== pkgText) fs.writeFileSync(pkgPath, next);
}

main();
