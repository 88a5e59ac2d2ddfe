import { randomBytes } from 'node:crypto';
import type { ClientChannel } from 'ssh2';
import { BerthError, TimeoutError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { ProcessGroups, ProcessPids, ShellGroups } from '../../shell/transport.js';
import { AGENT_SCRIPT } from './cgroup-scripts.js';
import type { SshConnectionPool } from './connections.js';
import { endpointOf } from './errors.js';
import { scriptCommand } from './remote-exec.js';
import type { SshTarget } from './target.js';

/** How long a kill waits for a group to empty (as on berth's own host). */
const WAIT_MS = 5_000;
/** An answer later than this (a kill's wait included) means the agent is stuck: its channel is closed. */
const ANSWER_TIMEOUT_MS = WAIT_MS * 2 + 10_000;
/** An agent with no request for this long is closed; the next request opens one again. */
const IDLE_CLOSE_MS = 60_000;
/** Groups a shell holds on to before it asks which of them emptied. */
const PRUNE_AT = 64;

export interface RemoteGroupsContext {
  pool: SshConnectionPool;
  target: SshTarget;
  account: string;
  log?: Logger | undefined;
}

/** A fresh group name: `c-` and 12 random hex digits. */
function freshName(): string {
  return `c-${randomBytes(6).toString('hex')}`;
}

/**
 * One sandbox's agent (cgroup-scripts.ts AGENT_SCRIPT): a root bash on the host, over one exec
 * channel, answering one request line at a time. Requests are queued, so a slow kill delays
 * only this sandbox's other group steps.
 */
class Agent {
  private buf = '';
  private readonly waiting: { resolve: (words: string[]) => void; reject: (err: Error) => void }[] = [];
  private failure: Error | undefined;

  private constructor(private readonly channel: ClientChannel, private readonly where: string) {
    channel.on('data', (c: Buffer) => this.take(c.toString('utf8')));
    channel.stderr.resume();
    channel.on('error', (e: Error) => this.fail(new BerthError('backend_unavailable', `the cgroup agent's channel to ${where} failed: ${e.message}`)));
    channel.once('close', () => this.fail(new BerthError('backend_unavailable', `the cgroup agent on ${where} ended`)));
  }

  static async open(ctx: RemoteGroupsContext): Promise<Agent> {
    const where = endpointOf(ctx.target.host, ctx.target.port);
    const { channel } = await ctx.pool.exec(ctx.target, scriptCommand(AGENT_SCRIPT, 'berth-cgroups', [ctx.account]));
    const agent = new Agent(channel, where);
    await agent.answer();
    return agent;
  }

  get closed(): boolean {
    return this.failure !== undefined;
  }

  /** Sends one request line; its answer's words after `ok`. A refusal (`E why`) rejects. */
  async request(line: string): Promise<string[]> {
    if (this.failure !== undefined) throw this.failure;
    const answered = this.answer();
    this.channel.write(`${line}\n`);
    return answered;
  }

  close(): void {
    this.fail(new BerthError('backend_unavailable', `the cgroup agent on ${this.where} was closed`));
  }

  private answer(): Promise<string[]> {
    return new Promise<string[]>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new TimeoutError(`the cgroup agent on ${this.where} did not answer within ${ANSWER_TIMEOUT_MS} ms`)), ANSWER_TIMEOUT_MS);
      this.waiting.push({
        resolve: (w) => { clearTimeout(timer); resolve(w); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      });
    });
  }

  private take(text: string): void {
    this.buf += text;
    for (let nl = this.buf.indexOf('\n'); nl >= 0; nl = this.buf.indexOf('\n')) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      const w = this.waiting.shift();
      if (w === undefined) continue;
      if (line.startsWith('E ')) w.reject(new BerthError('internal', `cgroups on ${this.where}: ${line.slice(2)}`));
      else if (line === 'ready' || line === 'ok' || line.startsWith('ok ')) w.resolve(line.split(/\s+/).slice(1).filter((x) => x !== ''));
      else w.reject(new BerthError('internal', `cgroups on ${this.where}: unexpected answer ${JSON.stringify(line.slice(0, 100))}`));
    }
    if (this.buf.length > 4096) this.fail(new BerthError('internal', `cgroups on ${this.where}: an answer without an end`));
  }

  private fail(err: Error): void {
    if (this.failure === undefined) {
      this.failure = err;
      this.channel.close();
    }
    for (const w of this.waiting.splice(0)) w.reject(err);
  }
}

/**
 * The command groups of one SSH sandbox (ProcessGroups): the cgroups under its account's group
 * on the host, managed by its agent. The agent opens at the first step and closes after a minute
 * without one; steps go one at a time.
 */
