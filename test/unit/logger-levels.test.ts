import { describe, expect, it } from 'vitest';
import { envLogSink, logSink } from '../../src/logging/log-sink.js';
import { Logger } from '../../src/logging/logger.js';

/* The logger's levels, threshold, JSON and terminal lines, and BERTH_DEBUG, on a sink that collects lines. */

const at = new Date('2025-01-02T03:04:05.678Z');

function collect(opts: { threshold: 'debug' | 'info' | 'warn' | 'error' | 'silent'; debug?: string; json?: boolean }): { lines: string[]; log: Logger } {
  const lines: string[] = [];
  const sink = logSink({ threshold: opts.threshold, debug: opts.debug, json: opts.json ?? true, write: (l) => void lines.push(l), now: () => at });
  return { lines, log: new Logger(sink, 'berth:server') };
}

describe('Logger levels', () => {
  it('writes one JSON object per line with time, level, component, msg, the sandbox and the fields', () => {
    const { lines, log } = collect({ threshold: 'info' });
    log.with({ key: 'session:s1', ref: 'a'.repeat(64) }).info('started', { status: 200, tenant: 'acme', level: 'forged' });
    expect(lines).toHaveLength(1);
    expect(lines[0]!.endsWith('\n')).toBe(true);
    expect(JSON.parse(lines[0]!)).toEqual({
      time: '2025-01-02T03:04:05.678Z', level: 'info', component: 'berth:server', msg: 'started', sandbox: 'session:s1', ref: 'a'.repeat(12), status: 200, tenant: 'acme',
    });
  });

  it('the threshold lets through its level and those above it', () => {
    const { lines, log } = collect({ threshold: 'warn' });
    log.debug('d');
    log.info('i');
    log.warn('w');
    log.error('e');
    expect(lines.map((l) => (JSON.parse(l) as { level: string }).level)).toEqual(['warn', 'error']);
    expect(log.enabled).toBe(false);
  });

  it('BERTH_DEBUG turns every line of its namespaces on, and no other namespace\'s', () => {
    const { lines, log } = collect({ threshold: 'silent', debug: 'berth:ssh' });
    log.child('berth:ssh').debug('connected');
    log.child('berth:shell').debug('started');
    log.error('not asked for');
    expect(lines.map((l) => JSON.parse(l) as { component: string; msg: string })).toEqual([expect.objectContaining({ component: 'berth:ssh', msg: 'connected', level: 'debug' })]);
    expect(log.child('berth:ssh').enabled).toBe(true);
    expect(log.child('berth:shell').enabled).toBe(false);
  });

  it('a line handed to the sink as bare text is a debug line', () => {
    const lines: string[] = [];
    const sink = logSink({ threshold: 'info', debug: 'berth:audit', json: true, write: (l) => void lines.push(l), now: () => at })!;
    sink('berth:audit', 'pruned 3');
    sink('berth:jobs', 'not asked for');
    expect(lines.map((l) => JSON.parse(l) as unknown)).toEqual([{ time: at.toISOString(), level: 'debug', component: 'berth:audit', msg: 'pruned 3' }]);
  });

  it('on a terminal a line is readable text, a stack on the lines after it', () => {
    const { lines, log } = collect({ threshold: 'info', json: false });
    log.with({ key: 'session:s1' }).error('GET /v1/x 500', { status: 500, error: 'internal: boom', stack: 'Error: boom\n    at f' });
    expect(lines).toEqual(['03:04:05.678 ERROR berth:server session:s1: GET /v1/x 500 status=500 error="internal: boom"\nError: boom\n    at f\n']);
  });

  it('silent and no BERTH_DEBUG: no sink at all, so nothing is built', () => {
    expect(logSink({ threshold: 'silent', json: true, write: () => undefined })).toBeUndefined();
  });

  it('BERTH_LOG_LEVEL picks the threshold over the fallback; a wrong value is a one-line error naming the fix', () => {
    const lines: string[] = [];
    const log = new Logger(envLogSink({ BERTH_LOG_LEVEL: 'error' }, 'info', false, (l) => void lines.push(l)), 'berth:server');
    log.warn('w');
    log.error('e');
    expect(lines).toHaveLength(1);
    expect(() => envLogSink({ BERTH_LOG_LEVEL: 'loud' }, 'info', false, () => undefined)).toThrow(/^BERTH_LOG_LEVEL "loud" is not a level; set it to debug, info, warn, error or silent$/);
  });
});
