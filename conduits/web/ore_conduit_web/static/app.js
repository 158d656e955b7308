// The chat page: threads on the left, the active path of one thread in the middle,
// live answers from the thread's event stream (resumed by the browser with
// Last-Event-ID after a drop; a reload is shown the answer so far, then the rest).
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  threadId: null,
  tree: null,
  source: null,
  live: { running: false, text: "", reasoning: "", pending: [] },
  error: null, // {message, turnId}
  stopped: false,
  editing: null,
  renderQueued: false,
  me: null, // {user, max_message_length}
  offer: null, // {processor, model, models}: what answers and the models a thread may pick
  notice: null, // {content, severity}: the thread's latest notice, until the next message
  expanded: new Set(), // compaction lines the reader opened (kept across renders)
  files: [], // the composer's files: {key, name, size, upload (a promise of {id}), id, failed}
  picking: null, // the turn whose reaction picker is open
};

// On a thread linked to other endpoints (bridging), stored events and turns carry
// `relay` (the server's word on where they came from and how they are shown): another
// endpoint's message is shown with its label, an answer the gateway's `answer` setting
// hides is left out, edits and deletes made elsewhere and delivery reports for this
// page's messages reload the thread.
const relayed = (relay) => relay && (relay.action === "relayed" || relay.action === "edited");

// -- talking to the server ----------------------------------------------------

class ApiProblem extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    throw new ApiProblem(0, "The server cannot be reached. Is `ore conduit web` running?");
  }
  if (response.status === 204 || response.status === 202 && !response.headers.get("content-type")) return null;
  let payload = null;
  try { payload = await response.json(); } catch (error) { payload = null; }
  if (!response.ok) {
    const message = payload && payload.error ? payload.error.message : `HTTP ${response.status}`;
    throw new ApiProblem(response.status, message);
  }
  return payload;
}

// What went wrong, in plain words (the server's own sentence where it says more).
const PLAIN = {
  401: () => "You are not signed in: open the URL that `ore conduit web` printed (it carries your token).",
  404: () => "That thread is gone (deleted, or another user's).",
  409: () => "This thread is still answering: wait for the answer, or press Stop.",
  413: (error) => `That is too large to send. ${error.message}`,
  415: (error) => `That file cannot be sent here. ${error.message}`,
  503: () => "ore's core is not answering: is `ore serve` running? Try again when it is.",
};

function showProblem(error) {
  const box = $("problem");
  if (!error) { box.hidden = true; $("problem-text").textContent = ""; return; }
  box.hidden = false;
  const plain = PLAIN[error.status];
  $("problem-text").textContent = plain ? plain(error) : error.message;
}

async function attempt(action) {
  try {
    const result = await action();
    showProblem(null);
    return result;
  } catch (error) {
    showProblem(error);
    return undefined;
  }
}

// -- the thread list ----------------------------------------------------------

let searchTimer = null;
let listings = 0;

async function loadThreads() {
  const query = $("search").value.trim();
  const serial = ++listings;
  const found = await attempt(() => api("GET", "/api/threads" + (query ? `?q=${encodeURIComponent(query)}` : "")));
  if (!found || serial !== listings) return; // a later listing (another search) wins
  const list = $("threads");
  list.replaceChildren();
  for (const thread of found.threads) {
    list.append(threadItem(thread));
  }
}

// A thread in the list: its title and last activity (opens it), then rename and delete.
function threadItem(thread) {
  const item = document.createElement("li");
  const open = document.createElement("button");
  open.type = "button";
  open.className = "open";
  open.setAttribute("aria-label", `Open thread ${thread.title}`);
  if (thread.id === state.threadId) open.setAttribute("aria-current", "true");
  open.addEventListener("click", () => openThread(thread.id));
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = thread.title;
  open.append(name);
  if (thread.updated) open.append(timeElement(thread.updated, true));
  const rename = button(`Rename ${thread.title}`, "✎", () => renameThread(thread.id, thread.title));
  const remove = button(`Delete ${thread.title}`, "🗑", () => deleteThread(thread.id, thread.title));
  rename.className = remove.className = "item-action";
  item.append(open, rename, remove);
  return item;
}

