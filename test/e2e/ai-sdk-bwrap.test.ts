import type { LanguageModelV3CallOptions, LanguageModelV3Content, LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterEach, expect, it, onTestFinished } from 'vitest';
import { berthTools, type ToolSession } from '../../src/ai-sdk.js';
import { BerthClient } from '../../src/client.js';
import { tempInstall } from '../helpers/cli.js';
import { bwrapInstall, describeBwrap, tempRoot, testRange } from '../helpers/bwrap.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * `berth/ai-sdk` in the AI SDK's own tool-call loop (`generateText` with the SDK's mock model):
 * the model calls the tools, berth runs them in a real bwrap sandbox, and the test reads what the
 * model received back in its next prompt, which is what an agent would see. The same loop runs on
 * a session of the library and on one of the remote client (a real `berth serve` on bwrap).
 */

const range = testRange();

afterEach(() => stopAll());

/** A session of the in-process broker on bwrap. */
async function localSession(name: string): Promise<ToolSession & { jobs: { list(): Promise<{ status: string }[]> } }> {
  const broker = await bwrapInstall('berth-ai-sdk-', range).open();
  return broker.session({ session: name });
}

/** A session of the remote client, through a real `berth serve` whose sandboxes are bwrap's. */
async function remoteSession(name: string): Promise<ToolSession & { jobs: { list(): Promise<{ status: string }[]> } }> {
  const root = tempRoot();
  const t = tempInstall(`backend: bwrap\npersistent: false\nbwrap:\n  root: ${root}\n  uids: { first: ${range.first + 500}, count: 500 }\n  tmpSizeMb: 16\n`);
  onTestFinished(() => t[Symbol.dispose]());
  const token = await createToken(t, 'agents');
  const server = await ServeProcess.start(t);
  onTestFinished(async () => {
    await server.stop();
  });
  return new BerthClient({ url: server.url, token }).session({ session: name });
}

type Json = Record<string, unknown>;
type ToolCall = { tool: string; input: Json };

/** The tool results of the latest step, by tool call id order, as the model's prompt holds them. */
function lastResults(opts: LanguageModelV3CallOptions): { tool: string; output: unknown }[] {
  const last = opts.prompt[opts.prompt.length - 1];
  if (last?.role !== 'tool') return [];
  return last.content.flatMap((p) => (p.type === 'tool-result' ? [{ tool: p.toolName, output: p.output.type === 'json' ? p.output.value : p.output }] : []));
}

const USAGE = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

/**
 * A scripted model: each step's tool calls come from the results of the step before (as a real
 * model's would), and every prompt it got is kept.
 */
function scriptedModel(next: (results: { tool: string; output: unknown }[], step: number) => ToolCall[] | string): MockLanguageModelV3 {
  let step = 0;
  return new MockLanguageModelV3({
    doGenerate: async (opts): Promise<LanguageModelV3GenerateResult> => {
      const decided = next(lastResults(opts), step++);
      const content: LanguageModelV3Content[] = typeof decided === 'string'
        ? [{ type: 'text', text: decided }]
        : decided.map((c, i) => ({ type: 'tool-call', toolCallId: `call-${step}-${i}`, toolName: c.tool, input: JSON.stringify(c.input) }));
      return { content, finishReason: { unified: typeof decided === 'string' ? 'stop' : 'tool-calls', raw: undefined }, usage: USAGE, warnings: [] };
    },
  });
}

describeBwrap('berth/ai-sdk: the AI SDK\'s tool loop on a bwrap sandbox', () => {
  it.each([
    ['a library session', localSession],
    ['a remote client session', remoteSession],
  ])('%s: a mock model writes, runs, times out, reads, and runs and kills background jobs; each result it receives is what berth did', async (_name, open) => {
    const session = await open('agent');
    const seen: { step: number; results: { tool: string; output: unknown }[] }[] = [];
    let written = '';
    let jobId = '';
    let sleeper = '';
    const model = scriptedModel((results, step) => {
      seen.push({ step, results });
      const job = results.find((r) => r.tool === 'job_start' || r.tool === 'job_read')?.output as Json | undefined;
      switch (step) {
        case 0: return [{ tool: 'write_file', input: { path: 'greet.sh', content: 'echo "hello $1"\n' } }];
        case 1:
          written = (results[0]?.output as Json)['path'] as string;
          return [{ tool: 'shell', input: { command: 'bash greet.sh agent; mkdir -p sub && cd sub && export MARK=kept' } }];
        case 2: return [{ tool: 'shell', input: { command: 'echo "$MARK in $(pwd)"; sleep 30', timeoutSeconds: 1 } }];
        case 3: return [{ tool: 'shell', input: { command: 'pwd', workdir: '/tmp' } }];
        // Relative paths follow the shell's cwd (now sub/): the model names the file by the path write_file answered.
        case 4: return [{ tool: 'read_file', input: { path: written } }, { tool: 'read_file', input: { path: 'no/such.txt' } }];
        case 5: return [{ tool: 'job_start', input: { command: 'for i in 1 2 3; do echo "tick $i"; sleep 0.1; done; exit 7' } }];
        default:
          if (job !== undefined && job['jobId'] !== undefined) jobId = job['jobId'] as string;
          // Reads the job until it says done, as a model following nextOffset would.
          if (jobId !== '' && (job === undefined || job['done'] !== true) && results[0]?.tool !== 'job_kill' && sleeper === '') {
            return [{ tool: 'job_read', input: { jobId, offset: 0 } }];
          }
          if (sleeper === '') {
            sleeper = 'starting';
            return [{ tool: 'job_start', input: { command: 'sleep 300' } }];
          }
          if (sleeper === 'starting') {
            sleeper = (results[0]?.output as Json)['jobId'] as string;
            return [{ tool: 'job_kill', input: { jobId: sleeper } }];
          }
          return 'all done';
      }
    });

    const r = await generateText({ model, tools: berthTools(session, { maxTimeoutSeconds: 60 }), stopWhen: stepCountIs(40), prompt: 'use the sandbox' });
    expect(r.text).toBe('all done');

    // The model was offered every tool, each with its JSON schema.
    const offered = model.doGenerateCalls[0]?.tools?.map((x) => x.name).sort();
    expect(offered).toEqual(['job_kill', 'job_read', 'job_start', 'read_file', 'shell', 'write_file']);

    const at = (step: number) => seen.find((s) => s.step === step)?.results ?? [];
    expect(at(1)).toEqual([{ tool: 'write_file', output: { path: expect.stringMatching(/greet\.sh$/), bytes: 16 } }]);
    expect(at(2)).toEqual([{ tool: 'shell', output: { exitCode: 0, output: 'hello agent\n', cwd: expect.stringMatching(/\/sub$/), timedOut: false, truncated: false } }]);
    const timedOut = at(3)[0]?.output as Json;
    expect(timedOut).toMatchObject({ exitCode: 124, timedOut: true, cwd: expect.stringMatching(/\/sub$/) });
    expect(timedOut['output']).toMatch(/^kept in \/.*\/sub\n/);
    expect(at(4)).toEqual([{ tool: 'shell', output: { exitCode: 0, output: '/tmp\n', cwd: expect.stringMatching(/\/sub$/), timedOut: false, truncated: false } }]);
    expect(at(5)).toEqual([
      { tool: 'read_file', output: { path: written, content: 'echo "hello $1"\n' } },
      { tool: 'read_file', output: { error: { code: 'path_not_found', message: expect.stringContaining('no/such.txt') } } },
    ]);
    expect(at(6)).toEqual([{ tool: 'job_start', output: { jobId: expect.stringMatching(/^job_[0-9a-f]{16}$/) } }]);
    const reads = seen.flatMap((s) => s.results).filter((x) => x.tool === 'job_read').map((x) => x.output as Json);
    expect(reads.at(-1)).toEqual({ output: 'tick 1\ntick 2\ntick 3\n', nextOffset: 21, done: true, exitCode: 7, status: 'exited' });
    const kill = seen.flatMap((s) => s.results).find((x) => x.tool === 'job_kill');
    expect(kill?.output).toEqual({ killed: true });
    expect((await session.jobs.list()).map((j) => j.status)).toEqual(['exited', 'killed']);
  });

  it('what the model asks past the limits is refused by the schema, and the model reads why; nothing runs', async () => {
    const session = await localSession('limits');
    const model = scriptedModel((_results, step) => (step === 0
      ? [{ tool: 'shell', input: { command: 'touch /tmp/ran', timeoutSeconds: 3600 } }]
      : 'stopped'));
    await generateText({ model, tools: berthTools(session, { maxTimeoutSeconds: 5 }), stopWhen: stepCountIs(3), prompt: 'go' });
    const got = lastResults(model.doGenerateCalls[1] as LanguageModelV3CallOptions);
    expect(got).toHaveLength(1);
    expect(JSON.stringify(got[0]?.output)).toMatch(/timeoutSeconds|too_big|less than or equal/i);
    expect((await session.exec('test -e /tmp/ran; echo $?')).output).toBe('1\n');
  });

  it('aborting the generation cancels the command the model is waiting for: its processes are gone from the sandbox', async () => {
    const session = await localSession('abort');
    const ac = new AbortController();
    const model = scriptedModel((_results, step) => (step === 0 ? [{ tool: 'shell', input: { command: 'touch started; sleep 31337' } }] : 'unreachable'));
    const generating = generateText({ model, tools: berthTools(session), stopWhen: stepCountIs(3), prompt: 'go', abortSignal: ac.signal });
    // The shell is busy with the command: a file call (which does not queue behind it) sees it start.
    for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
      if (await session.files.readFile({ path: 'started' }).then(() => true, () => false)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    ac.abort();
    await generating.catch(() => undefined);
    let left = '';
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && left !== '1\n';) {
      left = (await session.exec('pgrep -f "sleep 31337" >/dev/null; echo $?')).output;
    }
    expect(left).toBe('1\n');
  });
});
