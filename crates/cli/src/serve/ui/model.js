// The timeline's model: run events (docs/events.md) folded into node runs.
//
// No DOM here, so `node --test` checks the fold on real event logs. The page
// (app.js) feeds events in as they stream and redraws what changed: every
// change bumps the `version` of the node runs it concerns and of their
// ancestors (sums are shown on parents), and adds them to `dirty`.

const TERMINAL = new Set(['flow:completed', 'flow:failed', 'flow:cancelled']);

/** A terminal event type ends the run's log. */
export function isTerminal(type) {
  return TERMINAL.has(type);
}

/** Milliseconds since the epoch of an RFC 3339 timestamp, or null. */
function ms(timestamp) {
  const t = Date.parse(timestamp);
  return Number.isFinite(t) ? t : null;
}

function num(value) {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0;
}

/** Token counts and cost, own or summed. */
export function emptyUsage() {
  return { input: 0, output: 0, cacheRead: 0, cacheCreation: 0, cost: 0, turns: 0, calls: 0 };
}

export function addUsage(into, from) {
  into.input += from.input;
  into.output += from.output;
  into.cacheRead += from.cacheRead;
  into.cacheCreation += from.cacheCreation;
  into.cost += from.cost;
  into.turns += from.turns;
  into.calls += from.calls;
  return into;
}

/** One node run (`nodeRunId`), a skipped node, or a `for_each` item. */
class NodeRun {
  constructor(key, nodeId, run) {
    this.key = key;
    this.nodeId = nodeId ?? '';
    this.run = run;
    this.status = 'running';
    this.attempt = 1;
    this.item = null;
    this.items = null;
    this.iteration = null;
    /** Which pass over its node this is (a loop runs a node again), from 1. */
    this.pass = 1;
    this.startedAt = null;
    this.attemptStartedAt = null;
    this.endedAt = null;
    this.error = null;
    /** Every failure seen, with the attempt it ended: `{attempt, type, message}`. */
    this.errors = [];
    /** In order: `{kind: 'text'|'thinking', text}`, `{kind: 'tool', ...}`, `{kind: 'attempt', attempt}`, `{kind: 'note', ...}`. */
    this.blocks = [];
    this.tools = new Map();
    this.usage = emptyUsage();
    this.model = null;
    this.sessionId = null;
    this.childRunId = null;
    this.childStatus = null;
    this.input = undefined;
    this.output = undefined;
    this.parent = null;
    this.children = [];
    this.version = 0;
    /** The open question (`approval:requested`) until it is resolved. */
    this.question = null;
  }

  /** The text streamed so far, every block joined. */
  get text() {
    return this.blocks.filter((b) => b.kind === 'text').map((b) => b.text).join('');
  }

  get thinking() {
    return this.blocks.filter((b) => b.kind === 'thinking').map((b) => b.text).join('');
  }
}

/** One run's events folded, in offset order. */
export class RunModel {
  constructor(runId) {
    this.runId = runId;
    this.workflow = '';
    this.parentRunId = null;
    this.status = 'pending';
    this.startedAt = null;
    this.endedAt = null;
    this.lastOffset = 0;
    this.lastAt = null;
    this.error = null;
    this.failedNode = null;
    this.input = undefined;
    this.output = undefined;
    this.nodes = [];
    /** Node runs by key (`nodeRunId`, or a made-up key for a skipped node). */
    this.nodeRuns = new Map();
    /** Top-level node runs, in start order. */
    this.roots = [];
    /** Node runs started so far by node id (not counting items). */
    this.passes = new Map();
    this.commands = [];
    /** Bumped when a question is asked or resolved. */
    this.questionsVersion = 0;
    this.warnings = [];
    this.events = 0;
    /** Events received again (offset at or below one already folded): not folded twice. */
    this.duplicates = 0;
    /** Offsets that were skipped over (a hole in what was received). */
    this.gaps = 0;
    /** Keys of node runs changed since the last `takeDirty()`. */
    this.dirty = new Set();
    this.version = 0;
    /** The node run (in a parent run) this run is the child of, set by the Timeline. */
    this.parentNodeRun = null;
  }

