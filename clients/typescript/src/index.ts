// compactd-client: the protocol's types (generated from the daemon's JSON Schema) and a typed
// stdio client on vscode-jsonrpc.
export * from './protocol';
export * from './client';