// A moment as people read it: the time today, the date before; the full moment on hover.
function timeElement(iso, withDate) {
  const moment = new Date(iso);
  const element = document.createElement("time");
  element.dateTime = iso;
  element.title = moment.toLocaleString();
  const today = moment.toDateString() === new Date().toDateString();
  element.textContent = withDate && !today
    ? moment.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" })
    : moment.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return element;
}

// An in-page dialog instead of prompt()/confirm(): resolves to the typed value (with
// `value`), true (a confirmation), or null when cancelled.
function ask(text, { value = null, ok = "OK" } = {}) {
  const dialog = $("ask");
  const input = $("ask-value");
  $("ask-text").textContent = text;
  $("ask-ok").textContent = ok;
  input.hidden = value === null;
  input.value = value || "";
  dialog.returnValue = "";
  dialog.showModal();
  if (value !== null) input.select();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      if (dialog.returnValue !== "ok") resolve(null);
      else resolve(value === null ? true : input.value.trim() || null);
    }, { once: true });
  });
}

async function renameThread(threadId, current) {
  const title = await ask("Rename the thread to:", { value: current, ok: "Rename" });
  if (!title) return;
  await attempt(() => api("PATCH", `/api/threads/${threadId}`, { title }));
  if (threadId === state.threadId) reloadTree();
  loadThreads();
}

async function deleteThread(threadId, title) {
  if (!await ask(`Delete “${title}”? Only you stop seeing it: ore keeps its history.`, { ok: "Delete" })) return;
  const done = await attempt(async () => { await api("DELETE", `/api/threads/${threadId}`); return true; });
  if (!done) return;
  if (threadId === state.threadId) closeThread();
  loadThreads();
}

// -- the model (which one answers the thread; a picker when several are offered) ----

// The model the open thread answers with: its own choice, else the configured one
// (echo has none: the processor's name is shown).
function answeringModel() {
  const offer = state.offer;
  if (!offer || !state.tree) return "";
  return state.tree.model || offer.model || offer.processor;
}

function renderModel() {
  const offer = state.offer;
  const label = $("model");
  const picker = $("model-picker");
  const current = answeringModel();
  const choices = offer && state.tree ? offer.models : [];
  picker.hidden = choices.length < 2;
  label.hidden = !current || !picker.hidden;
  label.textContent = current;
  label.title = offer ? `${offer.processor} answers` : "";
  if (picker.hidden) return;
  const names = choices.includes(current) ? choices : [current, ...choices];
  if (picker.dataset.names !== names.join("\n")) {
    picker.replaceChildren(...names.map((name) => new Option(name, name)));
    picker.dataset.names = names.join("\n");
  }
  picker.value = current;
}

async function chooseModel(model) {
  const threadId = state.threadId;
  if (!threadId) return;
  const chosen = await attempt(() => api("PUT", `/api/threads/${threadId}/model`, { model }));
  if (!chosen) { renderModel(); return; } // refused: the picker shows the model as it was
  if (state.tree && threadId === state.threadId) state.tree.model = chosen.model;
  renderModel();
}

$("model-picker").addEventListener("change", (event) => chooseModel(event.target.value));

// -- one thread -----------------------------------------------------------------

async function openThread(threadId) {
  if (state.source) { state.source.close(); state.source = null; }
  state.threadId = threadId;
  state.tree = null;
  state.live = { running: false, text: "", reasoning: "", pending: [] };
  state.error = null;
  state.stopped = false;
  state.editing = null;
  state.notice = null;
  if (location.hash !== `#${threadId}`) history.replaceState(null, "", `#${threadId}`);
  const tree = await attempt(() => api("GET", `/api/threads/${threadId}`));
  if (!tree) { state.threadId = null; render(); return; }
  state.tree = tree;
  render();
  listen(threadId, tree.cursor || "0");
  loadThreads();
}

function closeThread() {
  if (state.source) state.source.close();
  state.source = null;
  state.threadId = null;
  state.tree = null;
  state.live = { running: false, text: "", reasoning: "", pending: [] };
  history.replaceState(null, "", "#");
  render();
}

