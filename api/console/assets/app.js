// The console's shell: routing on location.pathname (every page has a
// deep link), the token prompt, and the "which node answered" label.
import { call, setToken, token, onServedBy, ApiError } from "./api.js";
import { el, errorBox } from "./dom.js";
import { streamsPage } from "./streams.js";
import { streamPage } from "./stream.js";
import { clusterPage } from "./cluster.js";
import { kafkaPage } from "./kafka.js";
import { metricsPage } from "./metrics.js";

const BASE = "/_console";
const main = document.getElementById("main");
let current = null; // AbortController of the page on screen

const routes = [
  [/^\/streams\/(.+)$/, (m) => streamPage(decodeURIComponent("/" + m[1]))],
  [/^\/(streams)?\/?$/, () => streamsPage()],
  [/^\/cluster\/?$/, () => clusterPage()],
  [/^\/kafka\/?$/, () => kafkaPage()],
  [/^\/metrics\/?$/, () => metricsPage()],
];

export function navigate(href, replace) {
  if (replace) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  render();
}

async function render() {
  if (current) current.abort();
  current = new AbortController();
  const signal = current.signal;
  const rest = location.pathname.slice(BASE.length) || "/";
  document.querySelectorAll("[data-nav]").forEach((a) => {
    const on = rest.startsWith("/" + a.dataset.nav) || (a.dataset.nav === "streams" && rest === "/");
    on ? a.setAttribute("aria-current", "page") : a.removeAttribute("aria-current");
  });
  document.getElementById("logout").hidden = !token();
  if (!(await authorised(signal))) return;
  for (const [re, page] of routes) {
    const m = rest.match(re);
    if (m) {
      main.replaceChildren(el("p", { class: "muted" }, "Loading…"));
      try {
        const view = await page(m)(signal);
        if (!signal.aborted) main.replaceChildren(view);
      } catch (e) {
        if (!signal.aborted) main.replaceChildren(errorBox(e));
      }
      return;
    }
  }
  main.replaceChildren(el("h1", {}, "Not found"), el("p", {}, "No console page at " + location.pathname));
}

// authorised asks the node whether this session may read (GET
// /_sys/cluster needs any valid token when auth is on). Without one the
// page shows only the prompt: no data request is made.
async function authorised(signal) {
  try {
    await call("/_sys/cluster", { signal });
    return true;
  } catch (e) {
    if (e instanceof ApiError && (e.status === 401 || e.status === 403) ) {
      prompt(e.status === 403 || token() ? "That token was refused (" + e.code + ")." : "");
      return false;
    }
    return true; // the page itself shows the error
  }
}

function prompt(problem) {
  const input = el("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true });
  const form = el("form", { class: "prompt", id: "token-form", onsubmit: (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    render();
  } },
  el("h1", {}, "Token"),
  el("p", {}, "This node requires a token. It is kept in this tab's session storage and sent as a bearer header."),
  problem ? el("p", { class: "error", role: "alert" }, problem) : null,
  el("label", { for: "token" }, "Bearer token", input),
  el("p", {}, el("button", { type: "submit" }, "Use token")));
  main.replaceChildren(form);
  input.focus();
}

window.addEventListener("picomq:unauthorized", () => { if (!document.getElementById("token-form")) render(); });
window.addEventListener("popstate", render);
document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a[href]");
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith(BASE + "/")) return;
  ev.preventDefault();
  navigate(url.pathname + url.search);
});
document.getElementById("logout").addEventListener("click", () => { setToken(""); render(); });
onServedBy((n) => { document.getElementById("served").textContent = "answered by " + n; });
render();
