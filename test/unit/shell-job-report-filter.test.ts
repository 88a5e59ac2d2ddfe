import { describe, expect, it } from 'vitest';
import { JobReportFilter } from '../../src/shell/job-report-filter.js';

/*
 * bash's reports of the jobs a timeout's kill ends are dropped from stderr, and nothing else: not
 * before the kill, not on stdout, not a line that only looks like one mid-line.
 */

function collect(): { filter: JobReportFilter; out: () => { stdout: string; stderr: string } } {
  const got = { stdout: '', stderr: '' };
  const filter = new JobReportFilter((stream, chunk) => void (got[stream] += chunk.toString('utf8')));
  return { filter, out: () => got };
}

const REPORT = '/dev/fd/3: line 1:    16 Killed                  sleep 5\n';

describe('JobReportFilter', () => {
  it('passes everything until armed, a report-like line of the command included', () => {
    const { filter, out } = collect();
    filter.push('stderr', Buffer.from(`own\n${REPORT}`));
    filter.push('stdout', Buffer.from(REPORT));
    expect(out()).toEqual({ stdout: REPORT, stderr: `own\n${REPORT}` });
  });

  it('once armed, drops bash\'s reports (split across reads, with or without a line number) and keeps the rest in order', () => {
    const { filter, out } = collect();
    filter.push('stderr', Buffer.from('before\npartial'));
    filter.arm();
    filter.push('stderr', Buffer.from(' line\nbash: line 3:   1'));
    filter.push('stderr', Buffer.from('7 Killed                  sleep 9\nbash:    29 Killed                  sleep 5 & sleep 6\n'));
    filter.push('stderr', Buffer.from('/dev/fd/3: line 2:  4 Terminated   x\nafter\ntail'));
    filter.push('stdout', Buffer.from(REPORT));
    filter.flush();
    expect(out()).toEqual({ stdout: REPORT, stderr: 'before\npartial line\nafter\ntail' });
  });

  it('keeps a report that does not start a line, another signal\'s report, and a long partial line', () => {
    const { filter, out } = collect();
    filter.arm();
    filter.push('stderr', Buffer.from(`no newline: ${REPORT}`));
    filter.push('stderr', Buffer.from('bash: line 1:    16 Segmentation fault      ./crash\n'));
    const long = 'x'.repeat(5000);
    filter.push('stderr', Buffer.from(long));
    expect(out().stderr).toBe(`no newline: ${REPORT}bash: line 1:    16 Segmentation fault      ./crash\n${long}`);
    filter.push('stderr', Buffer.from(REPORT));
    filter.flush();
    expect(out().stderr).toBe(`no newline: ${REPORT}bash: line 1:    16 Segmentation fault      ./crash\n${long}${REPORT}`);
  });
});
