import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  assertNoneLeft, describeDocker, dockerConfigYaml, ensureImage, installs, waitFor,
} from '../helpers/docker-e2e.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * The dashboard in a real headless Chromium (Debian's, driven by playwright-core): log in with a
 * token, see a sandbox created through the API, close its session with the button, see it gone.
 * Skips visibly without /usr/bin/chromium, unless BERTH_REQUIRE_BROWSER=1 (CI), which fails.
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

      await row.locator('button.close-session[data-session="chat-7"]').click();
      await row.waitFor({ state: 'detached', timeout: 30_000 });
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
});
