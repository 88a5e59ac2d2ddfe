import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';

/* The strict Prometheus text parser the /metrics tests rely on: it must accept prom-client's output and refuse what breaks the format. */

describe('parsePrometheusText', () => {
  it('reads what prom-client writes: counters with escaped labels, histograms with their buckets', async () => {
    const registry = new Registry();
    const c = new Counter({ name: 'x_total', help: 'x', labelNames: ['a'], registers: [registry] });
    c.inc({ a: 'q"uo\\te\nnl' }, 2);
    const h = new Histogram({ name: 'd_seconds', help: 'd', labelNames: ['b'], buckets: [0.1, 1], registers: [registry] });
    h.observe({ b: 'z' }, 0.5);
    const families = parsePrometheusText(await registry.metrics());
    expect(sampleValue(families, 'x_total', { a: 'q"uo\\te\nnl' })).toBe(2);
    expect(sampleValue(families, 'd_seconds_bucket', { b: 'z', le: '0.1' })).toBe(0);
    expect(sampleValue(families, 'd_seconds_bucket', { b: 'z', le: '+Inf' })).toBe(1);
    expect(families.get('d_seconds')?.type).toBe('histogram');
  });

  it.each([
    ['a sample without # TYPE', 'x 1\n', /no # TYPE/],
    ['an unquoted label value', '# TYPE x counter\nx{a=b} 1\n', /not quoted/],
    ['a bad escape', '# TYPE x counter\nx{a="\\t"} 1\n', /bad escape/],
    ['a value that is no number', '# TYPE x gauge\nx one\n', /not a sample value/],
    ['a series twice', '# TYPE x gauge\nx{a="1"} 1\nx{a="1"} 2\n', /twice/],
    ['no final newline', '# TYPE x gauge\nx 1', /newline/],
    ['a bucket of a counter', '# TYPE x counter\nx_bucket{le="1"} 1\n', /no # TYPE/],
  ])('refuses %s', (_name, text, error) => {
    expect(() => parsePrometheusText(text)).toThrow(error);
  });
});