export class SshProcessGroups implements ProcessGroups {
  readonly mechanism = 'cgroup2 (cgroup.kill) on the SSH host';
  private agent: Promise<Agent> | undefined;
  private chain: Promise<unknown> = Promise.resolve();
  private idle: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly ctx: RemoteGroupsContext) {}

  async adopt(pids: ProcessPids): Promise<ShellGroups | undefined> {
    const name = freshName();
    await this.request(`adopt ${pids.sandbox} ${name}`);
    this.ctx.log?.debug(`${this.ctx.account}: shell ${pids.sandbox} in cgroup ${name}, a group per command, ended by ${this.mechanism}`);
    return new RemoteShellGroups(this, pids.sandbox, name);
  }

  async killGroup(name: string): Promise<number | undefined> {
    const [n] = await this.request(`kill ${name} ${WAIT_MS}`);
    return n === undefined || n === 'none' ? undefined : Number(n);
  }

  /** One step, after those asked before it; the agent is opened (again) when needed. */
  request(line: string): Promise<string[]> {
    const step = this.chain.then(async () => {
      if (this.closed) throw new BerthError('internal', `the command groups of ${this.ctx.account} were closed`);
      clearTimeout(this.idle);
      try {
        return await (await this.agentNow()).request(line);
      } finally {
        this.idle = setTimeout(() => this.closeAgent(), IDLE_CLOSE_MS);
        this.idle.unref();
      }
    });
    this.chain = step.catch(() => undefined);
    return step;
  }

  /** Closes the agent; later steps fail. */
  close(): void {
    this.closed = true;
    this.closeAgent();
  }

  private async agentNow(): Promise<Agent> {
    const current = this.agent === undefined ? undefined : await this.agent.catch(() => undefined);
    if (current !== undefined && !current.closed) return current;
    this.agent = Agent.open(this.ctx);
    return this.agent;
  }

  private closeAgent(): void {
    clearTimeout(this.idle);
    const a = this.agent;
    this.agent = undefined;
    void a?.then((x) => x.close(), () => undefined);
  }
}

/**
 * One shell's groups (ShellGroups) on the host, as CgroupShell keeps them on berth's own: the
 * shell stays in its group while its commands leave nothing behind, moves to a fresh one before
 * the next command after one that did, and to a group of the job's name for a background job.
 * Each step is one request to the sandbox's agent.
 */
class RemoteShellGroups implements ShellGroups {
  /** The shell's group; undefined once it was taken out to end. */
  private current: string | undefined;
  private named = false;
  /** The look-ahead `settle` started: true once it readied the shell for an unnamed command. */
  private ahead: Promise<boolean> | undefined;
  /** Every group this shell made and has not seen removed. */
  private readonly made = new Set<string>();
  private pruneAt = PRUNE_AT;

  constructor(private readonly groups: SshProcessGroups, private readonly pid: number, group: string) {
    this.current = group;
    this.made.add(group);
  }

  async prepare(name?: string): Promise<void> {
    const ahead = this.ahead;
    this.ahead = undefined;
    const readied = ahead === undefined ? false : await ahead;
    const cur = this.current ?? freshName();
    if (name === undefined && this.current !== undefined && !this.named) {
      if (!readied) await this.prep();
    } else {
      const to = name ?? freshName();
      await this.groups.request(`move ${this.pid} ${cur} ${to}`);
      this.enter(to);
      this.named = name !== undefined;
    }
    if (this.made.size > this.pruneAt) await this.prune();
  }

  /**
   * After a command: the step the next command needs (stay, or move on from what the command left
   * running) is asked now and not awaited, so its round trip overlaps the answer's way to the
   * caller and the caller's next call. Only the idle shell runs in its group meanwhile, so the
   * answer still holds when the next command comes; `prepare` awaits it then.
   */
  settle(): Promise<void> {
    if (!this.named) {
      this.ahead = this.prep().then(() => true, () => false);
      return Promise.resolve();
    }
    return this.leaveNamed();
  }

  /** Stays in the current group when the shell is alone there, else moves to a fresh one. */
  private async prep(): Promise<void> {
    const cur = this.current;
    if (cur === undefined) return;
    const [now] = await this.groups.request(`prep ${this.pid} ${cur} ${freshName()}`);
    this.enter(now ?? cur);
  }

  private async leaveNamed(): Promise<void> {
    const to = freshName();
    await this.groups.request(`move ${this.pid} ${this.current ?? to} ${to}`);
    this.enter(to);
    this.named = false;
  }

  async timeout(): Promise<{ killed: number; shell: 'cont' | 'killed' | 'gone'; stillFull: boolean }> {
    const group = this.current;
    if (group === undefined) throw new BerthError('internal', 'the shell has no process group of its own to end');
    const to = freshName();
    const [killed = '0', shell = 'gone'] = await this.groups.request(`timeout ${this.pid} ${group} ${to} ${WAIT_MS}`);
    this.made.delete(group);
    this.current = undefined;
    this.named = false;
    if (shell === 'cont') this.enter(to);
    else this.made.add(to);
    // ssh bounds a sandbox's processes per uid (RLIMIT_NPROC), not by a pids cgroup: no such count here.
    return { killed: Number(killed), shell: shell as 'cont' | 'killed' | 'gone', stillFull: false };
  }

  async endCommand(): Promise<number> {
    const group = this.current;
    if (group === undefined) return 0;
    this.current = undefined;
    this.made.delete(group);
    const [n] = await this.groups.request(`kill ${group} ${WAIT_MS}`);
    return n === undefined || n === 'none' ? 0 : Number(n);
  }

  async endAll(): Promise<number> {
    this.current = undefined;
    let killed = 0;
    for (const group of [...this.made]) {
      this.made.delete(group);
      const [n] = await this.groups.request(`kill ${group} ${WAIT_MS}`);
      if (n !== undefined && n !== 'none') killed += Number(n);
    }
    return killed;
  }

  async release(): Promise<void> {
    this.current = undefined;
    if (this.made.size === 0) return;
    const left = await this.groups.request(`rm ${[...this.made].join(' ')}`);
    this.made.clear();
    for (const g of left) this.made.add(g);
  }

  private enter(group: string): void {
    this.current = group;
    this.made.add(group);
  }

  /** Removes the groups whose processes all ended (the current one stays); the rest are kept. */
  private async prune(): Promise<void> {
    const others = [...this.made].filter((g) => g !== this.current);
    const left = new Set(await this.groups.request(`rm ${others.join(' ')}`));
    for (const g of others) if (!left.has(g)) this.made.delete(g);
    this.pruneAt = Math.max(PRUNE_AT, 2 * this.made.size);
  }
}
