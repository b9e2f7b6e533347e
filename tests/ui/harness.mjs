// What the browser tests share: a real `awr serve` on 127.0.0.1 with a
// temporary storage and workflow root, a TCP proxy in front of it that a
// test can cut (to force the browser's EventSource to reconnect), and the
// system Chromium, driven by playwright-core.
//
// Nothing here skips: a missing `awr` binary or Chromium is an error, so
// the tests fail rather than pass by not running.

import { execFile, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';

const execFileAsync = promisify(execFile);

const here = path.dirname(fileURLToPath(import.meta.url));
const workspace = path.resolve(here, '../..');

/** Where screenshots go (kept as CI artifacts). */
export const artifacts = process.env.AWR_UI_ARTIFACTS ?? path.join(workspace, 'target', 'ui-artifacts');

/** The `awr` binary: `AWR_BIN` (set by `cargo xtask test`), else the debug build. */
export function awrBin() {
  const bin = process.env.AWR_BIN ?? path.join(workspace, 'target', 'debug', 'awr');
  if (!existsSync(bin)) throw new Error(`no awr binary at ${bin}: build it (cargo build -p cli) or set AWR_BIN`);
  return bin;
}

export const CHROMIUM = process.env.AWR_CHROMIUM ?? '/usr/bin/chromium';

/** Polls `check` until it returns a truthy value (returned), or fails after `timeout` ms. */
export async function waitFor(check, { timeout = 20_000, interval = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((resolve) => setTimeout(resolve, interval));
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * A TCP proxy to `port` on 127.0.0.1; `block()` drops every connection and
 * refuses new ones until `unblock()`; `stall()` keeps the open event
 * streams (SSE) open but forwards nothing more to the browser on them (a
 * half-open connection: no error, no bytes), while other and new
 * connections work.
 */
async function startProxy(port) {
  const sockets = new Set();
  const pairs = new Set();
  let blocked = false;
  const server = net.createServer((client) => {
    if (blocked) {
      client.destroy();
      return;
    }
    const upstream = net.connect(port, '127.0.0.1');
    const pair = [client, upstream];
    // A kept-alive connection carries one request after another: it is an
    // event stream while its latest request is one.
    client.on('data', (chunk) => {
      const request = /^[A-Z]+ (\S+) HTTP\//.exec(chunk.toString('latin1'));
      if (!request) return;
      if (/\/events\/sse(\?|$)/.test(request[1])) pairs.add(pair);
      else pairs.delete(pair);
    });
    upstream.on('close', () => pairs.delete(pair));
    for (const s of pair) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        sockets.delete(s);
        for (const other of pair) other.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    drops: 0,
    block() {
      blocked = true;
      this.drops += sockets.size;
      for (const s of sockets) s.destroy();
    },
    unblock() {
      blocked = false;
    },
    stalls: 0,
    stall() {
      for (const [client, upstream] of pairs) {
        upstream.unpipe(client);
        // Read and drop what the server sends, so it is not held back.
        upstream.on('data', () => {});
        this.stalls += 1;
      }
      pairs.clear();
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Starts `awr serve` on a free port with a fresh storage, its workflow root
 * holding `files` (path → text or JSON value). Returns the server's URL,
 * the proxy's URL (what the browser uses), and helpers.
 */
export async function startServer(files = {}, { heartbeat, args: extra = [], env = {} } = {}) {
  const root = mkdtempSync(path.join(tmpdir(), 'awr-ui-'));
  const storage = path.join(root, 'storage');
  mkdirSync(path.join(root, 'gates'), { recursive: true });
  for (const [name, content] of Object.entries(files)) {
    const file = path.join(root, name);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, typeof content === 'string' ? content.replaceAll('$ROOT', root) : JSON.stringify(content));
    if (typeof content === 'string' && content.startsWith('#!')) chmodSync(file, 0o755);
  }
  const port = await freePort();
  const args = ['--storage', storage, 'serve', '--addr', `127.0.0.1:${port}`, '--root', root];
  if (heartbeat) args.push('--heartbeat', String(heartbeat));
  args.push(...extra);
  // The server makes its own token unless the test gives flags that say otherwise.
  const childEnv = { ...process.env, ...env };
  delete childEnv.AWR_TOKEN;
  const child = spawn(awrBin(), args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: childEnv });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  let exited = null;
  child.on('exit', (code, signal) => (exited = { code, signal }));
  const base = `http://127.0.0.1:${port}`;
  // The token the server made, from the page's address it prints (none
  // with --no-auth).
  const opened = await waitFor(() => {
    if (exited) throw new Error(`awr serve exited (${JSON.stringify(exited)}): ${output}`);
    return /awr: open http:\/\/\S+\/(#token=([0-9a-f]+))?\n/.exec(output);
  }, { what: 'awr serve to print its address', timeout: 30_000 });
  const token = opened[2] ?? null;
  const auth = token ? { Authorization: `Bearer ${token}` } : {};
  await waitFor(async () => {
    if (exited) throw new Error(`awr serve exited (${JSON.stringify(exited)}): ${output}`);
    const r = await fetch(`${base}/healthz`, { headers: auth });
    return r.ok;
  }, { what: 'awr serve to answer /healthz', timeout: 30_000 });
  const proxy = await startProxy(port);

  const server = {
    root,
    storage,
    base,
    proxy,
    url: `http://127.0.0.1:${proxy.port}`,
    token,
    /** Headers that carry the server's token. */
    auth,
    /**
     * The page's address at route `hash` (`#/runs/ID`), through the proxy,
     * with the token as a user's first visit has it (the page moves it out
     * of the address bar into the tab's storage).
     */
    page(hash = '#/') {
      return token ? `${server.url}/?token=${token}${hash}` : `${server.url}/${hash}`;
    },
    output: () => output,
    /** JSON from the server (not through the proxy); throws on an error status. */
    async api(pathname, body) {
      const init = body === undefined
        ? { headers: auth }
        : { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify(body) };
      const r = await fetch(`${base}${pathname}`, init);
      const text = await r.text();
      if (!r.ok) throw new Error(`${init.method ?? 'GET'} ${pathname}: ${r.status} ${text}`);
      return text ? JSON.parse(text) : null;
    },
    /** Starts a run of a workflow file under the root; returns its id. */
    async start(file, input = null) {
      const answer = await server.api('/workflows', { path: file, input });
      return answer.runId;
    },
    async status(runId) {
      return (await server.api(`/workflows/${runId}`)).status;
    },
    async waitStatus(runId, wanted, timeout = 30_000) {
      return waitFor(async () => (await server.status(runId)) === wanted, { what: `run ${runId} ${wanted}`, timeout });
    },
    /** The run's events on record so far (`awr events RUN --json` on the storage: its log, not the page). */
    async events(runId) {
      const { stdout } = await execFileAsync(awrBin(), ['--storage', storage, 'events', runId, '--json'], { cwd: root, maxBuffer: 64 << 20 });
      return stdout.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
    },
    /** Waits until the run's log holds an event that `match` accepts; returns it. */
    async waitEvent(runId, match, what = 'an event', timeout = 30_000) {
      return waitFor(async () => (await server.events(runId)).find(match), { what: `${what} in run ${runId}`, timeout });
    },
    /**
     * Starts `awr run FILE` in a process of its own on the server's storage
     * (as a user would beside the server); resolves once its run is on
     * record, with the run id and the process.
     */
    async awrRun(file) {
      const known = new Set((await server.api('/workflows?limit=1000')).runs.map((r) => r.runId));
      const proc = spawn(awrBin(), ['--storage', storage, 'run', file], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, RUST_LOG: 'warn' },
      });
      let said = '';
      proc.stdout.on('data', (d) => (said += d));
      proc.stderr.on('data', (d) => (said += d));
      const exit = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
      let ended = null;
      exit.then((e) => (ended = e));
      const runId = await waitFor(async () => {
        if (ended) throw new Error(`awr run ended (${JSON.stringify(ended)}): ${said}`);
        const runs = (await server.api('/workflows?limit=1000')).runs;
        return runs.find((r) => !known.has(r.runId))?.runId;
      }, { what: `awr run ${file} to record its run` });
      return { runId, process: proc, exit, output: () => said };
    },
    /** Lets a gated command node of run `runId` go on. */
    open(runId) {
      writeFileSync(path.join(root, 'gates', runId), '');
    },
    async stop() {
      await proxy.close();
      if (!exited) {
        child.kill('SIGTERM');
        await waitFor(() => exited, { what: 'awr serve to exit', timeout: 15_000 }).catch(() => child.kill('SIGKILL'));
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
  return server;
}

/** The system Chromium, headless, with a fresh profile. */
export async function launch() {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: install the Debian package \`chromium\``);
  const profile = mkdtempSync(path.join(tmpdir(), 'awr-ui-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    // The flags below make it headless; playwright adds none of its own.
    headless: false,
    viewport: { width: 1400, height: 900 },
    args: [
      '--headless=new',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  page.on('pageerror', (error) => errors.push(error.message));
  return {
    context,
    page,
    errors,
    async screenshot(name) {
      mkdirSync(artifacts, { recursive: true });
      await page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });
    },
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// ------------------------------------------------------------ workflows

/** Mock agents' fixture: one call that streams `chunks` as text deltas. */
export function streaming(chunks, { usage = { inputTokens: 100, outputTokens: 20 }, cost = 0.0012 } = {}) {
  return {
    calls: [
      {
        output: { text: chunks.join(''), usage, totalCostUsd: cost, numTurns: 1 },
        events: [
          { type: 'agent:thinking:delta', content: 'let me think' },
          { type: 'agent:tool:use', toolUseId: 'tu_1', toolName: 'search', toolInput: { q: 'heat pumps' } },
          { type: 'agent:tool', toolUseId: 'tu_1', toolName: 'search', toolInput: { q: 'heat pumps' }, toolOutput: { hits: 2 }, durationMs: 5 },
          ...chunks.map((content) => ({ type: 'agent:text:delta', content })),
        ],
      },
    ],
  };
}

/**
 * A run that streams text, waits at a command node until the test opens
 * its gate (`server.open(runId)`), then streams more text.
 */
export const LIVE = {
  'live.yaml': `name: live
agents:
  writer: {provider: mock}
  teller: {provider: mock}
nodes:
  - id: writer
    agent: writer
  - id: wait
    command: 'while [ ! -f "$ROOT/gates/$AWR_RUN_ID" ]; do sleep 0.05; done; echo opened'
  - id: teller
    agent: teller
edges:
  - {from: writer, to: wait}
  - {from: wait, to: teller}
`,
  'fixtures/live/writer.json': streaming(['alpha ', 'beta ', 'gamma']),
  'fixtures/live/teller.json': streaming(['one ', 'two ', 'three'], { usage: { inputTokens: 50, outputTokens: 7 }, cost: 0.0005 }),
};

/** A run whose one node runs `live.yaml` as a sub-workflow. */
export const NESTED = {
  'nested.yaml': `name: nested
nodes:
  - id: sub
    call_workflow: live.yaml
`,
};

/** A node that fails twice with a transient error: the run fails at attempt 2. */
export const FLAKY = {
  'flaky.yaml': `name: flaky
agents:
  writer: {provider: mock}
  flaky: {provider: mock}
nodes:
  - id: writer
    agent: writer
  - id: flaky
    agent: flaky
    retry: {max_attempts: 2, backoff: 10ms}
edges:
  - {from: writer, to: flaky}
`,
  'fixtures/flaky/writer.json': streaming(['fine']),
  'fixtures/flaky/flaky.json': {
    calls: [
      { output: { error: { errorType: 'rate_limit', message: 'slow down' } } },
      { output: { error: { errorType: 'rate_limit', message: 'slow down again' } } },
    ],
  },
};

/** A run of at least `events` events: a for_each node whose items stream many text deltas. */
export function big(events = 10_000, items = 50) {
  const perItem = Math.ceil(events / items);
  const calls = [];
  for (let i = 0; i < items; i += 1) {
    const chunks = Array.from({ length: perItem }, (_, k) => `item ${i} chunk ${k}. `);
    calls.push({
      output: { text: chunks.join(''), usage: { inputTokens: 200, outputTokens: perItem }, totalCostUsd: 0.001, numTurns: 1 },
      events: chunks.map((content) => ({ type: 'agent:text:delta', content })),
    });
  }
  return {
    'big.yaml': `name: big
input: {items: [${Array.from({ length: items }, (_, i) => i).join(', ')}]}
agents:
  worker: {provider: mock}
nodes:
  - id: work
    agent: worker
    for_each: {items: input.items, max_concurrency: 4}
`,
    'fixtures/big/work.json': { calls },
  };
}

/**
 * One Claude Code agent, `coder`, played by a fake CLI: its first turn
 * stays open until the test opens the run's gate (`server.open(runId)`); a
 * resumed session (a message delivered, a resume) answers at once with
 * `heard: PROMPT`. It is what a message is sent to while the run is live.
 */
export const CHAT = {
  'fake-claude': String.raw`#!/bin/sh
prompt=$(printf '%s' "$2" | awk 'BEGIN { ORS = "" } NR > 1 { print "\\n" } { print }')
sid=""
resume=""
while [ $# -gt 0 ]; do
  case "$1" in
    --session-id) sid="$2"; shift ;;
    --resume) sid="$2"; resume=1; shift ;;
  esac
  shift
done
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","model":"m"}'
if [ -z "$resume" ]; then
  while [ ! -f "$ROOT/gates/$AWR_RUN_ID" ]; do sleep 0.02; done
fi
printf '%s\n' '{"type":"result","subtype":"success","is_error":false,"result":"heard: '"$prompt"'","session_id":"'"$sid"'","num_turns":1,"duration_ms":5,"usage":{"input_tokens":3,"output_tokens":2}}'
`,
  'chat.yaml': `name: chat
agents:
  coder:
    provider: claude-code
    executable: '$ROOT/fake-claude'
nodes:
  - id: coder
    agent: coder
`,
};
