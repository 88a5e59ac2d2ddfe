import { Readable } from 'node:stream';
import { expect, it } from 'vitest';

/*
 * One suite for the library's session API, run against every way to hold a session: the
 * in-process broker (`broker.session(scope)`) and the remote client over a real `berth serve`
 * (`new BerthClient(...).session(scope)`). The same calls, the same answers, the same error
 * codes; what one cannot do (a host path over HTTP) is tested beside it, not here.
 */

/** What this suite asks of a session: the shape the library's `SessionHandle` and the client's `RemoteSession` share. */
export interface SessionUnderTest {
  exec(command: string, opts?: {
    timeoutSeconds?: number; workdir?: string; stdin?: string; onChunk?: (stream: 'stdout' | 'stderr', chunk: string) => void;
  }): Promise<{ exitCode: number; stdout: string; stderr: string; output: string; cwd: string; timedOut: boolean; sandboxKey: string }>;
  /** Synchronous in the library, a promise over HTTP: the suite awaits either. */
  explain(): { sandboxKey: string; cwd: string; persistent: boolean } | Promise<{ sandboxKey: string; cwd: string; persistent: boolean }>;
  close(): Promise<{ removed: string[]; kept: string[]; wasOpen: boolean }>;
  files: {
    upload(a: { path: string; data: Buffer }): Promise<{ path: string; bytes: number }>;
    uploadStream(a: { path: string; size: number; stream: AsyncIterable<Uint8Array> }): Promise<{ path: string; bytes: number }>;
    readFile(a: { path: string; maxBytes?: number }): Promise<{ path: string; data: Buffer }>;
  };
  jobs: {
    start(command: string, opts?: { workdir?: string }): Promise<{ jobId: string; sandboxKey: string }>;
    read(jobId: string, opts?: { offset?: number; maxBytes?: number }): Promise<{ output: string; nextOffset: number; done: boolean; exitCode: number | null; status: string }>;
    kill(jobId: string): Promise<{ killed: boolean }>;
    list(): Promise<{ jobId: string; command: string; status: string; exitCode: number | null }[]>;
  };
}

/** A fresh installation (ephemeral sandboxes) and the sessions of one tenant on it. */
export interface SessionInstall {
  session(scope: { session?: string; user?: string }): SessionUnderTest;
  /** The kinds of the audit entries of one session, as the installation recorded them. */
  auditKinds(session: string): Promise<string[]>;
}

export interface SessionTarget {
  /** `in-process broker`, `client over HTTP`: the tests' names say which ran. */
  name: string;
  /** Opens a fresh installation; it goes when the test finishes. */
  open(): Promise<SessionInstall>;
}

async function readToEnd(s: SessionUnderTest, jobId: string): Promise<{ output: string; done: boolean; status: string; exitCode: number | null }> {
  let read = await s.jobs.read(jobId);
  for (const deadline = Date.now() + 10_000; !read.done && Date.now() < deadline;) {
    await new Promise((r) => setTimeout(r, 20));
    read = await s.jobs.read(jobId);
  }
  return read;
}