// Reloads overlap (a title change and the end of an answer): the last one asked wins.
let reloads = 0;

async function reloadTree() {
  if (!state.threadId) return;
  const threadId = state.threadId;
  const serial = ++reloads;
  const tree = await attempt(() => api("GET", `/api/threads/${threadId}`));
  if (tree && threadId === state.threadId && serial === reloads) { state.tree = tree; render(); }
}

function listen(threadId, cursor) {
  const source = new EventSource(`/api/threads/${threadId}/events?after=${encodeURIComponent(cursor)}`);
  state.source = source;
  const mine = () => state.source === source;
  source.addEventListener("partial", (message) => {
    if (!mine()) return;
    const partial = JSON.parse(message.data);
    state.live = partial;
    queueRender();
  });
  source.addEventListener("pending", (message) => {
    if (!mine()) return;
    const pending = JSON.parse(message.data);
    if (!state.live.pending.some((p) => p.event_id === pending.event_id)) state.live.pending.push(pending);
    state.live.running = true;
    state.error = null;
    state.stopped = false;
    queueRender();
  });
  source.addEventListener("live", (message) => {
    if (!mine()) return;
    const event = JSON.parse(message.data);
    if (event.kind === "notice") { state.notice = event; queueRender(); return; } // not an answer
    state.live.running = true;
    if (event.kind === "text_delta") state.live.text += event.content;
    else if (event.kind === "reasoning_delta") state.live.reasoning += event.content;
    queueRender();
  });
  source.addEventListener("stored", (message) => {
    if (!mine()) return;
    const event = JSON.parse(message.data);
    if (event.relay && event.relay.action === "hidden") {
      // Another endpoint's conversation: shown once it is stored, its answer left out.
      if (event.kind === "lifecycle" && event.phase === "done") { reloadTree(); loadThreads(); }
      return;
    }
    if (event.kind === "reaction") {
      applyReaction(event);
    } else if (event.kind === "turn_deleted" || event.kind === "delivery") {
      reloadTree();
    } else if (event.kind === "error") {
      state.error = { message: event.message };
    } else if (event.kind === "turn_complete" && event.turn.role === "user") {
      state.live.pending = state.live.pending.filter((p) => p.event_id !== (event.turn.metadata || {}).event_id);
    } else if (event.kind === "lifecycle" && (event.phase === "done" || event.phase === "cancelled")) {
      if (event.phase === "cancelled") state.stopped = true;
      state.live.running = false;
      state.live.text = "";
      state.live.reasoning = "";
      reloadTree();
      loadThreads();
    }
    queueRender();
  });
  source.addEventListener("changed", (message) => {
    if (!mine()) return;
    const what = JSON.parse(message.data).what;
    if (what === "deleted") { closeThread(); loadThreads(); return; }
    reloadTree();
    if (what === "title") loadThreads();
  });
}

// Deltas arrive faster than a page needs to paint: one render per frame.
function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(() => { state.renderQueued = false; render(); });
}

// -- rendering ---------------------------------------------------------------------

function button(label, text, onClick) {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = text;
  element.setAttribute("aria-label", label);
  element.addEventListener("click", onClick);
  return element;
}

function siblingNav(view) {
  const nav = document.createElement("nav");
  nav.className = "siblings";
  nav.setAttribute("aria-label", "Sibling message navigation");
  const index = view.siblings.indexOf(view.id);
  const previous = button("Previous sibling message", "‹", () => select(view.siblings[index - 1]));
  previous.disabled = index <= 0;
  const position = document.createElement("span");
  position.setAttribute("role", "status");
  position.textContent = `${index + 1} / ${view.siblings.length}`;
  const next = button("Next sibling message", "›", () => select(view.siblings[index + 1]));
  next.disabled = index >= view.siblings.length - 1;
  nav.append(previous, position, next);
  return nav;
}

function details(summary, text) {
  const element = document.createElement("details");
  const title = document.createElement("summary");
  title.textContent = summary;
  const body = document.createElement("pre");
  body.textContent = text;
  element.append(title, body);
  return element;
}

