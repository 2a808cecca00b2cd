#!/usr/bin/env node
// The plan graph in the real Mermaid: `warden plan graph` and the graph STATE.md embeds,
// parsed and rendered by the mermaid package (the one GitHub uses to draw ```mermaid
// blocks) in Debian's Chromium, for a plan whose titles hold everything that could break
// a label out of its quotes.
//
//   node tests/web/graph.test.mjs path/to/warden
//
// Prints one line per test and `N passed, M failed`; exits 1 when any test failed.

import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, appendFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BIN = path.resolve(process.argv[2] || 'target/debug/warden');
const CHROMIUM = process.env.WARDEN_CHROMIUM || '/usr/bin/chromium';
const MERMAID = path.join(HERE, 'node_modules', 'mermaid', 'dist', 'mermaid.min.js');

function cli(dir, ...args) {
  const env = { ...process.env };
  delete env.WARDEN_ROLE;
  delete env.WARDEN_TASK_ID;
  return execFileSync(BIN, ['--dir', dir, ...args], { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function assert(ok, what) {
  if (!ok) throw new Error(what);
}

// Titles a person or an agent might write, and some an attacker would.
const HOSTILE = 'REST "API" <v1> & co; [x] {y} |z| `q` #1 --> end';
const SCRIPT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">';

function workspace() {
  const dir = mkdtempSync(path.join(tmpdir(), 'warden-graph-'));
  cli(dir, 'init');
  const plan = {
    tasks: [
      { id: '01-auth', title: 'Authentication end to end' },
      { id: 'login', parent: '01-auth', order: 1, title: HOSTILE },
      { id: 'signup', parent: '01-auth', order: 2, title: SCRIPT, depends_on: ['login'] },
      { id: 'end', parent: '01-auth', order: 3, title: 'end' },
      { id: '02-api', title: 'Public API', depends_on: ['01-auth'] },
      { id: 'api.users', parent: '02-api', order: 1, title: 'Users endpoint' },
      { id: 'api-orders', parent: '02-api', order: 2, title: 'Orders', depends_on: ['api.users'] },
      { id: 'docs', title: 'Docs', depends_on: ['02-api', 'login'] },
    ],
  };
  writeFileSync(path.join(dir, 'plan.json'), JSON.stringify(plan));
  cli(dir, 'plan', 'import', path.join(dir, 'plan.json'));
  cli(dir, 'state', '--write');
  // Some colour: login done through the real gates, signup stuck, docs cancelled.
  const tf = (id) => path.join(dir, '.warden', 'tasks', id, 'TASK.md');
  cli(dir, 'task', 'update', 'login', '--status', 'working');
  appendFileSync(tf('login'), '\n## Handoff\nBuilt it.\n');
  cli(dir, 'task', 'update', 'login', '--status', 'agent-review');
  appendFileSync(tf('login'), '\n## Review\nPASS\n');
  cli(dir, 'task', 'update', 'login', '--status', 'reviewing');
  cli(dir, 'task', 'approve', 'login');
  cli(dir, 'task', 'update', 'signup', '--status', 'working');
  cli(dir, 'task', 'update', 'signup', '--status', 'stuck');
  cli(dir, 'task', 'cancel', 'docs');
  return dir;
}

async function main() {
  if (!existsSync(BIN)) throw new Error(`no warden binary at ${BIN}; build it with cargo build`);
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}; apt-get install chromium`);
  if (!existsSync(MERMAID)) throw new Error(`no mermaid at ${MERMAID}; run npm ci in tests/web`);
  const dir = workspace();
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  });
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.setContent('<!doctype html><html><body><div id="out"></div></body></html>');
  await page.addScriptTag({ path: MERMAID });
  await page.evaluate(() => window.mermaid.initialize({ startOnLoad: false, securityLevel: 'strict' }));

  // Parses and renders `text`; returns the diagram type, the SVG's text and its shapes.
  const render = (text) => page.evaluate(async (text) => {
    const parsed = await window.mermaid.parse(text);
    const { svg } = await window.mermaid.render('g' + Math.random().toString(36).slice(2), text);
    const holder = document.getElementById('out');
    holder.innerHTML = svg;
    const out = {
      type: parsed.diagramType,
      text: holder.textContent,
      nodes: holder.querySelectorAll('.node').length,
      clusters: holder.querySelectorAll('.cluster').length,
      edges: holder.querySelectorAll('.flowchart-link, path.flowchart-link, .edgePath').length,
      scripts: holder.querySelectorAll('script').length,
      pwned: window.__pwned || 0,
    };
    holder.innerHTML = '';
    return out;
  }, text);

  const tests = [];
  const test = (name, fn) => tests.push({ name, fn });

  test('`plan graph` parses and renders in Mermaid, every label intact', async () => {
    const text = cli(dir, 'plan', 'graph');
    const r = await render(text);
    assert(r.type.startsWith('flowchart'), `diagram type ${r.type}`);
    assert(r.nodes === 6, `6 leaf boxes, got ${r.nodes}`);
    assert(r.clusters === 2, `2 groups, got ${r.clusters}`);
    assert(r.edges === 5, `5 dependency arrows, got ${r.edges}`);
    assert(r.text.includes(HOSTILE), `the hostile title reads as written: ${r.text}`);
    assert(r.text.includes('<script>window.__pwned = 1</script>'), 'the script title is text');
    assert(r.scripts === 0 && r.pwned === 0, 'nothing in a title runs');
    for (const s of ['done', 'stuck', 'cancelled', 'pending']) assert(r.text.includes(s), `status ${s} shown`);
  });

  test('the graph STATE.md embeds is the same picture, and renders', async () => {
    const state = cli(dir, 'state');
    const m = state.match(/## Plan graph\n\n```mermaid\n([\s\S]*?)```/);
    assert(m, 'STATE.md has a mermaid block');
    assert(m[1] === cli(dir, 'plan', 'graph'), 'the same text as `plan graph`');
    const r = await render(m[1]);
    assert(r.nodes === 6 && r.clusters === 2, `${r.nodes} nodes, ${r.clusters} clusters`);
  });

  test('the parser is real: an unescaped quote in a label is rejected', async () => {
    const good = cli(dir, 'plan', 'graph');
    const bad = good.replace('#quot;API#quot;', '"API"');
    assert(bad !== good, 'the mutation applies');
    let refused = false;
    try {
      await render(bad);
    } catch (e) {
      refused = true;
    }
    assert(refused, 'mermaid refused the broken label');
  });

  let passed = 0;
  let failed = 0;
  for (const t of tests) {
    const start = Date.now();
    try {
      await t.fn();
      console.log(`ok   ${t.name} (${Date.now() - start} ms)`);
      passed += 1;
    } catch (e) {
      console.log(`FAIL ${t.name}\n     ${String(e.stack || e).split('\n').join('\n     ')}`);
      failed += 1;
    }
  }
  if (errors.length) {
    console.log(`FAIL the page had errors: ${errors.join('; ')}`);
    failed += 1;
  }
  await browser.close();
  rmSync(dir, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  return failed;
}

main().then(
  (failed) => process.exit(failed ? 1 : 0),
  (e) => {
    console.log(`error: ${e.stack || e}`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  },
);
