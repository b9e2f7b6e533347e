// awr's timeline page: one run's live step tree, fed by its SSE stream
// (and its child runs' streams).
//
// Events are folded into the model (model.js) as they arrive; the DOM is
// redrawn at most once a frame, and only for the node runs that changed.
// Text from runs always goes into the DOM as text, never as HTML.

import { Timeline } from './model.js';
import { renderCounts } from './list.js';
import { $, api, fmtCost, fmtDuration, fmtTime, fmtTokens, h, notice, send, url } from './util.js';
import { drawBlock, label, lastText, lazyJson, tokenTitle } from './blocks.js';
import { drawQuestions } from './approvals.js';

// ---------------------------------------------------------------- run view

/** At most this many streams at once (a browser allows about 6 per origin over HTTP/1.1). */
const MAX_STREAMS = 4;

/**
 * The idle watchdog: a stream silent (no event, no heartbeat) for this many
 * heartbeat intervals is taken for a dead connection (a half-open socket
 * sends no error) and opened again from the last offset folded.
 */
const WATCHDOG_BEATS = 3;

/** The server's heartbeat interval until a heartbeat says it (`awr serve --heartbeat`'s default). */
const DEFAULT_HEARTBEAT_MS = 15_000;

/**
 * How often a run that is not over asks for its status while its stream
 * brings no event: `interrupted` (its writer died) is in no event.
 */
const STATUS_POLL_MS = 2000;

export class RunView {
  /** `replay`: a speed (above 0) to play the recorded run at its pace (`?replay=`), or null for live. */
  constructor(runId, replay = null) {
    this.runId = runId;
    this.replay = replay;
    this.timeline = new Timeline(runId);
    this.rows = new Map();
    this.running = new Set();
    this.selected = null;
    this.detail = null;
    this.commandCount = -1;
    this.frame = 0;
    this.ticker = null;
    this.closed = false;
    this.streams = new Map();
    this.queue = [];
    this.retries = new Map();
    /** When each stream was last heard from (`performance.now()`): opened, an event, a heartbeat. */
    this.heard = new Map();
    this.heartbeatMs = DEFAULT_HEARTBEAT_MS;
    /** No process writes the run (`interrupted`), as of offset `interruptedAt`. */
    this.interrupted = false;
    this.interruptedAt = 0;
    this.lastEventAt = performance.now();
    this.statusAt = -Infinity;
    this.statusBusy = false;
    this.stats = {
      openedAt: performance.now(),
      endedAt: null,
      renderedEndAt: null,
      frames: 0,
      longestFrameMs: 0,
      opens: 0,
      errors: 0,
      badFrames: 0,
      heartbeats: 0,
      /** Streams the watchdog closed and opened again. */
      watchdog: 0,
    };
    this.tree = $('tree');
    this.tree.replaceChildren();
    $('detail').replaceChildren(h('p', { class: 'muted', text: 'Select a step to see its text, thinking and tool calls.' }));
    $('run-view').hidden = false;
    $('run-id').textContent = runId;
    $('run-workflow').textContent = '';
    $('run-error').hidden = true;
    $('send-node-run').value = '';
    this.follow(runId);
    this.schedule();
    this.ticker = setInterval(() => this.tick(), 250);
  }

  stop() {
    this.closed = true;
    clearInterval(this.ticker);
    cancelAnimationFrame(this.frame);
    for (const es of this.streams.values()) es.close();
    this.streams.clear();
    for (const t of this.retries.values()) clearTimeout(t);
    $('run-view').hidden = true;
  }

  // ------------------------------------------------ streams

  follow(runId) {
    if (this.streams.has(runId) || this.queue.includes(runId)) return;
    this.queue.push(runId);
    this.pump();
  }

  pump() {
    while (!this.closed && this.streams.size < MAX_STREAMS && this.queue.length) this.open(this.queue.shift());
  }