function messageElement(role, label) {
  const article = document.createElement("article");
  article.className = `message ${role}`;
  article.setAttribute("aria-label", label);
  return article;
}

function senderLine(view) {
  const line = document.createElement("div");
  line.className = "sender";
  line.textContent = view.relay.label;
  if (view.relay.action === "edited") {
    const mark = document.createElement("span");
    mark.className = "edited";
    mark.textContent = " (edited)";
    line.append(mark);
  }
  return line;
}

// A reply made on another endpoint: the start of the message it answers, quoted.
function replyLine(view) {
  const line = document.createElement("blockquote");
  line.className = "reply";
  const target = state.tree.turns.find((v) => v.id === view.relay.reply_to);
  const text = target ? target.text : "an earlier message";
  line.textContent = `↪ ${text.length > 80 ? `${text.slice(0, 80)}…` : text}`;
  return line;
}

// What other endpoints reported about their copy of this page's message: a small line,
// read out by screen readers, like a chat app's warning beside a message not delivered.
function deliveryLine(view) {
  const line = document.createElement("p");
  line.className = "delivery";
  line.setAttribute("role", "status");
  line.textContent = view.deliveries.map((d) => (d.status === "failed"
    ? `⚠ not delivered to ${d.endpoint}${d.detail ? `: ${d.detail}` : ""}`
    : `↻ delivering to ${d.endpoint}…`)).join(" · ");
  return line;
}

// Who wrote the message and when (another endpoint's carries its label instead).
function metaLine(view) {
  const line = document.createElement("div");
  line.className = "meta";
  const author = document.createElement("span");
  author.className = "author";
  author.textContent = view.role === "user" ? (state.me ? state.me.user : "you") : "ore";
  line.append(author);
  if (view.timestamp) line.append(timeElement(view.timestamp, true));
  return line;
}

// A compaction's summary turn (the start of the active path): one line that opens to
// the summary, rendered as answers are (escaped Markdown). The summarised turns stay in
// the thread; /uncompact brings them back and the line goes.
function compactionLine(view) {
  const line = document.createElement("details");
  line.className = "compaction";
  line.dataset.turn = view.id;
  line.open = state.expanded.has(view.id);
  line.addEventListener("toggle", () => {
    if (line.open) state.expanded.add(view.id);
    else state.expanded.delete(view.id);
  });
  const title = document.createElement("summary");
  const count = view.compaction.turns;
  title.textContent = `earlier conversation summarised (${count} turn${count === 1 ? "" : "s"})`;
  const body = document.createElement("div");
  body.className = "body";
  body.innerHTML = OreMarkdown.render(view.compaction.summary);
  line.append(title, body);
  return line;
}

// A notice of the thread (a compaction, a restore, a warning): one line under the
// messages, read out by screen readers, until the next message is sent.
function noticeLine(notice) {
  const line = document.createElement("p");
  line.className = `notice ${String(notice.severity).toLowerCase()}`;
  line.setAttribute("role", "status");
  line.textContent = notice.content;
  return line;
}

