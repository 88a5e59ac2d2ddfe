import { createHash } from 'node:crypto';

/*
 * The dashboard: one static page, no build step. The page itself holds no data, so it is served
 * without a token; everything it shows comes from /v1 with `Authorization: Bearer <token>`.
 * The token is typed into a login form and kept in sessionStorage (gone with the tab), never in
 * a cookie: no request is ever authenticated ambiently, so there is no CSRF surface, and the
 * token never appears in a URL or a server log. All values are inserted with textContent (audit
 * entries are commands someone typed), and a strict CSP allows only this page's own script.
 * Updates are pushed: the page reads GET /v1/overview/stream with fetch() and the token in the
 * Authorization header (EventSource could only carry it in the URL); the charts are inline SVG
 * built element by element.
 */

const SCRIPT = `
'use strict';
const $ = (id) => document.getElementById(id);
const KEY = 'berthToken';
const SVG = 'http://www.w3.org/2000/svg';
let stream;
let view;

function token() { return sessionStorage.getItem(KEY); }

async function api(path, init) {
  const res = await fetch(path, { ...init, headers: { ...(init && init.headers), authorization: 'Bearer ' + token() } });
  if (res.status === 401) { logout('The token was refused; enter a valid one.'); throw new Error('unauthorized'); }
  const body = await res.json();
  if (!res.ok) throw new Error((body.error && body.error.message) || res.statusText);
  return body;
}

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function button(text, cls, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = cls;
  b.textContent = text;
  b.addEventListener('click', () => onClick(b));
  return b;
}

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min';
  if (s < 86400) return Math.floor(s / 3600) + ' h';
  return Math.floor(s / 86400) + ' d';
}

function bytes(n) {
  if (n === null || n === undefined) return '-';
  if (n < 1024 * 1024) return (n / 1024).toFixed(0) + ' KiB';
  if (n < 1024 * 1024 * 1024) return (n / 1048576).toFixed(1) + ' MiB';
  return (n / 1073741824).toFixed(2) + ' GiB';
}

/** The call scope of a session ref as the broker records it. */
function scopeOfRef(ref, profile) {
  const scope = {};
  if (profile) scope.profile = profile;
  if (ref.startsWith('@task:')) scope.task = ref.slice(6);
  else if (ref.startsWith('@user:')) scope.user = ref.slice(6);
  else if (ref !== '@default') scope.session = ref;
  return scope;
}

function query(fields) {
  const q = new URLSearchParams();
  for (const k of Object.keys(fields)) if (fields[k] !== undefined) q.set(k, fields[k]);
  const s = q.toString();
  return s ? '?' + s : '';
}

/**
 * Asks before an action that ends something (closing a session, killing a job): a modal <dialog>
 * of the page (not window.confirm, which a browser may suppress or auto-dismiss), with Cancel
 * focused so Enter or Escape does nothing harmful. Nothing is sent until Confirm is clicked.
 */
let pending;
function ask(text, label, action) {
  pending = action;
  $('confirm-text').textContent = text;
  $('confirm-yes').textContent = label;
  $('confirm').showModal();
  $('confirm-no').focus();
}

function answer(yes) {
  const action = pending;
  pending = undefined;
  $('confirm').close();
  if (yes && action) action();
}

async function closeSession(ref, profile, b) {
  b.disabled = true;
  try {
    await api('/v1/sessions/close', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(scopeOfRef(ref, profile)) });
    $('status').textContent = 'Closed session ' + ref + '.';
  } catch (e) {
    $('status').textContent = 'Close failed: ' + e.message;
  }
  watch();
}

async function killJob(job, b) {
  b.disabled = true;
  try {
    const r = await api('/v1/jobs/' + encodeURIComponent(job.jobId) + query(job.scope), { method: 'DELETE' });
    $('status').textContent = r.killed ? 'Killed job ' + job.jobId + '.' : 'Job ' + job.jobId + ' had already ended.';
  } catch (e) {
    $('status').textContent = 'Kill failed: ' + e.message;
  }
  watch();
}

/** A session's latest calls, from the audit (a user's session by its user). */
async function showCalls(ref, profile) {
  const title = $('session-calls-title');
  const body = $('session-calls').querySelector('tbody');
  $('session-panel').hidden = false;
  body.replaceChildren();
  if (ref.startsWith('@task:') || ref === '@default') {
    title.textContent = 'Calls of ' + ref + ': the audit keeps no session id for these; see Recent calls.';
    return;
  }
  const filter = ref.startsWith('@user:') ? { user: ref.slice(6) } : { session: ref };
  title.textContent = 'Calls of session ' + ref + (profile ? ' (profile ' + profile + ')' : '');
  try {
    const entries = await api('/v1/audit' + query({ ...filter, limit: '20' }));
    for (const e of entries.filter((x) => profile === null || x.profile === profile)) body.appendChild(auditRow(e));
    if (body.children.length === 0) title.textContent += ': none';
  } catch (e) {
    if (e.message !== 'unauthorized') title.textContent += ': ' + e.message;
  }
  await showEgress(filter, profile);
}

/** A session's latest egress decisions (what its sandbox asked the network for, and the answer). */
async function showEgress(filter, profile) {
  const body = $('session-egress').querySelector('tbody');
  body.replaceChildren();
  try {
    const decisions = await api('/v1/audit/egress' + query({ ...filter, limit: '20' }));
    for (const e of decisions.filter((x) => profile === null || x.profile === profile)) body.appendChild(egressRow(e));
  } catch (e) {
    if (e.message === 'unauthorized') return;
  }
  $('session-egress-none').hidden = body.children.length > 0;
}

function usersOf(s) {
  const users = new Set();
  if (s.sandboxKey.startsWith('user:')) users.add(s.sandboxKey.slice(5));
  for (const sess of s.sessions) if (sess.session.startsWith('@user:')) users.add(sess.session.slice(6));
  for (const c of view.calls) if (c.user !== null && c.sandboxKey === s.sandboxKey && c.profile === s.profile) users.add(c.user);
  return users;
}

function filters() {
  return { profile: $('filter-profile').value, user: $('filter-user').value, state: $('filter-state').value };
}

function fillSelect(select, values) {
  const keep = select.value;
  select.replaceChildren();
  const all = document.createElement('option');
  all.value = '';
  all.textContent = 'all';
  select.appendChild(all);
  for (const v of [...values].sort()) {
    const o = document.createElement('option');
    o.value = v;
    o.textContent = v;
    select.appendChild(o);
  }
  select.value = values.has(keep) ? keep : '';
}

function fillFilters() {
  const profiles = new Set(view.sandboxes.map((s) => s.profile === null ? '(shared)' : s.profile));
  for (const j of view.jobs) profiles.add(j.scope.profile);
  const users = new Set();
  for (const s of view.sandboxes) for (const u of usersOf(s)) users.add(u);
  for (const c of view.calls) if (c.user !== null) users.add(c.user);
  for (const j of view.jobs) if (j.scope.user) users.add(j.scope.user);
  const states = new Set(view.sandboxes.map((s) => s.state));
  fillSelect($('filter-profile'), profiles);
  fillSelect($('filter-user'), users);
  fillSelect($('filter-state'), states);
}

function renderSandboxes() {
  const f = filters();
  const body = $('sandboxes').querySelector('tbody');
  body.replaceChildren();
  const list = view.sandboxes.filter((s) =>
    (!f.profile || (s.profile === null ? '(shared)' : s.profile) === f.profile) && (!f.state || s.state === f.state) && (!f.user || usersOf(s).has(f.user)));
  $('no-sandboxes').hidden = list.length > 0;
  for (const s of list) {
    const tr = document.createElement('tr');
    tr.dataset.key = s.sandboxKey;
    cell(tr, s.sandboxKey, 'key');
    cell(tr, s.profile === null ? '(shared)' : s.profile);
    cell(tr, s.rule);
    cell(tr, s.backend);
    cell(tr, s.persistent ? 'persistent' : 'ephemeral');
    cell(tr, s.state, 'state state-' + s.state);
    const u = s.usage;
    // '…': the second sample CPU needs comes with the next update; '-': the backend cannot tell.
    cell(tr, u === null ? '-' : u.cpuPercent !== null ? u.cpuPercent.toFixed(1) + ' %' : u.cpuPending ? '…' : '-', 'num cpu');
    cell(tr, u === null ? '-' : bytes(u.memoryBytes) + (u.memoryLimitBytes === null ? '' : ' / ' + bytes(u.memoryLimitBytes)), 'num mem');
    cell(tr, u === null ? '-' : bytes(u.diskBytes), 'num disk');
    cell(tr, ago(s.createdMs));
    cell(tr, ago(s.lastUsedMs));
    const td = cell(tr, '');
    for (const sess of s.sessions) {
      const b = button(sess.session + (sess.open ? '' : ' (closed)'), 'session' + (sess.open ? ' open' : ''), () => showCalls(sess.session, s.profile));
      b.dataset.session = sess.session;
      td.appendChild(b);
      if (sess.open) {
        const c = button('close', 'close-session', (x) => ask('Close session ' + sess.session + (s.profile === null ? '' : ' (profile ' + s.profile + ')') +
          '? Its shells end; an ephemeral sandbox is removed with its files.', 'Close session', () => closeSession(sess.session, s.profile, x)));
        c.dataset.session = sess.session;
        td.appendChild(c);
      }
    }
    body.appendChild(tr);
  }
}

function renderJobs() {
  const f = filters();
  const body = $('jobs').querySelector('tbody');
  body.replaceChildren();
  const list = view.jobs.filter((j) => (!f.profile || j.scope.profile === f.profile) && (!f.user || j.scope.user === f.user));
  $('no-jobs').hidden = list.length > 0;
  for (const j of list) {
    const tr = document.createElement('tr');
    tr.dataset.job = j.jobId;
    cell(tr, j.jobId, 'key');
    cell(tr, j.scope.profile);
    cell(tr, j.scope.session || (j.scope.task ? '@task:' + j.scope.task : ''));
    cell(tr, j.scope.user || '');
    cell(tr, j.command, 'cmd');
    cell(tr, j.status + (j.exitCode === null ? '' : ' (' + j.exitCode + ')'), 'state job-' + j.status);
    cell(tr, ago(j.startedMs));
    const td = cell(tr, '');
    if (j.status === 'running') {
      td.appendChild(button('kill', 'kill-job', (b) => ask('Kill job ' + j.jobId + ' (' + j.command + ')? Its processes end now.', 'Kill job', () => killJob(j, b))));
    }
    body.appendChild(tr);
  }
}

function auditRow(e) {
  const tr = document.createElement('tr');
  cell(tr, new Date(e.timeMs).toLocaleTimeString());
  cell(tr, e.kind);
  cell(tr, e.session === null ? '' : e.session);
  cell(tr, e.user === null ? '' : e.user);
  cell(tr, e.sandboxKey === null ? '' : e.sandboxKey);
  cell(tr, e.command === null ? '' : e.command, 'cmd');
  cell(tr, e.exitCode === null ? '' : String(e.exitCode));
  cell(tr, e.durationMs === null ? '' : e.durationMs + ' ms');
  return tr;
}

function egressRow(e) {
  const tr = document.createElement('tr');
  tr.dataset.decision = e.allowed ? 'allowed' : 'refused';
  cell(tr, new Date(e.timeMs).toLocaleTimeString());
  cell(tr, e.allowed ? 'allowed' : 'refused', e.allowed ? 'allowed' : 'refused');
  cell(tr, e.session === null ? '' : e.session);
  cell(tr, e.user === null ? '' : e.user);
  cell(tr, e.host + ':' + e.port, 'key');
  cell(tr, e.rule + (e.detail === null ? '' : ' (' + e.detail + ')'));
  cell(tr, e.credentials.join(', '));
  cell(tr, bytes(e.bytesUp) + ' / ' + bytes(e.bytesDown), 'num');
  return tr;
}

function renderEgress() {
  const f = filters();
  const body = $('egress').querySelector('tbody');
  body.replaceChildren();
  for (const e of view.egress) {
    if (f.profile && e.profile !== f.profile) continue;
    if (f.user && e.user !== f.user) continue;
    body.appendChild(egressRow(e));
  }
  $('no-egress').hidden = body.children.length > 0;
}

function renderAudit() {
  const f = filters();
  const body = $('audit').querySelector('tbody');
  body.replaceChildren();
  for (const e of view.calls) {
    if (f.profile && e.profile !== f.profile) continue;
    if (f.user && e.user !== f.user) continue;
    body.appendChild(auditRow(e));
  }
}

function svg(name, attrs) {
  const el = document.createElementNS(SVG, name);
  for (const k of Object.keys(attrs)) el.setAttribute(k, String(attrs[k]));
  return el;
}

/** 1, 2 or 5 times a power of ten, at least v: a scale's top that reads well. */
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v * (1 - 1e-9)) return m * p;
  return 10 * p;
}

/**
 * The top of a chart's scale: the largest value, unless a few (fewer than a quarter of the
 * points) stand more than OUTLIER times above the third quartile; then the largest of the rest,
 * and those few are drawn clipped at the top with their value. A linear scale reads at a glance
 * (a log scale would squeeze 2 ms against 4 ms and cannot show 0 sessions); clipping keeps one
 * slow minute from flattening the other 59.
 */
const OUTLIER = 4;
function scaleTop(known, floor) {
  const sorted = [...known].sort((a, b) => a - b);
  if (sorted.length === 0) return floor;
  const q3 = sorted[Math.max(0, Math.ceil(0.75 * sorted.length) - 1)];
  const kept = q3 > 0 ? sorted.filter((v) => v <= OUTLIER * q3) : sorted;
  return niceCeil(Math.max(floor, kept.length > 0 ? kept[kept.length - 1] : sorted[sorted.length - 1]));
}

function num(v) {
  return v >= 100 || Number.isInteger(v) ? String(Math.round(v)) : v >= 10 ? v.toFixed(1).replace(/\\.0$/, '') : String(Math.round(v * 100) / 100);
}

/**
 * A line over the last hour (one point a minute; a minute without data leaves a gap), with a
 * y axis in the chart's unit (0, half and the top), an x axis in minutes before now, the latest
 * value, and values above the scale clipped at the top, marked with a triangle and their value.
 */
function drawChart(el, values, unit, floor) {
  const W = 360, H = 130, L = 50, R = 10, T = 22, B = 18;
  el.replaceChildren();
  el.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  el.appendChild(svg('rect', { x: 0, y: 0, width: W, height: H, class: 'chart-bg' }));
  const known = values.filter((v) => v !== null);
  const top = scaleTop(known, floor);
  const x = (i) => L + (i * (W - L - R)) / Math.max(1, values.length - 1);
  const y = (v) => H - B - (Math.min(v, top) / top) * (H - T - B);
  for (const v of [0, top / 2, top]) {
    el.appendChild(svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: v === 0 ? 'axis' : 'grid' }));
    const t = svg('text', { x: L - 4, y: y(v) + 3, class: 'tick tick-y', 'text-anchor': 'end' });
    t.textContent = v === 0 ? '0' : num(v) + ' ' + unit;
    el.appendChild(t);
  }
  el.appendChild(svg('line', { x1: L, x2: L, y1: T, y2: H - B, class: 'axis' }));
  for (const [i, text] of [[0, '-60 min'], [Math.floor((values.length - 1) / 2), '-30 min'], [values.length - 1, 'now']]) {
    const t = svg('text', { x: x(i), y: H - 4, class: 'tick tick-x', 'text-anchor': i === 0 ? 'start' : i === values.length - 1 ? 'end' : 'middle' });
    t.textContent = text;
    el.appendChild(t);
  }
  let d = '';
  let pen = false;
  let clipped = 0;
  values.forEach((v, i) => {
    if (v === null) { pen = false; return; }
    d += (pen ? 'L' : 'M') + x(i).toFixed(1) + ' ' + y(v).toFixed(1) + ' ';
    pen = true;
    if (v <= top) {
      el.appendChild(svg('circle', { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 2.5, class: 'dot', 'data-value': v }));
      return;
    }
    clipped++;
    const cx = x(i), cy = y(top);
    el.appendChild(svg('path', { d: 'M' + (cx - 4) + ' ' + (cy + 3) + ' L' + cx + ' ' + (cy - 4) + ' L' + (cx + 4) + ' ' + (cy + 3) + ' Z', class: 'clipped', 'data-value': v }));
    const t = svg('text', { x: Math.min(cx, W - R - 40), y: cy - 6, class: 'tick clipped-value' });
    t.textContent = num(v) + ' ' + unit;
    el.appendChild(t);
  });
  if (d) el.insertBefore(svg('path', { d: d.trim(), class: 'line' }), el.querySelector('circle, path.clipped'));
  el.dataset.points = String(known.length);
  el.dataset.top = String(top);
  el.dataset.clipped = String(clipped);
  const latest = svg('text', { x: W - R, y: 13, class: 'chart-latest', 'text-anchor': 'end' });
  let last = values.length - 1;
  while (last >= 0 && values[last] === null) last--;
  latest.textContent = last < 0 ? 'no data yet' : 'latest ' + num(values[last]) + ' ' + unit + (last === values.length - 1 ? '' : ', ' + (values.length - 1 - last) + ' min ago');
  el.appendChild(latest);
}

function renderCharts() {
  drawChart($('chart-latency'), view.history.map((p) => p.p50Ms), 'ms', 1);
  drawChart($('chart-sessions'), view.history.map((p) => p.sessions), 'sessions', 1);
}

function render() {
  if (!view) return;
  fillFilters();
  renderSandboxes();
  renderJobs();
  renderAudit();
  renderEgress();
}

function onEvent(block) {
  let name = 'message';
  let data = '';
  for (const line of block.split('\\n')) {
    if (line.startsWith('event: ')) name = line.slice(7);
    else if (line.startsWith('data: ')) data += line.slice(6);
  }
  if (name === 'overview') {
    view = JSON.parse(data);
    $('tenant').textContent = view.tenant;
    render();
    renderCharts();
    $('updated').textContent = 'updated ' + new Date(view.timeMs).toLocaleTimeString();
  } else if (name === 'error') {
    const err = JSON.parse(data).error;
    if (err.code === 'unauthorized') logout('The token was revoked; enter a valid one.');
    else $('status').textContent = 'Update failed: ' + err.message;
  }
}

/**
 * Reads the overview stream with fetch (EventSource cannot send the Authorization header, and
 * the token must never be in a URL) and reconnects with a growing pause when it drops.
 */
function watch() {
  if (stream) stream.abort();
  const ac = new AbortController();
  stream = ac;
  void (async () => {
    let pause = 1000;
    while (!ac.signal.aborted && token()) {
      try {
        const res = await fetch('/v1/overview/stream', { headers: { authorization: 'Bearer ' + token(), accept: 'text/event-stream' }, signal: ac.signal, cache: 'no-store' });
        if (res.status === 401) { logout('The token was refused; enter a valid one.'); return; }
        if (!res.ok) {
          const body = await res.json().catch(() => ({}));
          throw new Error((body.error && body.error.message) || res.statusText);
        }
        $('live').textContent = 'live';
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          for (let i = buf.indexOf('\\n\\n'); i >= 0; i = buf.indexOf('\\n\\n')) {
            onEvent(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
          pause = 1000;
        }
      } catch (e) {
        if (ac.signal.aborted) return;
        $('status').textContent = 'Live updates: ' + e.message;
      }
      $('live').textContent = 'reconnecting';
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 30000);
    }
  })();
}

function show() {
  const on = !!token();
  $('login').hidden = on;
  $('main').hidden = !on;
  if (on) watch();
  else if (stream) { stream.abort(); stream = undefined; }
}

function logout(message) {
  sessionStorage.removeItem(KEY);
  $('login-error').textContent = message || '';
  view = undefined;
  show();
}

$('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const t = $('token').value.trim();
  if (!t) return;
  sessionStorage.setItem(KEY, t);
  $('token').value = '';
  $('login-error').textContent = '';
  show();
});
$('logout').addEventListener('click', () => logout(''));
$('refresh').addEventListener('click', () => watch());
for (const id of ['filter-profile', 'filter-user', 'filter-state']) $(id).addEventListener('change', () => render());
$('session-close').addEventListener('click', () => { $('session-panel').hidden = true; });
$('confirm-yes').addEventListener('click', () => answer(true));
$('confirm-no').addEventListener('click', () => answer(false));
$('confirm').addEventListener('cancel', () => { pending = undefined; });
show();
`;

