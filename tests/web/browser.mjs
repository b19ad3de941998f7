// Drives headless Debian chromium through the dashboard (tests/tests/web_dashboard.rs).
// Usage: node browser.mjs <dashboard url> <job id> <screenshot dir>
// Protocol with the Rust test: prints READY once the jobs page is open, then waits for the
// test to submit <job id> and for the row to appear live; prints OK at the end.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [url, jobId, outDir] = process.argv.slice(2);
const step = (m) => console.log(`step: ${m}`);
const fail = (m) => { console.log(`FAIL: ${m}`); process.exit(1); };

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'mozart-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 900 },
});
try {
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(30000);
  // Anything the page's Content-Security-Policy blocks (an inline script or style left
  // behind) shows up as a console error: the run fails on any.
  const blocked = [];
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to (execute|apply|load)/i.test(m.text())) blocked.push(m.text());
  });
  // The printed address carries the token: the dashboard trades it for a cookie and
  // redirects to the bare address.
  await page.goto(url);
  await page.waitForSelector('#rows');
  if (page.url().includes('token=')) fail(`the token stayed in the address bar: ${page.url()}`);
  step('logged in with the printed address; the token left the address bar');
  // A marker that a reload would wipe: the list must update without one.
  await page.evaluate(() => { window.__sameDocument = 'yes'; });
  console.log('READY');

  const row = `#rows tr[data-job="${jobId}"]`;
  await page.waitForSelector(`${row}[data-status="running"]`);
  step('the new job appeared as running without a reload');
  const firstProgress = await page.textContent(`${row} .sub`).catch(() => '');
  await page.waitForFunction(([sel, before]) => {
    const el = document.querySelector(sel + ' .sub');
    return el && el.textContent !== before;
  }, [row, firstProgress]);
  step(`its progress moved live (${firstProgress} -> ${await page.textContent(`${row} .sub`)})`);
  if (await page.evaluate(() => window.__sameDocument) !== 'yes') fail('the page was reloaded');
  await page.screenshot({ path: path.join(outDir, 'jobs.png'), fullPage: true });

  await page.click(`${row} a`);
  await page.waitForSelector('#job-status');
  await page.click('#pause-btn');
  await page.waitForSelector('#flash');
  step(`pause: ${await page.textContent('#flash')}`);
  await page.evaluate(() => { window.__sameDocument = 'yes'; });
  await page.waitForSelector('#job-status:text("paused")');
  step('the job page shows paused (live)');
  if (await page.evaluate(() => window.__sameDocument) !== 'yes') fail('the job page was reloaded');
  await page.click('#resume-btn');
  await page.waitForSelector('#flash');
  step(`resume: ${await page.textContent('#flash')}`);
  await page.waitForSelector('#job-status:text("running")');
  step('the job page shows running again');
  await page.waitForSelector('h2:text("Timeline")');
  await page.screenshot({ path: path.join(outDir, 'job.png'), fullPage: true });

  // Cancel asks first (app.js, from the form's data-confirm): dismissed, nothing happens;
  // accepted, the job is cancelled.
  const questions = [];
  let answer = false;
  page.on('dialog', async (d) => { questions.push(d.message()); if (answer) await d.accept(); else await d.dismiss(); });
  await page.click('#cancel-btn');
  await page.waitForTimeout(500);
  if (questions.length !== 1) fail(`cancel asked ${questions.length} questions`);
  if (await page.$('#flash')) {
    const f = await page.textContent('#flash');
    if (f.includes('cancelled')) fail('a dismissed cancel still cancelled the job');
  }
  answer = true;
  await page.click('#cancel-btn');
  await page.waitForSelector('#flash:has-text("cancelled")');
  step(`cancel asked "${questions[0]}" and then: ${await page.textContent('#flash')}`);

  await page.goto(new URL('/validate', url).toString());
  await page.fill('textarea[name=yaml]', 'name: [broken\n');
  await page.click('#validate-btn');
  const err = await page.textContent('#report .message');
  if (!err.includes('YAML syntax error')) fail(`validator said: ${err}`);
  step(`validator on broken YAML: ${err.split('\n')[0]}`);
  await page.fill('textarea[name=yaml]',
    'name: demo\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 3\nprompt:\n  template: "RUN: echo {{ sheet_num }}"\n');
  await page.click('#validate-btn');
  await page.waitForSelector('table.plan');
  const planRows = await page.$$eval('table.plan tbody tr', (r) => r.length);
  if (planRows !== 3) fail(`sheet plan has ${planRows} rows`);
  step('validator shows a 3-sheet plan');
  await page.screenshot({ path: path.join(outDir, 'validate.png'), fullPage: true });

  await page.goto(new URL('/learning', url).toString());
  await page.waitForSelector('h1:text("Learning")');
  await page.screenshot({ path: path.join(outDir, 'learning.png'), fullPage: true });
  step('learning page rendered');

  const missing = await page.goto(new URL('/jobs/no-such-job', url).toString());
  if (missing.status() !== 404) fail(`unknown job answered ${missing.status()}`);
  step(`unknown job: ${(await page.textContent('#error .message')).trim()}`);
  if (blocked.length) fail(`the page policy blocked: ${blocked.join(' | ')}`);
  step('nothing was blocked by the page policy');
  console.log('OK');
} catch (e) {
  fail(e && e.stack ? e.stack : String(e));
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
