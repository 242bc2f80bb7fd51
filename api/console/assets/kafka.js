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
    return el("section", {}, el("h1", {}, "Kafka"),
      el("h2", {}, "Topics and streams"),
      rows.length ? table(["Topic", "Stream", "Leader (owner)"], rows, { id: "topics" }) : el("p", {}, "No stream has a Kafka topic."),
      el("p", { class: "muted" }, "Every topic has one partition, which is its stream."));
  };
}
