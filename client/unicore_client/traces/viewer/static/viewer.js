// UniCore's trace viewer: one trace of Jaeger's query API as a waterfall (trace/<id>), and the recent traces ("" or
// search). No dependencies, no build step, nothing fetched but this Jaeger's own API (relative to <base href>).
// Everything that comes from a span (names, attributes, events, service names) is inserted as text, never as HTML:
// span names and attributes come from models and users.

const app = document.getElementById("app");
const base = new URL(document.baseURI);
const TRACE_ID = /^[0-9a-f]{1,32}$/i;

/** An element: props are attributes ("class", and on<event> listeners aside); children are nodes, strings (append()
 * makes text nodes of them) or arrays of these; null, undefined and false are left out. */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  node.append(...children.flat(Infinity).filter((child) => child !== undefined && child !== null && child !== false));
  return node;
}

function setState(state) {
  document.body.dataset.state = state;
}

function fail(message) {
  app.replaceChildren(el("p", { class: "status error", role: "alert" }, message));
  setState("error");
}

async function api(path) {
  const response = await fetch(new URL(path, base), { headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: reported by status below
  }
  if (!response.ok || !body) {
    const errors = (body && body.errors) || [];
    const error = new Error(errors.map((e) => e.msg).join("; ") || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

const traceHref = (traceID) => new URL(`trace/${encodeURIComponent(traceID)}`, base).href;
const tagValue = (tags, key) => (tags || []).find((tag) => tag.key === key)?.value;
const isError = (span) => {
  const error = tagValue(span.tags, "error");
  return error === true || error === "true" || tagValue(span.tags, "otel.status_code") === "ERROR";
};
const parentRef = (span) => (span.references || []).find((ref) => ref.refType === "CHILD_OF");
const linkRefs = (span) => (span.references || []).filter((ref) => ref.refType === "FOLLOWS_FROM");
const serviceOf = (trace, span) => trace.processes?.[span.processID]?.serviceName ?? "unknown service";

function formatDuration(us) {
  if (us < 1000) return `${Math.round(us)}µs`;
  if (us < 1e6) return `${Number((us / 1000).toFixed(us < 1e4 ? 2 : 1))}ms`;
  if (us < 6e7) return `${Number((us / 1e6).toFixed(2))}s`;
  const minutes = Math.floor(us / 6e7);
  return `${minutes}m ${Math.round((us - minutes * 6e7) / 1e6)}s`;
}

const formatOffset = (us) => (us <= 0 ? "0" : formatDuration(us));
const formatTime = (us) => new Date(us / 1000).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
const formatValue = (value) => (typeof value === "string" ? value : JSON.stringify(value));

/** A stable hue per service name, for its badge and bars. */
function hue(name) {
  let hash = 0;
  for (const char of name) hash = (hash * 31 + char.codePointAt(0)) >>> 0;
  return (hash * 137) % 360;
}

/** Bounds and the root of a trace: the earliest span whose parent is not in the trace. */
function summarize(trace) {
  const spans = trace.spans || [];
  const ids = new Set(spans.map((span) => span.spanID));
  const start = Math.min(...spans.map((span) => span.startTime));
  const end = Math.max(...spans.map((span) => span.startTime + span.duration));
  const byStart = [...spans].sort((a, b) => a.startTime - b.startTime);
  const root = byStart.find((span) => !ids.has(parentRef(span)?.spanID)) || byStart[0];
  return { start, end, total: Math.max(end - start, 1), root, errors: spans.filter(isError).length };
}

/** The spans in tree order: each child (CHILD_OF) under its parent, siblings by start time. A span whose parent is
 * not in the trace starts a tree of its own, flagged; so do spans caught in a reference cycle. */
function treeRows(trace) {
  const spans = trace.spans || [];
  const ids = new Set(spans.map((span) => span.spanID));
  const children = new Map();
  const roots = [];
  for (const span of spans) {
    const parent = parentRef(span)?.spanID;
    if (parent !== undefined && parent !== span.spanID && ids.has(parent)) {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(span);
    } else {
      roots.push(span);
    }
  }
  const byStart = (a, b) => a.startTime - b.startTime;
  const rows = [];
  const seen = new Set();
  const visit = (span, depth, missingParent) => {
    if (seen.has(span)) return;
    seen.add(span);
    rows.push({ span, depth, missingParent });
    for (const child of (children.get(span.spanID) || []).sort(byStart)) visit(child, depth + 1, false);
  };
  for (const span of roots.sort(byStart)) visit(span, 0, parentRef(span) !== undefined);
  for (const span of spans) visit(span, 0, true);
  return rows;
}

function kvTable(pairs, label) {
  if (!pairs.length) return el("p", { class: "muted" }, "None");
  return el("table", { class: "kv", "aria-label": label },
    el("tbody", {}, pairs.map(({ key, value }) =>
      el("tr", {}, el("th", { scope: "row" }, key), el("td", {}, formatValue(value))))));
}

function showDetail(trace, summary, span, panel) {
  const byId = new Map(trace.spans.map((item) => [item.spanID, item]));
  const parent = parentRef(span);
  const facts = [
    ["Service", serviceOf(trace, span)],
    ["Duration", formatDuration(span.duration)],
    ["Starts at", `+${formatOffset(span.startTime - summary.start)}`],
    ["Span ID", span.spanID],
    ["Parent", parent ? (byId.has(parent.spanID) ? `${byId.get(parent.spanID).operationName} (${parent.spanID})`
      : `missing from this trace (${parent.spanID})`) : "none (root)"],
  ];
  const events = span.logs || [];
  const links = linkRefs(span);
  const warnings = span.warnings || [];
  panel.replaceChildren(...el("div", {},
    el("div", { class: "detail-head" },
      el("h2", { id: "detail-title" }, span.operationName),
      el("button", { type: "button", class: "close", "aria-label": "Close details", onclick: () => select(null) }, "×")),
    isError(span) ? el("p", { class: "badge error" },
      `Error${tagValue(span.tags, "otel.status_description") ? `: ${tagValue(span.tags, "otel.status_description")}` : ""}`) : null,
    el("dl", { class: "facts" }, facts.map(([term, value]) => [el("dt", {}, term), el("dd", {}, value)])),
    el("h3", {}, "Attributes"),
    kvTable(span.tags || [], "Attributes"),
    el("h3", {}, `Events (${events.length})`),
    events.length ? el("ol", { class: "events" }, events.map((log) => {
      const fields = log.fields || [];
      const name = fields.find((field) => field.key === "event")?.value ?? "event";
      return el("li", {},
        el("div", {}, el("span", { class: "offset" }, `+${formatOffset(log.timestamp - summary.start)}`), " ",
          el("strong", {}, formatValue(name))),
        kvTable(fields.filter((field) => field.key !== "event"), "Event fields"));
    })) : el("p", { class: "muted" }, "None"),
    links.length ? [el("h3", {}, "Linked from"), el("ul", { class: "links" }, links.map((ref) => el("li", {},
      ref.traceID === span.traceID && byId.has(ref.spanID)
        ? el("a", { href: `#span-${ref.spanID}`, onclick: (event) => { event.preventDefault(); select(ref.spanID); } },
          byId.get(ref.spanID).operationName)
        : el("a", { href: traceHref(ref.traceID) }, `span ${ref.spanID} of trace ${ref.traceID}`))))] : null,
    el("h3", {}, "Process"),
    kvTable(trace.processes?.[span.processID]?.tags || [], "Process"),
    warnings.length ? [el("h3", {}, "Warnings"), el("ul", { class: "warnings" }, warnings.map((w) => el("li", {}, w)))]
      : null,
  ).childNodes);
  panel.hidden = false;
}

let select = () => {};

async function showTrace(traceID) {
  if (!TRACE_ID.test(traceID)) return fail("Not a trace ID: it is up to 32 hexadecimal digits.");
  let body;
  try {
    body = await api(`api/traces/${encodeURIComponent(traceID)}`);
  } catch (error) {
    if (error.status === 404) return fail(`Trace ${traceID} was not found in this Jaeger.`);
    throw error;
  }
  const trace = body.data && body.data[0];
  if (!trace || !(trace.spans || []).length) return fail(`Trace ${traceID} was not found in this Jaeger.`);
  const summary = summarize(trace);
  const rows = treeRows(trace);
  const services = new Set(trace.spans.map((span) => serviceOf(trace, span)));
  const byId = new Map(trace.spans.map((span) => [span.spanID, span]));
  document.title = `${summary.root.operationName} · UniCore traces`;

  const panel = el("aside", { id: "detail", class: "detail", "aria-labelledby": "detail-title", hidden: true });
  const items = rows.map(({ span, depth, missingParent }) => {
    const service = serviceOf(trace, span);
    const error = isError(span);
    const links = linkRefs(span).map((ref) => (ref.traceID === span.traceID && byId.get(ref.spanID)?.operationName)
      || `another trace (${ref.traceID.slice(0, 8)}…)`);
    const startAt = (span.startTime - summary.start) / summary.total;
    const end = startAt + span.duration / summary.total;
    const row = el("li", {
      class: `span${error ? " error" : ""}`, tabindex: 0, role: "row", "aria-selected": "false",
      "data-span-id": span.spanID, "data-depth": depth, "data-service": service,
      "data-error": error, "data-parent-missing": missingParent,
    },
    el("div", { class: "label", role: "cell", style: `padding-left: ${0.6 + depth * 1.1}rem`, title: span.operationName },
      el("span", { class: "name" }, span.operationName),
      el("span", { class: "service", style: `--hue: ${hue(service)}` }, service),
      missingParent ? el("span", { class: "flag", title: `parent ${parentRef(span)?.spanID ?? "?"} is not in this trace` },
        "parent missing") : null,
      links.length ? el("span", { class: "note" }, `linked from ${links.join(", ")}`) : null),
    el("div", { class: "lane", role: "cell" },
      el("div", { class: "bar", style: `left: ${startAt * 100}%; width: max(2px, ${(end - startAt) * 100}%); --hue: ${hue(service)}` }),
      el("span", { class: "dur", style: end > 0.8 ? `right: ${100 - startAt * 100}%; padding-right: .35rem`
        : `left: ${end * 100}%; padding-left: .35rem` }, formatDuration(span.duration))));
    row.addEventListener("click", () => select(span.spanID));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); select(span.spanID); }
      if (event.key === "ArrowDown") { event.preventDefault(); row.nextElementSibling?.focus(); }
      if (event.key === "ArrowUp") { event.preventDefault(); row.previousElementSibling?.focus(); }
    });
    return row;
  });

  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => el("span", { class: "tick", style: `left: ${f * 100}%` },
    formatOffset(summary.total * f)));
  const layout = el("div", { class: "trace-body" },
    el("div", { class: "waterfall", role: "table", "aria-label": "Spans" },
      el("div", { class: "axis", role: "row" }, el("div", { class: "label", role: "columnheader" }, "Span"),
        el("div", { class: "lane", role: "columnheader" }, ticks)),
      el("ol", { class: "spans", role: "rowgroup" }, items)),
    panel);

  select = (spanID) => {
    for (const item of items) item.setAttribute("aria-selected", String(item.dataset.spanId === spanID));
    const span = byId.get(spanID);
    layout.classList.toggle("with-detail", Boolean(span));
    history.replaceState(null, "", span ? `#span-${spanID}` : location.pathname + location.search);
    if (span) showDetail(trace, summary, span, panel);
    else panel.hidden = true;
  };

  app.replaceChildren(
    el("section", { class: "trace-head" },
      el("h1", {}, summary.root.operationName),
      el("p", { class: "meta" },
        el("span", { class: "service", style: `--hue: ${hue(serviceOf(trace, summary.root))}` },
          serviceOf(trace, summary.root)),
        ` ${formatTime(summary.start)} · ${formatDuration(summary.total)} · ${trace.spans.length} spans · `
        + `${services.size} service${services.size === 1 ? "" : "s"}`,
        summary.errors ? el("span", { class: "badge error" }, `${summary.errors} error${summary.errors === 1 ? "" : "s"}`)
          : null),
      el("p", { class: "meta code" }, `trace ${trace.traceID}`)),
    layout);
  const wanted = /^#span-([0-9a-f]+)$/i.exec(location.hash);
  if (wanted && byId.has(wanted[1])) select(wanted[1]);
  setState("ready");
}

