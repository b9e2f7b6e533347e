// The timeline page steering and watching live runs, in a real headless
// Chromium against a real `awr serve` with a 1 s heartbeat: the message
// form and the run's list of commands, the pause and resume buttons (each
// checked against the run's log), the idle watchdog on a silent stream, and a run whose `awr run`
// process is killed turning `interrupted` in the header and the run list.
// Every wait is on a condition; screenshots go to target/ui-artifacts/.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { artifacts, CHAT, LIVE, launch, startServer } from './harness.mjs';

let server;
let browser;

before(async () => {
  server = await startServer({ ...LIVE, ...CHAT }, { heartbeat: 1 });
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

const row = (nodeId) => `.node[data-node-id="${nodeId}"] > .row`;
const node = (nodeId) => `.node[data-node-id="${nodeId}"]`;

async function openRun(runId, page = browser.page) {
  await page.goto(server.page(`#/runs/${runId}`));
}

function shownStatus(page, status) {
  return page.waitForFunction((s) => document.querySelector('#run-status')?.textContent === s, status, { timeout: 30_000 });
}

/** The notice once it matches `pattern`; its text. */
async function noticeMatching(page, pattern) {
  const handle = await page.waitForFunction((source) => {
    const text = document.querySelector('#notice')?.textContent ?? '';
    return new RegExp(source).test(text) && text;
  }, pattern.source);
  return handle.jsonValue();
}

const TERMINAL = ['flow:completed', 'flow:failed', 'flow:cancelled'];

describe('steering a live run', () => {
  test('the form sends a message and a reply to the node run in flight; they reach its agent', async () => {
    const { page } = browser;
    const runId = await server.start('chat.yaml', 'Write the report.');
    await openRun(runId);
    await page.waitForSelector(`${node('coder')}[data-status="running"]`);
    const start = await server.waitEvent(runId, (e) => e.type === 'agent:start', 'the agent in its turn');
    await page.click(row('coder'));
    assert.equal(await page.inputValue('#send-node-run'), start.nodeRunId, 'selecting a step addresses the form to it');

    // A node run that is not in flight: refused by the run, and recorded.
    const stranger = '6f1c2a9e-0d3b-4c5a-8e7f-1a2b3c4d5e6f';
    await page.fill('#send-node-run', stranger);
    await page.fill('#send-message', 'hello?');
    await page.click('#send button[type="submit"]');
    await noticeMatching(page, /^send refused: .*6f1c2a9e/);
    const refused = await server.waitEvent(runId, (e) => e.type === 'command:received' && e.accepted === false, 'the refused send');
    assert.deepEqual(refused.command, { type: 'send', nodeRunId: stranger, message: 'hello?' });

    // The node run in flight: a message, then a reply.
    await page.fill('#send-node-run', start.nodeRunId);
    await page.fill('#send-message', 'Add a summary.');
    await page.selectOption('#send-type', 'send');
    await page.click('#send button[type="submit"]');
    const sentAt = Number((await noticeMatching(page, /^send accepted \(offset \d+\)/)).match(/\d+/)[0]);
    assert.equal(await page.inputValue('#send-message'), '', 'an accepted message clears the field');
    await page.fill('#send-message', 'Yes, in English.');
    await page.selectOption('#send-type', 'reply');
    await page.click('#send button[type="submit"]');
    const repliedAt = Number((await noticeMatching(page, /^reply accepted \(offset \d+\)/)).match(/\d+/)[0]);

    const events = await server.events(runId);
    const at = (offset) => events.find((e) => e.offset === offset);
    assert.equal(at(sentAt).type, 'command:received');
    assert.equal(at(sentAt).accepted, true);
    assert.deepEqual(at(sentAt).command, { type: 'send', nodeRunId: start.nodeRunId, message: 'Add a summary.' });
    assert.equal(at(repliedAt).accepted, true);
    assert.deepEqual(at(repliedAt).command, { type: 'reply', nodeRunId: start.nodeRunId, message: 'Yes, in English.' });
    // The page lists the run's commands as its log has them: the refused one with its reason.
    await page.waitForFunction(() => document.querySelectorAll('#run-commands-list li').length === 3);
    const listed = await page.$$eval('#run-commands-list li', (items) => items.map((li) => ({
      offset: Number(li.dataset.offset), refused: li.classList.contains('refused'), text: li.textContent,
    })));
    assert.deepEqual(listed.map((c) => c.offset), [refused.offset, sentAt, repliedAt]);
    assert.deepEqual(listed.map((c) => c.refused), [true, false, false]);
    assert.match(listed[0].text, /send → 6f1c2a9e.*“hello\?” refused: .+/);
    assert.match(listed[2].text, /reply → .*“Yes, in English\.” accepted/);
    assert.ok(!(await page.$eval('#run-commands', (el) => el.hidden)), 'the list is shown once there is a command');
    await browser.screenshot('message-sent');

    // The turn ends; the messages go to the same agent, in its session, after it.
    server.open(runId);
    await shownStatus(page, 'completed');
    const log = await server.events(runId);
    const starts = log.filter((e) => e.type === 'agent:start');
    assert.equal(starts.length, 2);
    assert.equal(starts[1].nodeRunId, start.nodeRunId);
    assert.equal(starts[1].prompt, 'Add a summary.\n\nYes, in English.');
    assert.deepEqual(starts[1].inbox, [sentAt, repliedAt]);
    assert.equal(starts[1].sessionId, starts[0].sessionId);
    assert.equal(log.at(-1).type, 'flow:completed');
    assert.equal(log.at(-1).output, 'heard: Add a summary.\n\nYes, in English.');
    // The page shows the answer as the step's output.
    await page.waitForFunction(() => document.querySelector('#detail .detail-head .badge')?.textContent === 'completed');
    await page.click('#detail details.json:nth-of-type(2) summary');
    await page.waitForFunction(() => /heard: Add a summary\.\\n\\nYes, in English\./.test(document.querySelector('#detail details.json[open] pre')?.textContent));
    assert.deepEqual(browser.errors, []);
  });

  test('pause then resume from the buttons: paused on record, then resumed to the end', async () => {
    const { page } = browser;
    const runId = await server.start('chat.yaml', 'Write the report.');
    await openRun(runId);
    await page.waitForSelector(`${node('coder')}[data-status="running"]`);
    await server.waitEvent(runId, (e) => e.type === 'agent:start', 'the agent in its turn');
    await page.waitForFunction(() => !document.querySelector('#pause').disabled);
    assert.ok(await page.$eval('#resume', (el) => el.disabled), 'a running run cannot be resumed');

    await page.click('#pause');
    await shownStatus(page, 'paused');
    const paused = await server.events(runId);
    const pause = paused.find((e) => e.type === 'command:received');
    assert.deepEqual(pause.command, { type: 'pause' });
    assert.equal(pause.accepted, true);
    assert.equal(paused.at(-1).type, 'flow:paused', 'the run stopped at its pause');
    assert.equal(await server.status(runId), 'paused');
    await page.waitForFunction(() => !document.querySelector('#resume').disabled);
    assert.ok(await page.$eval('#pause', (el) => el.disabled));
    await browser.screenshot('paused');

    // The agent's turn was cut short: let the redone one end at once.
    server.open(runId);
    await page.click('#resume');
    await shownStatus(page, 'completed');
    const log = await server.events(runId);
    const resumed = log.filter((e) => e.type === 'flow:resumed');
    assert.equal(resumed.length, 1);
    assert.equal(resumed[0].message, 'continue');
    assert.ok(resumed[0].offset > paused.at(-1).offset, 'resumed after the pause');
    assert.equal(log.at(-1).type, 'flow:completed');
    assert.ok(await page.$eval('#resume', (el) => el.disabled));
    assert.deepEqual(browser.errors, []);
  });
});

describe('watching a live run', () => {
  test('a silent stream is reconnected by the watchdog from its last offset, nothing shown twice', async () => {
    const { page } = browser;
    const runId = await server.start('live.yaml');
    await openRun(runId);
    await page.waitForSelector(`${node('wait')}[data-status="running"]`);
    await page.click(row('writer'));
    await page.waitForFunction(() => document.querySelector('#detail .blk.text')?.textContent === 'alpha beta gamma');
    // The page has heard the server's heartbeat and learnt its interval.
    await page.waitForFunction(() => window.awrTimeline.view.stats.heartbeats > 0 && window.awrTimeline.view.heartbeatMs === 1000);
    const opens = await page.evaluate(() => window.awrTimeline.view.stats.opens);

    // The connection stays open but nothing more reaches the page (no error
    // either), while the run goes on to its end.
    server.proxy.stall();
    server.open(runId);
    await server.waitStatus(runId, 'completed');

    await page.waitForFunction(() => window.awrTimeline.view.stats.watchdog >= 1, null, { timeout: 30_000 });
    await shownStatus(page, 'completed');
    assert.match(await page.textContent('#stream-state'), /reconnected 1× after silence/);
    assert.match(await page.textContent('#notice'), /^the stream was silent for \d\.\d s: reconnected from offset \d+$/);
    const stats = await page.evaluate(() => {
      const view = window.awrTimeline.view;
      const run = view.timeline.root;
      return { events: run.events, lastOffset: run.lastOffset, duplicates: run.duplicates, gaps: run.gaps, opens: view.stats.opens, watchdog: view.stats.watchdog };
    });
    const stored = await server.events(runId);
    assert.equal(stats.watchdog, 1);
    assert.equal(stats.opens, opens + 1, 'one new stream');
    assert.equal(stats.lastOffset, stored.length);
    assert.equal(stats.events, stored.length, 'every stored event folded once');
    assert.equal(stats.gaps, 0);
    assert.equal(stats.duplicates, 0, 'the new stream began after the last offset folded');
    assert.ok(server.proxy.stalls > 0);
    assert.equal(await page.textContent('#detail .blk.text'), 'alpha beta gamma');
    await page.click(row('teller'));
    await page.waitForFunction(() => document.querySelector('#detail .blk.text')?.textContent === 'one two three');
    assert.equal(await page.$$eval('#detail .blk.text', (els) => els.map((el) => el.textContent).join('')), 'one two three');
    await browser.screenshot('watchdog-reconnected');
    assert.deepEqual(browser.errors, []);
  });

  test('a run whose awr run process is killed turns interrupted in the header and the list, and resumes from the button', async () => {
    const { page, context } = browser;
    const list = await context.newPage();
    try {
      await list.goto(server.page('#/'));
      await list.waitForSelector('#runs');
      const run = await server.awrRun('live.yaml');
      await openRun(run.runId);
      await page.waitForSelector(`${node('wait')}[data-status="running"]`);
      await shownStatus(page, 'running');
      const listed = (status) => list.waitForSelector(`tr[data-run-id="${run.runId}"] .badge.${status}`, { timeout: 30_000 });
      await listed('running');

      run.process.kill('SIGKILL');
      assert.equal((await run.exit).signal, 'SIGKILL');
      await shownStatus(page, 'interrupted');
      await listed('interrupted');
      assert.equal(await server.status(run.runId), 'interrupted');
      const log = await server.events(run.runId);
      assert.ok(log.every((e) => !TERMINAL.includes(e.type) && e.type !== 'flow:paused'), 'the log still says running');
      assert.ok(Number(await list.textContent('.chip[data-status="interrupted"] b')) >= 1);
      assert.ok(Number(await page.textContent('.chip[data-status="interrupted"] b')) >= 1);
      await page.waitForFunction(() => !document.querySelector('#resume').disabled);
      assert.ok(await page.$eval('#pause', (el) => el.disabled));
      await browser.screenshot('interrupted');
      await list.screenshot({ path: path.join(artifacts, 'interrupted-list.png'), fullPage: true });

      // The server takes the run over: it runs the gated step again and ends.
      server.open(run.runId);
      await page.click('#resume');
      await shownStatus(page, 'completed');
      await listed('completed');
      const after = await server.events(run.runId);
      const resumed = after.find((e) => e.type === 'flow:resumed');
      assert.ok(resumed && resumed.offset > log.at(-1).offset, 'resumed after the kill');
      assert.equal(after.at(-1).type, 'flow:completed');
    } finally {
      await list.close();
    }
    assert.deepEqual(browser.errors, []);
  });
});
