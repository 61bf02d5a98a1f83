// UniCore UI: the task tree and a task's transcript, live by Server-Sent Events, and the routing between them and
// the shared conversations' views (conversations.js). Every text that comes from a model, a user or a tool is set
// with textContent (never innerHTML; common.js builds the elements).
import { api, connect, el, showView, view } from "./common.js";
import { showConversation, showConversations } from "./conversations.js";

const PAGE = 200;
const ICONS = { running: "\u25b6", done: "\u2713", waiting: "?", suspended: "\u23f8", failed: "\u2717", queued: "\u25cb" };

function seconds(node) {
  if (!node.created_at) return "";
  const end = node.phase === "running" ? Date.now() / 1000 : node.updated_at;
  return `${Math.max(0, end - node.created_at).toFixed(1)}s`;
}

function phaseLabel(node) {
  return node.phase === "waiting" ? `waiting for ${node.waiting}` : node.phase;
}

// ------------------------------------------------------------------ tree view

// Rows are kept by task id and updated in place (a changed tree moves or adds only the rows that changed), so a
// live update neither rebuilds 1,000 rows nor takes the keyboard focus away from the link it is on.
const treeRows = new Map(); // task id -> {li, icon, indent, meta}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function treeRow(node) {
  let row = treeRows.get(node.id);
  if (!row) {
    row = { icon: el("span", { class: "icon", role: "img" }), indent: el("span"), meta: el("span", { class: "meta" }) };
    row.li = el("li", { "data-task": node.id }, row.icon, row.indent,
      el("a", { href: `#/task/${encodeURIComponent(node.id)}`, text: node.id }), row.meta);
    treeRows.set(node.id, row);
  }
  row.li.className = `phase-${node.phase}`;
  row.li.dataset.phase = node.phase;
  row.icon.setAttribute("aria-label", phaseLabel(node));
  setText(row.icon, ICONS[node.phase] || "?");
  setText(row.indent, "\u00a0\u00a0".repeat(node.depth));
  setText(row.meta, `${phaseLabel(node)} \u00b7 turns ${node.turns} \u00b7 tokens ${node.tokens} \u00b7 ${seconds(node)}`
    + (node.origin ? ` \u00b7 from ${node.origin}` : ""));
  return row.li;
}

function renderTree(nodes) {
  const list = document.getElementById("tree");
  const shown = new Set(nodes.map((node) => node.id));
  for (const [id, row] of treeRows) {
    if (!shown.has(id)) { row.li.remove(); treeRows.delete(id); }
  }
  let previous = null;
  for (const node of nodes) {
    const li = treeRow(node);
    if (li !== (previous ? previous.nextSibling : list.firstChild)) {
      if (previous) previous.after(li); else list.prepend(li);
    }
    previous = li;
  }
  document.getElementById("tree-empty").hidden = nodes.length > 0;
  document.getElementById("tree").dataset.rendered = String(nodes.length);
}

function showTree() {
  showView("tree-view");
  document.title = "UniCore";
  connect("/api/events", { tree: renderTree }, "/api/tree");
}

document.getElementById("create-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const error = document.getElementById("create-error");
  error.textContent = "";
  const limits = {};
  for (const input of form.querySelectorAll("#limits input")) {
    if (input.value !== "") limits[input.name] = Number(input.value);
  }
  try {
    const created = await api("POST", "/api/tasks", {
      prompt: form.prompt.value, model: form.model.value, name: form.elements.name.value,
      require_approval: form.require_approval.value, ...(Object.keys(limits).length ? { limits } : {}),
    });
    form.prompt.value = "";
    form.elements.name.value = "";
    location.hash = `#/task/${encodeURIComponent(created.id)}`;
  } catch (err) {
    error.textContent = err.message;
  }
});

document.getElementById("yaml-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const error = document.getElementById("yaml-error");
  error.textContent = "";
  try {
    const created = await api("POST", "/api/tasks", { yaml: form.yaml.value });
    form.yaml.value = "";
    location.hash = `#/task/${encodeURIComponent(created.id)}`;
  } catch (err) {
    error.textContent = err.message;
  }
});

// ------------------------------------------------------------------ task view

let task = null; // {id, first, shown, turn, calls: Map(toolUseId -> details), live: Map(seq -> {node, attempt})}

