import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/*
 * The public API of each entry point, name by name: a name that appears, disappears or moves
 * between `berth`, `berth/server`, `berth/mcp`, `berth/client` and `berth/ai-sdk` fails here and
 * has to be decided on purpose.
 */

const ROOT = join(import.meta.dirname, '..', '..');

const ENTRY_POINTS = {
  berth: {
    file: 'src/index.ts',
    values: [
      'BackendUnavailableError', 'BerthError', 'Broker', 'ConfigError', 'FileTooLargeError', 'PathNotFoundError',
      'PolicyRefusedError', 'SandboxNotFoundError', 'SessionHandle', 'TimeoutError', 'UnsupportedError', 'UsageError',
      'currentScope', 'defaultBerthHome', 'findConfig', 'isBerthError', 'loadConfig', 'normalizeSandboxPath', 'parseConfig',
      'parseSecretsFile', 'runWithScope', 'sandboxPathRefusal',
    ],
    types: [
      'AttachedWorkspace', 'AuditEntry', 'Backend', 'BackendName', 'BerthConfig', 'Binding', 'BrokerExecResult', 'BrokerFiles',
      'BrokerJobs', 'BrokerOptions', 'BrokerReapers', 'SessionFiles', 'SessionJobs', 'SessionSnapshots', 'SnapshotCalls', 'SnapshotInfo',
      'ForkResult', 'RestoreResult',
      'CallScope', 'CallScopeInput', 'CloseResult', 'CwdSource', 'DockerSettings', 'EnvSettings', 'ErrorCode', 'ExecOptions', 'ExecResult',
      'Isolation', 'JobReadResult', 'JobStatus', 'JobSummary', 'ManagedSandbox', 'ProfileSettings', 'Sandbox', 'SandboxIdentity',
      'SandboxInfo', 'SandboxPathPolicy', 'SandboxSpec', 'ScopeMode', 'SecretsFile', 'ShellTransport', 'TaskOverride',
    ],
    load: () => import('../../src/index.js'),
  },
  'berth/server': {
    file: 'src/server.ts',
    values: ['BerthServer', 'HostBackendForbiddenError', 'ProfileForbiddenError', 'TokenStore', 'openApiDocument'],
    types: ['Caller', 'ServerOptions', 'TokenEntry', 'TokenGrant', 'TokenStoreOptions'],
    load: () => import('../../src/server.js'),
  },
  'berth/mcp': {
    file: 'src/mcp.ts',
    values: ['createMcpHttpHandler', 'createMcpServer', 'describeSandbox', 'serveMcpStdio'],
    types: ['McpHttpHandler', 'McpHttpOptions', 'McpServerInfo', 'McpStdioOptions', 'SandboxDescription'],
    load: () => import('../../src/mcp.js'),
  },
  'berth/client': {
    file: 'src/client.ts',
    values: ['BerthClient', 'RemoteCallError', 'RemoteFiles', 'RemoteJobs', 'RemoteSession'],
    types: [
      'BerthClientOptions', 'RemoteBinding', 'RemoteCloseResult', 'RemoteExecOptions', 'RemoteExecResult', 'RemoteExport', 'RemoteJobRead',
      'RemoteJobStarted', 'RemoteJobSummary', 'RemoteScope', 'RemoteWritten',
    ],
    load: () => import('../../src/client.js'),
  },
  'berth/ai-sdk': {
    file: 'src/ai-sdk.ts',
    values: ['berthTools'],
    types: ['BerthToolsOptions', 'JobReadOutput', 'ShellInput', 'ShellOutput', 'ToolFailure', 'ToolSession'],
    load: () => import('../../src/ai-sdk.js'),
  },
} as const;

/** Every name each file exports, values and types, as the compiler sees them. */
function exportedNames(files: string[]): Map<string, { values: string[]; types: string[] }> {
  const program = ts.createProgram(files.map((f) => join(ROOT, f)), {
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022,
    noEmit: true, skipLibCheck: true, types: ['node'],
  });
  const checker = program.getTypeChecker();
  const out = new Map<string, { values: string[]; types: string[] }>();
  for (const file of files) {
    const source = program.getSourceFile(join(ROOT, file));
    const moduleSymbol = source && checker.getSymbolAtLocation(source);
    if (moduleSymbol === undefined) throw new Error(`the compiler found no module in ${file}`);
    const values: string[] = [];
    const types: string[] = [];
    for (const s of checker.getExportsOfModule(moduleSymbol)) {
      const target = (s.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(s) : s;
      // `export type { SomeClass }` exports no value, whatever the class is.
      const typeOnly = (s.declarations ?? []).some((d) => ts.isTypeOnlyExportDeclaration(d));
      ((target.flags & ts.SymbolFlags.Value) !== 0 && !typeOnly ? values : types).push(s.name);
    }
    out.set(file, { values: values.sort(), types: types.sort() });
  }
  return out;
}

describe('public exports of each entry point', () => {
  it('each entry point exports exactly its pinned values and types', () => {
    const found = exportedNames(Object.values(ENTRY_POINTS).map((e) => e.file));
    for (const [name, e] of Object.entries(ENTRY_POINTS)) {
      expect({ entry: name, ...found.get(e.file) }).toEqual({ entry: name, values: [...e.values].sort(), types: [...e.types].sort() });
    }
  }, 60_000);

  it('at run time each entry point holds exactly its pinned values', async () => {
    for (const [name, e] of Object.entries(ENTRY_POINTS)) {
      expect({ entry: name, values: Object.keys(await e.load()).sort() }).toEqual({ entry: name, values: [...e.values].sort() });
    }
  });
});
