// The timeline's requests to the API and its small DOM and formatting
// helpers, shared by the page's views (app.js).

// ---------------------------------------------------------------- requests

/**
 * The server's token. The address `awr serve` prints carries it in the
 * fragment (`/#token=T`; `/?token=T` is taken too): it is kept in this
 * tab's session storage and taken out of the address bar at once, so it
 * stays out of the history, of bookmarks and of any `Referer`.
 */
const TOKEN_KEY = 'awr.token';

function takeToken() {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ''));
  const query = new URLSearchParams(location.search);
  const given = fragment.get('token') ?? query.get('token');
  if (given) {
    try {
      sessionStorage.setItem(TOKEN_KEY, given);
    } catch {
      // Storage refused (a private window's quota): the token lives in memory only.
    }
    query.delete('token');
    const search = query.toString();
    const hash = fragment.has('token') ? '#/' : location.hash;
    history.replaceState(null, '', `${location.pathname}${search ? `?${search}` : ''}${hash}`);
    return given;
  }
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

const token = takeToken();

/** `path` with the token as `access_token=`: for `EventSource`, which cannot send a header. */
export function url(path) {
  if (!token) return path;
  return `${path}${path.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(token)}`;
}

/** How long a request may take: one on a dead (half-open) connection fails instead of hanging. */
const REQUEST_TIMEOUT_MS = 15_000;

export async function api(path, options = {}) {
  const headers = { Accept: 'application/json', ...(options.headers ?? {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { ...options, headers, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) };
  if (options.json !== undefined) {
    init.method = init.method ?? 'POST';
    init.body = JSON.stringify(options.json);
    init.headers['Content-Type'] = 'application/json';
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    let message = body?.message ?? `${response.status} ${response.statusText}`;
    if (response.status === 401) message += ': open the address `awr serve` printed (it ends with #token=…)';
    throw new Error(message);
  }
  return body;
}

/** Sends a command and says what became of it: `{ok, offset}` or `{ok: false, error}`. */
export async function send(runId, body) {
  try {
    const answer = await api(`/workflows/${encodeURIComponent(runId)}/commands`, { json: body });
    notice(`${body.type} accepted (offset ${answer?.offset ?? '?'})`);
    return { ok: true, offset: answer?.offset };
  } catch (error) {
    notice(`${body.type} refused: ${error.message}`, true);
    return { ok: false, error: error.message };
  }
}

// ---------------------------------------------------------------- helpers

export const $ = (id) => document.getElementById(id);

/** An element; string children become text nodes. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) el.append(child);
  return el;
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '';
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  return m < 60 ? `${m}m ${String(s).padStart(2, '0')}s` : `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, '0')}m`;
}

export function fmtTokens(u) {
  const n = u.input + u.output;
  if (!n) return '';
  return n >= 10_000 ? `${(n / 1000).toFixed(1)}k tok` : `${n} tok`;
}

export function fmtCost(u) {
  if (!u.cost) return '';
  return u.cost >= 1 ? `$${u.cost.toFixed(2)}` : `$${u.cost.toFixed(4)}`;
}

export function fmtTime(value) {
  const t = typeof value === 'number' ? value : Date.parse(value ?? '');
  return Number.isFinite(t) ? new Date(t).toLocaleString() : '';
}

export function json(value) {
  if (value === undefined) return '';
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export function notice(text, isError = false) {
  const el = $('notice');
  el.textContent = text;
  el.classList.toggle('error', isError);
}