  /** Folds one stored event; returns false when it was already folded. */
  apply(event) {
    const offset = event.offset;
    if (typeof offset === 'number') {
      if (offset <= this.lastOffset) {
        this.duplicates += 1;
        return false;
      }
      if (offset > this.lastOffset + 1) this.gaps += offset - this.lastOffset - 1;
      this.lastOffset = offset;
    }
    this.events += 1;
    this.version += 1;
    const at = ms(event.timestamp);
    if (at !== null) this.lastAt = at;
    const handler = HANDLERS[event.type];
    if (handler) handler(this, event, at);
    else if (event.nodeRunId) this.note(event, at);
    return true;
  }

  /** Node runs whose question waits for an answer, oldest question first. */
  get questions() {
    return [...this.nodeRuns.values()].filter((nr) => nr.question).sort((a, b) => a.question.offset - b.question.offset);
  }

  /** Keys changed since the last call; the set is emptied. */
  takeDirty() {
    const dirty = this.dirty;
    this.dirty = new Set();
    return dirty;
  }

  get ended() {
    return this.status === 'completed' || this.status === 'failed' || this.status === 'cancelled';
  }

  /** The node run of an event, made when first seen (a log may start mid-run). */
  nodeRun(event, at) {
    const key = event.nodeRunId;
    if (!key) return null;
    let nr = this.nodeRuns.get(key);
    if (!nr) {
      nr = new NodeRun(key, event.nodeId, this);
      nr.startedAt = at;
      nr.attemptStartedAt = at;
      this.nodeRuns.set(key, nr);
      this.roots.push(nr);
    }
    return nr;
  }

  /** Marks a node run and its ancestors (across runs) changed. */
  touch(nr) {
    for (let n = nr; n; n = n.parent ?? n.run.parentNodeRun) {
      n.version += 1;
      n.run.dirty.add(n.key);
    }
  }

  /** An event of a node run this page does not show apart: kept as a note. */
  note(event, at) {
    const nr = this.nodeRun(event, at);
    if (!nr) return;
    nr.blocks.push({ kind: 'note', type: event.type, text: event.message ?? '', at, version: 1 });
    this.touch(nr);
  }

  /** Ends every node run still in flight (the run ended). */
  endOpen(at, status) {
    for (const nr of this.nodeRuns.values()) {
      if (nr.status === 'running') {
        nr.status = status;
        nr.endedAt = at;
        this.touch(nr);
      }
    }
  }
}

function streamed(kind) {
  return (run, event, at) => {
    const nr = run.nodeRun(event, at);
    if (!nr) return;
    const text = typeof event.content === 'string' ? event.content : '';
    const last = nr.blocks[nr.blocks.length - 1];
    if (last && last.kind === kind && last.open) {
      last.text += text;
      last.version += 1;
    } else {
      nr.blocks.push({ kind, text, open: true, at, version: 1 });
    }
    run.touch(nr);
  };
}

function whole(kind) {
  return (run, event, at) => {
    const nr = run.nodeRun(event, at);
    if (!nr) return;
    closeBlocks(nr);
    nr.blocks.push({ kind, text: typeof event.content === 'string' ? event.content : '', open: false, at, version: 1 });
    run.touch(nr);
  };
}

/** A streamed block ends when something else comes between its deltas. */
function closeBlocks(nr) {
  const last = nr.blocks[nr.blocks.length - 1];
  if (last && last.open) last.open = false;
}

/** The tool call an event is about: joined by its id, else a new one. */
function toolCall(run, event, at, id) {
  const nr = run.nodeRun(event, at);
  if (!nr) return [null, null];
  let call = id ? nr.tools.get(id) : undefined;
  if (!call) {
    closeBlocks(nr);
    call = {
      kind: 'tool',
      id: id ?? null,
      name: event.toolName ?? '',
      input: event.toolInput,
      output: undefined,
      error: null,
      status: 'running',
      durationMs: null,
      at,
      version: 0,
    };
    nr.blocks.push(call);
    if (id) nr.tools.set(id, call);
  }
  call.version += 1;
  return [nr, call];
}

