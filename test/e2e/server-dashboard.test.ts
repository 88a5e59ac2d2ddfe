import { existsSync, writeFileSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  assertNoneLeft, describeDocker, dockerConfigYaml, ensureImage, installs, waitFor,
} from '../helpers/docker-e2e.js';
import { runBerth } from '../helpers/cli.js';
import { countColour, decodePng } from '../helpers/png.js';
import { createToken, qs, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * The dashboard in a real headless Chromium (Debian's, driven by playwright-core): log in with a
 * token, see a sandbox created through the API, close its session with the button (nothing sent
 * until confirmed), see it gone; then the live view: rows pushed without a reload, filters, a
 * session's calls, CPU never '-', a job killed from the page (after its confirmation), charts that
 * draw pixels, and CPU on the first frame after a reload; then the charts' axes, ticks, latest
 * values and outlier clipping on an hour the test sends the page. BERTH_DASHBOARD_SCREENSHOT=path writes the
 * README's screenshot. Skips visibly without /usr/bin/chromium, unless BERTH_REQUIRE_BROWSER=1 (CI), which fails.
 */

const CHROMIUM = process.env['BERTH_CHROMIUM'] ?? '/usr/bin/chromium';
const reg = installs('berth-dash-');

function describeBrowser(name: string, body: () => void): void {
  if (existsSync(CHROMIUM)) {
    describeDocker(name, body);
    return;
  }
  if (process.env['BERTH_REQUIRE_BROWSER'] === '1') {
    describe(name, () => {
      it('needs Chromium (BERTH_REQUIRE_BROWSER=1)', () => {
        throw new Error(`BERTH_REQUIRE_BROWSER=1 but ${CHROMIUM} does not exist; apt-get install chromium`);
      });
    });
    return;
  }
  console.warn(`skipping ${name}: ${CHROMIUM} not found`);
  describe.skip(`${name} (skipped: ${CHROMIUM} not found)`, body);
}

describeBrowser('berth serve: dashboard in headless Chromium', () => {
  let browser: Browser;
  beforeAll(async () => {
    await ensureImage();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
  }, 180_000);
  afterEach(async () => {
    await stopAll();
    await reg.cleanupAll();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await assertNoneLeft(reg.ids);
  });

  it('log in, see the sandbox and recent calls, close the session, see it gone', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'dash');
    const other = await createToken(t, 'someone-else');
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    const made = await api.post('/v1/exec', { session: 'chat-7', command: 'echo "<img src=x onerror=alert(1)>"' });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    // Another tenant's sandbox must never show up.
    expect((await server.client(other).post('/v1/exec', { session: 'hidden', command: 'true' })).status).toBe(200);

    const page = await browser.newPage();
    const dialogs: string[] = [];
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    try {
      await page.goto(server.url);
      // A wrong token is refused and the form stays.
      await page.fill('#token', `berth_${'x'.repeat(43)}`);
      await page.click('#login-button');
      await page.waitForSelector('#login-error:has-text("refused")');
      expect(await page.isVisible('#main')).toBe(false);

      await page.fill('#token', token);
      await page.click('#login-button');
      const row = page.locator('#sandboxes tr[data-key="session:chat-7"]');
      await row.waitFor({ timeout: 15_000 });
      expect(await page.textContent('#tenant')).toBe('dash');
      const cells = await row.locator('td').allTextContents();
      expect(cells.slice(0, 6)).toEqual(['session:chat-7', 'default', 'auto:5', 'docker', 'ephemeral', 'active']);
      expect(await page.locator('#sandboxes tbody tr').count()).toBe(1);
      expect(await page.locator('#sandboxes tr[data-key="session:hidden"]').count()).toBe(0);
      // The audit shows the command as text, never as markup.
      await page.locator('#audit td.cmd', { hasText: '<img src=x onerror=alert(1)>' }).first().waitFor();
      expect(await page.locator('#audit img').count()).toBe(0);

      // Close asks first: Cancel (and Escape) send nothing and the session stays open.
      const closes: string[] = [];
      page.on('request', (r) => {
        if (r.url().endsWith('/v1/sessions/close')) closes.push(r.method());
      });
      await row.locator('button.close-session[data-session="chat-7"]').click();
      await page.locator('#confirm[open]').waitFor();
      expect(await page.textContent('#confirm-text')).toContain('Close session chat-7');
      await page.click('#confirm-no');
      await row.locator('button.close-session[data-session="chat-7"]').click();
      await page.keyboard.press('Escape');
      expect(await page.locator('#confirm[open]').count()).toBe(0);
      // Two updates later (the page redraws on each), nothing was sent and the session is open.
      const seen = await page.textContent('#updated');
      await expect.poll(() => page.textContent('#updated'), { timeout: 15_000 }).not.toBe(seen);
      expect(closes).toEqual([]);
      expect((await api.get('/v1/sandboxes')).body).toMatchObject([{ sandboxKey: 'session:chat-7', sessions: [{ session: 'chat-7', open: true }] }]);
      await row.locator('button.close-session[data-session="chat-7"]').click();
      await page.click('#confirm-yes');
      await row.waitFor({ state: 'detached', timeout: 30_000 });
      expect(closes).toEqual(['POST']);
      await page.waitForSelector('#status:has-text("Closed session chat-7")');
      expect(dialogs).toEqual([]);
    } finally {
      await page.close();
    }
    // Gone for real: the record and the container.
    expect((await api.get('/v1/sandboxes')).body).toEqual([]);
    expect(await waitFor(async () => (await t.containers()).every((c) => c.labels['berth.tenant'] !== 'dash'), 10_000)).toBe(true);
    expect((await server.stop()).code).toBe(0);
  }, 120_000);

  it('live: a new session shows up without a reload, filters hide rows, a click shows its calls, kill stops a job, the charts draw', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, profiles: { bot: {} } }));
    const token = await createToken(t, 'dash', ['default', 'bot']);
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    expect((await api.post('/v1/exec', { session: 'chat-1', command: 'echo first' })).status).toBe(200);
    // A sandbox of the tenant made by the CLI (another process): running, not active in the server.
    const cli = await runBerth(['exec', '--tenant', 'dash', '--session', 'cli-1', '--', 'true'], { env: t.env, cwd: t.dir });
    expect(cli.code, cli.stderr).toBe(0);

    const page = await browser.newPage({ deviceScaleFactor: 2, viewport: { width: 1280, height: 900 } });
    const urls: string[] = [];
    page.on('request', (r) => urls.push(r.url()));
    let navigations = 0;
    let jobId = '';
    try {
      await page.goto(server.url);
      await login(page, token);
      await page.locator('#sandboxes tr[data-key="session:chat-1"]').waitFor({ timeout: 15_000 });
      const cpuAtFirst = await page.textContent('#sandboxes tr[data-key="session:chat-1"] td.cpu');
      page.on('framenavigated', () => navigations++);
      await page.evaluate(() => Object.assign(globalThis, { stillThisPage: 42 }));

      // Pushed: a new session's sandbox appears with no reload and no click.
      expect((await api.post('/v1/exec', { session: 'chat-2', user: 'tg:42', command: 'echo second' })).status).toBe(200);
      expect((await api.post('/v1/exec', { profile: 'bot', session: 'chat-3', command: 'echo third' })).status).toBe(200);
      // A call with a user lands in the user's sandbox (rule auto:3).
      await page.locator('#sandboxes tr[data-key="user:tg:42"]').waitFor({ timeout: 15_000 });
      // Active once their calls ended (a sandbox being created has a record and no container yet: missing).
      for (const key of ['user:tg:42', 'session:chat-3']) await page.locator(`#sandboxes tr[data-key="${key}"] td.state-active`).waitFor({ timeout: 15_000 });
      expect(await page.evaluate(() => (globalThis as { stillThisPage?: number }).stillThisPage)).toBe(42);
      expect(navigations).toBe(0);
      // Resource use from the engine: memory and disk of a running container.
      const chat1 = await page.locator('#sandboxes tr[data-key="session:chat-1"]').locator('td').allTextContents();
      expect(chat1[7]).toMatch(/[0-9.]+ (KiB|MiB)/);
      expect(chat1[8]).toMatch(/[0-9.]+ (KiB|MiB)/);
      // CPU: never '-' for a running container; a number once the second sample came (about a second).
      expect(cpuAtFirst).toMatch(/^(…|[0-9.]+ %)$/);
      await page.locator('#sandboxes tr[data-key="session:chat-1"] td.cpu', { hasText: '%' }).waitFor({ timeout: 15_000 });

      // Filters hide rows (client side): by profile, then by user.
      const keys = () => page.locator('#sandboxes tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-key')));
      await page.selectOption('#filter-profile', 'bot');
      expect(await keys()).toEqual(['session:chat-3']);
      await page.selectOption('#filter-profile', '');
      await page.selectOption('#filter-user', 'tg:42');
      expect(await keys()).toEqual(['user:tg:42']);
      expect(await page.locator('#audit td.cmd').allTextContents()).toEqual(['echo second']);
      await page.selectOption('#filter-user', '');
      await page.selectOption('#filter-state', 'running');
      expect(await keys()).toEqual(['session:cli-1']);
      await page.selectOption('#filter-state', 'active');
      expect((await keys()).sort()).toEqual(['session:chat-1', 'session:chat-3', 'user:tg:42']);
      await page.selectOption('#filter-state', '');
      expect(await keys()).toHaveLength(4);

      // A session's calls on click.
      await page.locator('#sandboxes button.session[data-session="chat-1"]').click();
      await page.locator('#session-calls td.cmd', { hasText: 'echo first' }).waitFor({ timeout: 10_000 });
      expect(await page.locator('#session-calls td.cmd').allTextContents()).toEqual(['echo first']);

      // The charts draw: pixels of the line colour in a screenshot of the latency chart.
      await page.waitForSelector('#chart-latency:not([data-points="0"])', { timeout: 10_000 });
      const chart = decodePng(await page.locator('#chart-latency').screenshot());
      expect(chart.width).toBeGreaterThan(300);
      expect(countColour(chart, [0x25, 0x63, 0xeb])).toBeGreaterThan(30);

      // A background job with its state and a kill button.
      const job = await api.post('/v1/jobs', { session: 'chat-1', command: 'sleep 300' });
      expect(job.status).toBe(201);
      jobId = job.body.jobId as string;
      const jobRow = page.locator(`#jobs tr[data-job="${jobId}"]`);
      await jobRow.locator('td.job-running').waitFor({ timeout: 15_000 });
      const shot = process.env['BERTH_DASHBOARD_SCREENSHOT'];
      if (shot !== undefined) {
        await page.locator('#session-close').click();
        writeFileSync(shot, await page.screenshot({ fullPage: true, scale: 'css' }));
      }
      // Kill asks first: Cancel sends nothing and the job runs on.
      await jobRow.locator('button.kill-job').click();
      await page.locator('#confirm[open]').waitFor();
      expect(await page.textContent('#confirm-text')).toContain(`Kill job ${jobId} (sleep 300)`);
      await page.click('#confirm-no');
      expect(urls.some((u) => u.includes(`/v1/jobs/${jobId}?`))).toBe(false);
      expect((await api.get(`/v1/jobs/${jobId}${qs({ session: 'chat-1', maxBytes: 0 })}`)).body.status).toBe('running');
      await jobRow.locator('button.kill-job').click();
      await page.click('#confirm-yes');
      await page.waitForSelector(`#status:has-text("Killed job ${jobId}")`, { timeout: 15_000 });
      await jobRow.locator('td.job-killed').waitFor({ timeout: 15_000 });

      // A reload (the token stays in the tab): CPU is on its very first frame, from the samples the server keeps.
      await page.reload();
      const first = page.locator('#sandboxes tr[data-key="session:chat-1"] td.cpu');
      await first.waitFor({ timeout: 15_000 });
      expect(await first.textContent()).toMatch(/^[0-9.]+ %$/);
    } finally {
      await page.close();
    }
    // Killed for real, as the API reads it (not only as the page shows it).
    const read = await api.get(`/v1/jobs/${jobId}${qs({ session: 'chat-1', maxBytes: 0 })}`);
    expect([read.status, read.body.status]).toEqual([200, 'killed']);
    expect((await api.get(`/v1/jobs${qs({ session: 'chat-1' })}`)).body).toMatchObject([{ jobId, status: 'killed' }]);
    // The token travelled in headers only, never in a URL.
    expect(urls.every((u) => !u.includes(token))).toBe(true);
    expect((await server.stop()).code).toBe(0);
  }, 180_000);

  it('charts: axes with units and ticks, the latest value, and one slow minute clipped and marked instead of flattening the rest', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'dash');
    const server = await ServeProcess.start(t);
    const page = await browser.newPage();
    try {
      // The page draws what the stream sends: an hour with one minute a thousand times slower than the others.
      const view = { tenant: 'dash', timeMs: Date.now(), sandboxes: [], jobs: [], calls: [], egress: [], history: hour([2, 3, 2.5, 4, 3, 2, 3, 5000, 3, 2.2], [1, 2, 3, 3, 2]) };
      await page.route('**/v1/overview/stream', (route) => route.fulfill({ status: 200, contentType: 'text/event-stream', body: `event: overview\ndata: ${JSON.stringify(view)}\n\n` }));
      await page.goto(server.url);
      await login(page, token);
      const chart = page.locator('#chart-latency');
      await page.waitForSelector('#chart-latency[data-points="10"]', { timeout: 15_000 });
      expect(await chart.locator('text.tick-y').allTextContents()).toEqual(['0', '2.5 ms', '5 ms']);
      expect(await chart.locator('text.tick-x').allTextContents()).toEqual(['-60 min', '-30 min', 'now']);
      expect(await chart.locator('text.chart-latest').textContent()).toBe('latest 2.2 ms');
      // The slow minute: drawn at the top, marked, with its value; the scale is the other minutes'.
      expect([await chart.getAttribute('data-top'), await chart.getAttribute('data-clipped')]).toEqual(['5', '1']);
      expect(await chart.locator('path.clipped').getAttribute('data-value')).toBe('5000');
      expect(await chart.locator('text.clipped-value').textContent()).toBe('5000 ms');
      // The other nine spread over the plot (2 ms to 4 ms: 40 % of its height), not squeezed onto the axis.
      const ys = (await chart.locator('circle.dot').evaluateAll((dots) => dots.map((d) => Number(d.getAttribute('cy')))));
      expect(ys).toHaveLength(9);
      expect(Math.max(...ys) - Math.min(...ys)).toBeGreaterThan(30);
      const sessions = page.locator('#chart-sessions');
      expect(await sessions.locator('text.tick-y').allTextContents()).toEqual(['0', '2.5 sessions', '5 sessions']);
      expect(await sessions.locator('text.chart-latest').textContent()).toBe('latest 2 sessions');
      expect(await sessions.getAttribute('data-clipped')).toBe('0');
    } finally {
      await page.close();
    }
    expect((await server.stop()).code).toBe(0);
  }, 120_000);
});


/** A minute-by-minute hour as the stream sends it: `values` are the last minutes' figures, the rest empty. */
function hour(latency: Array<number | null>, sessions: Array<number | null>): Array<{ minuteMs: number; execCalls: number; p50Ms: number | null; sessions: number | null }> {
  const now = Math.floor(Date.now() / 60_000);
  return Array.from({ length: 60 }, (_, i) => {
    const p50Ms = latency[i - (60 - latency.length)] ?? null;
    return { minuteMs: (now - 59 + i) * 60_000, execCalls: p50Ms === null ? 0 : 10, p50Ms, sessions: sessions[i - (60 - sessions.length)] ?? null };
  });
}

async function login(page: Page, token: string): Promise<void> {
  await page.fill('#token', token);
  await page.click('#login-button');
}
