// awr's timeline page: the run list (`GET /workflows`), with its counts by
// status and the status filter.

import { $, api, fmtTime, h, notice } from './util.js';

// ---------------------------------------------------------------- run list

const STATUSES = ['running', 'waiting', 'paused', 'interrupted', 'completed', 'failed', 'cancelled'];

export class ListView {
  constructor() {
    this.filter = null;
    this.timer = null;
    this.stopped = false;
    this.after = null;
    $('more').onclick = () => this.load(true);
  }

  start(filter) {
    this.filter = filter;
    $('list-view').hidden = false;
    this.load(false);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    $('list-view').hidden = true;
  }

  async load(more) {
    clearTimeout(this.timer);
    const query = new URLSearchParams({ limit: '50' });
    if (this.filter) query.set('status', this.filter);
    if (more && this.after) query.set('after', this.after);
    try {
      const page = await api(`/workflows?${query}`);
      if (this.stopped) return;
      renderCounts(page.counts ?? {}, this.filter);
      const body = $('runs');
      if (!more) body.replaceChildren();
      for (const run of page.runs ?? []) body.append(runRow(run));
      this.after = page.next ?? null;
      $('more').hidden = !this.after;
      $('runs-empty').hidden = body.children.length > 0;
      notice('');
    } catch (error) {
      notice(`cannot list runs: ${error.message}`, true);
    }
    // The first page refreshes while the list is shown; paging stops that.
    if (!more && !this.stopped) this.timer = setTimeout(() => this.load(false), 2000);
  }
}

export function renderCounts(counts, active) {
  const nav = $('counts');
  nav.replaceChildren(
    h('a', { href: '#/', class: active ? 'chip' : 'chip active' }, 'all'),
    ...STATUSES.map((s) =>
      h('a', { href: `#/?status=${s}`, class: `chip ${s}${active === s ? ' active' : ''}`, 'data-status': s },
        `${s} `, h('b', { text: String(counts[s] ?? 0) }))),
  );
}

function runRow(run) {
  const href = `#/runs/${encodeURIComponent(run.runId)}`;
  return h('tr', { 'data-run-id': run.runId, class: run.status },
    h('td', {}, h('span', { class: `badge ${run.status}`, text: run.status })),
    h('td', {}, h('a', { href, text: run.workflow || '(unnamed)' }), run.parentRunId ? h('span', { class: 'muted', text: ' (child)' }) : null),
    h('td', {}, h('a', { href }, h('code', { text: run.runId.slice(0, 8) }))),
    h('td', { text: fmtTime(run.startedAt) }),
    h('td', { text: fmtTime(run.updatedAt) }),
    h('td', { class: 'num', text: String(run.lastOffset ?? '') }),
  );
}