/** The columns of an egress decision (the page's recent egress and a session's). */
const EGRESS_HEAD = ['Time', 'Decision', 'Session', 'User', 'Target', 'Rule', 'Credentials', 'Bytes up / down'].map((h) => `<th>${h}</th>`).join('');

const SCRIPT_HASH = createHash('sha256').update(SCRIPT, 'utf8').digest('base64');

export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>berth</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d232a; }
  h1 { font-size: 1.3rem; margin: 0 0 1rem; } h2 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
  table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
  th { font-weight: 600; background: #f5f6f8; } .key, .cmd { font-family: ui-monospace, monospace; } .cmd { white-space: pre-wrap; word-break: break-all; }
  .session { display: inline-block; margin-right: .3rem; font-family: ui-monospace, monospace; } .session:not(.open) { color: #8a939d; }
  button { margin-right: .6rem; } .state-active, .state-running { color: #11762b; } .state-missing { color: #b42318; }
  #status, #updated { color: #59636e; margin-left: .5rem; } #login-error { color: #b42318; }
  input[type=password] { width: 28rem; max-width: 100%; }
  .num { text-align: right; white-space: nowrap; } button.session { font-family: ui-monospace, monospace; margin: 0 .2rem .2rem 0; background: none; border: 1px solid #c9d1d9; border-radius: 3px; cursor: pointer; }
  .job-running { color: #11762b; } .job-killed, .job-unknown { color: #b42318; } #live { color: #11762b; margin-left: .5rem; }
  .filters label { margin-right: 1rem; } .charts { display: flex; gap: 1.5rem; flex-wrap: wrap; } figure { margin: 0; } figcaption { color: #59636e; }
  svg.chart { width: 360px; height: 130px; } .chart-bg { fill: #f5f6f8; } .line { fill: none; stroke: #2563eb; stroke-width: 2; } .dot { fill: #2563eb; }
  #chart-sessions .line { stroke: #c2410c; } #chart-sessions .dot { fill: #c2410c; } .tick { font: 10px system-ui, sans-serif; fill: #59636e; }
  .axis { stroke: #8a939d; stroke-width: 1; } .grid { stroke: #e3e6ea; stroke-width: 1; } .clipped { fill: #b42318; } .clipped-value { fill: #b42318; }
  .chart-latest { font: 600 11px system-ui, sans-serif; fill: #1d232a; }
  #session-panel { border: 1px solid #e3e6ea; padding: .5rem; margin-top: 1rem; } #session-egress { margin-top: .5rem; }
  td.allowed { color: #11762b; } td.refused { color: #b42318; }
  dialog { border: 1px solid #c9d1d9; border-radius: 4px; max-width: 32rem; } dialog::backdrop { background: rgba(29, 35, 42, .3); } button.danger { color: #fff; background: #b42318; border: 1px solid #b42318; }
</style>
</head>
<body>
<h1>berth</h1>
<section id="login" hidden>
  <form id="login-form">
    <label for="token">Bearer token</label><br>
    <input id="token" name="token" type="password" autocomplete="off" placeholder="berth_..." required>
    <button id="login-button" type="submit">Log in</button>
  </form>
  <p>Create one with <code>berth token create --tenant T</code>. It is kept in this tab only.</p>
  <p id="login-error" role="alert"></p>
</section>
<section id="main" hidden>
  <div>Tenant <strong id="tenant"></strong>
    <button id="refresh" type="button">Reconnect</button><button id="logout" type="button">Log out</button>
    <span id="live"></span><span id="updated"></span><span id="status" role="status"></span></div>
  <h2>Last hour</h2>
  <div class="charts">
    <figure><svg id="chart-latency" class="chart" role="img" aria-label="exec latency, median per minute, ms"></svg><figcaption>exec latency (ms), median per minute</figcaption></figure>
    <figure><svg id="chart-sessions" class="chart" role="img" aria-label="open sessions, most per minute"></svg><figcaption>open sessions, most per minute</figcaption></figure>
  </div>
  <h2>Sandboxes</h2>
  <div class="filters">
    <label>Profile <select id="filter-profile"></select></label>
    <label>User <select id="filter-user"></select></label>
    <label>State <select id="filter-state"></select></label>
  </div>
  <table id="sandboxes"><thead><tr><th>Key</th><th>Profile</th><th>Scope rule</th><th>Backend</th><th>Lifecycle</th><th>State</th><th>CPU</th><th>Memory</th><th>Disk</th><th>Age</th><th>Idle</th><th>Sessions</th></tr></thead><tbody></tbody></table>
  <p id="no-sandboxes" hidden>No sandboxes.</p>
  <div id="session-panel" hidden>
    <strong id="session-calls-title"></strong> <button id="session-close" type="button">hide</button>
    <table id="session-calls"><thead><tr><th>Time</th><th>Kind</th><th>Session</th><th>User</th><th>Sandbox</th><th>Command</th><th>Exit</th><th>Duration</th></tr></thead><tbody></tbody></table>
    <table id="session-egress"><thead><tr>${EGRESS_HEAD}</tr></thead><tbody></tbody></table>
    <p id="session-egress-none" hidden>No egress decisions.</p>
  </div>
  <h2>Background jobs</h2>
  <table id="jobs"><thead><tr><th>Job</th><th>Profile</th><th>Session</th><th>User</th><th>Command</th><th>State</th><th>Started</th><th></th></tr></thead><tbody></tbody></table>
  <p id="no-jobs" hidden>No jobs.</p>
  <h2>Recent calls</h2>
  <table id="audit"><thead><tr><th>Time</th><th>Kind</th><th>Session</th><th>User</th><th>Sandbox</th><th>Command</th><th>Exit</th><th>Duration</th></tr></thead><tbody></tbody></table>
  <dialog id="confirm" aria-labelledby="confirm-text">
    <p id="confirm-text"></p>
    <button id="confirm-no" type="button">Cancel</button><button id="confirm-yes" type="button" class="danger"></button>
  </dialog>
  <h2>Recent egress</h2>
  <table id="egress"><thead><tr>${EGRESS_HEAD}</tr></thead><tbody></tbody></table>
  <p id="no-egress" hidden>No egress decisions.</p>
</section>
<script>${SCRIPT}</script>
</body>
</html>
`;

export function dashboardHeaders(): Record<string, string> {
  return {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
    'content-security-policy': `default-src 'none'; script-src 'sha256-${SCRIPT_HASH}'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'`,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
  };
}
