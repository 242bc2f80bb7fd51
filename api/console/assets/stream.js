// One stream: its description, its recent records decoded by content
// type, a jump to an offset or a time, a live tail (SSE over fetch, the
// token in a header), and trim/delete for tokens allowed to.
import { json, call, tail, ApiError } from "./api.js";
import { el, table, errorBox, duration, bytes, link } from "./dom.js";
import { navigate } from "./app.js";

const RECENT = 50;

// read is the path that reads stream name through the answering node:
// /_sys/follow/… answers like the stream's own URL, but fetches the
// records from the owner when another node serves the stream, instead
// of a 307 to an origin the page may not reach (docs/console.md).
export function read(name, query) {
  return "/_sys/follow" + name + (query ? "?" + new URLSearchParams(query) : "");
}

export function streamPage(name) {
  return async (signal) => {
    const info = await json("/_streams" + name, { signal });
    const q = new URLSearchParams(location.search);
    const isJSON = /^application\/(.+\+)?json\b/.test(info.contentType);
    const isText = isJSON || /^text\/|\+xml\b|^application\/xml\b/.test(info.contentType);
    const decode = (r) => decodeValue(r, isJSON, isText);

    const body = el("tbody", {});
    const tbl = el("div", { class: "scroll" }, el("table", { class: "records", id: "records" },
      el("thead", {}, el("tr", {}, ["Offset", "Time", "Key", "Headers", "Value"].map((h) => el("th", { scope: "col" }, h)))), body));
    const notes = el("div", { "aria-live": "polite" });
    const live = el("p", { id: "live", class: "muted" }, "Live tail: starting…");
    const addRows = (records, fresh) => {
      for (const r of records) {
        if (body.querySelector(`tr[data-offset="${r.offset}"]`)) continue;
        body.append(el("tr", { "data-offset": String(r.offset), class: fresh ? "new" : null },
          el("td", { class: "num" }, String(r.offset)),
          el("td", {}, new Date(r.timestamp).toISOString()),
          el("td", {}, r.key === undefined ? "—" : el("pre", {}, decodeText(r.key, r.keyEncoding))),
          el("td", {}, (r.headers || []).map((h) => el("pre", {}, h.key + ": " + (h.value === undefined || h.value === null ? "(null)" : decodeText(h.value, h.valueEncoding))))),
          el("td", {}, el("pre", {}, decode(r)))));
      }
    };

    let from;
    if (q.has("offset")) from = Number(q.get("offset"));
    else if (q.has("time")) from = await offsetAt(name, info, Date.parse(q.get("time")), signal);
    let readErr = null, next = info.nextOffset;
    try {
      if (from === undefined) {
        const head = await call(read(name), { method: "HEAD", signal });
        next = Number(head.headers.get("Pico-Next-Offset"));
        from = Math.max(Number(head.headers.get("Pico-Start-Offset")), next - RECENT);
        if (info.nextOffset < 0) { // described by a node that does not serve it
          info.startOffset = Number(head.headers.get("Pico-Start-Offset"));
          info.nextOffset = next;
        }
      }
      const resp = await call(read(name, { offset: String(from), limit: String(RECENT) }), { signal });
      addRows(await resp.json(), false);
      if (!q.has("offset") && !q.has("time")) next = Number(resp.headers.get("Pico-Next-Offset"));
    } catch (e) {
      readErr = e;
    }
    if (readErr) {
      notes.append(errorBox(readErr));
      live.textContent = "Live tail: off.";
    } else {
      startTail(name, next, addRows, live, signal);
    }

    return el("section", {},
      el("h1", {}, name),
      describe(info),
      jumpForm(name, info),
      notes,
      live,
      tbl,
      actions(name, info));
  };
}

function describe(s) {
  const dl = el("dl", { class: "row", id: "describe" });
  const add = (k, v) => dl.append(el("div", {}, el("dt", { class: "muted" }, k), el("dd", {}, v)));
  add("Content type", s.contentType);
  add("Offsets", s.nextOffset < 0 ? "served by " + s.owner : `${s.startOffset} – ${s.nextOffset}`);
  add("Owner", s.owner || "—");
  add("Durability", s.durability || "node default");
  add("Kafka topic", s.kafkaTopic || "—");
  add("Retention", (s.retentionMs > 0 ? duration(s.retentionMs) : "no time limit") + ", " + (s.retentionBytes > 0 ? bytes(s.retentionBytes) : "no size limit"));
  add("Created", new Date(s.createdAt).toISOString());
  return dl;
}