function renderTurn(view) {
  if (view.compaction) return compactionLine(view);
  const from = relayed(view.relay);
  const article = messageElement(view.role, from ? `message from ${view.relay.label}` : `${view.role} message`);
  article.dataset.turn = view.id;
  if (!from) article.append(metaLine(view));
  if (from) {
    article.classList.add("relayed");
    article.append(senderLine(view));
  }
  if (view.relay && view.relay.reply_to) article.append(replyLine(view));
  if (view.reasoning) article.append(details("Reasoning", view.reasoning));
  for (const step of view.steps) {
    article.append(details(step.kind === "tool_call" ? `Tool call: ${step.name}` : "Tool result", step.content));
  }
  const body = document.createElement("div");
  body.className = "body";
  if (state.editing === view.id) {
    body.className = "edit";
    const area = document.createElement("textarea");
    area.value = view.text;
    area.setAttribute("aria-label", "Edit message");
    area.addEventListener("keydown", (event) => {
      if (event.key === "Escape") { state.editing = null; render(); }
    });
    const keep = button("Save edit without an answer", "Save", () => edit(view, area.value, false));
    const save = button("Save and answer", "Save and answer", () => edit(view, area.value, true));
    const cancel = button("Cancel edit", "Cancel", () => { state.editing = null; render(); });
    body.append(area, keep, save, cancel);
    setTimeout(() => area.focus(), 0);
  } else if (view.role === "assistant") {
    body.innerHTML = OreMarkdown.render(view.text);
  } else {
    body.textContent = view.text;
  }
  article.append(body);
  if (view.files && view.files.length) article.append(filesOf(view));
  if (view.deliveries && view.deliveries.length) article.append(deliveryLine(view));
  article.append(reactionsOf(view));
  const tools = document.createElement("div");
  tools.className = "tools";
  if (view.siblings.length > 1) tools.append(siblingNav(view));
  if (view.role === "user" && !from && state.editing !== view.id) {
    tools.append(button("Edit message", "Edit", () => { state.editing = view.id; render(); }));
    tools.append(button("Delete message", "Delete", () => deleteMessage(view.id)));
  }
  if (view.role === "assistant") {
    tools.append(button("Copy message", "Copy", (event) => copy(view.text, event.target)));
    tools.append(button("Regenerate answer", "Regenerate", () => regenerate(view.id)));
  }
  article.append(tools);
  return article;
}

function render() {
  const tree = state.tree;
  $("title").textContent = tree ? tree.title : "ore";
  for (const id of ["rename", "delete", "export-md", "export-json"]) $(id).hidden = !tree;
  renderModel();
  const messages = $("messages");
  const streaming = messages.querySelector(".message.streaming .body");
  const keepStreaming = streaming && state.live.running;
  const atBottom = messages.scrollHeight - messages.scrollTop - messages.clientHeight < 40;
  const fresh = [];
  if (tree) {
    const views = new Map(tree.turns.map((view) => [view.id, view]));
    for (const id of tree.path) fresh.push(renderTurn(views.get(id)));
  }
  for (const pending of state.live.pending) {
    const article = messageElement("user", "user message");
    article.classList.add("pending");
    const body = document.createElement("div");
    body.className = "body";
    body.textContent = pending.text;
    article.append(body);
    fresh.push(article);
  }
  if (state.live.running) {
    const article = messageElement("assistant", "assistant message");
    article.classList.add("streaming");
    if (state.live.reasoning) article.append(details("Reasoning", state.live.reasoning));
    const body = keepStreaming ? streaming : document.createElement("div");
    body.className = "body";
    OreMarkdown.updateStreaming(body, state.live.text);
    article.append(body);
    fresh.push(article);
  }
  if (state.error && !state.live.running) {
    const alert = document.createElement("div");
    alert.className = "error message";
    alert.setAttribute("role", "alert");
    alert.textContent = `The answer failed: ${state.error.message} `;
    const lastUser = tree ? [...tree.path].reverse().find((id) => {
      const view = tree.turns.find((v) => v.id === id);
      return view && view.role === "user";
    }) : null;
    if (lastUser) alert.append(button("Retry", "Retry", () => regenerate(lastUser)));
    fresh.push(alert);
  } else if (state.stopped && !state.live.running) {
    const note = document.createElement("div");
    note.className = "stopped message";
    note.textContent = "Stopped.";
    fresh.push(note);
  }
  if (state.notice) fresh.push(noticeLine(state.notice));
  messages.replaceChildren(...fresh);
  $("stop").hidden = !state.live.running;
  if (atBottom) messages.scrollTop = messages.scrollHeight;
}

// -- actions -------------------------------------------------------------------------

