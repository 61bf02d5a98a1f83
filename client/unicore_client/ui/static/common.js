// What every view of the UniCore page shares: the view switch, the element builder (every text from a model, a user
// or a tool is set with textContent, never innerHTML), the JSON API with the CSRF header, and the one live stream.
const csrf = document.querySelector('meta[name="csrf-token"]').content;
const VIEWS = ["tree-view", "task-view", "conversations-view", "conversation-view"];
let source = null;
export let view = 0; // bumped by every route change: a view whose awaits finish after the user moved on does nothing
let leaving = null; // what the shown view stops when another is shown (the conversation list's refresh)

// Show one view (the others hidden); a new view number, so that what the last one awaited is dropped. ``onLeave``:
// called when another view is shown.
export function showView(id, onLeave = null) {
  view += 1;
  if (leaving) { leaving(); leaving = null; }
  for (const name of VIEWS) document.getElementById(name).hidden = name !== id;
  leaving = onLeave;
  return view;
}

export function disconnect() {
  if (source) { source.close(); source = null; }
  document.getElementById("conn").textContent = "";
}

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

export async function api(method, path, body) {
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

// ``probe``: a plain GET of the same data; when the stream fails, its error (a 403 of the API server in cluster
// mode, a task that is gone) is shown and the stream closed, instead of reconnecting forever.
export function connect(url, handlers, probe) {
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
