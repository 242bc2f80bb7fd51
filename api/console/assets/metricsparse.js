// parseMetrics reads the Prometheus text format into
// Map<name, [{labels, value}]>; histograms keep their _bucket/_sum/_count
// series under those names.
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: Number(m[4]) });
  }
  return out;
}

/** sum adds the series of name whose labels match every given label. */
export function sum(metrics, name, match) {
  let t = 0;
  for (const s of metrics.get(name) || []) {
    if (Object.entries(match || {}).every(([k, v]) => (v instanceof RegExp ? v.test(s.labels[k] || "") : s.labels[k] === v))) t += s.value;
  }
  return t;
}
