import { describe, expect, it } from 'vitest';
import { requestLevel } from '../../src/server/request-log.js';

describe('a request line\'s level', () => {
  it('by the category of the code answered', () => {
    expect(requestLevel(504, 'timeout')).toBe('warn');
    expect(requestLevel(413, 'too_large')).toBe('warn');
    expect(requestLevel(507, 'disk_limit_exceeded')).toBe('warn');
    expect(requestLevel(403, 'policy_refused')).toBe('warn');
    expect(requestLevel(503, 'backend_unavailable')).toBe('error');
    expect(requestLevel(503, 'shutting_down')).toBe('warn');
    expect(requestLevel(409, 'session_closed')).toBe('warn');
    expect(requestLevel(400, 'usage')).toBe('info');
    expect(requestLevel(404, 'not_found')).toBe('info');
    expect(requestLevel(422, 'unsupported')).toBe('info');
    expect(requestLevel(500, 'config_invalid')).toBe('error');
    expect(requestLevel(500, 'engine_refused')).toBe('error');
    expect(requestLevel(500, 'internal')).toBe('error');
  });

  it('without a recorded code, by the codes that answer with that status (the most severe), success info, a cut-off answer warn', () => {
    expect(requestLevel(200)).toBe('info');
    expect(requestLevel(0)).toBe('warn');
    expect(requestLevel(401)).toBe('warn');
    expect(requestLevel(413)).toBe('warn');
    expect(requestLevel(429)).toBe('warn');
    expect(requestLevel(504)).toBe('warn');
    expect(requestLevel(503)).toBe('error');
    expect(requestLevel(404)).toBe('info');
    expect(requestLevel(400)).toBe('info');
    expect(requestLevel(500)).toBe('error');
    // A status no code answers with.
    expect(requestLevel(502)).toBe('error');
    expect(requestLevel(418)).toBe('info');
  });
});
