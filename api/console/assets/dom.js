// A few DOM helpers: pages are built with createElement and textContent
// only, so no record byte is ever parsed as HTML.

export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export function errorBox(err) {
  return el("div", { class: "error", role: "alert", "data-error": err.code || "error" }, err.message || String(err));
}

export function table(head, rows, attrs) {
  return el("div", { class: "scroll" },
    el("table", attrs || {},
      el("thead", {}, el("tr", {}, head.map((h) => typeof h === "string" ? el("th", { scope: "col" }, h) : h))),
      el("tbody", {}, rows)));
}

export function bytes(n) {
  if (n === undefined || n === null || n < 0) return "—";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

export function age(ms) {
  if (!isFinite(ms) || ms < 0) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 120) return s + " s";
  if (s < 7200) return Math.floor(s / 60) + " min";
  if (s < 172800) return Math.floor(s / 3600) + " h";
  return Math.floor(s / 86400) + " d";
}

export function duration(ms) {
  return ms > 0 ? age(ms) : "unlimited";
}

/** link to a console page; the app intercepts clicks (no reload). */
export function link(href, text, attrs) {
  return el("a", { href, ...(attrs || {}) }, text);
}
