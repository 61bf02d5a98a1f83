// UniCore UI: shared conversations (issue 33): their list (polled) with the "New conversation" form, and a
// conversation's page: posts and participants live by Server-Sent Events, the post box, pause/resume/close, and
// "Add a task" / "Remove" for its task participants. Every text from a person or a model is set as text (``el``).
import { api, connect, disconnect, el, showView, view } from "./common.js";

const LIST_POLL_MS = 2000; // the list is read again this often while shown (a conversation's page is live by SSE)
const POSTS = 500; // a conversation's page opens with its newest POSTS posts
const KIND_LABELS = { post: "posted", answer: "answered", joined: "joined", left: "left", note: "note" };
let listShown = ""; // the list as last rendered (JSON): rendered again only when it changed, so focus stays
let conv = null; // {name, last: seq of the last post shown, status, clientId, shown: participants as rendered, adding}
let listTimer = null; // the list's refresh, while it is shown
let notice = ""; // said once on the page the "New conversation" form opens (it existed: kept as it is)
const removing = new Set(); // "<conversation>\n<task>" whose Remove was sent and not answered yet: its button stays
// disabled, also in a list re-rendered meanwhile, so a double click sends it once

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

export function showConversations() {
  disconnect();
  const mine = showView("conversations-view", () => clearInterval(listTimer));
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
  const node = el("li", { class: `state-${item.state}`, "data-participant": item.id, "data-kind": item.kind,
    "data-state": item.state }, name, " ", el("span", { class: "state", text: what }));
  if (item.kind === "task" && !item.left) {  // take it out: it gets no more posts (Add a task brings it back)
    const remove = el("button", { type: "button", class: "remove", text: "Remove", "aria-label": `Remove ${item.name}`,
      title: "Take this task out of the conversation (it gets no more posts)" });
    remove.disabled = conv.status === "closed" || removing.has(`${conv.name}\n${item.id}`);
    remove.addEventListener("click", () => removeTask(item.id, remove));
    node.append(" ", remove);
  }
  return node;
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
  const shown = JSON.stringify([info.status, ...info.participants.map((p) => [p.id, p.kind, p.name, p.state,
    p.task && p.task.waiting])]);
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
  const members = document.getElementById("member-form");
  members.task.disabled = closed;
  members.querySelector("button").disabled = closed || conv.adding;
  const note = document.getElementById("post-paused");
  note.textContent = closed ? "The conversation is closed: it takes no more posts."
    : "The conversation is paused: your post is kept and delivered when it is resumed.";
  note.hidden = info.status === "open";
}

export async function showConversation(name) {
  disconnect();
  const mine = showView("conversation-view");
  const path = `/api/conversations/${encodeURIComponent(name)}`;
  document.title = `${name} \u00b7 UniCore`;
  document.getElementById("conversation-title").textContent = name;
  document.getElementById("conversation-status").textContent = "";
  document.getElementById("conversation-error").textContent = "";
  document.getElementById("post-error").textContent = "";
  document.getElementById("member-error").textContent = "";
  const said = document.getElementById("conversation-note");
  said.textContent = notice;
  said.hidden = !notice;
  notice = "";
  document.getElementById("participants").replaceChildren();
  document.getElementById("posts").replaceChildren();
  conv = { name, last: 0, status: null, clientId: null, shown: "", adding: false };
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

// ------------------------------------------------------------------ creating, adding and removing tasks

// "New conversation": its tasks as typed, split at commas and spaces. It opens the conversation's page, which says
// when it existed (the server keeps it as it is; the tasks named joined it).
document.getElementById("conversation-create-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const button = form.querySelector("button");
  if (button.disabled) return;
  const error = document.getElementById("conversation-create-error");
  error.textContent = "";
  button.disabled = true;
  try {
    const tasks = form.elements.tasks.value.split(/[\s,]+/).filter(Boolean);
    const made = await api("POST", "/api/conversations", { name: form.elements.name.value.trim(),
      title: form.elements.title.value, tasks });
    form.reset();
    notice = made.created ? "" : `${made.id} existed: kept as it is${tasks.length ? " (the tasks named take part)" : ""}.`;
    location.hash = `#/conversation/${encodeURIComponent(made.id)}`;
  } catch (err) {  // a bad name, a task that does not exist, a 403 in cluster mode: one line
    error.textContent = err.message;
  } finally {
    button.disabled = false;
  }
});

// A task joins or leaves; then the participants at once (the stream says it too).
async function member(current, task, action) {
  const path = `/api/conversations/${encodeURIComponent(current.name)}`;
  await api("POST", `${path}/members`, { task, action });
  const info = await api("GET", path);
  if (conv === current) onConversation(info);
}

document.getElementById("member-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const button = form.querySelector("button");
  if (!conv || button.disabled) return;
  const current = conv;
  const error = document.getElementById("member-error");
  error.textContent = "";
  current.adding = true;
  button.disabled = true;
  try {
    await member(current, form.task.value.trim(), "join");
    if (conv === current) form.task.value = "";
  } catch (err) {  // a task that does not exist (404), closed (409), another namespace (400): one line
    if (conv === current) error.textContent = err.message;
  } finally {
    current.adding = false;
    if (conv === current) button.disabled = current.status === "closed";
  }
});

async function removeTask(task, button) {
  const current = conv;
  const key = `${current.name}\n${task}`;
  if (removing.has(key)) return;
  removing.add(key);
  button.disabled = true;
  const error = document.getElementById("member-error");
  error.textContent = "";
  try {
    await member(current, task, "leave");
  } catch (err) {
    if (conv === current) error.textContent = err.message;
  } finally {
    removing.delete(key);
    for (const li of document.getElementById("participants").children) {  // the row as rendered now
      const remove = li.dataset.participant === task && li.querySelector("button.remove");
      if (remove && conv === current) remove.disabled = current.status === "closed";
    }
  }
}
