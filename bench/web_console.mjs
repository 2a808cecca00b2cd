#!/usr/bin/env node
// The web console with 10,000 tasks, measured in a real browser (Debian's Chromium,
// driven by playwright-core from tests/web): first paint of the page, and how long a
// change made by the CLI in another process takes to be on screen. Prints a table.
//
//   node bench/web_console.mjs path/to/warden [tasks] [updates]
//
// "On screen" is the frame after the page applied the change (the page's own
// `warden:applied` event), never a sleep. The limit beside each figure is measured in
// the same run: a page load that fetches nothing, and the CLI transition alone.

import { createRequire } from 'node:module';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { chromium } = createRequire(path.join(root, 'tests/web/package.json'))('playwright-core');
const BIN = path.resolve(process.argv[2] || 'target/release/warden');
const TASKS = Number(process.argv[3] || 10000);
const UPDATES = Number(process.argv[4] || 20);
const LOADS = 5;
const CHROMIUM = process.env.WARDEN_CHROMIUM || '/usr/bin/chromium';

const dir = mkdtempSync(path.join(tmpdir(), 'warden-web-bench-'));
const profile = mkdtempSync(path.join(tmpdir(), 'warden-web-bench-chromium-'));
const cli = (...a) => execFileSync(BIN, ['--dir', dir, ...a], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}
const median = (xs) => pct(xs, 50);

// A plan of `TASKS` tasks: 100 phases, the rest leaves spread over them, one leaf in
// ten depending on the leaf before it.
function plan() {
  const phases = 100;
  const tasks = [];
  for (let p = 0; p < phases; p++) tasks.push({ id: `p${String(p).padStart(3, '0')}`, title: `Phase ${p}` });
  const perPhase = Math.ceil((TASKS - phases) / phases);
  for (let i = 0; tasks.length < TASKS; i++) {
    const p = Math.floor(i / perPhase);
    const id = `t${String(i).padStart(5, '0')}`;
    const t = { id, parent: `p${String(p).padStart(3, '0')}`, order: i, title: `Leaf task number ${i} of phase ${p}` };
    if (i % 10 === 9) t.depends_on = [`t${String(i - 1).padStart(5, '0')}`];
    tasks.push(t);
  }
  return { tasks };
}

function serve() {
  const proc = spawn(BIN, ['--dir', dir, '--json', 'serve', '--addr', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    readline.createInterface({ input: proc.stdout }).once('line', (l) => resolve({ proc, info: JSON.parse(l) }));
    proc.once('exit', (c) => reject(new Error(`warden serve exited ${c}`)));
  });
}

async function main() {
  process.stderr.write(`setting up ${TASKS} tasks…\n`);
  cli('init');
  const file = path.join(dir, 'plan.json');
  writeFileSync(file, JSON.stringify(plan()));
  cli('plan', 'import', file);
  const { proc, info } = await serve();
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1440, height: 900 },
  });
  try {
    // First paint: navigation start → the board on screen, over fresh page loads.
    const paints = [];
    let bytes = 0;
    for (let i = 0; i < LOADS; i++) {
      const page = await ctx.newPage();
      await page.goto(info.url);
      await page.waitForFunction(() => window.__warden && window.__warden.firstPaint !== null, null, { timeout: 60000 });
      paints.push(await page.evaluate(() => window.__warden.firstPaint));
      if (i === 0) {
        const rows = await page.$$eval('.row', (r) => r.length);
        const shown = await page.textContent('#shown');
        process.stderr.write(`  page ${i}: ${shown}, ${rows} rows in the DOM\n`);
        bytes = await page.evaluate(async () => {
          const r = await fetch('/api/events');
          const reader = r.body.getReader();
          let n = 0;
          let text = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            n += value.length;
            text += new TextDecoder().decode(value);
            if (text.includes('\n\n')) break;
          }
          reader.cancel();
          return n;
        });
      }
      await page.close();
    }
    // The limit: a page from the same server that loads nothing.
    const blank = [];
    for (let i = 0; i < LOADS; i++) {
      const page = await ctx.newPage();
      await page.goto(info.url + 'favicon.svg');
      blank.push(await page.evaluate(() => performance.getEntriesByType('navigation')[0].responseEnd));
      await page.close();
    }
    // Updates: a transition by the CLI, then the frame that shows it.
    const page = await ctx.newPage();
    await page.goto(info.url);
    await page.waitForFunction(() => window.__warden && window.__warden.firstPaint !== null, null, { timeout: 60000 });
    const fromExit = [];
    const fromStart = [];
    const cliAlone = [];
    for (let i = 0; i < UPDATES; i++) {
      const id = `t${String(Math.floor(((i * 7919) % (TASKS - 100)))).padStart(5, '0')}`;
      const seen = page.evaluate((id) => new Promise((resolve) => {
        const on = (e) => {
          if (e.detail.ids.includes(id)) {
            document.removeEventListener('warden:applied', on);
            resolve(e.detail.at);
          }
        };
        document.addEventListener('warden:applied', on);
      }), id);
      // Let the listener be in place before the change.
      await page.evaluate(() => 0);
      const start = Date.now();
      cli('task', 'update', id, '--status', 'working');
      const exit = Date.now();
      const at = await seen;
      cliAlone.push(exit - start);
      fromStart.push(at - start);
      fromExit.push(at - exit);
    }
    await page.close();
    const ms = (x) => `${Math.round(x)} ms`;
    const rows = [
      ['figure', 'measured', 'target', 'limit (same run)'],
      [`first paint, ${TASKS} tasks (navigation → board on screen), median of ${LOADS}`, `${ms(median(paints))} (max ${ms(Math.max(...paints))})`, '< 1 s', `empty page: ${ms(median(blank))}`],
      ['board sent to a page (one SSE event)', `${(bytes / 1e6).toFixed(2)} MB`, '–', ''],
      [`update latency, CLI exit → on screen, median / p95 / max of ${UPDATES}`, `${ms(median(fromExit))} / ${ms(pct(fromExit, 95))} / ${ms(Math.max(...fromExit))}`, '< 1 s', ''],
      ['update latency, CLI start → on screen, median', ms(median(fromStart)), '–', `the CLI transition alone: ${ms(median(cliAlone))}`],
    ];
    const w = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
    for (const [i, r] of rows.entries()) {
      console.log('| ' + r.map((x, c) => x.padEnd(w[c])).join(' | ') + ' |');
      if (i === 0) console.log('|' + w.map((n) => '-'.repeat(n + 2)).join('|') + '|');
    }
  } finally {
    await ctx.close();
    proc.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
    rmSync(profile, { recursive: true, force: true });
  }
}

await main();
