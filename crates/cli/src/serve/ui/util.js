// The timeline's requests to the API and its small DOM and formatting
// helpers, shared by the page's views (app.js).

// ---------------------------------------------------------------- requests

/** `?token=` on the page is passed as `access_token=` on every request. */
const token = new URLSearchParams(location.search).get('token');

export function url(path) {
  if (!token) return path;
  return `${path}${path.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(token)}`;
}

/** How long a request may take: one on a dead (half-open) connection fails instead of hanging. */
const REQUEST_TIMEOUT_MS = 15_000;

export async function api(path, options = {}) {
  const init = {
    ...options,
    headers: { Accept: 'application/json', ...(options.headers ?? {}) },
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  };
  if (options.json !== undefined) {
    init.method = init.method ?? 'POST';
    init.body = JSON.stringify(options.json);
    init.headers['Content-Type'] = 'application/json';
  }
  const response = await fetch(url(path), init);
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body?.message ?? `${response.status} ${response.statusText}`;
    throw new Error(message);
  }
  return body;
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