const HANDLERS = {
  'flow:started'(run, e, at) {
    run.status = 'running';
    run.startedAt = at;
    run.workflow = e.workflow?.name ?? '';
    run.parentRunId = e.parentRunId ?? null;
    run.input = e.input;
    run.nodes = Array.isArray(e.nodes) ? e.nodes : [];
  },
  'flow:paused'(run, e) {
    // Stopped with nothing left but people to answer.
    run.status = e.waiting ? 'waiting' : 'paused';
  },
  'approval:requested'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    nr.question = {
      offset: e.offset,
      at,
      prompt: e.prompt ?? '',
      schema: e.schema ?? null,
      deadline: ms(e.deadline),
      onTimeout: e.onTimeout ?? null,
      approvers: Array.isArray(e.approvers) ? e.approvers : [],
      tool: e.tool ?? null,
    };
    nr.blocks.push({ kind: 'note', type: 'approval:requested', text: nr.question.prompt, at, version: 1 });
    run.questionsVersion += 1;
    run.touch(nr);
  },
  'approval:resolved'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    nr.question = null;
    const who = e.by ? ` by ${e.by}` : '';
    const why = e.reason ? `: ${e.reason}` : '';
    const how = e.how === 'answered' ? '' : ` (${e.how})`;
    nr.blocks.push({ kind: 'note', type: 'approval:resolved', text: `${e.approved ? 'approved' : 'rejected'}${who}${how}${why}`, at, version: 1 });
    run.questionsVersion += 1;
    run.touch(nr);
  },
  'flow:resumed'(run) {
    run.status = 'running';
  },
  'flow:completed'(run, e, at) {
    run.status = 'completed';
    run.endedAt = at;
    run.output = e.output;
    run.endOpen(at, 'cancelled');
  },
  'flow:failed'(run, e, at) {
    run.status = 'failed';
    run.endedAt = at;
    run.error = e.error ?? null;
    run.failedNode = e.failedNode ?? null;
    run.endOpen(at, 'cancelled');
  },
  'flow:cancelled'(run, e, at) {
    run.status = 'cancelled';
    run.endedAt = at;
    run.error = e.reason ?? null;
    run.endOpen(at, 'cancelled');
  },
  'node:started'(run, e, at) {
    const known = run.nodeRuns.has(e.nodeRunId);
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    const attempt = typeof e.attempt === 'number' ? e.attempt : 1;
    if (known && attempt > nr.attempt) {
      // A retry: the same node run, a new attempt.
      nr.attempt = attempt;
      nr.attemptStartedAt = at;
      nr.status = 'running';
      nr.endedAt = null;
      closeBlocks(nr);
      nr.blocks.push({ kind: 'attempt', attempt, at, version: 1 });
    }
    nr.input = e.input;
    if (typeof e.items === 'number') nr.items = e.items;
    if (typeof e.iteration === 'number') nr.iteration = e.iteration;
    if (!known && typeof e.item !== 'number') {
      nr.pass = (run.passes.get(nr.nodeId) ?? 0) + 1;
      run.passes.set(nr.nodeId, nr.pass);
    }
    if (typeof e.item === 'number' && !known) {
      // A for_each item: nested under its node's open node run that has the items.
      nr.item = e.item;
      const parent = openForEach(run, nr.nodeId, nr);
      if (parent) {
        run.roots.splice(run.roots.indexOf(nr), 1);
        nr.parent = parent;
        parent.children.push(nr);
        parent.children.sort((a, b) => (a.item ?? 0) - (b.item ?? 0));
      }
    }
    run.touch(nr);
  },
  'node:completed'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    nr.status = 'completed';
    nr.endedAt = at;
    nr.output = e.output;
    closeBlocks(nr);
    run.touch(nr);
  },
  'node:failed'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    const error = typeof e.error === 'string' ? e.error : 'failed';
    nr.status = error.startsWith('cancelled') ? 'cancelled' : 'failed';
    nr.continued = e.continued === true;
    nr.endedAt = at;
    nr.error = error;
    // The node fails with its attempt's agent error (`type: message`): that is one failure, listed once.
    const same = nr.errors.some((e) => e.attempt === nr.attempt && error === `${e.type}: ${e.message}`);
    if (!same) nr.errors.push({ attempt: nr.attempt, type: 'node:failed', message: error });
    closeBlocks(nr);
    run.touch(nr);
  },
  'node:skipped'(run, e, at) {
    const key = `skipped:${e.nodeId ?? ''}:${e.offset}`;
    const nr = new NodeRun(key, e.nodeId, run);
    nr.status = 'skipped';
    nr.startedAt = at;
    nr.endedAt = at;
    nr.error = e.reason ?? null;
    run.nodeRuns.set(key, nr);
    run.roots.push(nr);
    run.touch(nr);
  },
  'agent:start'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    if (e.model) nr.model = e.model;
    if (e.sessionId && !e.provisional) nr.sessionId = e.sessionId;
    closeBlocks(nr);
    run.touch(nr);
  },
  'agent:session'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    if (e.sessionId) nr.sessionId = e.sessionId;
    if (e.model) nr.model = e.model;
    run.touch(nr);
  },
  'agent:text:delta': streamed('text'),
  'agent:thinking:delta': streamed('thinking'),
  'agent:text': whole('text'),
  'agent:thinking': whole('thinking'),
  'agent:tool:use'(run, e, at) {
    const [nr] = toolCall(run, e, at, e.toolUseId);
    if (nr) run.touch(nr);
  },
  'agent:tool'(run, e, at) {
    const [nr, call] = toolCall(run, e, at, e.toolUseId);
    if (!nr) return;
    call.name = e.toolName ?? call.name;
    if (e.toolInput !== undefined) call.input = e.toolInput;
    call.output = e.toolOutput;
    call.error = e.error ?? null;
    call.status = e.error ? 'failed' : 'completed';
    call.durationMs = typeof e.durationMs === 'number' ? e.durationMs : null;
    run.touch(nr);
  },
  'tool:started'(run, e, at) {
    const [nr] = toolCall(run, e, at, e.callId);
    if (nr) run.touch(nr);
  },
  'tool:completed'(run, e, at) {
    const [nr, call] = toolCall(run, e, at, e.callId);
    if (!nr) return;
    call.output = e.toolOutput;
    call.status = 'completed';
    call.durationMs = typeof e.durationMs === 'number' ? e.durationMs : null;
    run.touch(nr);
  },
  'tool:failed'(run, e, at) {
    const [nr, call] = toolCall(run, e, at, e.callId);
    if (!nr) return;
    call.error = e.error ?? 'failed';
    call.status = 'failed';
    call.durationMs = typeof e.durationMs === 'number' ? e.durationMs : null;
    run.touch(nr);
  },
  'agent:error'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    closeBlocks(nr);
    // Listed in `errors` (the detail shows that list), not again as a block.
    nr.errors.push({ attempt: nr.attempt, type: e.errorType ?? 'error', message: e.message ?? '' });
    run.touch(nr);
  },
  'agent:complete'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    const u = e.usage ?? {};
    nr.usage.input += num(u.inputTokens);
    nr.usage.output += num(u.outputTokens);
    nr.usage.cacheRead += num(u.cacheReadInputTokens);
    nr.usage.cacheCreation += num(u.cacheCreationInputTokens);
    nr.usage.cost += num(e.totalCostUsd);
    nr.usage.turns += num(e.numTurns);
    nr.usage.calls += 1;
    if (e.sessionId) nr.sessionId = e.sessionId;
    closeBlocks(nr);
    run.touch(nr);
  },
  'subflow:started'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    nr.childRunId = e.childRunId ?? null;
    nr.childStatus = 'running';
    run.touch(nr);
  },
  'subflow:completed'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    nr.childRunId = e.childRunId ?? nr.childRunId;
    nr.childStatus = e.status ?? 'completed';
    run.touch(nr);
  },
  'command:received'(run, e, at) {
    run.commands.push({ offset: e.offset, at, command: e.command, accepted: e.accepted !== false, error: e.error ?? null });
  },
  'rate:limited'(run, e, at) {
    const nr = run.nodeRun(e, at);
    if (!nr) return;
    nr.blocks.push({ kind: 'note', type: 'rate:limited', text: `rate limited by ${e.provider ?? 'the provider'}, retry in ${num(e.retryAfterMs)} ms`, at, version: 1 });
    run.touch(nr);
  },
  warning(run, e, at) {
    run.warnings.push({ offset: e.offset, message: e.message ?? '' });
    if (e.nodeRunId) run.note(e, at);
  },
  'budget:exceeded'(run, e) {
    run.warnings.push({ offset: e.offset, message: `budget ${e.budget} exceeded: ${e.used} of ${e.limit}` });
  },
  'system:error'(run, e) {
    run.warnings.push({ offset: e.offset, message: e.message ?? 'system error' });
  },
  'state:saved'() {},
  'edge:fired'() {},
  'edge:skipped'() {},
  'process:started'() {},
};

