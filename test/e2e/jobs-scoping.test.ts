import { randomBytes } from 'node:crypto';

import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import type { Sandbox } from '../../src/backends/backend.js';
import { JobLedger } from '../../src/broker/job-ledger.js';
import { JobProbe } from '../../src/broker/job-probe.js';
import { JobReader } from '../../src/broker/job-reader.js';
import { JobRunner } from '../../src/broker/job-runner.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * Background jobs among users and secrets (local backend): a job is its user's alone (another
 * user of the same group chat neither lists, reads nor kills it), and no read returns a byte of a
 * secret, whatever the offset, and also when the scope that started the job no longer resolves.
 */

const ANA = 'telegram:1';
const BEN = 'telegram:2';
const anaSecret = `ana-${randomBytes(12).toString('hex')}`;
const benSecret = `ben-${randomBytes(12).toString('hex')}`;
const gatewayEnv = {
  BERTH_USER_TELEGRAM_1_API_SECRET: anaSecret,
  BERTH_USER_TELEGRAM_2_API_SECRET: benSecret,
};

function home(): string {
  return tempDir('berth-jobscope-');
}

async function open(berthHome: string, config: Record<string, unknown> = {}): Promise<Broker> {
  return Broker.open({
    config: parseConfig({ backend: 'local', persistent: false, ...config }), berthHome,
    env: { PATH: process.env['PATH'], ...gatewayEnv }, holdSessions: true,
  });
}