async function showSearch() {
  const services = (await api("api/services")).data || [];
  const chosen = new URLSearchParams(location.search).get("service") || "";
  const picker = el("select", { id: "service", onchange: (event) => {
    const url = new URL("search", base);
    if (event.target.value) url.searchParams.set("service", event.target.value);
    location.assign(url);
  } }, el("option", { value: "" }, "All services"),
  [...services].sort().map((name) => el("option", { value: name, selected: name === chosen }, name)));
  const queried = chosen ? [chosen] : services;
  const found = new Map();
  for (const body of await Promise.all(queried.map((name) =>
    api(`api/traces?service=${encodeURIComponent(name)}&limit=20`)))) {
    for (const trace of body.data || []) if ((trace.spans || []).length) found.set(trace.traceID, trace);
  }
  const traces = [...found.values()].map((trace) => ({ trace, summary: summarize(trace) }))
    .sort((a, b) => b.summary.start - a.summary.start).slice(0, 20);
  app.replaceChildren(
    el("section", { class: "search" },
      el("div", { class: "search-head" }, el("h1", {}, "Recent traces"),
        el("label", { class: "muted" }, "Service ", picker)),
      traces.length ? el("ol", { class: "traces" }, traces.map(({ trace, summary }) => el("li", {
        "data-trace-id": trace.traceID, class: summary.errors ? "error" : null,
      },
      el("a", { href: traceHref(trace.traceID) }, summary.root.operationName),
      el("span", { class: "service", style: `--hue: ${hue(serviceOf(trace, summary.root))}` },
        serviceOf(trace, summary.root)),
      el("span", { class: "meta" }, `${trace.spans.length} spans · ${formatDuration(summary.total)} · `
        + formatTime(summary.start)),
      summary.errors ? el("span", { class: "badge error" }, `${summary.errors} error${summary.errors === 1 ? "" : "s"}`)
        : null,
      el("code", { class: "meta" }, trace.traceID.slice(0, 12)))))
        : el("p", { class: "status" }, services.length ? "No recent traces." : "No traces yet.")));
  setState("ready");
}

document.getElementById("open-trace").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = event.target.elements.trace;
  const id = input.value.trim().toLowerCase();
  if (TRACE_ID.test(id)) return location.assign(traceHref(id));
  input.setCustomValidity("A trace ID is up to 32 hexadecimal digits.");
  input.reportValidity();
});
document.getElementById("trace-id").addEventListener("input", (event) => event.target.setCustomValidity(""));

async function main() {
  const route = location.pathname.startsWith(base.pathname) ? location.pathname.slice(base.pathname.length) : "";
  const traceRoute = /^trace\/([^/]+)\/?$/.exec(route);
  if (traceRoute) return showTrace(decodeURIComponent(traceRoute[1]));
  if (["", "search", "search/"].includes(route)) return showSearch();
  return fail("No such page: the recent traces are at the top left.");
}

main().catch((error) => fail(`Could not load from Jaeger: ${error.message}`));
