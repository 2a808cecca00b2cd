#!/usr/bin/env node
// Browser tests of the web console: the real `warden` binary serving a temporary
// workspace, Debian's Chromium driven by playwright-core, the store changed and checked
// through the real CLI in other processes.
//
//   node tests/web/console.test.mjs path/to/warden
//
// Prints one line per test, the folder of the screenshots it took, and a closing
// `N passed, M failed` line; exits 1 when any test failed. The non-loopback test runs
// the console and a browser in a network namespace of its own (root and iproute2); it
// is skipped loudly without them, and fails under CI=true.

import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, appendFileSync, mkdirSync, rmSync, chmodSync, existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

const BIN = path.resolve(process.argv[2] || 'target/debug/warden');
const CHROMIUM = process.env.WARDEN_CHROMIUM || '/usr/bin/chromium';
const CI = process.env.CI === 'true';
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];
const SHOTS = mkdtempSync(path.join(tmpdir(), 'warden-web-shots-'));
const cleanups = [];

// ---- the store, through the CLI ---------------------------------------------------

function cli(dir, ...args) {
  const env = { ...process.env };
  delete env.WARDEN_ROLE;
  delete env.WARDEN_TASK_ID;
  return execFileSync(BIN, ['--dir', dir, ...args], { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}
const show = (dir, id) => JSON.parse(cli(dir, '--json', 'task', 'show', id));
const taskFile = (dir, id) => path.join(dir, '.warden', 'tasks', id, 'TASK.md');
const outputLog = (dir, id) => path.join(dir, '.warden', 'tasks', id, 'output.log');

function addSection(dir, id, text) {
  appendFileSync(taskFile(dir, id), '\n' + text + '\n');
}

/// Moves a review task through the real gates, writing each artifact first.
function advance(dir, id, to) {
  const steps = ['working', 'agent-review', 'reviewing', 'done'];
  let at = show(dir, id).status;
  for (const s of steps.slice(steps.indexOf(at) + 1, steps.indexOf(to) + 1)) {
    if (s === 'agent-review') addSection(dir, id, '## Handoff\nImplemented as planned; tests added for the edge cases.');
    if (s === 'reviewing') addSection(dir, id, '## Review\nVerdict: PASS\n\nReads well; the error paths are covered.');
    cli(dir, 'task', 'update', id, '--status', s);
    at = s;
  }
}

/// A plan mid-run: done, in review, crashed (dead session), stuck, blocked, working.
function midRunWorkspace() {
  const dir = mkdtempSync(path.join(tmpdir(), 'warden-web-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  cli(dir, 'init');
  const plan = {
    tasks: [
      { id: '01-auth', title: 'Authentication' },
      { id: 'login', parent: '01-auth', order: 1, title: 'Login form and session cookie' },
      { id: 'signup', parent: '01-auth', order: 2, title: 'Sign-up with e-mail confirmation' },
      { id: 'reset', parent: '01-auth', order: 3, title: 'Password reset by e-mail', depends_on: ['login'] },
      { id: 'audit', parent: '01-auth', order: 4, title: 'Security review of the auth flows' },
      { id: '02-api', title: 'Public API' },
      { id: 'api-users', parent: '02-api', order: 1, title: 'Users endpoint' },
      { id: 'api-orders', parent: '02-api', order: 2, title: 'Orders endpoint', depends_on: ['api-users'] },
      { id: 'api-docs', parent: '02-api', order: 3, title: 'OpenAPI documentation', depends_on: ['login'] },
      { id: '03-ui', title: 'Web UI' },
      { id: 'ui-shell', parent: '03-ui', order: 1, title: 'Application shell and routing', depends_on: ['login'] },
      { id: 'ui-theme', parent: '03-ui', order: 2, title: 'Theme and dark mode', depends_on: ['ui-shell'] },
    ],
  };
  const planFile = path.join(dir, 'plan.json');
  writeFileSync(planFile, JSON.stringify(plan));
  cli(dir, 'plan', 'import', planFile);
  advance(dir, 'login', 'done');
  advance(dir, 'signup', 'reviewing');
  advance(dir, 'audit', 'reviewing');
  // A worker that died without a handoff: one crash, session dead.
  advance(dir, 'reset', 'working');
  cli(dir, 'task', 'exited', 'reset', '--exit-code', '137');
  writeFileSync(outputLog(dir, 'reset'), 'cargo test -p auth\n   Compiling auth v0.1.0\n\x1b[31merror\x1b[0m: process killed (signal 9)\n');
  // Two crashes: stuck by the crash threshold.
  advance(dir, 'api-users', 'working');
  cli(dir, 'task', 'exited', 'api-users', '--exit-code', '1');
  cli(dir, 'task', 'exited', 'api-users', '--exit-code', '1');
  advance(dir, 'api-docs', 'working');
  writeFileSync(outputLog(dir, 'api-docs'), 'writing openapi.yaml\n');
  advance(dir, 'ui-shell', 'agent-review');
  return dir;
}

// ---- the console -----------------------------------------------------------------

/// Starts `warden serve` (under `wrap`, e.g. `ip netns exec NS`) and reads where it
/// listens from its first line.
function serve(dir, addr = '127.0.0.1:0', wrap = []) {
  const argv = [...wrap, BIN, '--dir', dir, '--json', 'serve', '--addr', addr];
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const stop = () => {
    if (proc.exitCode === null) proc.kill('SIGTERM');
  };
  cleanups.push(stop);
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: proc.stdout });
    lines.once('line', (l) => resolve({ info: JSON.parse(l), proc, stop }));
    proc.once('exit', (code) => reject(new Error(`warden serve exited ${code}: ${stderr}`)));
    setTimeout(() => reject(new Error('warden serve did not start in 10 s: ' + stderr)), 10000);
  });
}