function clientId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function send() {
  const input = $("input");
  const text = input.value;
  const files = state.files;
  if ((!text.trim() && !files.length) || !updateCount()) return;
  const uploaded = await Promise.all(files.map((file) => file.upload));
  if (uploaded.some((upload) => !upload)) return; // a failed upload: its chip says why
  if (!state.threadId) {
    const created = await attempt(() => api("POST", "/api/threads", {}));
    if (!created) return;
    await openThread(created.id);
  }
  // Cleared before sending: the answer (or its failure) may arrive before the reply.
  state.error = null;
  state.stopped = false;
  state.notice = null;
  const body = { text, client_id: clientId(), files: uploaded.map((upload) => upload.id) };
  const sent = await attempt(() => api("POST", `/api/threads/${state.threadId}/messages`, body));
  if (sent) { // kept when sending failed: nothing typed or attached is lost
    input.value = "";
    state.files = state.files.filter((file) => !files.includes(file));
    renderAttachments();
    updateCount();
  }
}

async function stop() {
  if (state.threadId) await attempt(() => api("POST", `/api/threads/${state.threadId}/interrupt`));
}

async function regenerate(turnId) {
  state.error = null;
  state.stopped = false;
  render();
  await attempt(() => api("POST", `/api/threads/${state.threadId}/regenerate`, { turn_id: turnId }));
}

async function deleteMessage(turnId) {
  // One core delete: the message leaves the conversation here and on linked endpoints.
  const done = await attempt(() => api("DELETE", `/api/threads/${state.threadId}/turns/${turnId}`));
  if (done !== undefined) reloadTree();
}

async function edit(view, text, answer) {
  if (!text.trim()) return;
  state.error = null;
  state.stopped = false;
  const sent = await attempt(() => api("POST", `/api/threads/${state.threadId}/messages`, {
    text, parent_id: view.parent_id, edit_of: view.id, client_id: clientId(), answer,
  }));
  if (sent) { state.editing = null; reloadTree(); }
}

async function select(turnId) {
  const serial = ++reloads;
  const tree = await attempt(() => api("POST", `/api/threads/${state.threadId}/select`, { turn_id: turnId }));
  if (tree && serial === reloads) { state.tree = tree; render(); }
}

async function copy(text, target) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (error) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  target.textContent = "Copied";
  setTimeout(() => { target.textContent = "Copy"; }, 1500);
}

// -- wiring ---------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); send(); }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && state.live.running && !state.editing) stop();
});
$("stop").addEventListener("click", stop);
$("new-thread").addEventListener("click", async () => {
  const created = await attempt(() => api("POST", "/api/threads", {}));
  if (created) { await openThread(created.id); $("input").focus(); }
});
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(loadThreads, 200);
});
$("rename").addEventListener("click", () => renameThread(state.threadId, state.tree ? state.tree.title : ""));
$("delete").addEventListener("click", () => deleteThread(state.threadId, state.tree ? state.tree.title : ""));
$("dismiss").addEventListener("click", () => showProblem(null));
for (const [id, format] of [["export-md", "markdown"], ["export-json", "json"]]) {
  $(id).addEventListener("click", () => {
    const link = document.createElement("a");
    link.href = `/api/threads/${state.threadId}/export?format=${format}`;
    link.download = "";
    document.body.append(link);
    link.click();
    link.remove();
  });
}
$("theme").addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const theme = dark ? "light" : "dark";
  document.documentElement.dataset.theme = theme;
  localStorage.setItem("ore-theme", theme);
});
$("messages").addEventListener("click", (event) => {
  const target = event.target;
  if (target instanceof HTMLButtonElement && target.classList.contains("copy")) {
    copy(target.parentElement.querySelector("code").textContent, target);
  }
});

// -- the composer's count (the server refuses longer messages with 413) -----------------

function charactersOf(text) { return [...text].length; } // code points, as the server counts

function updateCount() {
  const limit = state.me ? state.me.max_message_length : 0;
  const count = $("count");
  const used = charactersOf($("input").value);
  const over = limit > 0 && used > limit;
  count.hidden = !(limit > 0 && used >= limit * 0.8);
  count.classList.toggle("over", over);
  count.textContent = over
    ? `${used.toLocaleString()} characters: ${(used - limit).toLocaleString()} over the limit of ${limit.toLocaleString()}; shorten it or send it in parts.`
    : `${used.toLocaleString()} / ${limit.toLocaleString()} characters`;
  $("send").disabled = over;
  return !over;
}

