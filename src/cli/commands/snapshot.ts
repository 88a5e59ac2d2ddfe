import { UsageError } from '../../errors.js';
import type { SnapshotInfo } from '../../broker/snapshot-info.js';
import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const SNAPSHOT_HELP = `usage: berth snapshot create [scope flags] [--name N] [--json]
       berth snapshot ls [--tenant T] [scope flags] [--json]
       berth snapshot rm [scope flags] NAME
       berth snapshot restore [scope flags] NAME [--json]

create   saves the call's sandbox: its files and each shell's state (cwd, exported variables,
         functions, aliases). Refused while a command or job runs in it, and when a file in it
         holds the value of a secret the call is granted. Default name: snap-<time>.
ls       the tenant's snapshots; with --session, --task, --user or --profile, those of that
         scope's sandbox only.
rm       removes a snapshot of the call's sandbox.
restore  puts the call's sandbox back to snapshot NAME (checked first); the next command runs
         in the snapshot's cwd with its variables. A restore that fails changes nothing and says so.

Snapshots count against limits.snapshots and limits.snapshotBytes and go after
limits.snapshotRetentionDays. See also: berth fork.

${SCOPE_HELP}`;

export async function snapshotCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('snapshot', argv, {
    ...SCOPE_OPTIONS, ...COMMON_OPTIONS, name: { type: 'string' }, json: { type: 'boolean' },
  });
  const [action, ...names] = positionals;
  if (values.help || action === undefined) {
    io.out(`${SNAPSHOT_HELP}\n`);
    return values.help ? 0 : 2;
  }
  const oneName = (): string => {
    if (names.length !== 1) throw new UsageError(`berth snapshot ${action} takes one snapshot NAME (see "berth snapshot --help")`);
    return names[0] as string;
  };
  if (action !== 'create' && action !== 'ls' && action !== 'rm' && action !== 'restore') {
    throw new UsageError(`unknown snapshot action "${action}"; use create, ls, rm or restore (see "berth snapshot --help")`);
  }
  if (action === 'create' || action === 'ls') {
    if (names.length > 0) throw new UsageError(`berth snapshot ${action} takes no NAME${action === 'create' ? ' (use --name N)' : ''}`);
  } else if (values.name !== undefined) {
    throw new UsageError(`--name is for berth snapshot create; give ${action} the NAME as a word`);
  }
  return withBroker(io, values.config, async (broker) => {
    const scope = scopeFromFlags(values, io.env, io.cwd);
    switch (action) {
      case 'create': {
        const s = await broker.snapshots.create(scope, { name: values.name });
        io.out(values.json ? `${JSON.stringify(s)}\n` : `snapshot ${s.name} of sandbox ${s.sandboxKey} (${formatBytes(s.bytes)})\n`);
        return 0;
      }
      case 'ls': {
        const filtered = [values.session, values.task, values.user, values.profile].some((v) => v !== undefined);
        const tenant = broker.snapshots.tenantOf(scope);
        const list = broker.snapshots.list(tenant, filtered ? scope : undefined);
        io.out(values.json ? `${JSON.stringify(list)}\n` : table(list));
        return 0;
      }
      case 'rm': {
        const name = oneName();
        const removed = await broker.snapshots.remove(scope, name);
        io.out(removed ? `removed snapshot ${name}\n` : `no snapshot ${name} to remove\n`);
        return 0;
      }
      case 'restore': {
        const r = await broker.snapshots.restore(scope, oneName());
        io.out(values.json ? `${JSON.stringify(r)}\n` : `restored sandbox ${r.sandboxKey} to snapshot ${r.name}${r.cwd === null ? '' : `; the shell resumes in ${r.cwd}`}\n`);
        return 0;
      }
    }
  });
}

function table(list: SnapshotInfo[]): string {
  if (list.length === 0) return 'no snapshots\n';
  const head = `${'NAME'.padEnd(24)} ${'SANDBOX'.padEnd(28)} ${'BACKEND'.padEnd(7)} ${'SIZE'.padStart(9)} CREATED\n`;
  return head + list.map((s) =>
    `${s.name.padEnd(24)} ${s.sandboxKey.padEnd(28)} ${s.backend.padEnd(7)} ${formatBytes(s.bytes).padStart(9)} ${new Date(s.createdMs).toISOString()}\n`).join('');
}

function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