export function sessionConformance(target: SessionTarget): void {
  const t = target.name;

  it(`${t}: exec runs in the session's persistent shell: output, exit code, cwd and exports carry over; workdir and stdin apply to one command`, async () => {
    const inst = await target.open();
    const s = inst.session({ session: 'shell' });
    const first = await s.exec('mkdir -p a/b && cd a && export KEPT=yes; echo out; echo err >&2; exit 3');
    expect(first).toMatchObject({ exitCode: 3, stdout: 'out\n', stderr: expect.stringContaining('err\n'), timedOut: false, sandboxKey: 'session:shell' });
    // `exit` replaces the shell; the new one starts where the old one was.
    expect(first.cwd).toMatch(/\/a$/);
    const again = await s.exec('pwd; echo "[$KEPT]"');
    expect(again.stdout).toBe(`${first.cwd}\n[yes]\n`);
    const inB = await s.exec('pwd', { workdir: `${first.cwd}/b` });
    expect(inB.stdout).toBe(`${first.cwd}/b\n`);
    expect(inB.cwd).toBe(first.cwd);
    expect((await s.exec('tr a-z A-Z', { stdin: 'piped in\n' })).stdout).toBe('PIPED IN\n');
    expect((await s.explain()).cwd).toBe(first.cwd);
  });

  it(`${t}: a streaming exec hands over each chunk in arrival order before the result, and the result carries the whole output`, async () => {
    const inst = await target.open();
    const s = inst.session({ session: 'stream' });
    const chunks: [string, string][] = [];
    const r = await s.exec('for i in 1 2 3; do echo "out $i"; echo "err $i" >&2; sleep 0.05; done', {
      onChunk: (stream, chunk) => chunks.push([stream, chunk]),
    });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'out 1\nout 2\nout 3\n', stderr: 'err 1\nerr 2\nerr 3\n' });
    expect(chunks.filter(([k]) => k === 'stdout').map(([, c]) => c).join('')).toBe(r.stdout);
    expect(chunks.filter(([k]) => k === 'stderr').map(([, c]) => c).join('')).toBe(r.stderr);
    expect(chunks.map(([, c]) => c).join('')).toBe(r.output);
  });

  it(`${t}: a command over its timeout is a result (exit 124, timedOut), not an error, and the session goes on`, async () => {
    const inst = await target.open();
    const s = inst.session({ session: 'slow' });
    const r = await s.exec('echo started; sleep 30', { timeoutSeconds: 1 });
    expect(r).toMatchObject({ exitCode: 124, timedOut: true, stdout: 'started\n' });
    expect((await s.exec('echo next')).stdout).toBe('next\n');
  });

  it(`${t}: explain names the session's sandbox without starting it; close removes the ephemeral sandbox and a later call gets a fresh one`, async () => {
    const inst = await target.open();
    const s = inst.session({ session: 'closing' });
    expect(await s.explain()).toMatchObject({ sandboxKey: 'session:closing', persistent: false });
    await s.exec('echo here > mark');
    expect(await s.close()).toEqual({ removed: ['session:closing'], kept: [], wasOpen: true });
    expect((await s.exec('test -e mark; echo $?')).stdout).toBe('1\n');
  });

  it(`${t}: files go to the session's own sandbox, never another session's, and each call is audited under its session`, async () => {
    const inst = await target.open();
    const a = inst.session({ session: 'a' });
    const b = inst.session({ session: 'b' });

    expect(await a.files.upload({ path: 'note.txt', data: Buffer.from('from a\n') })).toMatchObject({ bytes: 7 });
    expect((await a.exec('cat note.txt')).stdout).toBe('from a\n');
    expect((await a.files.readFile({ path: 'note.txt' })).data.toString()).toBe('from a\n');
    await expect(b.files.readFile({ path: 'note.txt' })).rejects.toMatchObject({ code: 'path_not_found' });
    expect((await b.exec('test -e note.txt; echo $?')).stdout).toBe('1\n');

    expect(await a.files.uploadStream({ path: 'streamed.txt', size: 3, stream: Readable.from([Buffer.from('ab'), Buffer.from('c')]) })).toMatchObject({ bytes: 3 });
    expect((await a.exec('cat streamed.txt')).stdout).toBe('abc');
    const binary = Buffer.from([0, 255, 10, 128, 13]);
    await a.files.upload({ path: 'bin/x.bin', data: binary });
    expect((await a.files.readFile({ path: 'bin/x.bin' })).data).toEqual(binary);

    expect((await inst.auditKinds('a')).filter((k) => k !== 'exec').sort()).toEqual(['read', 'read', 'upload', 'upload', 'upload']);
    expect((await inst.auditKinds('b')).sort()).toEqual(['exec', 'read']);
  });

  it(`${t}: jobs are started, read, listed and killed in the session's own session; another session sees none of them`, async () => {
    const inst = await target.open();
    const a = inst.session({ session: 'a' });
    const b = inst.session({ session: 'b' });

    const done = await a.jobs.start('echo job-out');
    expect(await readToEnd(a, done.jobId)).toMatchObject({ output: 'job-out\n', done: true, status: 'exited', exitCode: 0 });

    const running = await a.jobs.start('sleep 30');
    expect((await a.jobs.list()).map((j) => [j.jobId, j.status])).toEqual([[done.jobId, 'exited'], [running.jobId, 'running']]);
    expect(await b.jobs.list()).toEqual([]);
    await expect(b.jobs.read(running.jobId)).rejects.toMatchObject({ code: 'job_not_found' });
    await expect(b.jobs.kill(running.jobId)).rejects.toMatchObject({ code: 'job_not_found' });
    // Reads while the kill runs find the job's processes gone before the kill records its end (an
    // end they would call unknown): the kill's word stands. A smoke test through each surface, as
    // whether a read lands inside the kill is timing; test/unit/job-killer.test.ts pins the rule.
    let killing = true;
    const reads = (async () => {
      while (killing) await a.jobs.read(running.jobId, { maxBytes: 0 });
    })();
    try {
      expect(await a.jobs.kill(running.jobId)).toEqual({ killed: true });
    } finally {
      killing = false;
      await reads;
    }
    expect(await a.jobs.read(running.jobId)).toMatchObject({ status: 'killed', done: true, exitCode: null });
    expect(await a.jobs.kill(done.jobId)).toEqual({ killed: false });
    expect((await inst.auditKinds('a')).filter((k) => k === 'job')).toHaveLength(2);
  });

  it(`${t}: bad input and missing things fail with the library's error codes`, async () => {
    const inst = await target.open();
    const s = inst.session({ session: 'errors' });
    await expect(s.jobs.start('')).rejects.toMatchObject({ code: 'usage' });
    await expect(s.jobs.read('job_0000000000000000')).rejects.toMatchObject({ code: 'job_not_found' });
    await expect(s.files.readFile({ path: 'no/such/file' })).rejects.toMatchObject({ code: 'path_not_found' });
    await expect(inst.session({ session: '@reserved' }).exec('true')).rejects.toMatchObject({ code: 'usage' });
  });
}
