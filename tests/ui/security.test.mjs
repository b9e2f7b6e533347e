// A web page of another origin, in a real headless Chromium, tries to drive
// a running `awr serve` (docs/security.md): a `no-cors` POST of an inline
// workflow, a form POST, a `fetch` of the run list and an `EventSource` on a
// run's events. Nothing may run, nothing be created, nothing be read. The
// server runs with --no-auth, so the Host, Origin and content-type checks
// alone stand between the page and the server; its log must name each
// refusal.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { launch, startServer, waitFor } from './harness.mjs';

let server;
let browser;
let evil;

/** The attacker's page: what it tries, each result kept in `window.results`. */
function attackerPage(target, runId, marker) {
  const workflow = `name: pwn\nsteps:\n  - {id: pwn, command: "touch ${marker}"}\n`;
  const body = JSON.stringify({ workflow });
  // A form with enctype text/plain sends `NAME=VALUE`: a name that opens a
  // JSON document and a value that closes it make the body JSON.
  const formName = body.slice(0, -1) + ', "x": "';
  return `<!doctype html><html><body>
<iframe name="sink" style="display:none"></iframe>
<form id="form" method="POST" action="${target}/workflows" enctype="text/plain" target="sink">
  <input type="hidden" name='${formName.replaceAll("'", '&#39;')}' value='"}'>
</form>
<script>
window.results = {};
(async () => {
  try {
    const r = await fetch(${JSON.stringify(`${target}/workflows`)}, {
      method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body: ${JSON.stringify(body)},
    });
    window.results.noCors = 'sent (' + r.type + ')';
  } catch (e) { window.results.noCors = 'failed: ' + e.message; }

  document.getElementById('form').submit();
  window.results.form = 'submitted';

  try {
    const r = await fetch(${JSON.stringify(`${target}/workflows`)});
    window.results.read = 'read: ' + (await r.text());
  } catch (e) { window.results.read = 'blocked: ' + e.message; }

  await new Promise((resolve) => {
    const es = new EventSource(${JSON.stringify(`${target}/workflows/${runId}/events/sse?offset=0`)});
    const got = [];
    es.onmessage = (m) => got.push(m.data);
    es.onerror = () => { es.close(); window.results.stream = got.length ? 'read: ' + got.join('|') : 'error, nothing read'; resolve(); };
    setTimeout(() => { es.close(); window.results.stream = got.length ? 'read: ' + got.join('|') : 'nothing read'; resolve(); }, 5000);
  });
  window.results.done = true;
})();
</script></body></html>`;
}

before(async () => {
  server = await startServer(
    { 'hello.yaml': 'name: hello\nsteps:\n  - {id: say, command: "echo hello"}\n' },
    { args: ['--no-auth'], env: { AWR_LOG: 'info' } },
  );
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
  await new Promise((resolve) => (evil ? evil.close(resolve) : resolve()));
});

describe('a page of another origin', () => {
  test('can neither start, control nor read runs', async () => {
    const runId = await server.start('hello.yaml');
    await server.waitStatus(runId, 'completed');
    const before = (await server.api('/workflows')).runs.length;
    const marker = path.join(server.root, 'pwned');
    // The attacker's page is served by another server, on another port.
    evil = http.createServer((request, response) => {
      response.writeHead(200, { 'Content-Type': 'text/html' });
      response.end(attackerPage(server.base, runId, marker));
    });
    await new Promise((resolve) => evil.listen(0, '127.0.0.1', resolve));
    const { page } = browser;
    await page.goto(`http://127.0.0.1:${evil.address().port}/`);
    const results = await waitFor(() => page.evaluate(() => (window.results?.done ? window.results : null)), {
      what: 'the attacker page to try everything',
    });
    // Nothing was read: the list's fetch is blocked, the stream brought nothing.
    assert.match(results.read, /^blocked/, JSON.stringify(results));
    assert.doesNotMatch(results.stream, /^read/, JSON.stringify(results));
    // Nothing ran and nothing was created (the form's navigation done).
    await waitFor(() => /refused/.test(server.output()) && (server.output().match(/refused/g) ?? []).length >= 4, {
      what: 'the server to log its refusals',
    });
    assert.equal((await server.api('/workflows')).runs.length, before, 'no run was created');
    assert.equal(existsSync(marker), false, 'the inline command never ran');
    // The log names each refusal: the two POSTs, the read and the stream.
    const refusals = server.output().split('\n').filter((l) => l.includes('refused'));
    const evilOrigin = `http://127.0.0.1:${evil.address().port}`;
    assert.ok(refusals.some((l) => l.includes('POST') && l.includes('/workflows') && l.includes(evilOrigin)), refusals.join('\n'));
    assert.ok(refusals.some((l) => l.includes('GET') && l.includes('/workflows') && !l.includes('/events')), refusals.join('\n'));
    assert.ok(refusals.some((l) => l.includes(`/workflows/${runId}/events/sse`)), refusals.join('\n'));
    assert.ok(refusals.filter((l) => l.includes('POST')).length >= 2, refusals.join('\n'));
  });
});

describe('the token the server made', () => {
  test('leaves the address bar for the tab and goes with every request', async () => {
    const own = await startServer({ 'hello.yaml': 'name: hello\nsteps:\n  - {id: say, command: "echo hello"}\n' });
    const tab = await browser.context.newPage();
    try {
      const runId = await own.start('hello.yaml');
      const sent = [];
      tab.on('request', (request) => sent.push({ url: request.url(), headers: request.headers() }));
      // The address `awr serve` prints: the token in the fragment.
      await tab.goto(`${own.url}/#token=${own.token}`);
      await waitFor(() => tab.evaluate(() => location.hash === '#/'), { what: 'the page to take the token' });
      assert.equal(await tab.evaluate(() => location.href.includes('token')), false);
      assert.equal(await tab.evaluate(() => sessionStorage.getItem('awr.token')), own.token);
      // The list loads with it, as does a run's stream after a reload.
      await waitFor(() => tab.$(`[href="#/runs/${runId}"], [data-run-id="${runId}"]`), { what: 'the run in the list' });
      await tab.goto(`${own.url}/#/runs/${runId}`);
      await waitFor(() => sent.some((r) => r.url.includes('/events/sse')), { what: 'the run stream' });
      const api = sent.filter((r) => r.url.includes('/workflows'));
      assert.ok(api.length > 0);
      for (const request of api) {
        const carried = request.headers.authorization === `Bearer ${own.token}` || request.url.includes(`access_token=${own.token}`);
        assert.ok(carried, `${request.url} carries the token`);
      }
      // No request for the page or its files carries it (nor a Referer with it).
      for (const request of sent.filter((r) => !r.url.includes('/workflows'))) {
        assert.equal(request.url.includes(own.token), false, request.url);
        assert.equal((request.headers.referer ?? '').includes(own.token), false, request.headers.referer);
      }
    } finally {
      await tab.close();
      await own.stop();
    }
  });
});