async function waitDone(broker: Broker, scope: CallScopeInput, jobId: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((await broker.jobs.read(scope, jobId, { maxBytes: 0 })).status === 'running') {
    if (Date.now() > deadline) throw new Error(`job ${jobId} did not end`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Every substring of `secret` of `n` characters that occurs in `text`. */
function leaks(text: string, secret: string, n = 3): string[] {
  const out: string[] = [];
  for (let i = 0; i + n <= secret.length; i++) if (text.includes(secret.slice(i, i + n))) out.push(secret.slice(i, i + n));
  return out;
}

describe('background jobs: users and secrets (local backend)', () => {
  it('another user of the same session cannot list, read or kill a job (not found, like an unknown id); its owner can', async () => {
    await using broker = await open(home());
    const ana = { session: 'group', user: ANA };
    const ben = { session: 'group', user: BEN };
    const none = { session: 'group' };
    const { jobId } = await broker.jobs.start(ana, 'printf "%s\\n" "$API_SECRET"; sleep 60');
    const unknown = 'job_0123456789abcdef';

    expect(await broker.jobs.list(ben)).toEqual([]);
    expect(await broker.jobs.list(none)).toEqual([]);
    for (const who of [ben, none]) {
      for (const id of [jobId, unknown]) {
        const read = await broker.jobs.read(who, id).catch((e: unknown) => e);
        const kill = await broker.jobs.kill(who, id).catch((e: unknown) => e);
        // The same answer as for an id that never existed, apart from the id it names.
        for (const err of [read, kill]) {
          expect(err).toMatchObject({ code: 'job_not_found', message: `no job "${id}" in this session; list the session's jobs to see their ids` });
        }
      }
    }

    // Ana's job still runs and is hers: listed, read (her secret redacted), killed.
    expect(await broker.jobs.list(ana)).toEqual([expect.objectContaining({ jobId, status: 'running' })]);
    let out = '';
    const deadline = Date.now() + 10_000;
    while (out === '' && Date.now() < deadline) out = (await broker.jobs.read(ana, jobId)).output;
    expect(out).toBe('[REDACTED]\n');
    expect(await broker.jobs.kill(ana, jobId)).toEqual({ killed: true });
    expect(await broker.jobs.read(ana, jobId)).toMatchObject({ status: 'killed', done: true });
    expect(await broker.jobs.kill(ana, jobId)).toEqual({ killed: false });

    // Every kill is audited with who asked, the job and what came of it; refused ones too.
    const kills = broker.audit({ tenant: 'local', session: 'group' }).filter((e) => e.kind === 'kill').reverse();
    expect(kills.map((e) => [e.user, e.command])).toEqual([
      [BEN, `job ${jobId} (failed: job_not_found)`], [BEN, `job ${unknown} (failed: job_not_found)`],
      [null, `job ${jobId} (failed: job_not_found)`], [null, `job ${unknown} (failed: job_not_found)`],
      [ANA, `job ${jobId} (killed)`], [ANA, `job ${jobId} (had already ended)`],
    ]);
    expect(kills.at(-1)).toMatchObject({ sandboxKey: broker.explain(ana).sandboxKey, profile: 'default', exitCode: null });
    expect(kills.at(-1)!.timeMs).toBeGreaterThan(Date.now() - 60_000);

    // A job started with no user is seen by no-user calls only.
    const { jobId: plain } = await broker.jobs.start(none, 'echo plain');
    expect((await broker.jobs.list(none)).map((j) => j.jobId)).toEqual([plain]);
    expect((await broker.jobs.list(ana)).map((j) => j.jobId)).toEqual([jobId]);
    await expect(broker.jobs.read(ana, plain)).rejects.toMatchObject({ code: 'job_not_found' });
  });

  it('a store from before jobs carried their user keeps each job its own user\'s', async () => {
    const h = home();
    {
      // Opened once so the schema exists, then the jobs table is put back to its old form.
      const store = StateStore.open(h);
      store.close();
      const db = new Database(join(h, 'state.db'));
      db.exec(`DROP TABLE jobs; CREATE TABLE jobs (
        id TEXT PRIMARY KEY, tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT NOT NULL, digest TEXT NOT NULL,
        sandbox_key TEXT NOT NULL, scope TEXT NOT NULL, command TEXT NOT NULL, dir TEXT NOT NULL, started_ms INTEGER NOT NULL,
        status TEXT NOT NULL, exit_code INTEGER, ended_ms INTEGER)`);
      const row = db.prepare(`INSERT INTO jobs VALUES (?, 'local', 'default', 'group', 'd', 'k', ?, 'true', '/nowhere', 1, 'exited', 0, 2)`);
      row.run('job_00000000000000a1', JSON.stringify({ tenant: 'local', profile: 'default', session: 'group', user: ANA }));
      row.run('job_00000000000000a2', JSON.stringify({ tenant: 'local', profile: 'default', session: 'group' }));
      db.prepare(`INSERT INTO jobs VALUES (?, 'local', 'default', 'group', 'd', 'k', ?, 'sleep 9', '/nowhere', 1, 'running', NULL, NULL)`)
        .run('job_00000000000000a3', JSON.stringify({ tenant: 'local', profile: 'default', session: 'group' }));
      db.close();
    }
    const store = StateStore.open(h);
    try {
      // It also gained the column a kill marks itself in (from before kills were marked).
      store.jobs.markKilling('job_00000000000000a3', 1234);
      expect(store.jobs.killStartedMs('job_00000000000000a3')).toBe(1234);
      expect(store.jobs.list('local', 'default', 'group', ANA).map((j) => j.id)).toEqual(['job_00000000000000a1']);
      expect(store.jobs.list('local', 'default', 'group', null).map((j) => j.id)).toEqual(['job_00000000000000a2', 'job_00000000000000a3']);
      expect(store.jobs.list('local', 'default', 'group', BEN)).toEqual([]);
      expect(store.jobs.get('local', 'default', 'group', BEN, 'job_00000000000000a1')).toBeUndefined();
    } finally {
      store.close();
    }
  });

  it('a read from any offset inside a secret returns none of it; small sequential reads progress and redact', async () => {
    await using broker = await open(home());
    const ana = { session: 'offsets', user: ANA };
    const { jobId } = await broker.jobs.start(ana, 'printf "xxxx%s yyyy%szz\\n" "$API_SECRET" "$API_SECRET"');
    await waitDone(broker, ana, jobId);
    const raw = `xxxx${anaSecret} yyyy${anaSecret}zz\n`;
    const size = Buffer.byteLength(raw);
    const reads: Array<{ offset: number; maxBytes: number; output: string; nextOffset: number }> = [];
    for (let offset = 0; offset <= size; offset++) {
      for (const maxBytes of [1, 3, 7, 16, 65_536]) {
        reads.push({ offset, maxBytes, ...await broker.jobs.read(ana, jobId, { offset, maxBytes }) });
      }
    }
    for (const r of reads) expect(leaks(r.output, anaSecret), `offset ${r.offset}, maxBytes ${r.maxBytes}: ${r.output}`).toEqual([]);
    // Every read progresses, also from inside a secret and with maxBytes shorter than it.
    for (const r of reads) expect(r.nextOffset, `offset ${r.offset}, maxBytes ${r.maxBytes}`).toBeGreaterThan(Math.min(r.offset, size - 1));
    // Reads that follow nextOffset, however small, give the redacted output once.
    for (const maxBytes of [1, 5, 64]) {
      let offset = 0;
      let out = '';
      for (let i = 0; i < 500; i++) {
        const r = await broker.jobs.read(ana, jobId, { offset, maxBytes });
        out += r.output;
        offset = r.nextOffset;
        if (r.done) break;
      }
      expect(out).toBe('xxxx[REDACTED] yyyy[REDACTED]zz\n');
    }
  });

  it('when the call that started a job no longer resolves to its sandbox, the reader\'s own secrets redact it', async () => {
    await using broker = await open(home());
    const ana = { session: 'moved', task: 't1', user: ANA };
    const { jobId } = await broker.jobs.start(ana, 'printf "key=%s\\n" "$API_SECRET"');
    await waitDone(broker, ana, jobId);
    // A backend override gives the task its own sandbox: the job's stored call resolves elsewhere now.
    // (An image override did this before; on a backend without images it is refused now.)
    broker.setTaskOverride(ana, { backend: 'local' });
    expect(broker.explain(ana).sandboxKey).not.toBe(broker.explain({ session: 'moved', user: ANA }).sandboxKey);
    const r = await broker.jobs.read(ana, jobId);
    expect(leaks(r.output, anaSecret)).toEqual([]);
    expect(r).toMatchObject({ output: 'key=[REDACTED]\n', done: true, status: 'exited', exitCode: 0 });
  });

  it('when neither the job\'s call nor anything of the reader\'s resolves, its output is refused, its status still answered', async () => {
    // Unreachable through a broker whose config parsed (a profile's secrets always resolve), so a
    // reader whose resolver resolves nothing stands in for a config that no longer holds.
    const h = home();
    const store = StateStore.open(h);
    const scope = { tenant: 'local', profile: 'default', session: 'orphan', user: ANA };
    const id = 'job_00000000000000b1';
    store.jobs.put({
      id, tenant: 'local', profile: 'default', session: 'orphan', user: ANA, digest: 'd1', sandboxKey: 'user:telegram:1',
      scope: JSON.stringify(scope), command: 'printf ...', dir: '/state/jobs/x', startedMs: 1, status: 'running', exitCode: null, endedMs: null,
    });
    const out = Buffer.from(`key=${anaSecret}\n`);
    const sandbox = {
      execOnce: (argv: string[]) => {
        const [off, max] = [Number(argv[5]), Number(argv[6])];
        const body = max > 0 ? out.subarray(off, off + max) : Buffer.alloc(0);
        return Promise.resolve({ exitCode: 0, stdout: Buffer.concat([Buffer.from(`ok 0 0 ${out.length}\n`), body]), stderr: Buffer.alloc(0) });
      },
    } as unknown as Sandbox;
    const refuse = (): never => {
      throw new Error('profile "default" is gone');
    };
    const resolver = { resolve: refuse, policy: refuse };
    const sandboxes = { existing: () => Promise.resolve(sandbox), acquire: refuse };
    const ledger = new JobLedger({ jobs: store.jobs, resolver });
    const probe = new JobProbe({ jobs: store.jobs, ledger });
    const reader = new JobReader({ ledger, probe, sandboxes, resolver });
    const runner = new JobRunner({
      jobs: store.jobs, ledger, reader, sandboxes, killer: { kill: refuse }, commands: { run: refuse }, audit: { record: () => undefined },
    });
    try {
      await expect(reader.read(scope, id)).rejects.toMatchObject({ code: 'policy_refused', message: expect.stringMatching(/cannot be redacted/) });
      await expect(reader.read(scope, id, { offset: 6, maxBytes: 3 })).rejects.toMatchObject({ code: 'policy_refused' });
      expect(await reader.read(scope, id, { maxBytes: 0 })).toMatchObject({ output: '', status: 'exited', exitCode: 0 });
      expect(await reader.read(scope, id, { offset: out.length })).toMatchObject({ output: '', done: true });
      expect(await runner.list(scope)).toEqual([expect.objectContaining({ jobId: id, status: 'exited', exitCode: 0 })]);
    } finally {
      store.close();
    }
  });
});
