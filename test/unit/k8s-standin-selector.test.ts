import { describe, expect, it } from 'vitest';
import { parseLabelSelector } from '../k8s-standin/label-selector.js';

describe('stand-in label selectors (apimachinery labels.Parse forms)', () => {
  const labels = { app: 'berth', tier: 'sandbox', env: 'prod' };
  const cases: [string, boolean][] = [
    ['', true],
    ['app=berth', true],
    ['app==berth', true],
    ['app=other', false],
    ['app!=other', true],
    ['missing!=x', true],
    ['app=berth,tier=sandbox', true],
    ['app=berth,tier=job', false],
    ['env in (prod, staging)', true],
    ['env in (staging)', false],
    ['env notin (staging)', true],
    ['missing notin (a)', true],
    ['app', true],
    ['!app', false],
    ['!missing', true],
    ['app=berth, env in (prod,dev), !missing', true],
  ];
  for (const [selector, want] of cases) it(`${JSON.stringify(selector)} -> ${want}`, () => expect(parseLabelSelector(selector)(labels)).toBe(want));
  it('refuses a malformed selector', () => expect(() => parseLabelSelector('a b c')).toThrow(SyntaxError));
});
