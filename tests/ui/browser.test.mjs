// The timeline page in a real headless Chromium against a real `awr serve`
// (see harness.mjs). Every wait is on a condition; screenshots go to
// target/ui-artifacts/.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { artifacts, big, FLAKY, LIVE, launch, NESTED, startServer, waitFor } from './harness.mjs';

let server;
let browser;

before(async () => {
  server = await startServer({ ...LIVE, ...FLAKY, ...NESTED, ...big() });
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** Opens a run's page through the proxy. */
async function openRun(runId) {
  await browser.page.goto(server.page(`#/runs/${runId}`));
}

const row = (nodeId) => `.node[data-node-id="${nodeId}"] > .row`;
const node = (nodeId) => `.node[data-node-id="${nodeId}"]`;

/** The text of the selected node run's streamed blocks, as shown. */
async function shownText(page) {
  return page.$$eval('#detail .blk.text', (els) => els.map((el) => el.textContent).join(''));
}

describe('timeline', () => {
  test('the step tree appears and ticks during a live run', async () => {
    const { page } = browser;
    const runId = await server.start('live.yaml');
    await openRun(runId);
    await page.waitForSelector(`${node('writer')}[data-status="completed"]`);
    await page.waitForSelector(`${node('wait')}[data-status="running"]`);
    const time = `${row('wait')} .time`;
    const first = await page.textContent(time);
    const bar = () => page.$eval(node('wait'), (el) => Number(el.style.getPropertyValue('--d')));
    const width = await bar();
    // A running step ticks: its duration and its bar grow without a new event.
    await page.waitForFunction(([sel, was]) => document.querySelector(sel)?.textContent !== was, [time, first]);
    await waitFor(async () => (await bar()) > width, { what: 'the running bar to grow' });
    assert.equal(await page.textContent('#run-status'), 'running');
    await page.click(row('writer'));
    await page.waitForFunction(() => document.querySelector('#detail .blk.text')?.textContent === 'alpha beta gamma');
    assert.match(await page.textContent('#detail .blk.tool'), /search[\s\S]*tu_1[\s\S]*heat pumps[\s\S]*hits/);
    assert.equal(await page.textContent('#detail .blk.thinking div'), 'let me think');
    await browser.screenshot('live-running');

    server.open(runId);
    await page.waitForSelector(`${node('teller')}[data-status="completed"]`);
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'completed');
    // Tokens and cost per step, summed into the run.
    assert.equal(await page.textContent(`${row('writer')} .tokens`), '120 tok');
    assert.equal(await page.textContent(`${row('teller')} .tokens`), '57 tok');
    assert.match(await page.textContent('[data-fact="tokens"]'), /150 in · 27 out/);
    assert.match(await page.textContent('[data-fact="cost"]'), /\$0\.0017/);
    await browser.screenshot('live-completed');
    assert.deepEqual(browser.errors, []);
  });

  test('streamed text is not duplicated after the connection drops mid-run', async () => {
    const { page } = browser;
    const runId = await server.start('live.yaml');
    await openRun(runId);
    await page.waitForSelector(`${node('wait')}[data-status="running"]`);
    await page.click(row('writer'));
    await page.waitForFunction(() => document.querySelector('#detail .blk.text')?.textContent === 'alpha beta gamma');
    const errorsBefore = await page.evaluate(() => window.awrTimeline.view.stats.errors);

    // Cut every connection and refuse new ones while the run goes on.
    server.proxy.block();
    await page.waitForFunction((n) => window.awrTimeline.view.stats.errors > n, errorsBefore);
    server.open(runId);
    await server.waitStatus(runId, 'completed');
    server.proxy.unblock();

    // The browser reconnects by itself (Last-Event-ID) and gets the rest once.
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'completed', null, { timeout: 30_000 });
    assert.equal(await shownText(page), 'alpha beta gamma');
    await page.click(row('teller'));
    await page.waitForFunction(() => document.querySelector('#detail .blk.text')?.textContent === 'one two three');
    assert.equal(await shownText(page), 'one two three');
    const stats = await page.evaluate(() => {
      const run = window.awrTimeline.view.timeline.root;
      return { events: run.events, lastOffset: run.lastOffset, duplicates: run.duplicates, gaps: run.gaps, opens: window.awrTimeline.view.stats.opens };
    });
    const log = await (await fetch(`${server.base}/workflows/${runId}/events?offset=0`, { headers: server.auth })).text();
    const stored = log.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l)).filter((e) => typeof e.offset === 'number');
    assert.equal(stats.lastOffset, stored.length);
    assert.equal(stats.events, stored.length, 'every stored event folded once');
    assert.equal(stats.gaps, 0);
    assert.equal(stats.duplicates, 0, 'the server resumed after Last-Event-ID');
    assert.equal(stats.opens, 1, 'the browser reconnected the same EventSource');
    assert.ok(server.proxy.drops > 0, 'the proxy cut live connections');
    await browser.screenshot('reconnected');
  });

  test('a sub-workflow streams live nested under its node, its usage summed into it', async () => {
    const { page } = browser;
    const runId = await server.start('nested.yaml');
    await openRun(runId);
    const inner = `${node('sub')} > .kids ${node('wait')}[data-status="running"]`;
    await page.waitForSelector(inner);
    const childRunId = await page.$eval(inner, (el) => el.dataset.runId);
    assert.notEqual(childRunId, runId);
    await browser.screenshot('nested-running');
    server.open(childRunId);
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'completed');
    await page.waitForSelector(`${node('sub')} > .kids ${node('teller')}[data-status="completed"]`);
    assert.equal(await page.textContent(`${row('sub')} .tokens`), '177 tok');
    assert.equal(await page.textContent(`${row('sub')} .cost`), '$0.0017');
  });

  test('a failed step is highlighted with its attempt number', async () => {
    const { page } = browser;
    const runId = await server.start('flaky.yaml');
    await openRun(runId);
    const failed = `${node('flaky')}.failed[data-status="failed"]`;
    await page.waitForSelector(failed);
    assert.equal(await page.textContent(`${row('flaky')} .attempt`), 'attempt 2');
    assert.match(await page.textContent(`${row('flaky')} .preview`), /rate_limit: slow down again/);
    const colors = await page.$eval(`${row('flaky')}`, (el) => getComputedStyle(el).backgroundColor);
    const plain = await page.$eval(`${row('writer')}`, (el) => getComputedStyle(el).backgroundColor);
    assert.notEqual(colors, plain, 'the failed row stands out');
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'failed');
    assert.match(await page.textContent('#run-error'), /flaky/);
    await page.click(row('flaky'));
    await page.waitForSelector('#detail .error-line');
    const lines = await page.$$eval('#detail .error-line', (els) => els.map((el) => el.textContent));
    assert.deepEqual(lines, [
      'attempt 1 rate_limit: slow down',
      'attempt 2 rate_limit: slow down again',
    ]);
    // Each error is shown once in the detail: not again as a block, nor as the node's failure.
    const detail = await page.textContent('#detail');
    assert.equal(detail.split('slow down again').length - 1, 1, detail);
    assert.equal(detail.split('slow down').length - 1, 2, detail);
    await browser.screenshot('failed-step');
  });

  test('the replay button plays a finished run again at its pace, from its log', async () => {
    const { page } = browser;
    const runId = await server.start('flaky.yaml');
    await server.waitStatus(runId, 'failed');
    const log = await server.events(runId);
    await openRun(runId);
    await page.waitForSelector(`${node('flaky')}.failed`);
    const streams = [];
    const listen = (request) => {
      if (request.url().includes('/events/sse')) streams.push(request.url());
    };
    page.on('request', listen);
    await page.selectOption('#replay-speed', '100');
    await page.click('#replay');
    await page.waitForFunction(() => document.querySelector('#stream-state')?.textContent.includes('replay at 100×'));
    assert.match(await page.evaluate(() => location.hash), new RegExp(`^#/runs/${runId}\\?replay=100$`));
    // Every event of the log folded once, and the run shown as it ended.
    await page.waitForFunction((last) => window.awrTimeline.view?.timeline.root.lastOffset === last, log.length);
    await page.waitForSelector(`${node('flaky')}.failed[data-status="failed"]`);
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'failed');
    page.off('request', listen);
    assert.ok(streams.length >= 1, 'the page opened a stream');
    assert.ok(streams.every((u) => u.includes('replay=100') && u.includes('offset=0')), streams.join('\n'));
    assert.equal(await server.status(runId), 'failed', 'nothing ran again');
    assert.deepEqual(await server.events(runId), log, 'nothing was written');
    await browser.screenshot('replay');
  });

  test('the cancel button cancels the run', async () => {
    const { page } = browser;
    const runId = await server.start('live.yaml');
    await openRun(runId);
    await page.waitForSelector(`${node('wait')}[data-status="running"]`);
    await page.waitForFunction(() => !document.querySelector('#cancel').disabled);
    await page.click('#cancel');
    await server.waitStatus(runId, 'cancelled');
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'cancelled');
    await page.waitForSelector(`${node('wait')}[data-status="cancelled"]`);
    assert.ok(await page.$eval('#cancel', (el) => el.disabled));
    await browser.screenshot('cancelled');
  });

  test('the run list shows runs with status counts and opens a run', async () => {
    const { page } = browser;
    const runId = await server.start('flaky.yaml');
    await server.waitStatus(runId, 'failed');
    await page.goto(server.page('#/'));
    await page.waitForSelector(`tr[data-run-id="${runId}"]`);
    const failed = Number(await page.textContent('.chip[data-status="failed"] b'));
    const listed = await server.api('/workflows?status=failed');
    assert.equal(failed, listed.counts.failed);
    assert.ok(failed >= 1);
    await browser.screenshot('run-list');
    await page.click(`tr[data-run-id="${runId}"] td:nth-child(2) a`);
    await page.waitForSelector(`${node('flaky')}.failed`);
  });

  test('a run of 10,000 events loads fast and selecting a step stays quick', async () => {
    const { page } = browser;
    const runId = await server.start('big.yaml');
    await server.waitStatus(runId, 'completed', 120_000);
    const item = (i) => `${node('work')} > .kids > .node:nth-child(${i + 1}) > .row`;
    /** Milliseconds from a click on item `i` to its text shown in the detail. */
    async function select(i) {
      const started = performance.now();
      await page.click(item(i));
      // The step's head, and its whole text (which mock call an item gets depends on the order items start in).
      await page.waitForFunction((want) => document.querySelector('#detail h2')?.textContent === want
        && /^item \d+ chunk 0\. [\s\S]* chunk 199\. $/.test(document.querySelector('#detail .blk.text')?.textContent ?? ''), `completed work [${i}]`);
      return performance.now() - started;
    }
    await openRun(runId);
    await page.waitForFunction(() => window.awrTimeline?.view?.stats.renderedEndAt != null, null, { timeout: 60_000 });
    const m = await page.evaluate(() => {
      const v = window.awrTimeline.view;
      return {
        events: v.timeline.events,
        ms: v.stats.renderedEndAt - v.stats.openedAt,
        frames: v.stats.frames,
        longestFrameMs: v.stats.longestFrameMs,
        rows: document.querySelectorAll('.node').length,
      };
    });
    assert.ok(m.events >= 10_000, `${m.events} events`);
    assert.equal(m.rows, 51);
    // Once loaded: ten steps selected one after another, each shown in full.
    const clicks = [];
    for (const i of [6, 49, 0, 25, 13, 37, 2, 44, 19, 31]) clicks.push(await select(i));
    const clickMs = Math.max(...clicks);
    const line = `10,000-event run: ${m.events} events folded and rendered in ${m.ms.toFixed(0)} ms ` +
      `(${m.frames} frames, longest ${m.longestFrameMs.toFixed(1)} ms); a step selected and its 200 chunks shown ` +
      `in at most ${clickMs.toFixed(0)} ms (ten steps)`;
    console.log(line);
    mkdirSync(artifacts, { recursive: true });
    writeFileSync(path.join(artifacts, 'timeline-10k.json'), JSON.stringify({ ...m, clicks }, null, 2));
    // The bounds (docs/performance.md): loaded in 10 s, no frame over 100 ms, a step shown within 500 ms of its click.
    assert.ok(m.ms < 10_000, line);
    assert.ok(m.longestFrameMs < 100, line);
    assert.ok(clickMs < 500, line);
    await browser.screenshot('ten-thousand-events');
  });
});
