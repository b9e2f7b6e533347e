// The timeline's fold (crates/cli/src/serve/ui/model.js) on real event logs
// written by `awr run` on the example workflows (fixtures/*.ndjson).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { foldLog, Timeline } from '../../crates/cli/src/serve/ui/model.js';

const here = new URL('.', import.meta.url);
const log = (name) =>
  readFileSync(new URL(`fixtures/${name}.ndjson`, here), 'utf8')
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line));

test('a sub-workflow run nests under its call_workflow node run, and usage sums into it', () => {
  const parent = log('market-brief');
  const child = log('market-brief-child');
  const timeline = new Timeline(parent[0].runId);
  const followed = [];
  for (const e of parent) followed.push(...timeline.apply(e.runId, e));
  assert.deepEqual(followed, [child[0].runId]);
  for (const e of child) timeline.apply(e.runId, e);

  const root = timeline.root;
  assert.equal(root.status, 'completed');
  assert.deepEqual(root.roots.map((nr) => nr.nodeId), ['researcher', 'condense']);
  const condense = root.roots[1];
  assert.equal(condense.childRunId, child[0].runId);
  assert.equal(condense.childStatus, 'completed');
  const nested = timeline.children(condense);
  assert.deepEqual(nested.map((nr) => nr.nodeId), ['summarizer', 'fact-checker']);
  assert.equal(timeline.runs.get(child[0].runId).parentNodeRun, condense);

  const own = (events) =>
    events
      .filter((e) => e.type === 'agent:complete')
      .reduce((sum, e) => sum + (e.usage?.inputTokens ?? 0) + (e.usage?.outputTokens ?? 0), 0);
  const childTokens = own(child);
  assert.ok(childTokens > 0);
  const totals = timeline.totals(condense);
  assert.equal(totals.input + totals.output, childTokens);
  assert.equal(condense.usage.input, 0, 'the call_workflow node itself made no agent call');
  const all = timeline.runTotals();
  assert.equal(all.input + all.output, own(parent) + childTokens);
});

test('streamed text is the deltas joined once, and a replayed event is not folded twice', () => {
  const events = log('market-brief');
  const run = foldLog(events);
  const researcher = run.roots[0];
  const deltas = events
    .filter((e) => e.type === 'agent:text:delta' && e.nodeRunId === researcher.key)
    .map((e) => e.content)
    .join('');
  assert.ok(deltas.length > 0);
  assert.equal(researcher.text, deltas);
  const tool = researcher.blocks.find((b) => b.kind === 'tool');
  assert.equal(tool.name, 'web_search');
  assert.deepEqual(tool.input, { query: 'EU heat pump sales 2024' });
  assert.deepEqual(tool.output, { results: 7 });
  assert.equal(tool.durationMs, 640);

  // A reconnect that sends events again (offsets at or below the last one) changes nothing.
  for (const e of events.slice(5, 12)) assert.equal(run.apply(e), false);
  assert.equal(researcher.text, deltas);
  assert.equal(run.duplicates, 7);
  assert.equal(run.gaps, 0);
  assert.equal(run.events, events.length);
});

test('a retried node run keeps its id, counts attempts and is failed with the last attempt', () => {
  const run = foldLog(log('retry-failed'));
  assert.equal(run.status, 'failed');
  assert.equal(run.failedNode, 'flaky');
  const flaky = run.roots.find((nr) => nr.nodeId === 'flaky');
  assert.equal(flaky.status, 'failed');
  assert.equal(flaky.attempt, 2);
  assert.deepEqual(
    flaky.errors.map((e) => [e.attempt, e.type]),
    [
      [1, 'rate_limit'],
      [2, 'rate_limit'],
    ],
    'the node failure of attempt 2 is its agent error, not a second one',
  );
  assert.equal(flaky.blocks.filter((b) => b.kind === 'error').length, 0, 'errors are listed once, not again as blocks');
  assert.ok(flaky.attemptStartedAt >= flaky.startedAt);
  const writer = run.roots.find((nr) => nr.nodeId === 'writer');
  assert.equal(writer.thinking, 'hmm ');
  assert.equal(writer.text, 'alpha beta gamma');
  assert.equal(writer.usage.cost, 0.0012);
  const tool = writer.blocks.find((b) => b.kind === 'tool');
  assert.equal(tool.id, 'tu_1');
  assert.equal(tool.status, 'completed');
  assert.equal(writer.blocks.filter((b) => b.kind === 'tool').length, 1, 'use and result are one call');
});