function blockNodes(block) {
  if ("text" in block) return [el("div", { class: "text", text: String(block.text) })];
  if ("toolUse" in block) {
    const use = block.toolUse;
    const details = el("details", { class: "tool" },
      el("summary", { text: `tool call ${use.name}` }),
      el("div", { class: "who", text: "input" }),
      el("pre", { text: JSON.stringify(use.input, null, 2) }));
    task.calls.set(use.toolUseId, details);
    return [details];
  }
  if ("toolResult" in block) {
    const result = block.toolResult;
    const body = (result.content || []).map((c) => ("text" in c ? String(c.text) : JSON.stringify(c.json, null, 2)));
    const nodes = [el("div", { class: "who", text: `result (${result.status || "success"})` }),
      el("pre", { text: body.join("\n") })];
    const call = task.calls.get(result.toolUseId);
    if (call) { call.append(...nodes); return []; }
    return [el("details", { class: "tool" }, el("summary", { text: `tool result ${result.toolUseId}` }), ...nodes)];
  }
  return [el("pre", { text: JSON.stringify(block) })];
}

function messageNode(message) {
  const who = message.role === "user" ? "User" : "Assistant";
  const blocks = message.content.flatMap(blockNodes);
  if (!blocks.length) return null; // tool results only: shown inside their calls' <details>
  return el("li", { class: `msg ${message.role}`, "data-seq": String(message.seq) },
    el("div", { class: "who", text: who }), ...blocks);
}

function addMessage(message, before = null) {
  const list = document.getElementById("transcript");
  const nodes = [];
  if (message.turn_number !== task.turn) {
    task.turn = message.turn_number;
    nodes.push(el("li", {}, el("h2", { text: `Turn ${message.turn_number + 1}` })));
  }
  const node = messageNode(message);
  if (node) nodes.push(node);
  if (before) before.before(...nodes); else list.append(...nodes);
  const live = task.live.get(message.seq);
  if (live) { live.node.remove(); task.live.delete(message.seq); }
  task.shown = Math.max(task.shown, message.seq + 1);
}

function onToken(entry) {
  if (entry.seq < task.shown) return;
  let live = task.live.get(entry.seq);
  if (!live || entry.attempt > live.attempt) {
    if (live) live.node.remove();
    live = { node: el("div", { class: "msg assistant streaming", "data-seq": String(entry.seq) },
      el("div", { class: "who", text: "Assistant (writing\u2026)" }), el("div", { class: "text" })), attempt: entry.attempt };
    task.live.set(entry.seq, live);
    document.getElementById("live").append(live.node);
  }
  if (entry.attempt < live.attempt) return;
  if (entry.kind === "output" && !live.command) {  // a run_command command's line and output as it runs
    live.command = true;
    live.node.className = "msg tool streaming";
    live.node.firstChild.textContent = "Command (running\u2026)";
    live.node.lastChild.className = "text output";
  }
  if (entry.kind === "text" || entry.kind === "output") live.node.lastChild.textContent += entry.text;
}

function renderJobs(jobs) {  // the task's command Jobs (submit_job): text only, like all model-made text
  document.getElementById("task-jobs").replaceChildren(...jobs.map((job) => el("li", {
    text: `Job ${job.name} \u00b7 ${job.state}` + (job.gpus ? ` \u00b7 ${job.gpus} GPU` : "")
      + (job.exitCode !== undefined ? ` \u00b7 exit ${job.exitCode}` : "") + ` \u00b7 ${job.command}` })));
}

function onTask(node) {
  document.getElementById("task-status").textContent =
    `${ICONS[node.phase] || ""} ${phaseLabel(node)} \u00b7 turns ${node.turns} \u00b7 tokens ${node.tokens} \u00b7 model ${node.model}`
    + (node.origin ? ` \u00b7 started by ${node.origin}` : "");
  document.getElementById("task-status").dataset.phase = node.phase;
  document.getElementById("task-error").textContent = node.error || "";
  if (node.jobs) renderJobs(node.jobs);
  document.getElementById("suspend").disabled = Boolean(node.suspended);
  document.getElementById("resume").disabled = !node.suspended;
}