/** The open node run of a `for_each` node that an item belongs to. */
function openForEach(run, nodeId, except) {
  for (let i = run.roots.length - 1; i >= 0; i -= 1) {
    const nr = run.roots[i];
    if (nr !== except && nr.nodeId === nodeId && nr.items !== null) return nr;
  }
  return null;
}

/**
 * Every run shown on a page: one root run and the child runs its
 * `call_workflow` nodes started, each linked under its node run.
 */
export class Timeline {
  constructor(rootRunId) {
    this.rootRunId = rootRunId;
    this.runs = new Map();
    this.run(rootRunId);
  }

  get root() {
    return this.runs.get(this.rootRunId);
  }

  /** The model of a run, made when first named. */
  run(runId) {
    let run = this.runs.get(runId);
    if (!run) {
      run = new RunModel(runId);
      this.runs.set(runId, run);
    }
    return run;
  }

  /**
   * Folds an event of one of the runs. Returns the child run ids it named
   * for the first time (the page then follows their streams).
   */
  apply(runId, event) {
    const run = this.run(runId);
    if (!run.apply(event)) return [];
    if (event.type === 'subflow:started' && event.childRunId && event.nodeRunId) {
      const child = this.run(event.childRunId);
      const parent = run.nodeRuns.get(event.nodeRunId);
      if (parent && !child.parentNodeRun) {
        child.parentNodeRun = parent;
        run.touch(parent);
        return [event.childRunId];
      }
    }
    return [];
  }

