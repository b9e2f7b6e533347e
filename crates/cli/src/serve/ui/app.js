// awr's timeline page: the route (the run list of list.js, or one run's
// step tree of run.js) and the buttons that send a run its commands.

import { ListView } from './list.js';
import { RunView } from './run.js';
import { $, notice, send } from './util.js';

// ---------------------------------------------------------------- commands

let view = null;
let list = null;

async function command(runId, body) {
  return (await send(runId, body)).ok;
}

function wireCommands() {
  $('pause').onclick = () => view && command(view.runId, { type: 'pause' });
  $('resume').onclick = () => view && command(view.runId, { type: 'resume', message: 'continue' });
  $('cancel').onclick = () => view && command(view.runId, { type: 'cancel', reason: 'cancelled from the timeline' });
  // Plays the recorded run again at its pace times the speed (nothing runs again).
  $('replay').onclick = () => {
    if (!view) return;
    const target = `#/runs/${encodeURIComponent(view.runId)}?replay=${$('replay-speed').value}`;
    if (location.hash === target) route();
    else location.hash = target;
  };
  $('send').addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!view) return;
    const nodeRunId = $('send-node-run').value.trim();
    const message = $('send-message').value;
    // A node run of a child run takes its commands through the child run.
    const owner = [...view.timeline.runs.values()].find((run) => run.nodeRuns.has(nodeRunId));
    const runId = owner?.runId ?? view.runId;
    if (await command(runId, { type: $('send-type').value, nodeRunId, message })) $('send-message').value = '';
  });
}

// ---------------------------------------------------------------- routing

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const match = /^\/runs\/([^/?]+)/.exec(hash);
  if (view) view.stop();
  if (list) list.stop();
  view = null;
  list = null;
  notice('');
  if (match) {
    const speed = Number(new URLSearchParams(hash.split('?')[1] ?? '').get('replay'));
    view = new RunView(decodeURIComponent(match[1]), Number.isFinite(speed) && speed > 0 ? speed : null);
    view.refreshStatus();
  } else {
    const status = new URLSearchParams(hash.split('?')[1] ?? '').get('status');
    list = new ListView();
    list.start(status);
  }
  window.awrTimeline = { view, list };
}

wireCommands();
window.addEventListener('hashchange', route);
route();

