// The node's JSON API as the console uses it: every call carries the
// session's bearer token in a header (never in a URL) and gives up after
// a timeout, so a slow node shows an error instead of a hung page.

const TOKEN_KEY = "picomq.console.token";
export const TIMEOUT_MS = 8000;

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
export function setToken(t) { t ? sessionStorage.setItem(TOKEN_KEY, t) : sessionStorage.removeItem(TOKEN_KEY); }

/** ApiError carries the HTTP status and the node's error code. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export let servedBy = "";
const servedListeners = [];
export function onServedBy(fn) { servedListeners.push(fn); }

function headers(extra) {
  const h = new Headers(extra || {});
  const t = token();
  if (t) h.set("Authorization", "Bearer " + t);
  return h;
}

/**
 * call fetches path from this node. A 307 to another node (the stream's
 * owner) is not followed: that node is another origin, which the
 * console's Content-Security-Policy does not reach (and the browser would
 * drop the token on the way); it is an ApiError with status 307. Reads
 * go through /_sys/follow instead, which never answers 307 (stream.js).
 */
export async function call(path, { method = "GET", body, headers: extra, timeout = TIMEOUT_MS, signal } = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new ApiError(0, "timeout", `${method} ${path}: no answer within ${timeout / 1000} s`)), timeout);
  if (signal) signal.addEventListener("abort", () => ctl.abort(signal.reason), { once: true });
  let resp;
  try {
    resp = await fetch(path, { method, body, headers: headers(extra), signal: ctl.signal, redirect: "manual", cache: "no-store" });
  } catch (e) {
    if (ctl.signal.aborted && ctl.signal.reason instanceof ApiError) throw ctl.signal.reason;
    throw new ApiError(0, "network", `${method} ${path}: ${e.message || e}`);
  } finally {
    clearTimeout(timer);
  }
  noteServedBy(resp);
  if (resp.type === "opaqueredirect" || resp.status === 307) {
    throw new ApiError(307, "redirect", `${method} ${path}: the stream is served by another node; do this on that node's console (the Cluster page links it)`);
  }
  if (!resp.ok) throw await errorOf(resp, method, path);
  return resp;
}

export function noteServedBy(resp) {
  const s = resp.headers.get("Pico-Served-By");
  if (s && s !== servedBy) {
    servedBy = s;
    servedListeners.forEach((fn) => fn(s));
  }
}

async function errorOf(resp, method, path) {
  let code = "http_" + resp.status, msg = resp.statusText;
  try {
    const j = await resp.json();
    if (j && j.error) { code = j.error.code || code; msg = j.error.message || msg; }
  } catch { /* not the JSON error shape */ }
  const e = new ApiError(resp.status, code, `${method} ${path}: ${resp.status} ${code}: ${msg}`);
  if (resp.status === 401) window.dispatchEvent(new CustomEvent("picomq:unauthorized"));
  return e;
}

export async function json(path, opts) {
  const resp = await call(path, opts);
  if (resp.status === 204) return null;
  return resp.json();
}

/** encodePath keeps a stream name's slashes and escapes nothing else the grammar allows. */
export function streamURL(name, query) {
  return name + (query ? "?" + new URLSearchParams(query) : "");
}

/**
 * tail reads path as server-sent events with fetch and a ReadableStream
 * (EventSource cannot send an Authorization header), calling onEvent
 * with {event, id, data} until signal aborts. The connection must start
 * within TIMEOUT_MS; after that an idle stream gets a keep-alive every
 * 15 s, so a silent connection beyond 40 s is treated as dead.
 */
export async function tail(path, onEvent, signal, onOpen) {
  const resp = await call(path, { headers: { Accept: "text/event-stream" }, signal });
  if (onOpen) onOpen(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "", ev = { event: "message", id: "", data: [] };
  for (;;) {
    let idle;
    const next = await Promise.race([
      reader.read(),
      new Promise((_, rej) => { idle = setTimeout(() => rej(new ApiError(0, "timeout", "live tail: nothing for 40 s")), 40000); }),
    ]).finally(() => clearTimeout(idle));
    if (next.done) return;
    buf += next.value;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).replace(/\r$/, "");
      buf = buf.slice(i + 1);
      if (line === "") {
        if (ev.data.length) onEvent({ event: ev.event, id: ev.id, data: ev.data.join("\n") });
        ev = { event: "message", id: "", data: [] };
      } else if (!line.startsWith(":")) {
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        const value = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
        if (field === "event") ev.event = value;
        else if (field === "id") ev.id = value;
        else if (field === "data") ev.data.push(value);
      }
    }
  }
}