function renderEvents(events) {
  document.getElementById("events").replaceChildren(...events.map((item) => el("tr", { class: `event-${item.type}` },
    el("td", { text: new Date(item.time * 1000).toLocaleTimeString() }), el("td", { text: item.type }),
    el("td", { text: item.reason }), el("td", { text: item.message }))));
  const empty = document.getElementById("events-empty");
  empty.textContent = "No events yet.";
  empty.hidden = events.length > 0;
}

async function refreshEvents(id) {
  try {
    const data = await api("GET", `/api/tasks/${encodeURIComponent(id)}/eventlog`);
    if (task && task.id === id) renderEvents(data.events);
  } catch (err) {  // e.g. no right to list Events in cluster mode: say so instead of an empty panel
    if (task && task.id === id) {
      document.getElementById("events").replaceChildren();
      const empty = document.getElementById("events-empty");
      empty.textContent = `Events unavailable: ${err.message}`;
      empty.hidden = false;
    }
  }
}

for (const control of ["suspend", "resume", "stop"]) {
  document.getElementById(control).addEventListener("click", async () => {
    const error = document.getElementById("task-error");
    try {
      await api("POST", `/api/tasks/${encodeURIComponent(task.id)}/${control}`, {});
    } catch (err) {
      error.textContent = err.message;
    }
  });
}

// Calls whose decision this page sent and has no answer to yet (``<task>\n<call>``): their buttons stay disabled,
// also in a list re-rendered meanwhile, so a double click decides once.
const deciding = new Set();

