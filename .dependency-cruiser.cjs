/*
 * berth's floor plan (docs/design.md §10), checked by `npm run floors` before the tests run. An
 * import only ever goes down the floors, never in a circle (type-only imports count: a type
 * import is a dependency of the design, whatever the compiler erases), and the seams between
 * the rooms hold: policy knows no engine, engines are reached through the registry, the server
 * reaches the broker only, a backend knows no other backend.
 *
 * Each rule's `comment` is printed with its violation: it says why the rule holds.
 */

/** The floors, bottom up: a file may import its own floor and those below it. */
const FLOORS = [
  { name: 'ground', path: '^src/(errors\\.ts|logging/|kit/)', is: 'errors, logging and the common kit, which import nothing of berth' },
  { name: 'egress', path: '^src/egress/', is: 'the egress proxy library, which knows only the ground floor so that config, backends and the broker can all use it' },
  { name: 'config', path: '^src/config/', is: "berth's own settings, their schema and the config kit, which know no backend and no call" },
  { name: 'scope', path: '^src/scope/', is: 'call scopes and sandbox keys, which read settings and know no policy or engine' },
  { name: 'policy', path: '^src/policy/', is: 'the pure decisions (mounts, cwd, env grants, volumes), which know no engine' },
  { name: 'shell', path: '^src/shell/', is: 'the persistent shell and its protocol, which run over any process a backend gives' },
  { name: 'seam', path: '^src/backends/((backend|module|catalog|labels)\\.ts$|plumbing/|cgroups/)', is: "the backends' seam: what a backend is and gives, and what is built once on top of it" },
  { name: 'backends', path: '^src/backends/(registry\\.ts$|(?!plumbing/|cgroups/)[^/]+/)', is: 'each backend and the registry that lists them' },
  { name: 'files', path: '^src/files/', is: 'file transfer over a sandbox' },
  { name: 'setup', path: '^src/setup/', is: "the config assembled from berth's keys and the registry's modules" },
  { name: 'broker', path: '^src/broker/', is: 'the broker' },
  { name: 'server', path: '^src/(server/|server\\.ts$|mcp\\.ts$)', is: 'the HTTP server and MCP' },
  { name: 'client', path: '^src/(client/|client\\.ts$)', is: 'the remote client of a berth server, built on its schemas' },
  { name: 'agent-tools', path: '^src/(ai-sdk/|ai-sdk\\.ts$)', is: 'agent-framework tools over a session, local or remote' },
  { name: 'cli', path: '^src/cli/', is: 'the CLI' },
  { name: 'library', path: '^src/index\\.ts$', is: "the library's front door" },
];

/** Which floor files and setup share: neither needs the other, both sit between the backends and the broker. */
const SAME_LEVEL = { files: 'setup', setup: 'files' };

const ENTRY_POINTS = '^src/(index|server|mcp|client|ai-sdk)\\.ts$|^src/cli/main\\.ts$|^src/egress/index\\.ts$';

const BACKEND_FOLDER = '^src/backends/(?!plumbing/|cgroups/)[^/]+/';

function upwardRules() {
  return FLOORS.slice(0, -1).map((floor, i) => {
    const above = FLOORS.slice(i + 1).filter((f) => SAME_LEVEL[floor.name] !== f.name);
    return {
      name: `floor-${floor.name}`,
      severity: 'error',
      comment:
        `an import only goes down the floors (docs/design.md §10): ${floor.name} (${floor.is}) may not import ` +
        `${above.map((f) => f.name).join(', ')}; move the shared piece down to the floor that needs it, or declare there the interface it needs`,
      from: { path: floor.path },
      to: { path: above.map((f) => `(${f.path})`).join('|') },
    };
  });
}

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'two files that import each other (even for a type) are one room with two doors: split out what both need, ' +
        'or let the lower one declare the interface it needs (docs/design.md §10)',
      from: { path: '^src/' },
      to: { circular: true },
    },
    ...upwardRules(),
    {
      name: 'policy-knows-no-engine',
      severity: 'error',
      comment: 'keying and policy are pure functions of explicit inputs: they read backend traits (config/backend-traits.ts), never a backend',
      from: { path: '^src/(scope|policy|config)/' },
      to: { path: '^src/backends/' },
    },
    {
      name: 'engines-through-the-registry',
      severity: 'error',
      comment:
        "the rest of berth reaches an engine only through the registry and a module's traits and capabilities, never a backend's own folder, " +
        'so a backend can be added or changed without touching its callers',
      from: { path: '^src/(broker|server|cli|files|setup)/|^src/(index|server|mcp)\\.ts$' },
      to: { path: BACKEND_FOLDER },
    },
    {
      name: 'server-reaches-the-broker-only',
      severity: 'error',
      comment: 'the server and MCP are edges over the broker: they use what the broker offers (and its types), never the backends or the shell inside',
      from: { path: '^src/(server/|server\\.ts$|mcp\\.ts$)' },
      to: { path: '^src/(backends|shell)/' },
    },
    {
      name: 'client-knows-the-wire-only',
      severity: 'error',
      comment:
        "the remote client speaks HTTP to a server: it uses the server's schemas and error table (its types and its checks of each " +
        'answer), never the broker, the engines or the request handling, so importing it loads none of them',
      from: { path: '^src/(client/|client\\.ts$)' },
      to: { path: '^src/(broker|backends|shell|files|setup|policy|egress|cli)/|^src/server/(?!response-schemas|schemas|http-error|routes)' },
    },
    {
      name: 'agent-tools-over-a-session',
      severity: 'error',
      comment: 'agent-framework tools take a session, local or remote, by the shape they declare: they import neither the broker nor the client',
      from: { path: '^src/(ai-sdk/|ai-sdk\\.ts$)' },
      to: { path: '^src/', pathNot: '^src/(errors\\.ts|ai-sdk/)' },
    },
    {
      name: 'backends-know-no-broker',
      severity: 'error',
      comment: 'a backend gives sandboxes and processes; the broker decides what to do with them, so a backend never imports it',
      from: { path: '^src/backends/' },
      to: { path: '^src/(broker|setup|server|cli)/' },
    },
    {
      name: 'shell-below-the-broker',
      severity: 'error',
      comment: 'the shell protocol runs over any process a backend gives; the broker drives it, never the other way round',
      from: { path: '^src/shell/' },
      to: { path: '^src/(backends|broker)/' },
    },
    {
      name: 'backend-folders-apart',
      severity: 'error',
      comment: "a backend folder never imports another backend's: what two backends share belongs in the seam (backends/plumbing, backends/cgroups)",
      from: { path: '^src/backends/((?!plumbing/|cgroups/)[^/]+)/' },
      to: { path: BACKEND_FOLDER, pathNot: '^src/backends/$1/' },
    },
    {
      name: 'settings-on-the-config-kit',
      severity: 'error',
      comment:
        "a backend's settings.ts is its config section: it imports the ground floor, the config kit and its own folder only, " +
        'so setup can compose the schema without loading an engine',
      from: { path: '^src/backends/([^/]+)/settings\\.ts$' },
      to: { path: '^src/', pathNot: '^src/(errors\\.ts|kit/|logging/|config/)|^src/backends/$1/' },
    },
    {
      name: 'no-dead-files',
      severity: 'error',
      comment:
        'every file of src/ is reached from an entry point (the library, berth/server, berth/mcp, the CLI, the egress ' +
        'library); a file nothing reaches is dead code: delete it',
      from: { path: ENTRY_POINTS },
      to: { path: '^src/', pathNot: ENTRY_POINTS, reachable: false },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^(dist|test|bench)/' },
  },
};
