// Kafka: which streams Kafka clients see under which topic names.
import { json } from "./api.js";
import { el, table, link } from "./dom.js";

export function kafkaPage() {
  return async (signal) => {
    const rows = [];
    let cursor = "", pages = 0;
    do {
      const q = { limit: "1000" };
      if (cursor) q.cursor = cursor;
      const page = await json("/_streams?" + new URLSearchParams(q), { signal });
      for (const s of page.streams) {
        if (s.kafkaTopic) rows.push(el("tr", { "data-topic": s.kafkaTopic }, el("td", {}, s.kafkaTopic), el("td", {}, link("/_console/streams" + s.name, s.name)), el("td", {}, s.owner || "—")));
      }
      cursor = page.nextCursor || "";
    } while (cursor && ++pages < 20);
    const groups = await json("/_sys/groups", { signal });
    return el("section", {}, el("h1", {}, "Kafka"),
      el("h2", {}, "Topics and streams"),
      rows.length ? table(["Topic", "Stream", "Leader (owner)"], rows, { id: "topics" }) : el("p", {}, "No stream has a Kafka topic."),
      el("p", { class: "muted" }, "A topic made with one partition is one stream; partitions 1…N−1 of a wider topic are streams of their own."),
      el("h2", {}, "Consumer groups"),
      el("p", { class: "muted" }, "Groups of every live node, each shown by the node that coordinates it (asked by " + groups.self + ", every node within 2 s)."),
      (groups.nodes || []).filter((n) => n.error).map((n) => el("p", { class: "error", "data-node-error": n.nodeId }, `Groups of ${n.nodeId} are missing: ${n.error}`)),
      groups.groups.length ? groups.groups.map(groupView) : el("p", { id: "no-groups" }, "No consumer group."));
  };
}

function groupView(g) {
  const members = g.members.map((m) => el("tr", { "data-member": m.memberId },
    el("td", {}, m.clientId), el("td", {}, m.clientHost), el("td", { class: "wide" }, m.memberId),
    el("td", {}, Object.entries(m.assigned || {}).map(([t, ps]) => `${t}: ${ps.join(", ")}`).join("; ") || "—")));
  const parts = g.partitions.map((p) => el("tr", { "data-partition": `${p.topic}/${p.partition}` },
    el("td", {}, p.topic), el("td", { class: "num" }, String(p.partition)), el("td", { class: "num" }, String(p.committed)),
    el("td", { class: "num" }, p.end < 0 ? "—" : String(p.end)),
    el("td", { class: "num", "data-lag": String(p.lag) }, p.lag < 0 ? "unknown (its node did not answer)" : String(p.lag))));
  return el("section", { class: "card", "data-group": g.group },
    el("h3", {}, g.group + " ", el("span", { class: "muted" }, `${g.state}${g.protocol ? ", " + g.protocol : ""}`)),
    el("p", { class: "muted", "data-coordinator": g.coordinator || "" }, "Coordinator: " + (g.coordinator || "—")),
    members.length ? table(["Client", "Host", el("th", { class: "wide", scope: "col" }, "Member id"), "Assigned"], members) : el("p", { class: "muted" }, "No members."),
    parts.length ? table(["Topic", "Partition", "Committed", "End", "Lag"], parts) : el("p", { class: "muted" }, "No committed offsets."));
}