// A URL the page may link to: an absolute http or https URL (its parsed form), else null (javascript:, data:, a
// relative or unparsable one: shown as text, never an href).
function webUrl(text) {
  if (typeof text !== "string" || !text) return null;
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

// The task tree's trace (``trace``: {id, url} built by the server; null: none): a "Trace" link to its page when the
// url is an http(s) one, the id as text always.
function renderTrace(trace) {
  const line = document.getElementById("task-trace");
  if (!trace || !trace.id) {
    line.replaceChildren();
    line.hidden = true;
    return;
  }
  const href = webUrl(trace.url);
  const parts = [href ? el("a", { href, text: "Trace", target: "_blank", rel: "noopener noreferrer" }) : "Trace",
    " ", el("code", { text: String(trace.id) })];
  if (trace.url && !href) parts.push(` (${String(trace.url)})`);
  line.replaceChildren(...parts);
  line.hidden = false;
}

function renderLinks(info) {
  renderTrace(info.trace);
  const conversations = info.conversations || []; // the shared conversations it takes part in (local mode)
  const line = document.getElementById("task-conversations");
  line.replaceChildren(...(conversations.length ? ["conversations: ", ...conversations.flatMap((name) => [
    el("a", { href: `#/conversation/${encodeURIComponent(name)}`, text: name }), " "])] : []));
  line.hidden = conversations.length === 0;
  const links = [];
  if (info.parent) links.push("parent: ", el("a", { href: `#/task/${encodeURIComponent(info.parent)}`, text: info.parent }), " ");
  if (info.children.length) links.push("children: ");
  for (const child of info.children) links.push(el("a", { href: `#/task/${encodeURIComponent(child)}`, text: child }), " ");
  document.getElementById("task-links").replaceChildren(...links);
  const pending = document.getElementById("pending");
  pending.replaceChildren(...info.pending_calls.map((call) => {
    const key = `${info.id}\n${call.call_id}`;
    const approve = el("button", { type: "button", text: "Approve" });
    const deny = el("button", { type: "button", text: "Deny" });
    approve.disabled = deny.disabled = deciding.has(key);
    const decide = (choice) => async () => {
      if (deciding.has(key)) return;
      deciding.add(key);
      approve.disabled = deny.disabled = true;
      try {
        await api("POST", `/api/tasks/${encodeURIComponent(info.id)}/calls/${encodeURIComponent(call.call_id)}`, { approve: choice });
      } catch (err) {  // e.g. decided meanwhile by someone else (AlreadyDecided): say so; the list shows what holds
        if (task && task.id === info.id) document.getElementById("task-error").textContent = err.message;
      } finally {
        deciding.delete(key);
      }
      if (task && task.id === info.id) refreshLinks(info.id);
    };
    approve.addEventListener("click", decide(true));
    deny.addEventListener("click", decide(false));
    return el("div", { class: "msg" }, el("div", { class: "who", text: `waiting: ${call.tool}` }),
      el("pre", { text: JSON.stringify(call.input, null, 2) }), approve, deny);
  }));
}

async function showTask(id) {
  const mine = showView("task-view");
  document.getElementById("task-title").textContent = id;
  document.title = `${id} \u00b7 UniCore`;
  document.getElementById("transcript").replaceChildren();
  document.getElementById("live").replaceChildren();
  document.getElementById("events").replaceChildren();
  renderTrace(null);
  task = { id, first: 0, shown: 0, turn: null, calls: new Map(), live: new Map(), clientId: null };
  try {
    const info = await api("GET", `/api/tasks/${encodeURIComponent(id)}`);
    if (mine !== view) return;
    onTask(info);
    renderLinks(info);
    task.first = Math.max(0, info.messages - PAGE);
    const page = await api("GET", `/api/tasks/${encodeURIComponent(id)}/messages?start=${task.first}&count=${PAGE}`);
    if (mine !== view) return;
    page.messages.forEach((m) => addMessage(m));
    task.shown = task.first + page.messages.length;
    document.getElementById("earlier").hidden = task.first === 0;
    connect(`/api/tasks/${encodeURIComponent(id)}/events?from=${task.shown}`, {
      message: addMessage, token: onToken, task: (node) => { onTask(node); refreshLinks(id); refreshEvents(id); },
    }, `/api/tasks/${encodeURIComponent(id)}`);
  } catch (err) {
    document.getElementById("task-error").textContent = err.message;
  }
}

async function refreshLinks(id) {
  try {
    const info = await api("GET", `/api/tasks/${encodeURIComponent(id)}`);
    if (task && task.id === id) renderLinks(info);  // not another task's page the user moved to meanwhile
  } catch { /* the stream retries */ }
}

// One page at a time: the button is disabled while its page loads (a double click loads it once), and a page that
// arrives after the user moved to another task is dropped.
document.getElementById("earlier").addEventListener("click", async (event) => {
  const button = event.currentTarget;
  if (button.disabled) return;
  const mine = view;
  button.disabled = true;
  try {
    const start = Math.max(0, task.first - PAGE);
    const page = await api("GET", `/api/tasks/${encodeURIComponent(task.id)}/messages?start=${start}&count=${task.first - start}`);
    if (mine !== view) return;
    const anchor = document.getElementById("transcript").firstChild;
    const turn = task.turn;
    task.turn = null;
    page.messages.forEach((m) => addMessage(m, anchor));
    task.turn = turn;
    task.first = start;
    button.hidden = start === 0;
  } catch (err) {
    if (mine === view) document.getElementById("task-error").textContent = err.message;
  } finally {
    button.disabled = false;
  }
});

document.getElementById("send-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const button = form.querySelector("button");
  const error = document.getElementById("send-error");
  error.textContent = "";
  task.clientId = task.clientId || crypto.randomUUID(); // kept until it is accepted: a retry is not sent twice
  button.disabled = true;
  try {
    await api("POST", `/api/tasks/${encodeURIComponent(task.id)}/messages`, { text: form.text.value, client_id: task.clientId });
    task.clientId = null;
    form.text.value = "";
  } catch (err) {
    error.textContent = err.message;
  } finally {
    button.disabled = false;
  }
});

// ------------------------------------------------------------------ routing

function decoded(match) {
  try {
    return match ? decodeURIComponent(match[1]) : null;
  } catch {  // URIError: not percent-encoded UTF-8 (a hand-edited or cut link)
    return null;
  }
}

function route() {
  if (location.hash === "#/conversations") {
    showConversations();
    return;
  }
  const conversation = location.hash.match(/^#\/conversation\/(.+)$/);
  const name = decoded(conversation);
  if (name !== null) {
    showConversation(name);
    return;
  }
  const match = location.hash.match(/^#\/task\/(.+)$/);
  const id = decoded(match);
  document.getElementById("route-error").textContent = match && id === null
    ? `${location.hash.slice(0, 100)}: not a task address`
    : conversation ? `${location.hash.slice(0, 100)}: not a conversation address` : "";
  if (id !== null) showTask(id); else showTree();
}
window.addEventListener("hashchange", route);
route();