test('for_each items nest under their node run in item order, and sum into it', () => {
  const run = foldLog(log('for-each'));
  assert.deepEqual(run.roots.map((nr) => nr.nodeId), ['review', 'summary']);
  const review = run.roots[0];
  assert.equal(review.items, 3);
  assert.deepEqual(review.children.map((nr) => nr.item), [0, 1, 2]);
  assert.ok(review.children.every((nr) => nr.status === 'completed' && nr.parent === review));
  const timeline = new Timeline(run.runId);
  timeline.runs.set(run.runId, run);
  const sum = review.children.reduce((s, nr) => s + nr.usage.output, 0);
  assert.ok(sum > 0);
  assert.equal(timeline.totals(review).output, sum);
});

test('a loop runs a node again as a new pass; a skipped node and a continued failure show', () => {
  const loop = foldLog(log('judge-refine'));
  assert.deepEqual(
    loop.roots.map((nr) => `${nr.nodeId}#${nr.pass}`),
    ['write#1', 'judge#1', 'write#2', 'judge#2', 'write#3', 'judge#3', 'publish#1'],
  );
  const build = foldLog(log('build-and-test'));
  const docs = build.roots.find((nr) => nr.nodeId === 'docs-check');
  assert.equal(docs.status, 'failed');
  assert.equal(docs.continued, true);
  assert.equal(build.status, 'completed');
});

test('changes mark the node run and its ancestors dirty, across runs', () => {
  const parent = log('market-brief');
  const child = log('market-brief-child');
  const timeline = new Timeline(parent[0].runId);
  for (const e of parent.slice(0, 13)) timeline.apply(e.runId, e);
  timeline.root.takeDirty();
  const condense = timeline.root.roots[1];
  const before = condense.version;
  const childRun = timeline.runs.get(child[0].runId);
  for (const e of child.slice(0, 4)) timeline.apply(e.runId, e);
  assert.ok(condense.version > before);
  assert.deepEqual([...timeline.root.takeDirty()], [condense.key]);
  assert.equal(childRun.takeDirty().size, 1);
  assert.equal(timeline.root.takeDirty().size, 0);
});

test('10,000 events fold in well under a second', () => {
  const events = synthetic(10_000);
  const started = performance.now();
  const run = foldLog(events);
  const took = performance.now() - started;
  assert.equal(run.events, 10_000);
  assert.equal(run.status, 'completed');
  assert.ok(took < 1000, `fold took ${took.toFixed(1)} ms`);
  console.log(`fold of 10,000 events: ${took.toFixed(1)} ms`);
});

/** A run of `n` events: node runs of 98 text deltas between start and end. */
export function synthetic(n) {
  const runId = '00000000-0000-4000-8000-000000000000';
  const t0 = Date.parse('2026-01-01T00:00:00.000Z');
  const events = [];
  const push = (e) => {
    const offset = events.length + 1;
    events.push({ id: `e${offset}`, offset, timestamp: new Date(t0 + offset).toISOString(), runId, ...e });
  };
  push({ type: 'flow:started', workflow: { name: 'synthetic' } });
  let k = 0;
  while (events.length < n - 1) {
    const nodeRunId = `nr-${k}`;
    const nodeId = `step-${k}`;
    k += 1;
    push({ type: 'node:started', nodeId, nodeRunId, attempt: 1 });
    for (let i = 0; i < 96 && events.length < n - 3; i += 1) push({ type: 'agent:text:delta', nodeId, nodeRunId, content: `chunk ${i} ` });
    push({ type: 'agent:complete', nodeId, nodeRunId, usage: { inputTokens: 10, outputTokens: 5 }, totalCostUsd: 0.001 });
    push({ type: 'node:completed', nodeId, nodeRunId, output: { data: 'ok' } });
  }
  push({ type: 'flow:completed', output: 'done' });
  return events.slice(0, n - 1).concat(events[events.length - 1]).map((e, i) => ({ ...e, offset: i + 1 }));
}