$("input").addEventListener("input", updateCount);

// -- files: attached with 📎 or dropped on the page, uploaded at once, sent with the message --

function humanSize(size) { // as the server says it (powers of 1000)
  if (size < 1000) return `${size} B`;
  const units = ["kB", "MB", "GB"];
  let value = size / 1000;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) { value /= 1000; unit += 1; }
  return `${value.toFixed(1)} ${units[unit]}`;
}

// Why the operator's [files] settings refuse a file (the server checks again), or null.
function refusal(file) {
  const limits = state.me ? state.me.files : null;
  if (!limits) return null;
  if (file.size > limits.max_size) {
    return `${file.name} is ${humanSize(file.size)}, over the ${humanSize(limits.max_size)} limit for files.`;
  }
  const type = (file.type || "").toLowerCase();
  const allowed = (pattern) => (pattern.endsWith("/*") ? type.startsWith(pattern.slice(0, -1)) : type === pattern);
  if (type && !limits.allowed_types.some(allowed)) { // an unknown type: the server tells by its name
    return `${file.name}: files of type ${type} are not allowed here (allowed: ${limits.allowed_types.join(", ")}).`;
  }
  return null;
}

async function uploadFile(file) {
  let response;
  try {
    response = await fetch(`/api/files?name=${encodeURIComponent(file.name)}`, {
      method: "POST", body: file, headers: { "Content-Type": file.type || "application/octet-stream" },
    });
  } catch (error) {
    throw new ApiProblem(0, "The server cannot be reached. Is `ore conduit web` running?");
  }
  let payload = null;
  try { payload = await response.json(); } catch (error) { payload = null; }
  if (!response.ok) {
    throw new ApiProblem(response.status, payload && payload.error ? payload.error.message : `HTTP ${response.status}`);
  }
  return payload;
}

let fileKeys = 0;

function addFiles(list) {
  const refused = [];
  for (const file of list) {
    const reason = refusal(file);
    if (reason) { refused.push(reason); continue; }
    const entry = { key: ++fileKeys, name: file.name, size: file.size, id: null, failed: null };
    entry.upload = uploadFile(file).then((upload) => { entry.id = upload.id; renderAttachments(); return upload; },
      (error) => { entry.failed = error.message; showProblem(error); renderAttachments(); return null; });
    state.files.push(entry);
  }
  if (refused.length) showProblem(new ApiProblem(400, refused.join(" "))); // said as it is: nothing was sent
  renderAttachments();
}

// The composer's files: a chip each (uploading, ready, or why it failed), with Remove.
function renderAttachments() {
  const list = $("attachments");
  list.hidden = !state.files.length;
  list.replaceChildren(...state.files.map((file) => {
    const item = document.createElement("li");
    item.className = file.failed ? "failed" : file.id ? "ready" : "uploading";
    const label = document.createElement("span");
    label.textContent = `📎 ${file.name} (${humanSize(file.size)})${file.failed ? ": not uploaded" : file.id ? "" : ": uploading…"}`;
    const remove = button(`Remove ${file.name}`, "×", () => {
      state.files = state.files.filter((f) => f !== file);
      renderAttachments();
    });
    item.append(label, remove);
    return item;
  }));
}

function fileUrl(file) { return `/api/threads/${state.threadId}/files/${file.sha256}`; }

// A message's files: images inline (opening the whole image), others as downloads.
function filesOf(view) {
  const box = document.createElement("div");
  box.className = "files";
  for (const file of view.files) {
    const link = document.createElement("a");
    link.href = fileUrl(file);
    if (file.inline) {
      link.target = "_blank";
      link.rel = "noopener";
      const image = document.createElement("img");
      image.src = link.href;
      image.alt = file.name;
      image.loading = "lazy";
      link.append(image);
    } else {
      link.download = file.name;
      link.className = "download";
      link.textContent = `📎 ${file.name} (${humanSize(file.size)})`;
    }
    box.append(link);
  }
  return box;
}

