// Answering a question from the timeline page (docs/approvals.md), in a real
// headless Chromium against a real `awr serve`: the page shows what waits
// with its prompt and schema, an answer the run refuses says why (and is on
// record, refused), and an accepted one continues the run to its end. Every
// wait is on a condition; screenshots go to target/ui-artifacts/.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, startServer } from './harness.mjs';

const ASK = {
  'ask.yaml': `name: ask
nodes:
  - {id: draft, command: 'printf draft'}
  - id: review
    approval:
      prompt: 'Publish {{ input.stdout }}?'
      schema: {type: object, required: [channel], properties: {channel: {type: string}}}
  - {id: publish, command: 'echo published'}
edges:
  - {from: draft, to: review}
  - {from: review, to: publish, when: 'output.approved'}
`,
};

let server;
let browser;

before(async () => {
  server = await startServer(ASK);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

const form = '#approvals form.question';

/** The page's notice once it matches `pattern` (an answered question's form goes away with it). */
async function noticeMatching(page, pattern) {
  const handle = await page.waitForFunction((source) => {
    const text = document.querySelector('#notice')?.textContent ?? '';
    return new RegExp(source).test(text) && text;
  }, pattern.source);
  return handle.jsonValue();
}

/** The form's verdict once it matches `pattern`; its text. */
async function verdict(page, pattern) {
  const handle = await page.waitForFunction(([sel, source]) => {
    const text = document.querySelector(`${sel} .verdict`)?.textContent ?? '';
    return new RegExp(source).test(text) && text;
  }, [form, pattern.source]);
  return handle.jsonValue();
}

describe('approvals', () => {
  test('the page answers a question: a refused answer says why, an accepted one ends the run', async () => {
    const { page } = browser;
    const runId = await server.start('ask.yaml');
    await server.waitStatus(runId, 'waiting');
    await page.goto(server.page(`#/runs/${runId}`));
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'waiting');
    await page.waitForSelector(form);
    const asked = await server.waitEvent(runId, (e) => e.type === 'approval:requested', 'the question');
    assert.equal(await page.getAttribute(form, 'data-node-run-id'), asked.nodeRunId);
    assert.equal(await page.textContent(`${form} .prompt`), 'Publish draft?');
    await page.click(`${form} details.json summary`);
    assert.match(await page.textContent(`${form} details.json pre`), /"required": \[\s*"channel"\s*\]/);
    await browser.screenshot('approval-waiting');

    // Not JSON: the page says so and sends nothing.
    await page.fill(`${form} textarea`, '{channel: blog');
    await page.click(`${form} button[value="approve"]`);
    await verdict(page, /^the data is not JSON/);
    // Against the schema: the run refuses it, naming the field, on record.
    await page.fill(`${form} textarea`, '{"channel": 7}');
    await page.click(`${form} button[value="approve"]`);
    const refusal = await verdict(page, /^approve refused: .*channel/);
    const refused = await server.waitEvent(runId, (e) => e.type === 'command:received' && e.accepted === false, 'the refused answer');
    assert.deepEqual(refused.command, { type: 'approve', nodeRunId: asked.nodeRunId, data: { channel: 7 } });
    assert.ok(refusal.includes(refused.error.split(':')[0]), `${refusal} / ${refused.error}`);
    assert.equal((await server.events(runId)).filter((e) => e.type === 'command:received').length, 1, 'the bad JSON sent nothing');

    // A good answer: accepted, and the run goes on to its end.
    await page.fill(`${form} textarea`, '{"channel": "blog"}');
    await page.click(`${form} button[value="approve"]`);
    await noticeMatching(page, /^approve accepted \(offset \d+\)/);
    await server.waitStatus(runId, 'completed');
    await page.waitForFunction(() => document.querySelector('#run-status')?.textContent === 'completed');
    await page.waitForFunction(() => document.querySelector('#approvals')?.hidden === true);
    const log = await server.events(runId);
    const resolved = log.filter((e) => e.type === 'approval:resolved');
    assert.equal(resolved.length, 1);
    assert.equal(resolved[0].approved, true);
    assert.deepEqual(resolved[0].data, { channel: 'blog' });
    const accepted = log.find((e) => e.type === 'command:received' && e.accepted);
    assert.ok(typeof accepted.by === 'string' && accepted.by.length > 0, 'the answer names who gave it');
    assert.equal(resolved[0].by, accepted.by);
    assert.ok(log.some((e) => e.type === 'node:completed' && e.nodeId === 'publish'));
    assert.equal(log.at(-1).type, 'flow:completed');
    await browser.screenshot('approval-answered');
    assert.deepEqual(browser.errors, []);
  });

  test('a rejection from the page carries its reason', async () => {
    const { page } = browser;
    const runId = await server.start('ask.yaml');
    await server.waitStatus(runId, 'waiting');
    await page.goto(server.page(`#/runs/${runId}`));
    await page.waitForSelector(form);
    await page.fill(`${form} input[name="reason"]`, 'not this week');
    await page.click(`${form} button[value="reject"]`);
    await noticeMatching(page, /^reject accepted/);
    await server.waitStatus(runId, 'completed');
    const log = await server.events(runId);
    const resolved = log.find((e) => e.type === 'approval:resolved');
    assert.equal(resolved.approved, false);
    assert.equal(resolved.reason, 'not this week');
    assert.ok(!log.some((e) => e.type === 'node:started' && e.nodeId === 'publish'), 'a rejection does not publish');
    assert.deepEqual(browser.errors, []);
  });
});