function jumpForm(name, info) {
  const off = el("input", { id: "jump-offset", name: "offset", inputmode: "numeric", size: "10" });
  const time = el("input", { id: "jump-time", name: "time", type: "datetime-local", step: "1" });
  return el("form", { class: "row", id: "jump", onsubmit: (ev) => {
    ev.preventDefault();
    const base = "/_console/streams" + name;
    if (off.value.trim() !== "") navigate(base + "?" + new URLSearchParams({ offset: off.value.trim() }));
    else if (time.value) navigate(base + "?" + new URLSearchParams({ time: new Date(time.value).toISOString() }));
    else navigate(base);
  } },
  el("label", { for: "jump-offset" }, "From offset", off),
  el("label", { for: "jump-time" }, "or from time", time),
  el("button", { type: "submit" }, "Go"),
  link("/_console/streams" + name, "Latest"));
}

// offsetAt finds the first offset whose timestamp is at or after t by
// bisecting one-record reads: log2(records) requests, no server index.
async function offsetAt(name, info, t, signal) {
  if (!isFinite(t)) throw new ApiError(400, "bad_time", "not a time");
  const head = await call(read(name), { method: "HEAD", signal });
  let lo = Number(head.headers.get("Pico-Start-Offset")), hi = Number(head.headers.get("Pico-Next-Offset"));
  while (lo < hi) {
    const mid = lo + Math.floor((hi - lo) / 2);
    const recs = await json(read(name, { offset: String(mid), limit: "1" }), { signal });
    if (!recs.length) break;
    if (recs[0].timestamp < t) lo = recs[0].offset + 1; else hi = mid;
  }
  return lo;
}

// startTail follows the stream from offset with live=sse, reconnecting
// from the last event id when the node ends the connection
// (--sse-timeout) or it drops, with a growing pause after errors.
async function startTail(name, offset, addRows, live, signal) {
  let pause = 500, via = "";
  const opened = (resp) => {
    const from = resp.headers.get("Pico-Read-From");
    via = from ? ` (read from ${from} through ${resp.headers.get("Pico-Served-By") || "this node"})` : "";
  };
  while (!signal.aborted) {
    try {
      live.textContent = "Live tail: connecting at offset " + offset + "…";
      await tail(read(name, { offset: String(offset), live: "sse" }), (ev) => {
        if (ev.id) offset = Number(ev.id);
        if (ev.event === "data") {
          addRows(JSON.parse(ev.data), true);
        } else if (ev.event === "control") {
          live.textContent = "Live tail: following, next offset " + JSON.parse(ev.data).nextOffset + via + ".";
          live.dataset.state = "following";
          pause = 500;
        } else if (ev.event === "error") {
          throw new ApiError(0, "sse", JSON.parse(ev.data).error?.message || ev.data);
        }
      }, signal, opened);
    } catch (e) {
      if (signal.aborted) return;
      live.textContent = "Live tail: " + (e.message || e) + " — retrying.";
      live.dataset.state = "error";
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 15000);
    }
  }
}

function actions(name, info) {
  const out = el("div", { "aria-live": "polite" });
  const trimTo = el("input", { id: "trim-offset", name: "trim", inputmode: "numeric", size: "10" });
  const trim = el("form", { class: "row", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      await call("/_streams" + name, { method: "PATCH", headers: { "Content-Type": "application/merge-patch+json" },
        body: JSON.stringify({ trimBefore: Number(trimTo.value) }) });
      navigate(location.pathname + location.search, true);
    } catch (e) { out.replaceChildren(errorBox(e)); }
  } }, el("label", { for: "trim-offset" }, "Trim records before offset", trimTo), el("button", { type: "submit" }, "Trim"));
  const del = el("button", { type: "button", id: "delete", onclick: async () => {
    if (del.dataset.armed !== "1") {
      del.dataset.armed = "1";
      del.textContent = "Really delete " + name + "?";
      return;
    }
    try {
      await call(name, { method: "DELETE" });
      navigate("/_console/streams");
    } catch (e) { out.replaceChildren(errorBox(e)); }
  } }, "Delete stream");
  return el("section", {}, el("h2", {}, "Change"),
    el("p", { class: "muted" }, "Trimming needs admin access to the stream, deleting too; the node refuses other tokens."),
    trim, el("p", {}, del), out);
}

// decodeValue renders a record value by the stream's content type: JSON
// pretty-printed, text as text, anything else as hex.
function decodeValue(r, isJSON, isText) {
  const v = r.value;
  if (v === null) return "(null: tombstone)";
  if (isJSON && r.valueEncoding !== "base64") {
    if (r.valueEncoding === "json" || typeof v !== "string") return JSON.stringify(v, null, 2);
    return v;
  }
  if (isText && r.valueEncoding !== "base64") return v;
  return hex(r.valueEncoding === "base64" ? b64bytes(v) : new TextEncoder().encode(v));
}

function decodeText(v, enc) {
  return enc === "base64" ? hex(b64bytes(v)) : v;
}

function b64bytes(s) {
  return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
}

function hex(b) {
  const out = [];
  for (let i = 0; i < b.length; i++) out.push(b[i].toString(16).padStart(2, "0"));
  return out.join(" ");
}
