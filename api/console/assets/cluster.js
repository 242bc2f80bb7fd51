// Cluster: the live members (GET /_sys/cluster), the streams each owns
// (from the stream listing), this node's flush and WAL gauges (its
// /metrics), and which node answered.
import { json, call, servedBy } from "./api.js";
import { el, table, bytes, age } from "./dom.js";
import { parseMetrics, sum } from "./metricsparse.js";

const MAX_PAGES = 20; // 20 000 streams counted; more say so

export function clusterPage() {
  return async (signal) => {
    const [cluster, owned, metrics] = await Promise.all([
      json("/_sys/cluster", { signal }),
      ownedCounts(signal),
      call("/metrics", { signal }).then((r) => r.text()).then(parseMetrics).catch((e) => e),
    ]);
    const now = Date.now();
    const rows = cluster.nodes.map((n) => {
      const self = n.nodeId === cluster.self;
      const m = self && !(metrics instanceof Error) ? metrics : null;
      return el("tr", { "data-node": n.nodeId },
        el("td", {}, n.nodeId + (self ? " (answered)" : "")),
        el("td", {}, n.advertiseUrl ? el("a", { href: n.advertiseUrl + "/_console/cluster" }, n.advertiseUrl) : "—"),
        el("td", {}, n.kafkaAddr || "—"),
        el("td", {}, n.zone || "—"),
        el("td", { class: "num" }, n.startedAt ? age(now - Date.parse(n.startedAt)) : "—"),
        el("td", { class: "num", "data-owned": String(owned.counts.get(n.nodeId) || 0) }, String(owned.counts.get(n.nodeId) || 0)),
        el("td", { class: "num" }, m ? bytes(sum(m, "picomq_unflushed_bytes")) : "—"),
        el("td", { class: "num" }, m ? bytes(sum(m, "picomq_wal_disk_bytes")) : "—"),
        el("td", { class: "num" }, m ? bytes(sum(m, "picomq_flushed_bytes_total")) : "—"));
    });
    const orphans = [...owned.counts.entries()].filter(([id]) => !cluster.nodes.some((n) => n.nodeId === id));
    return el("section", {},
      el("h1", {}, "Cluster"),
      el("p", { id: "answered" }, "Answered by ", el("strong", {}, cluster.self || servedBy), ` · ${cluster.nodes.length} live node(s)`),
      table(["Node", "Advertise URL", "Kafka", "Zone", "Member for", "Streams owned", "Unflushed", "WAL on disk", "Flushed to objects"], rows, { id: "nodes" }),
      orphans.length ? el("p", { class: "error" }, "Streams owned by nodes that are not live: " + orphans.map(([id, c]) => `${id} (${c})`).join(", ")) : null,
      owned.truncated ? el("p", { class: "muted" }, `Counted the first ${MAX_PAGES * 1000} streams only.`) : null,
      metrics instanceof Error ? el("p", { class: "muted" }, "This node's metrics: " + metrics.message) : null,
      el("p", { class: "muted" }, "Gauges are the answering node's own; open another node's console for its numbers. \"Member for\" is the age of the node's membership lease record."));
  };
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
