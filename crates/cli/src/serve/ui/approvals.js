// awr's timeline page: the questions a run waits on (docs/approvals.md),
// each with a form to answer it. The run judges the answer (the node run
// must still ask, the data must meet the schema, the sender must be an
// approver) and records it either way; the form shows its verdict.

import { $, fmtTime, h, json } from './util.js';
import { label } from './blocks.js';

/**
 * Draws the open questions of `timeline`'s root run: a form per node run
 * that asks, kept while it asks (so what is typed survives a redraw),
 * added and removed as questions come and go.
 */
export function drawQuestions(timeline, answer) {
  const run = timeline.root;
  const list = $('approvals-list');
  const open = run.questions;
  $('approvals').hidden = open.length === 0;
  const shown = new Map([...list.children].map((el) => [el.dataset.nodeRunId, el]));
  for (const [key, el] of shown) if (!open.some((nr) => nr.key === key)) el.remove();
  for (const nr of open) {
    if (!shown.has(nr.key)) list.append(questionForm(nr, answer));
  }
}

function questionForm(nr, answer) {
  const q = nr.question;
  const data = q.tool ? null : h('textarea', { name: 'data', rows: 3, placeholder: q.schema ? 'data (JSON), checked against the schema' : 'data (JSON, optional)' });
  const reason = h('input', { name: 'reason', placeholder: 'reason (for a rejection)', autocomplete: 'off' });
  const verdict = h('p', { class: 'verdict', role: 'status' });
  const form = h('form', { class: 'question', 'data-node-run-id': nr.key },
    h('div', { class: 'question-head' },
      h('b', { text: label(nr) }),
      h('code', { class: 'muted', text: nr.key }),
      q.deadline ? h('span', { class: 'muted', text: `until ${fmtTime(q.deadline)}${q.onTimeout ? `, then ${q.onTimeout}` : ''}` }) : null,
      q.approvers.length ? h('span', { class: 'muted', text: `approvers: ${q.approvers.join(', ')}` }) : null),
    h('pre', { class: 'prompt', text: q.prompt }),
    q.tool ? h('details', { class: 'json' }, h('summary', { text: `tool call ${q.tool.toolName}` }), h('pre', { text: json(q.tool.toolInput) })) : null,
    q.schema ? h('details', { class: 'json' }, h('summary', { text: 'schema' }), h('pre', { text: json(q.schema) })) : null,
    data,
    reason,
    h('div', { class: 'question-actions' },
      h('button', { type: 'submit', value: 'approve', text: 'Approve' }),
      h('button', { type: 'submit', value: 'reject', class: 'danger', text: 'Reject' })),
    verdict);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const type = event.submitter?.value === 'reject' ? 'reject' : 'approve';
    const body = { type, nodeRunId: nr.key };
    if (type === 'approve' && data && data.value.trim()) {
      try {
        body.data = JSON.parse(data.value);
      } catch (error) {
        verdict.textContent = `the data is not JSON: ${error.message}`;
        verdict.className = 'verdict refused';
        data.focus();
        return;
      }
    }
    if (type === 'reject' && reason.value.trim()) body.reason = reason.value.trim();
    const said = await answer(nr.run.runId, body);
    verdict.textContent = said.ok ? `${type} accepted (offset ${said.offset ?? '?'})` : `${type} refused: ${said.error}`;
    verdict.className = `verdict ${said.ok ? 'accepted' : 'refused'}`;
  });
  return form;
}
