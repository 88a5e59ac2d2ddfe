import type { Broker } from '../../broker/broker.js';
import { describeRecreated, describeResume } from '../../broker/resume-report.js';
import { UsageError } from '../../errors.js';
import type { CallScopeInput } from '../../scope/call-scope.js';
import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import { CLOSED_PIPE_EXIT, type CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

const EXEC_HELP = `usage: berth exec [scope flags] [--workdir DIR] [--timeout SECONDS] [--json] -- CMD...

Runs CMD (the words after --, joined with single spaces, as one shell line) in the call's
sandbox through its persistent shell, and exits with the command's exit code.

${SCOPE_HELP}
  --workdir DIR       run this command in DIR (inside the sandbox); not remembered
  --timeout SECONDS   kill the command's process tree after SECONDS (exit 124)
  --json              print one single-line JSON result and nothing else on stdout`;

export async function execCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, rest } = parseFlags('exec', argv, {
    ...SCOPE_OPTIONS, ...COMMON_OPTIONS, workdir: { type: 'string' }, timeout: { type: 'string' }, json: { type: 'boolean' },
  });
  if (values.help) {
    io.out(`${EXEC_HELP}\n`);
    return 0;
  }
  if (rest === undefined || rest.length === 0) {
    throw new UsageError('berth exec needs a command after "--", e.g. berth exec --session s1 -- ls -la');
  }
  let timeoutSeconds: number | undefined;
  if (values.timeout !== undefined) {
    timeoutSeconds = Number(values.timeout);
    if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0 || timeoutSeconds > 86_400) {
      throw new UsageError(`--timeout "${values.timeout}" is not a number of seconds between 0 and 86400`);
    }
  }
  const scope = scopeFromFlags(values, io.env, io.cwd);
  // Nobody reads stdout any more: the command is cancelled (as SIGPIPE ends a writer in a shell
  // pipeline), nothing more is printed, and the exit code is 141. The last write may find out.
  const gone = (): boolean => io.outClosed?.aborted === true;
  const code = await withBroker(io, values.config, (broker) =>
    run(broker, scope, rest.join(' '), { timeoutSeconds, workdir: values.workdir, json: values.json === true }, io, gone));
  return gone() ? CLOSED_PIPE_EXIT : code;
}

async function run(
  broker: Broker, scope: CallScopeInput, command: string, o: { timeoutSeconds: number | undefined; workdir: string | undefined; json: boolean },
  io: CliIo, gone: () => boolean,
): Promise<number> {
  const r = await broker.exec(scope, command, {
    timeoutSeconds: o.timeoutSeconds,
    workdir: o.workdir,
    signal: io.outClosed,
    onChunk: o.json ? undefined : (stream, chunk) => {
      if (gone()) return;
      if (stream === 'stdout') io.out(chunk);
      else io.err(chunk);
    },
  });
  if (gone()) return CLOSED_PIPE_EXIT;
  if (o.json) {
    io.out(`${JSON.stringify({
      exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, output: r.output, cwd: r.cwd, sandboxKey: r.sandboxKey,
      timedOut: r.timedOut, truncated: r.truncated, durationMs: r.durationMs,
      ...(r.shellReplaced ? { shellReplaced: true } : {}),
      ...(r.sandboxRecreated ? { sandboxRecreated: true } : {}),
      ...(r.sandboxResumed ? { sandboxResumed: r.sandboxResumed } : {}),
    })}\n`);
  } else {
    // A timeout says so once, in the shell's own notice at the end of stderr.
    if (r.sandboxRecreated) io.err(`berth: ${describeRecreated(r.sandboxKey)}\n`);
    if (r.sandboxResumed) io.err(`berth: ${describeResume(r.sandboxKey, r.sandboxResumed)}\n`);
  }
  return r.exitCode;
}