  /** Children of a node run in display order: its items, then its child run's node runs. */
  children(nr) {
    if (nr.childRunId) {
      const child = this.runs.get(nr.childRunId);
      if (child) return nr.children.concat(child.roots);
    }
    return nr.children;
  }

  /** Own usage plus every descendant's, child runs included. */
  totals(nr) {
    const sum = addUsage(emptyUsage(), nr.usage);
    for (const child of this.children(nr)) addUsage(sum, this.totals(child));
    return sum;
  }

  /** A run's usage: the sum over its top-level node runs. */
  runTotals(runId = this.rootRunId) {
    const sum = emptyUsage();
    const run = this.runs.get(runId);
    if (run) for (const nr of run.roots) addUsage(sum, this.totals(nr));
    return sum;
  }

  /** Time axis of the page: the root run's start and the latest time seen. */
  span(now) {
    const root = this.root;
    const start = root.startedAt ?? now;
    let end = root.endedAt;
    if (end === null) {
      end = now;
      for (const run of this.runs.values()) if (run.lastAt !== null && run.lastAt > end) end = run.lastAt;
    }
    return { start, end: Math.max(end, start + 1) };
  }

  /** Number of events folded over every run. */
  get events() {
    let n = 0;
    for (const run of this.runs.values()) n += run.events;
    return n;
  }
}

/** Fold a whole log (array of events, or NDJSON text) into a RunModel. */
export function foldLog(events) {
  const list = typeof events === 'string' ? events.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l)) : events;
  const run = new RunModel(list[0]?.runId ?? '');
  for (const e of list) run.apply(e);
  return run;
}
