// Metrics: the append rate and the mean ack latency of this node, from
// two scrapes of /metrics a few seconds apart, drawn as small charts that
// keep updating while the page is open.
import { call } from "./api.js";
import { el } from "./dom.js";
import { parseMetrics, sum } from "./metricsparse.js";

const EVERY_MS = 3000, KEEP = 60;
const appendMatch = { method: "POST", route: "stream" };

export function metricsPage() {
  return async (signal) => {
    const rate = chart("Appends per second (HTTP POST)", "appends/s");
    const lat = chart("Mean append latency (ms, acknowledged POSTs)", "ms");
    const note = el("p", { class: "muted", "aria-live": "polite" }, "Scraping /metrics every 3 s…");
    let prev = null;
    const scrape = async () => {
      try {
        const m = parseMetrics(await (await call("/metrics", { signal })).text());
        const cur = { t: Date.now(), n: sum(m, "picomq_http_request_duration_seconds_count", appendMatch), s: sum(m, "picomq_http_request_duration_seconds_sum", appendMatch) };
        if (prev) {
          const dt = (cur.t - prev.t) / 1000, dn = cur.n - prev.n;
          rate.add(dn / dt);
          lat.add(dn > 0 ? ((cur.s - prev.s) / dn) * 1000 : 0);
          note.textContent = `Last scrape ${new Date(cur.t).toLocaleTimeString()}.`;
        }
        prev = cur;
      } catch (e) {
        note.textContent = "Scrape failed: " + e.message;
      }
      if (!signal.aborted) setTimeout(scrape, EVERY_MS);
    };
    scrape();
    return el("section", {}, el("h1", {}, "Metrics"), el("div", { class: "cards" }, rate.node, lat.node), note);
  };
}

function chart(title, unit) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", "0 0 300 100");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const line = document.createElementNS(NS, "polyline");
  svg.append(line);
  const label = el("p", { class: "muted" }, "—");
  const pts = [];
  return {
    node: el("figure", { class: "card" }, el("figcaption", {}, title), svg, label),
    add(v) {
      pts.push(v);
      if (pts.length > KEEP) pts.shift();
      const max = Math.max(...pts, 1e-9);
      line.setAttribute("points", pts.map((p, i) => `${(i * 300) / (KEEP - 1)},${100 - (p / max) * 95}`).join(" "));
      svg.setAttribute("aria-label", `${title}: latest ${v.toFixed(2)} ${unit}`);
      label.textContent = `latest ${v.toFixed(2)} ${unit}, max ${max.toFixed(2)} ${unit}`;
    },
  };
}