async function browser(executablePath = CHROMIUM) {
  const profile = mkdtempSync(path.join(tmpdir(), 'warden-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: ARGS,
    viewport: { width: 1440, height: 900 },
  });
  cleanups.push(async () => {
    await ctx.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  });
  return ctx;
}

/// A page open on the console, with its console errors collected.
async function open(ctx, url) {
  const page = await ctx.newPage();
  const errors = [];
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => window.__warden && window.__warden.applied.length > 0);
  return { page, errors };
}

async function selectTask(page, id) {
  await page.click(`.row[data-id="${id}"]`);
  // The detail of this task, not of the one shown before.
  await page.waitForSelector(`#detail-body[data-loaded="${id}"]`);
}

/// Reads the toast on screen and dismisses it, so the next read waits for the next one
/// (a toast stays up for seconds; two actions in a row would otherwise read the first).
async function toast(page) {
  await page.waitForSelector('#toast:not([hidden])');
  return page.evaluate(() => {
    const t = document.getElementById('toast');
    const text = t.textContent;
    t.hidden = true;
    return text;
  });
}

/// Waits (by the page's own event, never by sleeping) until an update naming `id` is on
/// screen, and returns the wall-clock time it was.
/// Starts watching for `id` in an applied update and returns a function that waits for
/// it (10 s at most). The listener is installed, and awaited, before the caller makes the
/// change: otherwise an update that arrives first is missed and the wait never ends.
async function onScreen(page, id) {
  await page.evaluate((id) => {
    window.__onScreen = window.__onScreen || {};
    const on = (e) => {
      if (e.detail.ids.includes(id)) {
        document.removeEventListener('warden:applied', on);
        window.__onScreen[id] = e.detail.at;
      }
    };
    document.addEventListener('warden:applied', on);
  }, id);
  return async () => {
    await page.waitForFunction((id) => window.__onScreen[id] !== undefined, id, { timeout: 10000 });
    return page.evaluate((id) => window.__onScreen[id], id);
  };
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

// ---- the tests -------------------------------------------------------------------

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
let ws; // the shared mid-run workspace
let srv; // its console
let ctx; // the browser

test('the page loads with every task and no console errors', async () => {
  const { page, errors } = await open(ctx, srv.info.url);
  const ids = await page.$$eval('.row', (rs) => rs.map((r) => r.dataset.id));
  assert(ids.length === 12, `12 rows expected, got ${ids.length}: ${ids}`);
  assert(ids[0] === '01-auth' && ids[1] === 'login', `tree order: ${ids}`);
  const header = await page.textContent('header');
  assert(header.includes('1/9 leaves'), `progress in the header: ${header}`);
  const dead = await page.textContent('#dead-count');
  assert(dead.includes('1 dead'), `dead count: ${dead}`);
  assert(await page.textContent('.row[data-id="reset"] .c-dead') === '✗', 'reset is marked dead');
  assert(await page.textContent('.row[data-id="api-users"] .c-cr') === '2', 'api-users crashed twice');
  assert(await page.textContent('.row[data-id="api-orders"] .c-gate') === 'BLOCKED', 'api-orders is blocked');
  await page.screenshot({ path: path.join(SHOTS, 'overview.png') });
  await page.click('.tab[data-view="graph"]');
  await page.waitForSelector('#graph .node[data-id="ui-theme"]');
  await page.screenshot({ path: path.join(SHOTS, 'plan-graph.png') });
  await page.click('.tab[data-view="tree"]');
  await selectTask(page, 'reset');
  await page.waitForFunction(() => document.getElementById('d-output').textContent.includes('process killed'));
  const output = await page.textContent('#d-output');
  assert(!output.includes('\x1b'), 'terminal escapes are removed from the output');
  await page.screenshot({ path: path.join(SHOTS, 'crashed-task.png') });
  await selectTask(page, 'api-users');
  await page.screenshot({ path: path.join(SHOTS, 'stuck-task.png') });
  await selectTask(page, 'signup');
  await page.screenshot({ path: path.join(SHOTS, 'review.png') });
  await selectTask(page, 'api-orders');
  const blocked = await page.textContent('#d-blocked');
  assert(blocked === 'blocked by api-users (stuck)', `why api-orders waits: ${blocked}`);
  assert(errors.length === 0, `console errors: ${errors.join(' | ')}`);
  await page.close();
});

test('the header says whether a supervisor runs, and names a task whose steps keep failing', async () => {
  // A repository whose task cannot get its worktree (a file is in its place).
  const dir = mkdtempSync(path.join(tmpdir(), 'warden-web-sup-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const env = { ...process.env, GIT_AUTHOR_NAME: 'P', GIT_AUTHOR_EMAIL: 'p@example.invalid', GIT_COMMITTER_NAME: 'P', GIT_COMMITTER_EMAIL: 'p@example.invalid' };
  delete env.WARDEN_ROLE;
  delete env.WARDEN_TASK_ID;
  execFileSync('git', ['-C', dir, 'init', '-q', '-b', 'main'], { env });
  execFileSync('git', ['-C', dir, 'commit', '-q', '--allow-empty', '-m', 'initial'], { env });
  cli(dir, 'init');
  // No lease renewal (a commit) within the test: only the announcement can show the failure.
  const toml = path.join(dir, '.warden', 'warden.toml');
  writeFileSync(toml, readFileSync(toml, 'utf8').replace(/^lease_ttl_s = \d+/m, 'lease_ttl_s = 600'));
  assert(readFileSync(toml, 'utf8').includes('lease_ttl_s = 600'), 'lease_ttl_s set');
  cli(dir, 'task', 'create', 'a', '--work', 'true');
  mkdirSync(path.join(dir, '.warden', 'worktrees'), { recursive: true });
  writeFileSync(path.join(dir, '.warden', 'worktrees', 'a'), 'in the way\n');
  const s = await serve(dir);
  const { page, errors } = await open(ctx, s.info.url);
  const state = (want) =>
    page.waitForFunction((want) => document.getElementById('sup').dataset.state === want, want, { timeout: 20000 });
  await state('none');
  assert((await page.textContent('#sup')).includes('no supervisor'), 'no supervisor yet');
  const run = spawn(BIN, ['--dir', dir, 'run'], { stdio: 'ignore', env });
  cleanups.push(() => {
    if (run.exitCode === null) run.kill('SIGKILL');
  });
  // Seen without a commit: a supervisor's announcement and its failing steps are files.
  await state('failing');
  const text = await page.textContent('#sup');
  assert(text.includes(`supervisor pid ${run.pid}`) && text.includes('steps failing: a'), `badge: ${text}`);
  assert((await page.getAttribute('#sup', 'title')).includes('cannot prepare the worktree'), 'the error is in its title');
  await page.screenshot({ path: path.join(SHOTS, 'failing-steps.png') });
  run.kill('SIGTERM');
  await state('none');
  assert(errors.length === 0, `console errors: ${errors.join(' | ')}`);
  await page.close();
  s.stop();
});

test('a change by the CLI in another process is on screen within a second', async () => {
  const { page } = await open(ctx, srv.info.url);
  const seen = await onScreen(page, 'ui-theme');
  const before = Date.now();
  cli(ws, 'task', 'update', 'ui-theme', '--status', 'clarification', '--reason', 'which palette?');
  const committed = Date.now();
  const at = await seen();
  const status = await page.textContent('.row[data-id="ui-theme"] .status');
  assert(status === 'clarification', `row shows ${status}`);
  const latency = at - committed;
  console.log(`    latency: ${at - before} ms from starting the CLI, ${latency} ms after it exited`);
  assert(at - before < 1000, `on screen ${at - before} ms after the CLI started`);
  await page.close();
});

test('the output tail streams while the detail pane is open', async () => {
  const { page } = await open(ctx, srv.info.url);
  await selectTask(page, 'api-docs');
  await page.waitForFunction(() => document.getElementById('d-output').textContent.includes('openapi.yaml'));
  appendFileSync(outputLog(ws, 'api-docs'), 'validated 42 paths\n');
  await page.waitForFunction(() => document.getElementById('d-output').textContent.includes('validated 42 paths'));
  await page.close();
});

test('approve through the page makes the task done in the store', async () => {
  const { page } = await open(ctx, srv.info.url);
  await selectTask(page, 'signup');
  // The approve names the version the page shows: a round reviewed again meanwhile is
  // refused by the server (crates/web/tests/http.rs), not approved unseen.
  const shown = show(ws, 'signup').version;
  const sent = page.waitForRequest((r) => r.url().endsWith('/api/tasks/signup/approve'));
  await page.click('#actions button[data-action="approve"]');
  const body = JSON.parse((await sent).postData());
  assert(body.version === shown, `approve sent ${JSON.stringify(body)}, the page showed version ${shown}`);
  const t = await toast(page);
  assert(t.includes('signup: reviewing → done'), `toast: ${t}`);
  const task = show(ws, 'signup');
  assert(task.status === 'done' && task.passes, `store says ${task.status}`);
  await page.waitForFunction(() => document.querySelector('.row[data-id="signup"] .status').textContent === 'done');
  await page.close();
});

test('reject through the page sends the task back with the reason', async () => {
  const { page } = await open(ctx, srv.info.url);
  await selectTask(page, 'audit');
  await page.click('#actions button[data-action="reject"]');
  await page.waitForSelector('#modal:not([hidden])');
  // An empty reason is not sent.
  await page.click('#modal-yes');
  assert(await page.isVisible('#modal'), 'the dialog stays open without a reason');
  await page.fill('#modal-reason', 'CSRF tokens are not checked on logout');
  await page.click('#modal-yes');
  const t = await toast(page);
  assert(t.includes('audit: reviewing → working'), `toast: ${t}`);
  const task = show(ws, 'audit');
  assert(task.status === 'working', `store says ${task.status}`);
  assert((task.feedback || '').includes('CSRF tokens are not checked on logout'), `feedback: ${task.feedback}`);
  const prompt = cli(ws, 'prompt', 'audit');
  assert(prompt.includes('CSRF tokens are not checked on logout'), 'the reason is in the worker prompt');
  await page.close();
});

test('cancel asks first; retry and respawn act', async () => {
  const { page } = await open(ctx, srv.info.url);
  await selectTask(page, 'ui-shell');
  await page.click('#actions button[data-action="cancel"]');
  await page.waitForSelector('#modal:not([hidden])');
  await page.click('#modal-no');
  assert(show(ws, 'ui-shell').status === 'agent-review', 'keeping it changes nothing');
  // Every action names the version the page shows (a task that moved meanwhile is
  // refused by the server as a conflict: crates/web/tests/http.rs).
  const sentVersion = async (id, action, click) => {
    const shown = show(ws, id).version;
    const sent = page.waitForRequest((r) => r.url().endsWith(`/api/tasks/${id}/${action}`));
    await click();
    const body = JSON.parse((await sent).postData());
    assert(body.version === shown, `${action} sent ${JSON.stringify(body)}, the page showed version ${shown}`);
  };
  await page.click('#actions button[data-action="cancel"]');
  await sentVersion('ui-shell', 'cancel', () => page.click('#modal-yes'));
  assert((await toast(page)).includes('ui-shell: agent-review → cancelled'), 'cancelled');
  assert(show(ws, 'ui-shell').status === 'cancelled', 'the store says cancelled');
  await selectTask(page, 'api-users');
  await sentVersion('api-users', 'retry', () => page.click('#actions button[data-action="retry"]'));
  assert((await toast(page)).includes('api-users: stuck → working'), 'retried');
  assert(show(ws, 'api-users').status === 'working', 'the store says working');
  await selectTask(page, 'reset');
  await sentVersion('reset', 'respawn', () => page.click('#actions button[data-action="respawn"]'));
  assert((await toast(page)).includes('respawn requested'), 'respawn requested');
  assert(show(ws, 'reset').respawn_requested === true, 'the store has the request');
  // One request stands until the session starts: the button is off, and says why.
  await page.waitForFunction(() => document.querySelector('#actions button[data-action="respawn"]').disabled);
  const title = await page.getAttribute('#actions button[data-action="respawn"]', 'title');
  assert(title.includes('requested already'), `respawn button: ${title}`);
  await page.close();
});

test('a refused action shows Warden\'s refusal', async () => {
  const { page } = await open(ctx, srv.info.url);
  await selectTask(page, 'api-docs');
  // The page offers no approve for a working task; ask the server anyway.
  const answer = await page.evaluate(async () => {
    const csrf = document.querySelector('meta[name="warden-csrf"]').content;
    const r = await fetch('/api/tasks/api-docs/approve', { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Warden-Csrf': csrf }, body: '{}' });
    return { status: r.status, body: await r.json() };
  });
  assert(answer.status === 422, `status ${answer.status}`);
  assert(answer.body.error.refused === true && answer.body.error.code === 1, JSON.stringify(answer.body));
  assert(answer.body.error.message === 'task api-docs is working; only a task in reviewing can be approved', answer.body.error.message);
  await page.close();
});

test('a group offers only cancel, and the server names its tasks', async () => {
  const { page } = await open(ctx, srv.info.url);
  await selectTask(page, '02-api');
  for (const a of ['approve', 'reject', 'retry', 'respawn']) {
    const b = await page.$eval(`#actions button[data-action="${a}"]`, (e) => ({ disabled: e.disabled, title: e.title }));
    assert(b.disabled && b.title.includes('a group'), `${a}: ${JSON.stringify(b)}`);
  }
  assert(!(await page.$eval('#actions button[data-action="cancel"]', (e) => e.disabled)), 'cancel is offered');
  const answer = await page.evaluate(async () => {
    const csrf = document.querySelector('meta[name="warden-csrf"]').content;
    const r = await fetch('/api/tasks/02-api/retry', { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Warden-Csrf': csrf }, body: '{}' });
    return { status: r.status, body: await r.json() };
  });
  assert(answer.status === 422, `status ${answer.status}`);
  assert(answer.body.error.message.startsWith('02-api is a group: its status comes from the tasks in it'), answer.body.error.message);
  await page.close();
});

test('TASK.md with <script> and <img onerror> executes nothing', async () => {
  cli(ws, 'task', 'create', 'xss', '--title', '<img src=x onerror="window.__pwned=\'title\'">');
  addSection(ws, 'xss', [
    '## Notes',
    '<script>window.__pwned = "script"</script>',
    '',
    'Inline <img src=x onerror="window.__pwned=\'img\'"> and <svg onload="window.__pwned=\'svg\'"></svg>',
    '',
    '[click me](javascript:window.__pwned=\'link\') and ![pic](x" onerror="window.__pwned=\'attr\')',
  ].join('\n'));
  const { page, errors } = await open(ctx, srv.info.url);
  await page.waitForSelector('.row[data-id="xss"]');
  await selectTask(page, 'xss');
  await page.waitForSelector('[data-section="Notes"] .md');
  const html = await page.$eval('[data-section="Notes"] .md', (e) => e.innerHTML);
  const text = await page.$eval('[data-section="Notes"] .md', (e) => e.textContent);
  assert(text.includes('<script>window.__pwned = "script"</script>'), `the script is shown as text: ${text}`);
  assert(text.includes('<img src=x onerror='), 'the img is shown as text');
  const elements = await page.$$eval('#d-sections script, #d-sections img, #d-sections svg, #d-sections a[href^="javascript"], .row img', (e) => e.length);
  assert(elements === 0, `no active element was created: ${html}`);
  await page.click('[data-section="Notes"] .link').catch(() => {});
  const pwned = await page.evaluate(() => window.__pwned);
  assert(pwned === undefined, `the payload ran: ${pwned}`);
  assert(errors.length === 0, `console errors: ${errors.join(' | ')}`);
  await page.close();
});

test('a cross-site POST is refused and changes nothing', async () => {
  const target = `${srv.info.url}api/tasks/api-orders/cancel`;
  // An attacker's page on another site (localhost is another site than 127.0.0.1).
  const evil = createServer((req, res) => {
    res.setHeader('Content-Type', 'text/html');
    res.end(`<!doctype html><form id=f method=POST action="${target}" enctype="text/plain">
      <input name='{"x":"' value='"}'></form>
      <script>
        fetch(${JSON.stringify(target)}, { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body: '{}' })
          .finally(() => document.getElementById('f').submit());
      </script>`);
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  cleanups.push(() => evil.close());
  const page = await ctx.newPage();
  const statuses = [];
  page.on('response', (r) => r.url().startsWith(target) && statuses.push(r.status()));
  const nav = page.waitForResponse((r) => r.url() === target && r.request().resourceType() === 'document');
  await page.goto(`http://localhost:${evil.address().port}/`);
  const res = await nav;
  assert(res.status() === 403, `the form post got ${res.status()}`);
  const body = await res.json();
  assert(body.error && body.error.refused, JSON.stringify(body));
  assert(show(ws, 'api-orders').status === 'pending', 'the store is unchanged');
  // Without a browser: a forged Origin, and no CSRF header.
  const direct = await fetch(target, { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example' }, body: '{}' });
  assert(direct.status === 403, `a POST without the CSRF header got ${direct.status}`);
  assert(show(ws, 'api-orders').status === 'pending', 'the store is unchanged');
  await page.close();
});

test('off loopback, a request without the token is refused (401)', async () => {
  const ns = `warden-web-${process.pid}`;
  const ip = (...a) => execFileSync('ip', a, { stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    ip('netns', 'add', ns);
  } catch (e) {
    const why = `cannot create a network namespace (${String(e.stderr || e.message).trim()}); run as root with iproute2`;
    if (CI) throw new Error(why);
    return `SKIPPED: ${why}`;
  }
  cleanups.push(() => execFileSync('ip', ['netns', 'del', ns]));
  // A host of our own: an address that is not loopback, inside a namespace nothing
  // else can reach.
  const inNs = (...a) => ip('netns', 'exec', ns, ...a);
  inNs('ip', 'link', 'set', 'lo', 'up');
  inNs('ip', 'link', 'add', 'wv0', 'type', 'veth', 'peer', 'name', 'wv1');
  inNs('ip', 'addr', 'add', '198.18.0.1/24', 'dev', 'wv0');
  inNs('ip', 'link', 'set', 'wv0', 'up');
  inNs('ip', 'link', 'set', 'wv1', 'up');
  const remote = await serve(ws, '198.18.0.1:7777', ['ip', 'netns', 'exec', ns]);
  assert(remote.info.token_required && remote.info.token_generated && !remote.info.loopback, JSON.stringify(remote.info));
  const wrapper = path.join(SHOTS, '..', `chromium-in-${ns}`);
  writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${ns} ${CHROMIUM} "$@"\n`);
  chmodSync(wrapper, 0o755);
  cleanups.push(() => rmSync(wrapper, { force: true }));
  const nsCtx = await browser(wrapper);
  const page = await nsCtx.newPage();
  for (const p of ['/', '/api/events', '/assets/app.js', '/api/tasks/login']) {
    const r = await page.goto('http://198.18.0.1:7777' + p);
    assert(r.status() === 401, `${p} without the token got ${r.status()}`);
  }
  const wrong = await page.goto('http://198.18.0.1:7777/?token=' + 'f'.repeat(32));
  assert(wrong.status() === 401, `a wrong token got ${wrong.status()}`);
  const ok = await page.goto(remote.info.url);
  assert(ok.status() === 200, `with the token: ${ok.status()}`);
  assert(!page.url().includes('token='), `the token leaves the address bar: ${page.url()}`);
  await page.waitForFunction(() => window.__warden && window.__warden.applied.length > 0);
  assert(await page.$$eval('.row', (r) => r.length) > 0, 'the board loads with the token');
  await nsCtx.close();
  remote.stop();
});

// ---- the run ---------------------------------------------------------------------

async function main() {
  if (!existsSync(BIN)) throw new Error(`no warden binary at ${BIN}; build it with cargo build`);
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}; apt-get install chromium`);
  ws = midRunWorkspace();
  srv = await serve(ws);
  ctx = await browser();
  let passed = 0;
  let failed = 0;
  for (const t of tests) {
    const start = Date.now();
    try {
      const note = await t.fn();
      console.log(`ok   ${t.name} (${Date.now() - start} ms)${note ? ' — ' + note : ''}`);
      passed += 1;
    } catch (e) {
      console.log(`FAIL ${t.name}\n     ${String(e.stack || e).split('\n').join('\n     ')}`);
      failed += 1;
    }
  }
  console.log(`screenshots: ${SHOTS}`);
  console.log(`${passed} passed, ${failed} failed`);
  return failed;
}

let failures = 1;
try {
  failures = await main();
} catch (e) {
  console.log(`FAIL setup: ${e.stack || e}`);
  console.log('0 passed, 1 failed');
} finally {
  for (const c of cleanups.reverse()) {
    try {
      await c();
    } catch {
      // Best effort: the next cleanup still runs.
    }
  }
}
process.exit(failures ? 1 : 0);
