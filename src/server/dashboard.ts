import { createHash } from 'node:crypto';

/*
 * The dashboard: one static page, no build step. The page itself holds no data, so it is served
 * without a token; everything it shows comes from /v1 with `Authorization: Bearer <token>`.
 * The token is typed into a login form and kept in sessionStorage (gone with the tab), never in
 * a cookie: no request is ever authenticated ambiently, so there is no CSRF surface, and the
 * token never appears in a URL or a server log. All values are inserted with textContent (audit
 * entries are commands someone typed), and a strict CSP allows only this page's own script.
 */

const SCRIPT = `
'use strict';
const $ = (id) => document.getElementById(id);
const KEY = 'berthToken';
let timer;

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

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min';
  if (s < 86400) return Math.floor(s / 3600) + ' h';
  return Math.floor(s / 86400) + ' d';
}

/** The call scope that closes a session ref as the broker records it. */
function scopeOfRef(ref, profile) {
  const scope = {};
  if (profile) scope.profile = profile;
  if (ref.startsWith('@task:')) scope.task = ref.slice(6);
  else if (ref.startsWith('@user:')) scope.user = ref.slice(6);
  else if (ref !== '@default') scope.session = ref;
  return scope;
}

async function closeSession(ref, profile, button) {
  button.disabled = true;
  try {
    await api('/v1/sessions/close', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(scopeOfRef(ref, profile)) });
    $('status').textContent = 'Closed session ' + ref + '.';
  } catch (e) {
    $('status').textContent = 'Close failed: ' + e.message;
  }
  await refresh();
}

function renderSandboxes(list) {
  const body = $('sandboxes').querySelector('tbody');
  body.replaceChildren();
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
    cell(tr, ago(s.createdMs));
    cell(tr, ago(s.lastUsedMs));
    const td = cell(tr, '');
    for (const sess of s.sessions) {
      const span = document.createElement('span');
      span.className = 'session' + (sess.open ? ' open' : '');
      span.textContent = sess.session + (sess.open ? '' : ' (closed)');
      td.appendChild(span);
      if (sess.open) {
        const b = document.createElement('button');
        b.type = 'button';
        b.className = 'close-session';
        b.dataset.session = sess.session;
        b.textContent = 'close';
        b.addEventListener('click', () => closeSession(sess.session, s.profile, b));
        td.appendChild(b);
      }
    }
    body.appendChild(tr);
  }
}

function renderAudit(entries) {
  const body = $('audit').querySelector('tbody');
  body.replaceChildren();
  for (const e of entries) {
    const tr = document.createElement('tr');
    cell(tr, new Date(e.timeMs).toLocaleTimeString());
    cell(tr, e.kind);
    cell(tr, e.session === null ? '' : e.session);
    cell(tr, e.user === null ? '' : e.user);
    cell(tr, e.sandboxKey === null ? '' : e.sandboxKey);
    cell(tr, e.command === null ? '' : e.command, 'cmd');
    cell(tr, e.exitCode === null ? '' : String(e.exitCode));
    cell(tr, e.durationMs === null ? '' : e.durationMs + ' ms');
    body.appendChild(tr);
  }
}

async function refresh() {
  if (!token()) return;
  try {
    const [who, sandboxes, audit] = await Promise.all([api('/v1/whoami'), api('/v1/sandboxes'), api('/v1/audit?limit=50')]);
    $('tenant').textContent = who.tenant;
    renderSandboxes(sandboxes);
    renderAudit(audit);
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.message !== 'unauthorized') $('status').textContent = 'Refresh failed: ' + e.message;
  }
}

function show() {
  const on = !!token();
  $('login').hidden = on;
  $('main').hidden = !on;
  clearInterval(timer);
  if (on) { refresh(); timer = setInterval(refresh, 5000); }
}

function logout(message) {
  sessionStorage.removeItem(KEY);
  $('login-error').textContent = message || '';
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
$('refresh').addEventListener('click', () => refresh());
show();
`;

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
    <button id="refresh" type="button">Refresh</button><button id="logout" type="button">Log out</button>
    <span id="updated"></span><span id="status" role="status"></span></div>
  <h2>Sandboxes</h2>
  <table id="sandboxes"><thead><tr><th>Key</th><th>Profile</th><th>Scope rule</th><th>Backend</th><th>Lifecycle</th><th>State</th><th>Age</th><th>Idle</th><th>Sessions</th></tr></thead><tbody></tbody></table>
  <p id="no-sandboxes" hidden>No sandboxes.</p>
  <h2>Recent calls</h2>
  <table id="audit"><thead><tr><th>Time</th><th>Kind</th><th>Session</th><th>User</th><th>Sandbox</th><th>Command</th><th>Exit</th><th>Duration</th></tr></thead><tbody></tbody></table>
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
