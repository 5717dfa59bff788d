#!/usr/bin/env node
// Generates src/protocol.ts from the daemon's JSON Schema (schema/protocol.schema.json at the
// repository root): one TypeScript type per schema definition (json-schema-to-typescript), then
// the method tables (which params and result each method has, in which direction) and the
// error kinds. `--check` writes nothing and fails when src/protocol.ts is stale (the tests run
// it), so the types cannot drift from the daemon.
'use strict';
const fs = require('fs');
const path = require('path');
const { compile } = require('json-schema-to-typescript');

// usage: node scripts/generate.js [--check] [--schema FILE] [--out FILE]
const here = path.resolve(__dirname, '..');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? path.resolve(process.argv[i + 1]) : fallback;
};
const schemaPath = arg('--schema', path.resolve(here, '../../schema/protocol.schema.json'));
const outPath = arg('--out', path.join(here, 'src/protocol.ts'));

/** A schema that allows any JSON value (only a description, or `true`): `unknown` in TypeScript. */
function isAny(node) {
  if (node === true) return true;
  if (!node || typeof node !== 'object' || Array.isArray(node)) return false;
  const typing = ['type', '$ref', 'anyOf', 'oneOf', 'allOf', 'enum', 'const', 'properties', 'items', 'additionalProperties', 'not'];
  return !typing.some((k) => k in node);
}

/** Copies `node`, turning every "any value" schema into `unknown` (the compiler would say `{}`). */
function anyToUnknown(node) {
  if (Array.isArray(node)) return node.map(anyToUnknown);
  if (!node || typeof node !== 'object') return node;
  // A reference with its own description: keep the description on the use site but let the
  // type be the referenced one (the compiler would make a renamed copy of it).
  if (node.$ref && Object.keys(node).length > 1) {
    const { $ref, ...rest } = node;
    return { ...anyToUnknown(rest), allOf: [{ $ref }] };
  }
  const out = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === 'properties' || key === '$defs') {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([k, v]) => [k, isAny(v) ? { ...(v === true ? {} : v), tsType: 'unknown' } : anyToUnknown(v)]),
      );
    } else if (key === 'items' || key === 'additionalProperties') {
      out[key] = isAny(value) && value !== true ? { ...value, tsType: 'unknown' } : anyToUnknown(value);
    } else {
      out[key] = anyToUnknown(value);
    }
  }
  return out;
}

/** The TypeScript type of a method's params or result: a definition's name, or `null`. */
function typeOf(node, where) {
  if (node == null) return 'void';
  if (node.$ref) return node.$ref.replace('#/$defs/', '');
  if (node.type === 'null') return 'null';
  throw new Error(`${where}: only $ref and {"type": "null"} are expected here, got ${JSON.stringify(node)}`);
}

function docComment(text, indent) {
  const lines = String(text).split('\n');
  return `${indent}/** ${lines.join(`\n${indent} * `)} */\n`;
}

/** One interface per direction and kind: method name -> params (and result for requests). */
function methodTable(methods, name, direction, kind, doc) {
  let out = `\n/** ${doc} */\nexport interface ${name} {\n`;
  for (const m of methods.filter((m) => m.direction === direction && m.kind === kind)) {
    out += docComment(m.description, '  ');
    const params = typeOf(m.params, m.method);
    out +=
      kind === 'request'
        ? `  '${m.method}': { params: ${params}; result: ${typeOf(m.result, m.method)} };\n`
        : `  '${m.method}': ${params};\n`;
  }
  return out + '}\n';
}

async function generate() {
  const schema = JSON.parse(fs.readFileSync(schemaPath, 'utf8'));
  // Compile the definitions only: the root describes the method list, not a message.
  // Each definition named by its key, so that every reference to it is that one named type.
  const defs = Object.fromEntries(Object.entries(schema.$defs).map(([name, def]) => [name, { ...def, title: name }]));
  const root = anyToUnknown({ $defs: defs, title: 'CompactdProtocol', type: 'object', additionalProperties: false });
  let types = await compile(root, 'CompactdProtocol', {
    bannerComment: '',
    unreachableDefinitions: true,
    additionalProperties: false,
    strictIndexSignatures: false,
    format: true,
    style: { singleQuote: true, printWidth: 110 },
  });
  // Drop the compiler's "referenced by ... via the definition" notes and the empty root type.
  types = types
    .replace(/\n \*\n \* This interface was referenced by `CompactdProtocol`'s JSON-Schema\n \* via the `definition` "[^"]+"\./g, '')
    .replace(/\/\*\*\n \* This interface was referenced by `CompactdProtocol`'s JSON-Schema\n \* via the `definition` "[^"]+"\.\n \*\/\n/g, '')
    .replace(/export interface CompactdProtocol \{\}\n/, '');
  if (/referenced by `CompactdProtocol`/.test(types)) throw new Error('unexpected compiler comment left in the output');

  const kinds = schema.errors.map((e) => `  ${e.kind}: ${e.code},\n`).join('');
  const header =
    '// GENERATED by scripts/generate.js from schema/protocol.schema.json: do not edit.\n' +
    '// The daemon writes the schema (`compactd schema --out schema`); `npm run generate` writes this file,\n' +
    '// and `node scripts/generate.js --check` (run by the tests) fails when it is stale.\n' +
    '/* eslint-disable */\n\n' +
    `/** The protocol version these types describe (\`protocolVersion\` of the schema). */\n` +
    `export const PROTOCOL_VERSION = ${JSON.stringify(schema.protocolVersion)};\n\n`;
  const tables =
    methodTable(schema.methods, 'ClientRequests', 'clientToServer', 'request', 'Requests a client sends: params and result of each.') +
    methodTable(schema.methods, 'ClientNotifications', 'clientToServer', 'notification', 'Notifications a client sends, with their params.') +
    methodTable(schema.methods, 'ServerRequests', 'serverToClient', 'request', 'Requests the daemon sends to a client that declared them: params and the expected answer.') +
    methodTable(schema.methods, 'ServerNotifications', 'serverToClient', 'notification', 'Notifications the daemon sends, with their params.') +
    '\n/** The `code` of each typed error, by its `data.kind`. */\n' +
    `export const ERROR_CODES = {\n${kinds}} as const;\n\n` +
    '/** A typed error\'s `data.kind`. */\nexport type ErrorKind = keyof typeof ERROR_CODES;\n';
  return header + types + tables;
}

async function main() {
  const next = await generate();
  const current = fs.existsSync(outPath) ? fs.readFileSync(outPath, 'utf8') : '';
  if (process.argv.includes('--check')) {
    if (next !== current) {
      console.error(`${path.relative(process.cwd(), outPath)} is stale: schema/protocol.schema.json changed. Run \`npm run generate\` in clients/typescript.`);
      process.exit(1);
    }
    return;
  }
  if (next !== current) fs.writeFileSync(outPath, next);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
