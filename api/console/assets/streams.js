// Streams: GET /_streams filtered by prefix, one page at a time; the
// filter and the page cursor live in the URL, so every view is a link.
import { json, call } from "./api.js";
import { el, table, duration, bytes, link, errorBox } from "./dom.js";
import { navigate } from "./app.js";

const PAGE = 50;

export function streamsPage() {
  return async (signal) => {
    const q = new URLSearchParams(location.search);
    const prefix = q.get("prefix") || "/";
    const cursor = q.get("cursor") || "";
    const params = { prefix, limit: String(PAGE) };
    if (cursor) params.cursor = cursor;
    const page = await json("/_streams?" + new URLSearchParams(params), { signal });
    const input = el("input", { id: "prefix", name: "prefix", value: prefix, spellcheck: "false" });
    const filter = el("form", { class: "row", role: "search", onsubmit: (ev) => {
      ev.preventDefault();
      let p = input.value.trim() || "/";
      if (!p.startsWith("/")) p = "/" + p;
      navigate("/_console/streams?" + new URLSearchParams({ prefix: p }));
    } }, el("label", { for: "prefix" }, "Name prefix", input), el("button", { type: "submit" }, "Filter"));
    const rows = page.streams.map((s) => el("tr", { "data-stream": s.name },
      el("td", {}, link("/_console/streams" + s.name, s.name)),
      el("td", {}, s.contentType),
      el("td", { class: "num" }, s.nextOffset < 0 ? "on " + (s.owner || "?") : String(s.nextOffset)),
      el("td", { class: "num" }, s.nextOffset < 0 ? "—" : String(s.nextOffset - s.startOffset)),
      el("td", {}, s.durability || "node default"),
      el("td", { "data-owner": s.owner || "" }, s.owner || "—"),
      el("td", {}, s.kafkaTopic || "—"),
      el("td", { class: "wide" }, retention(s)),
    ));
    const nav = el("p", { class: "row" },
      cursor ? link("/_console/streams?" + new URLSearchParams({ prefix }), "First page") : null,
      page.nextCursor ? link("/_console/streams?" + new URLSearchParams({ prefix, cursor: page.nextCursor }), "Next page", { rel: "next" }) : null);
    return el("section", {},
      el("h1", {}, "Streams"),
      filter,
      rows.length ? table(["Name", "Content type", "Next offset", "Records", "Durability", "Owner", "Kafka topic",
        el("th", { class: "wide", scope: "col" }, "Retention")], rows, { id: "streams" })
        : el("p", { id: "no-streams" }, "No stream names start with " + prefix + "."),
      nav,
      el("p", { class: "muted" }, "A node that does not serve a stream shows its owner instead of its offsets."),
      createForm());
  };
}

// createForm is PUT /{name}; a token without write access gets the
// node's 403, shown under the form.
function createForm() {
  const name = el("input", { id: "new-name", name: "name", required: true, placeholder: "/orders/eu", spellcheck: "false" });
  const type = el("input", { id: "new-type", name: "type", value: "application/json", spellcheck: "false" });
  const out = el("div", { "aria-live": "polite" });
  return el("form", { class: "row", id: "create", onsubmit: async (ev) => {
    ev.preventDefault();
    let n = name.value.trim();
    if (!n.startsWith("/")) n = "/" + n;
    try {
      await call(n, { method: "PUT", headers: { "Content-Type": type.value.trim() || "application/octet-stream" } });
      navigate("/_console/streams" + n);
    } catch (e) {
      out.replaceChildren(errorBox(e));
    }
  } }, el("h2", {}, "Create a stream"),
  el("label", { for: "new-name" }, "Name", name), el("label", { for: "new-type" }, "Content type", type),
  el("button", { type: "submit" }, "Create"), out);
}

function retention(s) {
  const parts = [];
  if (s.retentionMs > 0) parts.push(duration(s.retentionMs));
  if (s.retentionBytes > 0) parts.push(bytes(s.retentionBytes));
  return parts.length ? parts.join(", ") : "unlimited";
}
