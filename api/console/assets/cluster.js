// Cluster: the live members with each node's own figures
// (GET /_sys/cluster?figures=true: the answering node asks every node,
// each within 2 s), the streams the registry says each owns (from the
// stream listing: streams of nodes no longer live show up there), and
// which node answered.
import { json, servedBy } from "./api.js";
import { el, table, bytes, age } from "./dom.js";

const MAX_PAGES = 20; // 20 000 streams counted; more say so

export function clusterPage() {
  return async (signal) => {
    const [cluster, owned] = await Promise.all([
      json("/_sys/cluster?figures=true", { signal }),
      ownedCounts(signal),
    ]);
    const now = Date.now();
    const rows = cluster.nodes.map((n) => {
      const self = n.nodeId === cluster.self;
      const f = n.figures;
      const listed = owned.counts.get(n.nodeId) || 0;
      const fig = (key, text) => el("td", { class: "num", "data-fig": key, "data-value": f ? String(f[key]) : null }, f ? text(f[key]) : "—");
      return el("tr", { "data-node": n.nodeId, "data-stale": n.figuresError ? "1" : null, "data-figures-age": n.figuresAgeMs === undefined ? null : String(n.figuresAgeMs) },
        el("td", {}, n.nodeId + (self ? " (answered)" : ""),
          n.figuresError ? el("div", { class: "error-text", "data-figures-error": "1" }, figuresNote(n)) : null),
        el("td", {}, n.advertiseUrl ? el("a", { href: n.advertiseUrl + "/_console/cluster" }, n.advertiseUrl) : "—"),
        el("td", {}, n.kafkaAddr || "—"),
        el("td", {}, n.zone || "—"),
        el("td", { class: "num" }, n.startedAt ? age(now - Date.parse(n.startedAt)) : "—"),
        el("td", { class: "num", "data-owned": String(listed), "data-fig": "streamsOwned", "data-value": f ? String(f.streamsOwned) : null },
          f ? String(f.streamsOwned) + (f.streamsOwned !== listed ? ` (${listed} listed)` : "") : String(listed)),
        fig("unflushedBytes", bytes),
        fig("flushLagMs", lag),
        fig("walDiskBytes", bytes),
        fig("objectBytes", bytes));
    });
    const orphans = [...owned.counts.entries()].filter(([id]) => !cluster.nodes.some((n) => n.nodeId === id));
    return el("section", {},
      el("h1", {}, "Cluster"),
      el("p", { id: "answered" }, "Answered by ", el("strong", {}, cluster.self || servedBy), ` · ${cluster.nodes.length} live node(s)`),
      table(["Node", "Advertise URL", "Kafka", "Zone", "Member for", "Streams owned", "Unflushed", "Flush lag", "WAL on disk", "In object storage"], rows, { id: "nodes" }),
      orphans.length ? el("p", { class: "error" }, "Streams owned by nodes that are not live: " + orphans.map(([id, c]) => `${id} (${c})`).join(", ")) : null,
      owned.truncated ? el("p", { class: "muted" }, `Counted the first ${MAX_PAGES * 1000} streams only.`) : null,
      el("p", { class: "muted" }, "Each node reports its own figures (the same numbers as its /metrics: picomq_streams, picomq_unflushed_bytes, picomq_flush_lag_seconds, picomq_wal_disk_bytes, picomq_object_bytes); a node that does not answer within 2 s shows the last figures this node got from it, with their age. Streams owned include the server's own streams (consumer group offsets); \"listed\" counts the streams the stream listing gives the node. \"Member for\" is the age of the node's membership lease record."));
  };
}

function lag(ms) {
  return ms > 0 ? (ms < 10000 ? (ms / 1000).toFixed(1) + " s" : age(ms)) : "none";
}

function figuresNote(n) {
  const old = n.figuresAgeMs === undefined ? "no figures" : "figures " + age(n.figuresAgeMs) + " old";
  return `${old}: ${n.figuresError}`;
}

async function ownedCounts(signal) {
  const counts = new Map();
  let cursor = "", pages = 0;
  do {
    const q = { limit: "1000" };
    if (cursor) q.cursor = cursor;
    const page = await json("/_streams?" + new URLSearchParams(q), { signal });
    for (const s of page.streams) counts.set(s.owner || "?", (counts.get(s.owner || "?") || 0) + 1);
    cursor = page.nextCursor || "";
  } while (cursor && ++pages < MAX_PAGES);
  return { counts, truncated: !!cursor };
}