  open(runId) {
    const run = this.timeline.run(runId);
    const pace = this.replay ? `&replay=${this.replay}` : '';
    const path = `/workflows/${encodeURIComponent(runId)}/events/sse?offset=${run.lastOffset}${pace}`;
    const es = new EventSource(url(path));
    this.streams.set(runId, es);
    this.stats.opens += 1;
    const heard = () => this.heard.set(runId, performance.now());
    heard();
    es.onopen = () => {
      heard();
      this.streamState();
    };
    es.addEventListener('heartbeat', (message) => {
      heard();
      this.stats.heartbeats += 1;
      try {
        const every = JSON.parse(message.data)?.heartbeatMs;
        if (Number.isFinite(every) && every > 0) this.heartbeatMs = every;
      } catch {
        this.stats.badFrames += 1;
      }
    });
    es.onmessage = (message) => {
      heard();
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        this.stats.badFrames += 1;
        return;
      }
      this.fold(runId, event);
    };
    es.addEventListener('end', () => {
      // The terminal frame: the run ended, or the server is shutting down.
      es.close();
      this.ended(runId);
    });
    es.onerror = () => {
      this.stats.errors += 1;
      // CONNECTING: the browser reconnects by itself, sending Last-Event-ID.
      if (es.readyState === EventSource.CLOSED) this.ended(runId);
      this.streamState();
    };
  }

  /** A stream closed: done if its run ended, else opened again from its last offset. */
  ended(runId) {
    this.streams.delete(runId);
    this.heard.delete(runId);
    const run = this.timeline.run(runId);
    if (!this.closed && !run.ended) {
      const delay = Math.min(10_000, 500 * 2 ** Math.min(5, this.stats.errors));
      this.retries.set(runId, setTimeout(() => {
        this.retries.delete(runId);
        this.follow(runId);
      }, delay));
    }
    this.pump();
    this.streamState();
  }

  streamState() {
    let live = 0;
    let connecting = 0;
    for (const es of this.streams.values()) {
      if (es.readyState === EventSource.OPEN) live += 1;
      else connecting += 1;
    }
    const waiting = this.queue.length + this.retries.size;
    const parts = [];
    if (this.replay) parts.push(`replay at ${this.replay}×`);
    if (live) parts.push(`${live} live`);
    if (connecting) parts.push(`${connecting} connecting`);
    if (waiting) parts.push(`${waiting} waiting`);
    if (this.stats.watchdog) parts.push(`reconnected ${this.stats.watchdog}× after silence`);
    const state = $('stream-state');
    state.textContent = parts.length ? `stream: ${parts.join(', ')}` : '';
    state.dataset.watchdog = String(this.stats.watchdog);
  }

  /**
   * The idle watchdog: a stream not heard from for `WATCHDOG_BEATS`
   * heartbeats is closed and opened again at `?offset=` its run's last
   * folded offset (the durable cursor, as `Last-Event-ID` would be: a new
   * `EventSource` cannot send that header), so nothing is missed or folded twice.
   */
  watch() {
    const now = performance.now();
    const limit = WATCHDOG_BEATS * this.heartbeatMs;
    for (const [runId, es] of [...this.streams]) {
      const silent = now - (this.heard.get(runId) ?? now);
      if (silent <= limit) continue;
      es.close();
      this.streams.delete(runId);
      this.heard.delete(runId);
      this.stats.watchdog += 1;
      const offset = this.timeline.run(runId).lastOffset;
      notice(`the stream was silent for ${fmtDuration(silent)}: reconnected from offset ${offset}`);
      this.follow(runId);
    }
    this.streamState();
  }

  /** Asks for the run's status while it is not over and its stream is quiet. */
  poll() {
    const now = performance.now();
    if (this.timeline.root.ended || this.statusBusy) return;
    if (now - this.lastEventAt < STATUS_POLL_MS || now - this.statusAt < STATUS_POLL_MS) return;
    this.refreshStatus();
  }

  /** The status counts, and whether the run is interrupted (no writer), which events alone do not say. */
  async refreshStatus() {
    this.statusBusy = true;
    try {
      const [page, snapshot] = await Promise.all([
        api('/workflows?limit=1'),
        api(`/workflows/${encodeURIComponent(this.runId)}`),
      ]);
      if (this.closed) return;
      renderCounts(page?.counts ?? {}, null);
      const root = this.timeline.root;
      const at = typeof snapshot?.lastOffset === 'number' ? snapshot.lastOffset : 0;
      // A status older than the events already folded says nothing new.
      if (at < root.lastOffset) return;
      const interrupted = snapshot?.status === 'interrupted';
      if (interrupted !== this.interrupted) {
        this.interrupted = interrupted;
        this.interruptedAt = at;
        notice(interrupted ? 'no process writes this run (interrupted): Resume continues it here' : '');
        this.schedule();
      }
    } catch (error) {
      if (!this.closed) notice(error.message, true);
    } finally {
      this.statusBusy = false;
      this.statusAt = performance.now();
    }
  }

  /** The status to show: the events', or `interrupted` when nothing writes the run. */
  shownStatus() {
    const root = this.timeline.root;
    return this.interrupted && !root.ended ? 'interrupted' : root.status;
  }

  fold(runId, event) {
    const children = this.timeline.apply(runId, event);
    this.lastEventAt = performance.now();
    // A new event is a writer at work: the run is not interrupted any more.
    if (runId === this.runId && this.interrupted && event.offset > this.interruptedAt) {
      this.interrupted = false;
      notice('');
    }
    for (const child of children) this.follow(child);
    if (runId === this.runId && this.timeline.root.ended && this.stats.endedAt === null) this.stats.endedAt = performance.now();
    this.schedule();
  }

  schedule() {
    if (!this.frame && !this.closed) this.frame = requestAnimationFrame(() => this.render());
  }

  // ------------------------------------------------ drawing

  render() {
    this.frame = 0;
    const started = performance.now();
    const now = Date.now();
    const span = this.timeline.span(now);
    this.t0 = span.start;
    this.tree.style.setProperty('--span', String(span.end - span.start));
    $('axis').textContent = fmtDuration(span.end - span.start);
    // Only the node runs that changed (and their ancestors, for the sums).
    for (const run of this.timeline.runs.values()) {
      const dirty = run.takeDirty();
      if (!dirty.size) continue;
      for (const key of dirty) {
        const nr = run.nodeRuns.get(key);
        if (nr) this.drawRow(nr, now);
      }
    }
    this.drawHead(now);
    if (this.selected) this.drawDetail(now);
    const took = performance.now() - started;
    this.stats.frames += 1;
    this.stats.longestFrameMs = Math.max(this.stats.longestFrameMs, took);
    if (this.stats.endedAt !== null && this.stats.renderedEndAt === null) this.stats.renderedEndAt = performance.now();
  }

  /** Running steps tick: only their bars and durations change. The watchdog and the status poll run here too. */
  tick() {
    if (this.closed) return;
    this.watch();
    this.poll();
    if (document.hidden) return;
    const root = this.timeline.root;
    if (root.ended && !this.running.size) return;
    const now = Date.now();
    const span = this.timeline.span(now);
    this.tree.style.setProperty('--span', String(span.end - span.start));
    $('axis').textContent = fmtDuration(span.end - span.start);
    for (const key of this.running) {
      const row = this.rows.get(key);
      if (row) this.drawTime(row.nr, row, now);
    }
    this.drawFacts(now);
    if (this.selected?.status === 'running') this.drawDetailHead(now);
  }

  /** The container a node run's row goes into. */
  container(nr) {
    const parent = nr.parent ?? nr.run.parentNodeRun;
    if (!parent) return this.tree;
    const row = this.rows.get(parent.key) ?? this.drawRow(parent, Date.now());
    return row.kids;
  }

  drawRow(nr, now) {
    let row = this.rows.get(nr.key);
    if (!row) row = this.makeRow(nr);
    const el = row.el;
    el.dataset.status = nr.status;
    el.classList.toggle('failed', nr.status === 'failed');
    el.classList.toggle('retried', nr.attempt > 1);
    const child = nr.childRunId ? this.timeline.runs.get(nr.childRunId) : null;
    row.name.textContent = child?.workflow ? `${label(nr)} → ${child.workflow}` : label(nr);
    row.attempt.textContent = nr.attempt > 1 ? `attempt ${nr.attempt}` : '';
    row.attempt.hidden = nr.attempt <= 1;
    const preview = lastText(nr);
    row.preview.textContent = nr.error && nr.status !== 'completed' ? nr.error : preview;
    row.preview.classList.toggle('error', Boolean(nr.error) && nr.status !== 'completed');
    const total = this.timeline.totals(nr);
    row.tokens.textContent = fmtTokens(total);
    row.cost.textContent = fmtCost(total);
    row.tokens.title = tokenTitle(nr.usage, total);
    row.caret.hidden = !(nr.children.length || nr.childRunId);
    if (nr.status === 'running') this.running.add(nr.key);
    else this.running.delete(nr.key);
    this.drawTime(nr, row, now);
    return row;
  }

  makeRow(nr) {
    const caret = h('button', { type: 'button', class: 'caret', 'aria-label': 'fold', text: '▾' });
    const name = h('span', { class: 'name', text: label(nr) });
    const attempt = h('span', { class: 'attempt', hidden: true });
    const preview = h('span', { class: 'preview' });
    const time = h('span', { class: 'time' });
    const tokens = h('span', { class: 'tokens' });
    const cost = h('span', { class: 'cost' });
    const bar = h('span', { class: 'bar' });
    const line = h('div', { class: 'row', role: 'treeitem', tabindex: '0' },
      h('span', { class: 'label' }, caret, h('span', { class: 'dot' }), name, attempt, preview),
      h('span', { class: 'meta' }, time, tokens, cost),
      h('span', { class: 'track' }, bar));
    const kids = h('div', { class: 'kids', role: 'group' });
    const el = h('div', { class: 'node', 'data-node-run-id': nr.key, 'data-node-id': nr.nodeId, 'data-run-id': nr.run.runId }, line, kids);
    const row = { nr, el, line, kids, caret, name, attempt, preview, time, tokens, cost, bar };
    caret.addEventListener('click', (event) => {
      event.stopPropagation();
      el.classList.toggle('folded');
    });
    line.addEventListener('click', () => this.select(nr));
    line.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        this.select(nr);
      }
    });
    this.rows.set(nr.key, row);
    this.container(nr).append(el);
    return row;
  }

  drawTime(nr, row, now) {
    const start = nr.startedAt ?? this.t0;
    const end = nr.endedAt ?? (nr.status === 'running' ? Math.max(now, nr.run.lastAt ?? now) : start);
    row.el.style.setProperty('--s', String(Math.max(0, start - this.t0)));
    row.el.style.setProperty('--d', String(Math.max(0, end - start)));
    row.time.textContent = nr.status === 'skipped' ? 'skipped' : fmtDuration(end - start);
  }

  drawHead(now) {
    const root = this.timeline.root;
    const shown = this.shownStatus();
    const status = $('run-status');
    status.textContent = shown;
    status.className = `badge ${shown}`;
    $('run-workflow').textContent = root.workflow || 'run';
    document.title = `${root.workflow || 'run'} · ${shown} · awr`;
    const parent = $('run-parent');
    parent.hidden = !root.parentRunId;
    if (root.parentRunId) parent.href = `#/runs/${encodeURIComponent(root.parentRunId)}`;
    const error = $('run-error');
    error.hidden = !root.error;
    error.textContent = root.error ? `${root.status}: ${root.error}${root.failedNode ? ` (node ${root.failedNode})` : ''}` : '';
    $('pause').disabled = shown !== 'running';
    $('resume').disabled = shown !== 'paused' && shown !== 'interrupted';
    $('cancel').disabled = root.ended;
    this.drawFacts(now);
    this.drawCommands();
    if (this.questionsVersion !== root.questionsVersion) {
      this.questionsVersion = root.questionsVersion;
      drawQuestions(this.timeline, send);
    }
  }

  /** The commands the run (and its child runs) received, accepted or refused, oldest first. */
  drawCommands() {
    const commands = [];
    for (const run of this.timeline.runs.values()) {
      for (const c of run.commands) commands.push({ run, ...c });
    }
    if (commands.length === this.commandCount) return;
    this.commandCount = commands.length;
    commands.sort((a, b) => (a.at ?? 0) - (b.at ?? 0));
    $('run-commands').hidden = commands.length === 0;
    $('run-commands-count').textContent = `(${commands.length})`;
    $('run-commands-list').replaceChildren(...commands.map((c) => {
      const body = c.command ?? {};
      const said = body.message ?? body.reason ?? '';
      return h('li', { class: c.accepted ? 'accepted' : 'refused', 'data-offset': String(c.offset ?? '') },
        h('small', { class: 'muted', text: `${fmtTime(c.at)} · #${c.offset ?? '?'}${c.run === this.timeline.root ? '' : ` · child run ${c.run.runId}`}` }),
        ' ',
        h('strong', { text: String(body.type ?? '?') }),
        body.nodeRunId ? h('code', { text: ` → ${body.nodeRunId}` }) : '',
        said ? h('span', { text: ` “${said}”` }) : '',
        h('span', { class: 'verdict', text: c.accepted ? ' accepted' : ` refused: ${c.error ?? ''}` }),
      );
    }));
  }

  drawFacts(now) {
    const root = this.timeline.root;
    const total = this.timeline.runTotals();
    const elapsed = root.startedAt === null ? null : (root.endedAt ?? now) - root.startedAt;
    let events = 0;
    let duplicates = 0;
    for (const run of this.timeline.runs.values()) {
      events += run.events;
      duplicates += run.duplicates;
    }
    const facts = [
      ['duration', fmtDuration(elapsed)],
      ['tokens', `${total.input} in · ${total.output} out${total.cacheRead ? ` · ${total.cacheRead} cached` : ''}`],
      ['cost', fmtCost(total) || '$0'],
      ['events', String(events)],
      ['started', fmtTime(root.startedAt)],
    ];
    $('run-facts').replaceChildren(...facts.map(([k, v]) => h('span', { class: 'fact', 'data-fact': k }, h('small', { text: k }), ` ${v}`)));
    $('run-facts').dataset.duplicates = String(duplicates);
  }

  // ------------------------------------------------ detail

  select(nr) {
    if (this.selected === nr) return;
    for (const row of this.rows.values()) row.line.classList.toggle('selected', row.nr === nr);
    this.selected = nr;
    this.detail = null;
    if (!nr.key.startsWith('skipped:')) {
      $('send-node-run').value = nr.key;
      $('send-node-run').dataset.runId = nr.run.runId;
    }
    this.drawDetail(Date.now());
  }

  drawDetail(now) {
    const nr = this.selected;
    if (!this.detail || this.detail.nr !== nr) {
      const head = h('div', { class: 'detail-head' });
      const errors = h('div', { class: 'errors' });
      const blocks = h('div', { class: 'blocks' });
      const io = h('div', { class: 'io' });
      $('detail').replaceChildren(head, errors, blocks, io);
      this.detail = { nr, version: -1, head, errors, blocks, io, shown: [], errorCount: -1, ioStatus: null };
    }
    const d = this.detail;
    if (d.version === nr.version) return;
    d.version = nr.version;
    this.drawDetailHead(now);
    if (d.errorCount !== nr.errors.length) {
      d.errorCount = nr.errors.length;
      d.errors.replaceChildren(...nr.errors.map((e) =>
        h('div', { class: 'error-line' }, h('b', { text: `attempt ${e.attempt}` }), ` ${e.type}: `, e.message)));
    }
    for (let i = 0; i < nr.blocks.length; i += 1) {
      const block = nr.blocks[i];
      let shown = d.shown[i];
      if (!shown) {
        shown = drawBlock(block);
        d.shown[i] = shown;
        d.blocks.append(shown.el);
      } else if (shown.text) {
        // Streamed text grows: only what is new is added.
        if (block.text.length > shown.length) shown.text.appendData(block.text.slice(shown.length));
      } else if (shown.version !== block.version) {
        const again = drawBlock(block);
        shown.el.replaceWith(again.el);
        d.shown[i] = again;
        shown = again;
      }
      shown.length = block.text?.length ?? 0;
      shown.version = block.version;
    }
    if (d.ioStatus !== nr.status) {
      d.ioStatus = nr.status;
      d.io.replaceChildren(lazyJson('input', nr.input), lazyJson('output', nr.output));
    }
  }

  drawDetailHead(now) {
    const nr = this.selected;
    const d = this.detail;
    if (!nr || !d) return;
    const end = nr.endedAt ?? (nr.status === 'running' ? now : nr.startedAt);
    const own = nr.usage;
    const total = this.timeline.totals(nr);
    const facts = [
      ['status', nr.status + (nr.continued ? ' (run continued)' : '')],
      ['attempt', String(nr.attempt)],
      ['duration', fmtDuration(end - (nr.startedAt ?? end))],
      ['started', fmtTime(nr.startedAt)],
      ['node run', nr.key.startsWith('skipped:') ? '' : nr.key],
      ['run', nr.run.runId],
      ['model', nr.model ?? ''],
      ['session', nr.sessionId ?? ''],
      ['tokens', `${own.input} in · ${own.output} out${own.cacheRead ? ` · ${own.cacheRead} cached` : ''}`],
      ['cost', fmtCost(own)],
      ['turns', own.turns ? String(own.turns) : ''],
      ['with children', total.calls > own.calls ? `${total.input} in · ${total.output} out · ${fmtCost(total) || '$0'}` : ''],
      ['child run', nr.childRunId ? `${nr.childRunId} (${nr.childStatus ?? ''})` : ''],
    ].filter(([, v]) => v);
    d.head.replaceChildren(
      h('h2', {}, h('span', { class: `badge ${nr.status}`, text: nr.status }), ` ${label(nr)}`),
      h('dl', {}, ...facts.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })])),
    );
    if (nr.childRunId) d.head.append(h('a', { href: `#/runs/${encodeURIComponent(nr.childRunId)}`, text: 'open the child run' }));
  }
}
