// What the dashboard's jobs page draws for each job's progress (tests/tests/status_words.rs):
// opens the printed address in headless Debian chromium and prints one JSON line per row —
// job id, status, badge text, the bar's width and its computed fill colour, and the label.
// Usage: node bars.mjs <dashboard url>
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [url] = process.argv.slice(2);
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'mozart-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(30000);
  await page.goto(url);
  await page.waitForSelector('#rows');
  const rows = await page.$$eval('#rows tr[data-job]', (trs) => trs.map((tr) => {
    const rect = tr.querySelector('svg.bar rect');
    return {
      job: tr.dataset.job,
      status: tr.dataset.status,
      badge: tr.querySelector('.badge')?.textContent ?? '',
      width: rect ? Number(rect.getAttribute('width')) : null,
      fill: rect ? getComputedStyle(rect).fill : null,
      label: tr.querySelector('td:nth-child(3) .sub')?.textContent ?? '',
    };
  }));
  for (const r of rows) console.log(JSON.stringify(r));
  console.log('OK');
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