$("attach").addEventListener("click", () => $("file-input").click());
$("file-input").addEventListener("change", (event) => {
  addFiles([...event.target.files]);
  event.target.value = ""; // the same file can be chosen again
});
let dragDepth = 0;
const carriesFiles = (event) => event.dataTransfer && [...event.dataTransfer.types].includes("Files");
document.addEventListener("dragenter", (event) => {
  if (!carriesFiles(event)) return;
  dragDepth += 1;
  $("drop-zone").hidden = false;
});
document.addEventListener("dragleave", () => {
  dragDepth = Math.max(0, dragDepth - 1);
  if (!dragDepth) $("drop-zone").hidden = true;
});
document.addEventListener("dragover", (event) => { if (carriesFiles(event)) event.preventDefault(); });
document.addEventListener("drop", (event) => {
  dragDepth = 0;
  $("drop-zone").hidden = true;
  if (!event.dataTransfer || !event.dataTransfer.files.length) return;
  event.preventDefault(); // the browser would open the file instead of the page
  addFiles([...event.dataTransfer.files]);
  $("input").focus();
});

// -- reactions: each emoji and its count under a message; the user's own are pressed ----

const PICKER = ["👍", "❤️", "😂", "🎉", "😮", "👀"];

function reactionsOf(view) {
  const line = document.createElement("div");
  line.className = "reactions";
  const mine = state.me ? state.me.reactor : "";
  for (const [emoji, people] of Object.entries(view.reactions || {})) {
    const own = people.includes(mine);
    const chip = button(`${emoji} ${people.length}${own ? ", yours: take it back" : ": react too"}`,
      `${emoji} ${people.length}`, () => react(view.id, emoji, own));
    chip.className = "reaction";
    chip.setAttribute("aria-pressed", String(own));
    chip.title = people.join(", ");
    line.append(chip);
  }
  const add = button("Add reaction", "☺+", () => { state.picking = state.picking === view.id ? null : view.id; render(); });
  add.className = "add-reaction";
  line.append(add);
  if (state.picking === view.id) {
    const picker = document.createElement("span");
    picker.className = "picker";
    picker.setAttribute("role", "group");
    picker.setAttribute("aria-label", "Pick a reaction");
    for (const emoji of PICKER) {
      const own = (view.reactions[emoji] || []).includes(mine);
      picker.append(button(`React with ${emoji}`, emoji, () => { state.picking = null; react(view.id, emoji, own); }));
    }
    line.append(picker);
  }
  return line;
}

async function react(turnId, emoji, remove) {
  render();
  await attempt(() => api("POST", `/api/threads/${state.threadId}/turns/${turnId}/reactions`, { emoji, remove }));
}

// A stored `reaction` event: who reacts with the emoji now (from every endpoint).
function applyReaction(event) {
  const view = state.tree && state.tree.turns.find((v) => v.id === event.turn);
  if (!view) return;
  view.reactions = { ...(view.reactions || {}) };
  if (event.reactors && event.reactors.length) view.reactions[event.emoji] = event.reactors;
  else delete view.reactions[event.emoji];
}

// -- the drawer (narrow screens: the thread list slides over the page) ---------------

function setDrawer(open) {
  document.body.classList.toggle("drawer-open", open);
  $("menu").setAttribute("aria-expanded", String(open));
  if (open) $("search").focus();
}

$("menu").addEventListener("click", () => setDrawer(!document.body.classList.contains("drawer-open")));
$("close-drawer").addEventListener("click", () => setDrawer(false));
$("threads").addEventListener("click", () => setDrawer(false)); // a thread was chosen
$("new-thread").addEventListener("click", () => setDrawer(false));
$("sidebar").addEventListener("keydown", (event) => { if (event.key === "Escape") setDrawer(false); });

(async () => {
  const me = await attempt(() => api("GET", "/api/me"));
  if (!me) return;
  state.me = me;
  state.offer = await attempt(() => api("GET", "/api/models")) || null;
  await loadThreads();
  const wanted = location.hash.slice(1);
  if (wanted) await openThread(wanted);
  else render();
  $("input").focus();
})();
