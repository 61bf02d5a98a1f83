// UniCore UI: the task tree and a task's transcript, live by Server-Sent Events; shared conversations (their list,
// polled; a conversation's posts and participants, live by Server-Sent Events). Every text that comes from a model, a
// user or a tool is set with textContent (never innerHTML).
const csrf = document.querySelector('meta[name="csrf-token"]').content;
const PAGE = 200;
const ICONS = { running: "\u25b6", done: "\u2713", waiting: "?", suspended: "\u23f8", failed: "\u2717", queued: "\u25cb" };
const VIEWS = ["tree-view", "task-view", "conversations-view", "conversation-view"];
let source = null;
let view = 0; // bumped by every route change: a view whose awaits finish after the user moved on does nothing
let listTimer = null; // the conversation list's refresh, while it is shown

// Show one view (the others hidden); a new view number, so that what the last one awaited is dropped.
function showView(id) {
  view += 1;
  if (listTimer) { clearInterval(listTimer); listTimer = null; }
  for (const name of VIEWS) document.getElementById(name).hidden = name !== id;
  return view;
}

function disconnect() {
  if (source) { source.close(); source = null; }
  document.getElementById("conn").textContent = "";
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

async function api(method, path, body) {
  const init = { method, headers: { "Accept": "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.headers["X-CSRF-Token"] = csrf;
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

function seconds(node) {
  if (!node.created_at) return "";
  const end = node.phase === "running" ? Date.now() / 1000 : node.updated_at;
  return `${Math.max(0, end - node.created_at).toFixed(1)}s`;
}

function phaseLabel(node) {
  return node.phase === "waiting" ? `waiting for ${node.waiting}` : node.phase;
}

// ``probe``: a plain GET of the same data; when the stream fails, its error (a 403 of the API server in cluster
// mode, a task that is gone) is shown and the stream closed, instead of reconnecting forever.
function connect(url, handlers, probe) {
  if (source) source.close();
  const mine = new EventSource(url);
  source = mine;
  const conn = document.getElementById("conn");
  mine.onopen = () => { conn.textContent = "live"; };
  mine.onerror = async () => {
    conn.textContent = "reconnecting\u2026";
    if (!probe) return;
    try {
      await api("GET", probe);
    } catch (err) {
      if (source !== mine) return;
      mine.close();
      conn.textContent = err.message;
    }
  };
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => handler(JSON.parse(event.data)));
  }
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

// ------------------------------------------------------------------ conversations (issue 33)

const LIST_POLL_MS = 2000; // the list is read again this often while shown (a conversation's page is live by SSE)
const POSTS = 500; // a conversation's page opens with its newest POSTS posts
const KIND_LABELS = { post: "posted", answer: "answered", joined: "joined", left: "left", note: "note" };
let listShown = ""; // the list as last rendered (JSON): rendered again only when it changed, so focus stays
let conv = null; // {name, last: seq of the last post shown, status, clientId, shown: participants as rendered}

function conversationRow(item) {
  const title = item.title && item.title !== item.id ? item.title : "";
  return el("li", { "data-conversation": item.id, "data-status": item.status },
    el("a", { href: `#/conversation/${encodeURIComponent(item.id)}`, text: item.id }),
    el("span", { text: title }),
    el("span", { class: "meta", text: `${item.status} \u00b7 ${item.posts} posts \u00b7 agents `
      + `${item.agents.join(", ") || "-"} \u00b7 people ${item.people.join(", ") || "-"}` }));
}

async function loadConversations(mine) {
  const error = document.getElementById("conversations-error");
  try {
    const data = await api("GET", "/api/conversations");
    if (mine !== view) return;
    error.textContent = "";
    const shown = JSON.stringify(data.conversations);
    if (shown === listShown) return;
    listShown = shown;
    document.getElementById("conversations").replaceChildren(...data.conversations.map(conversationRow));
    document.getElementById("conversations-empty").hidden = data.conversations.length > 0;
  } catch (err) {  // e.g. a 403 in cluster mode (no right to list conversations), one line
    if (mine === view) error.textContent = err.message;
  }
}

function showConversations() {
  disconnect();
  const mine = showView("conversations-view");
  document.title = "Conversations \u00b7 UniCore";
  listShown = "";
  loadConversations(mine);
  listTimer = setInterval(() => loadConversations(mine), LIST_POLL_MS);
}

function timeOf(at) {
  const when = new Date((Number(at) || 0) * 1000);
  return el("time", { class: "when", datetime: when.toISOString(), text: when.toLocaleTimeString() });
}

// A post: who, what kind, when, and its text, all as text. Joins, leaves and notes are one quiet line.
function postNode(post) {
  const label = KIND_LABELS[post.kind] || String(post.kind);
  const attrs = { "data-seq": String(post.seq), "data-kind": String(post.kind), "data-sender": String(post.sender_kind) };
  if (post.kind === "joined" || post.kind === "left" || post.kind === "note") {
    return el("li", { class: `msg post-event post-${post.kind}`, ...attrs },
      el("span", { class: "who", text: post.kind === "note" ? `#${post.seq} note: ` : `#${post.seq} ` }),
      el("span", { class: "text", text: String(post.text) }), timeOf(post.at));
  }
  const who = post.sender_kind === "task" ? `${post.name} (agent)` : String(post.name);
  const person = post.sender_kind === "user" ? " post-person" : "";
  return el("li", { class: `msg post-${post.kind}${person}`, ...attrs },
    el("div", { class: "who" }, `#${post.seq} `, el("span", { class: "sender", text: who }), ` ${label}`, timeOf(post.at)),
    el("div", { class: "text", text: String(post.text) }));
}

function addPost(post) {
  if (!conv || post.seq <= conv.last) return; // resumed streams and the first page overlap: each post once
  const list = document.getElementById("posts");
  list.append(postNode(post));
  conv.last = post.seq;
  list.dataset.last = String(post.seq);
}

function participantNode(item) {
  let state = item.state;
  if (state === "waiting" && item.task && item.task.waiting) state = `waiting for ${item.task.waiting}`;
  const name = item.kind === "task" && item.state !== "gone"
    ? el("a", { href: `#/task/${encodeURIComponent(item.id)}`, text: item.name }) : el("span", { text: item.name });
  const what = item.kind === "task" ? `agent \u00b7 ${state}` : (item.left ? "person \u00b7 left" : "person");
  return el("li", { class: `state-${item.state}`, "data-participant": item.id, "data-kind": item.kind,
    "data-state": item.state }, name, " ", el("span", { class: "state", text: what }));
}

function onConversation(info) {
  if (!conv || info.id !== conv.name) return;
  conv.status = info.status;
  document.getElementById("conversation-title").textContent =
    info.title && info.title !== info.id ? `${info.title} (${info.id})` : info.id;
  const line = document.getElementById("conversation-status");
  const handoffs = info.handoffs === null || info.handoffs === undefined  // cluster mode: the task API does not say
    ? `agent hand-offs at most ${info.handoff_limit} per person's post`
    : `agent hand-offs ${info.handoffs} of ${info.handoff_limit} since the last person's post`;
  line.textContent = `${info.status} \u00b7 ${info.posts} posts \u00b7 ${handoffs} \u00b7 created by ${info.created_by}`;
  line.dataset.status = info.status;
  const shown = JSON.stringify(info.participants.map((p) => [p.id, p.kind, p.name, p.state, p.task && p.task.waiting]));
  if (shown !== conv.shown) {  // only when what it shows changed: a focused link stays
    conv.shown = shown;
    document.getElementById("participants").replaceChildren(...info.participants.map(participantNode));
  }
  const closed = info.status === "closed";
  document.getElementById("conversation-pause").disabled = info.status !== "open";
  document.getElementById("conversation-resume").disabled = info.status !== "paused";
  document.getElementById("conversation-close").disabled = closed;
  const form = document.getElementById("post-form");
  form.text.disabled = closed;
  form.querySelector("button").disabled = closed;
  const note = document.getElementById("post-paused");
  note.textContent = closed ? "The conversation is closed: it takes no more posts."
    : "The conversation is paused: your post is kept and delivered when it is resumed.";
  note.hidden = info.status === "open";
}

async function showConversation(name) {
  disconnect();
  const mine = showView("conversation-view");
  const path = `/api/conversations/${encodeURIComponent(name)}`;
  document.title = `${name} \u00b7 UniCore`;
  document.getElementById("conversation-title").textContent = name;
  document.getElementById("conversation-status").textContent = "";
  document.getElementById("conversation-error").textContent = "";
  document.getElementById("post-error").textContent = "";
  document.getElementById("participants").replaceChildren();
  document.getElementById("posts").replaceChildren();
  conv = { name, last: 0, status: null, clientId: null, shown: "" };
  try {
    const info = await api("GET", path);
    if (mine !== view) return;
    onConversation(info);
    const first = Math.max(0, info.posts - POSTS);
    const page = await api("GET", `${path}/posts?after=${first}&limit=${POSTS}`);
    if (mine !== view) return;
    if (first > 0) {
      document.getElementById("posts").append(el("li", { class: "msg post-event",
        text: `${first} earlier posts not shown (unicore conv show prints them all; on a cluster kubectl agenttask `
          + "conv show)" }));
    }
    conv.last = first;
    page.posts.forEach(addPost);
    connect(`${path}/events?after=${conv.last}`, { post: addPost, conversation: onConversation }, path);
  } catch (err) {
    if (mine === view) document.getElementById("conversation-error").textContent = err.message;
  }
}

// Exactly once per post: its client id is kept until the server took it, so a retry after an error is not posted
// twice (the server takes an id once).
document.getElementById("post-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const button = form.querySelector("button");
  if (!conv || button.disabled) return;
  const current = conv;
  const error = document.getElementById("post-error");
  error.textContent = "";
  current.clientId = current.clientId || crypto.randomUUID();
  button.disabled = true;
  try {
    await api("POST", `/api/conversations/${encodeURIComponent(current.name)}/posts`,
      { text: form.text.value, id: current.clientId });
    current.clientId = null;
    if (conv === current) form.text.value = "";
  } catch (err) {
    if (conv === current) error.textContent = err.message;
  } finally {
    button.disabled = conv !== null && conv.status === "closed";
  }
});

for (const action of ["pause", "resume", "close"]) {
  document.getElementById(`conversation-${action}`).addEventListener("click", async (event) => {
    const button = event.currentTarget;
    if (!conv || button.disabled) return;
    const current = conv;
    const path = `/api/conversations/${encodeURIComponent(current.name)}`;
    const error = document.getElementById("conversation-error");
    error.textContent = "";
    button.disabled = true;
    try {
      await api("POST", `${path}/${action}`, {});
      const info = await api("GET", path); // the buttons at once; the stream says it too
      if (conv === current) onConversation(info);
    } catch (err) {  // e.g. closed meanwhile (409): one line
      if (conv === current) { error.textContent = err.message; button.disabled = false; }
    }
  });
}

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
