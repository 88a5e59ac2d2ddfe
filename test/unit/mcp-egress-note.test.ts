import { describe, expect, it } from 'vitest';
import { egressNote } from '../../src/server/mcp/sandbox-description.js';

/* What the MCP server tells the agent about its sandbox's network (from explain's egress view: never a value or placeholder). */

describe('the MCP sandbox description\'s network note', () => {
  it('allowlist: the proxy, what it reaches (names, host: and cidr: entries), the 403 and that the operator decides; credentials as placeholders toward their hosts', () => {
    const note = egressNote({
      mode: 'allowlist', allow: ['api.github.com', '*.githubusercontent.com', { host: 'db.internal:5432' }, { cidr: '10.20.1.5/32', ports: [5432] }, { cidr: '203.0.113.0/24' }], proxy: true,
      credentials: [{ name: 'GITHUB_TOKEN', hosts: ['api.github.com', 'github.com'] }],
    });
    expect(note).toBe(
      'Network: only through berth\'s egress proxy (HTTP(S)_PROXY is set; programs that ignore it cannot connect), to api.github.com, *.githubusercontent.com, host:db.internal:5432, cidr:10.20.1.5/32 (ports 5432), cidr:203.0.113.0/24 ' +
        '(names: HTTPS on 443, plain HTTP on 80). Anything else gets HTTP 403 from the proxy naming the rule; the operator decides what the sandbox may reach, so do not try to get around it. ' +
        'Credentials: $GITHUB_TOKEN holds a placeholder, not the secret; berth swaps in the real value only on requests to api.github.com, github.com, and refuses it sent anywhere else. Use them as you would the real ones.',
    );
  });

  it('none: nothing; open without the proxy: nothing said (the backend\'s own words stand); open with credentials: the proxy and the placeholders', () => {
    expect(egressNote({ mode: 'none', proxy: false, credentials: [] })).toBe('Network: none; commands cannot connect anywhere.');
    expect(egressNote({ mode: 'open', proxy: false, credentials: [] })).toBe('');
    expect(egressNote({ mode: 'open', proxy: true, credentials: [{ name: 'T', hosts: ['a.example'] }] })).toMatch(/^Network: open, through berth's egress proxy .*\$T holds a placeholder/);
  });
});
