// The bub-bus operator console. Everything a peer wrote (client names,
// topics, payloads, an agent's summary) goes into the page as text
// (textContent), never as HTML: this file never sets innerHTML.
"use strict";

const api = "api/";
let csrf = "";
let session = null;
let stream = null;
const samples = [];
const $ = (id) => document.getElementById(id);

// el builds an element; string children become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node, ...children) { node.replaceChildren(...children); }

function banner(text, ok) {
  const b = $("banner");
  b.textContent = text;
  b.className = ok ? "ok" : "";
  b.hidden = !text;
}

// call fetches an API endpoint; state-changing calls carry the CSRF token.
async function call(path, body) {
  const opts = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.method = "POST";
    opts.headers["Content-Type"] = "application/json";
    opts.headers["X-Bub-CSRF"] = csrf;
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(api + path, opts);
  const data = await resp.json().catch(() => ({}));
  if (resp.status === 401 && path !== "login") {
    loggedOut("Your session ended; log in again.");
    throw new Error("not logged in");
  }
  if (!resp.ok) throw new Error((data.error && data.error.message) || resp.statusText);
  return data;
}

// fmtTime writes a time as the CLI and the logs do: UTC, ISO 8601, to the
// millisecond.
function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toISOString();
}

// timeEl is a time in UTC, with the browser's local time on hover.
function timeEl(t) {
  const d = new Date(t);
  return el("time", { class: "nowrap", datetime: fmtTime(t), title: isNaN(d) ? "" : "local: " + d.toLocaleString() }, fmtTime(t));
}

function fmtNum(n) {
  if (n === null || n === undefined || isNaN(n)) return "–";
  return Math.abs(n) >= 100 ? Math.round(n).toLocaleString() : (Math.round(n * 10) / 10).toLocaleString();
}

// ---- session ----

function loggedIn(s) {
  session = s;
  csrf = s.csrf;
  $("login").hidden = true;
  $("nav").hidden = false;
  $("logout").hidden = false;
  $("who").textContent = (s.identity || "open bus") + (s.admin ? "" : " (read-only)") + " @ " + (s.node ? s.cluster + "/" + s.node : s.serverId);
  // Without admin, the Messages page alone: what the grant may
  // subscribe to. The rest is the whole bus's state.
  for (const a of document.querySelectorAll("#nav a")) a.hidden = !s.admin && a.getAttribute("href") !== "#messages";
  if (s.admin) openStream();
  route();
}

function loggedOut(why) {
  session = null;
  csrf = "";
  if (stream) { stream.close(); stream = null; }
  stopTail();
  samples.length = 0;
  for (const p of document.querySelectorAll(".page")) p.hidden = true;
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("login").hidden = false;
  $("token").value = "";
  banner(why || "", true);
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const s = await call("login", { token: $("token").value });
    $("token").value = "";
    banner("");
    loggedIn(s);
  } catch (e) {
    banner("Login refused: " + e.message);
  }
});

$("logout").addEventListener("click", async () => {
  try { await call("logout", {}); } catch (e) { /* ended already */ }
  loggedOut("Logged out.");
});

// ---- live stream and overview ----

const tiles = [
  { key: "nodes", name: "Nodes", unit: "nodes" },
  { key: "connections", name: "Connections", unit: "connections" },
  { key: "published", name: "Messages/s", rate: true, unit: "msg/s" },
  { key: "deliveries", name: "Deliveries/s", rate: true, unit: "deliveries/s" },
  { key: "retries", name: "Retries pending", unit: "messages" },
  { key: "held", name: "Held", unit: "messages" },
  { key: "deadLetters", name: "Dead letters", unit: "entries" },
  { key: "refusals", name: "Refusals/s", rate: true, unit: "refusals/s" },
  { key: "subscriptions", name: "Subscriptions", unit: "subscriptions" },
  { key: "slow", name: "Slow subscribers", unit: "connections" },
];

function series(t) {
  const out = [];
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i];
    if (!t.rate) { out.push(s[t.key]); continue; }
    if (i === 0) continue;
    const p = samples[i - 1];
    const dt = (s.at - p.at) / 1000;
    out.push(dt > 0 ? Math.max(0, (s[t.key] - p[t.key]) / dt) : 0);
  }
  return out;
}

function buildTiles() {
  const box = $("tiles");
  if (box.childElementCount) return;
  for (const t of tiles) {
    t.value = el("div", { class: "value" }, "–");
    t.canvas = el("canvas", { width: "300", height: "72", "aria-label": t.name + " (" + t.unit + ") over the last minutes" });
    box.append(el("div", { class: "tile", "data-key": t.key }, el("div", { class: "name" }, t.name), t.value, t.canvas));
  }
}

// niceCeil is the scale's top for a largest value v: 1, 2 or 5 times a
// power of ten, at least v.
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// draw plots values, oldest first and spanning the last minutes, with
// axes: the scale and unit on the left, the time along the bottom.
function draw(canvas, values, unit, minutes) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300, h = canvas.clientHeight || 72;
  canvas.width = w * ratio;
  canvas.height = h * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, w, h);
  const left = 4, bottom = h - 14, topY = 12;
  const top = niceCeil(Math.max(1, ...values));
  g.strokeStyle = "#d8dde6";
  g.lineWidth = 1;
  g.beginPath();
  g.moveTo(left, topY); g.lineTo(left, bottom); g.lineTo(w - 1, bottom);
  g.stroke();
  g.fillStyle = "#667085";
  g.font = "10px system-ui, sans-serif";
  g.textBaseline = "top";
  g.fillText(fmtNum(top) + " " + unit, left + 3, 0);
  g.textBaseline = "bottom";
  g.fillText("0", left + 3, bottom - 1);
  g.textBaseline = "top";
  g.fillText("−" + Math.max(minutes, 1) + " min", left, bottom + 2);
  g.textAlign = "right";
  g.fillText("now (UTC " + new Date().toISOString().slice(11, 16) + ")", w - 1, bottom + 2);
  g.textAlign = "left";
  if (values.length < 2) return;
  g.beginPath();
  values.forEach((v, i) => {
    const x = left + (i / (values.length - 1)) * (w - left - 2) + 1;
    const y = bottom - (v / top) * (bottom - topY);
    if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
  });
  g.strokeStyle = "#2456c9";
  g.lineWidth = 1.5;
  g.stroke();
}

function renderOverview() {
  buildTiles();
  const mins = samples.length > 1 ? Math.round((samples[samples.length - 1].at - samples[0].at) / 60000) : 0;
  $("overview-where").textContent = "Live from this node's own counters, every 2 s; charts cover the last " + Math.max(mins, 1) +
    " min. Nodes, dead letters and pending retries are the cluster's; connections, rates and held messages are this node's.";
  for (const t of tiles) {
    const v = series(t);
    t.value.textContent = fmtNum(v.length ? v[v.length - 1] : NaN);
    draw(t.canvas, v, t.unit, mins);
  }
}

function openStream() {
  if (stream) return;
  stream = new EventSource(api + "stream");
  stream.addEventListener("sample", (ev) => {
    samples.push(JSON.parse(ev.data));
    if (samples.length > 300) samples.shift();
    refreshLive();
  });
  stream.addEventListener("error", async () => {
    // The stream reconnects by itself; a 401 means the session ended.
    if (stream && stream.readyState === EventSource.CLOSED) {
      stream = null;
      try { await call("session"); openStream(); } catch (e) { /* loggedOut shown */ }
    }
  });
}

// refreshLive updates the page shown when a new sample arrives: the one
// stream drives every live view.
function refreshLive() {
  const page = current();
  if (page === "overview") renderOverview();
  else if (page === "clients") loadClients();
  else if (page === "agents") loadAgents();
  else if (page === "bcp") loadBudgets();
}

// ---- clients ----

let clientsOffset = 0;
const pageSize = 100;

async function loadClients() {
  const q = $("clients-q").value;
  let data;
  try {
    data = await call("clients?limit=" + pageSize + "&offset=" + clientsOffset + "&q=" + encodeURIComponent(q));
  } catch (e) { banner(e.message); return; }
  $("clients-count").textContent = data.total + " client" + (data.total === 1 ? "" : "s") +
    (data.total > pageSize ? ", showing " + (data.offset + 1) + "–" + (data.offset + data.clients.length) : "");
  clear($("clients-rows"), ...data.clients.map((c) => {
    const subs = el("td", { class: "mono" });
    for (const s of c.subscriptions) {
      subs.append(el("div", {}, s.pattern, el("span", { class: "tag" }, s.policy), s.fallback ? el("span", { class: "tag warn" }, "fallback") : null));
    }
    const action = c.local
      ? el("button", { type: "button", class: "danger", onclick: () => disconnect(c.clientId) }, "Disconnect")
      : el("span", { class: "hint" }, "on its node");
    return el("tr", { "data-client": c.clientId },
      el("td", { class: "mono" }, c.clientId, c.publishOnly ? el("span", { class: "tag" }, "publish-only") : null),
      el("td", {}, c.identity || "–"), el("td", {}, c.node || "this node"), el("td", { class: "mono nowrap" }, c.address || "–"),
      el("td", {}, timeEl(c.since)), subs, el("td", { class: "num" }, c.local ? c.inFlight : "–"),
      el("td", { class: "num" }, c.local ? c.requests : "–"),
      el("td", {}, c.slow ? el("span", { class: "tag bad" }, "slow") : (c.timeouts ? c.timeouts + " timeouts" : "")), el("td", {}, action));
  }));
}

async function disconnect(id) {
  if (!(await confirmDialog("Disconnect client “" + id + "”? It may reconnect at once if it is still running."))) return;
  try {
    await call("clients/close", { clientId: id });
    banner("Disconnected " + id + ".", true);
    loadClients();
  } catch (e) { banner(e.message); }
}

$("clients-form").addEventListener("submit", (ev) => { ev.preventDefault(); clientsOffset = 0; loadClients(); });
$("clients-q").addEventListener("input", () => { clientsOffset = 0; loadClients(); });
$("clients-prev").addEventListener("click", () => { clientsOffset = Math.max(0, clientsOffset - pageSize); loadClients(); });
$("clients-next").addEventListener("click", () => { clientsOffset += pageSize; loadClients(); });

// ---- topics ----

$("topic-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const topic = $("topic").value.trim();
  if (!topic) return;
  let data;
  try { data = await call("chain?topic=" + encodeURIComponent(topic)); } catch (e) { banner(e.message); return; }
  banner("");
  const out = $("chain");
  if (!data.chain.length) {
    clear(out, el("p", {}, "No subscription matches ", el("code", {}, data.topic), ". ",
      data.held ? "A message would be held for a subscriber for up to " + data.holdLifetime + " (a hold pattern matches), then dead-lettered."
        : "A message would be accepted with reason no_subscribers and not kept."));
    return;
  }
  const list = el("ol", { class: "chain", id: "chain-list" });
  for (const l of data.chain) {
    list.append(el("li", { "data-client": l.clientId },
      el("code", {}, l.pattern), " → ", el("strong", {}, l.clientId),
      el("span", { class: "tag" }, l.policy), l.fallback ? el("span", { class: "tag warn" }, "fallback") : null,
      el("span", { class: "tag" }, "owner " + (l.identity || "anonymous")), l.node ? el("span", { class: "tag" }, "node " + l.node) : null,
      el("span", { class: "tag" }, "not durable: ends with its connection"),
      l.mayStop ? el("span", { class: "tag ok" }, "may stop the walk") : el("span", { class: "tag" }, "walk goes on")));
  }
  clear(out, el("p", { class: "hint" }, "Chain for ", el("code", {}, data.topic), data.held ? " (held when nobody subscribes)" : ""), list);
});

// ---- messages ----

let msgAfter = "";
let msgNext = "";
let tail = null;

function msgQuery() {
  const q = new URLSearchParams();
  for (const [name, id] of [["messageId", "msg-id"], ["correlationId", "msg-corr"], ["topic", "msg-topic"]]) {
    const v = $(id).value.trim();
    if (v) q.set(name, v);
  }
  for (const name of ["since", "until"]) {
    const v = $("msg-" + name).value;
    if (v) q.set(name, new Date(v).toISOString());
  }
  return q;
}

// describe says in words what a journal event tells.
function describe(ev) {
  const chain = (ev.chain || []).join(" → ");
  switch (ev.kind) {
    case "accepted": return "from " + (ev.from || "?") + (ev.identity ? " (" + ev.identity + ")" : "") + (ev.remote ? " at " + ev.remote : "") + (ev.api ? " over " + ev.api : "");
    case "routed": return chain ? "chain: " + chain : "to nobody (" + (ev.reason || "no_subscribers") + ")";
    case "woken": return "routed again, chain: " + chain;
    case "delivery": return "attempt " + ev.attempt + " to " + ev.clientId + (ev.subscription ? " (" + ev.subscription + ")" : "") + ": " + ev.outcome + (ev.error ? ": " + ev.error : "");
    case "retry_scheduled": return "attempt " + ev.attempt + " to " + ev.clientId + " due " + fmtTime(ev.nextAt);
    case "held": return "waits for a subscriber until " + fmtTime(ev.nextAt);
    case "dead_lettered": return "dead letter " + ev.deadLetterId + " (" + ev.reason + ")" + (ev.clientId ? " meant for " + ev.clientId : "") + (ev.attempt ? " after " + ev.attempt + " attempts" : "");
    case "replayed": return "dead letter " + ev.deadLetterId + " replayed to its " + ev.reason;
    case "purged": return "dead letter " + ev.deadLetterId + " purged";
  }
  return "";
}

function kindTag(ev) {
  if (ev.kind === "dead_lettered" || ev.kind === "purged") return "tag bad";
  if (ev.kind === "retry_scheduled" || ev.kind === "held") return "tag warn";
  if (ev.kind === "delivery") return ev.outcome === "processed" ? "tag ok" : "tag warn";
  return "tag";
}

function messageLink(id) {
  return el("a", { href: "#messages", class: "mono", onclick: (e) => { e.preventDefault(); showTimeline(id); } }, id);
}

function eventRow(ev) {
  return el("tr", { "data-id": ev.messageId, "data-kind": ev.kind },
    el("td", {}, timeEl(ev.time)), el("td", {}, el("span", { class: kindTag(ev) }, ev.kind)),
    el("td", {}, messageLink(ev.messageId)), el("td", { class: "mono" }, ev.topic), el("td", {}, describe(ev)),
    el("td", {}, ev.node || "this node"));
}

function messagesWhere() {
  const events = $("msg-events").checked;
  $("msg-where").textContent = !session.journal
    ? "The message journal is off on this bus (bub serve --journal=false): there is nothing to search."
    : !events
      ? "The newest messages first, one row per message with what became of it, from " + (session.cluster ? "this node's" : "the") +
        " message journal, in memory: the last hour at most (bub serve --journal-max-age, --journal-max-bytes). Times are UTC; hover for local time. " +
        "Pick a message for its story."
      : session.cluster
        ? "From the message journals of every node of the cluster, merged by time: each keeps its own in memory, the last hour at most " +
          "(bub serve --journal-max-age, --journal-max-bytes), oldest first. The live tail below shows this node's events only."
        : "From this node's message journal, in memory: the last hour at most (bub serve --journal-max-age, --journal-max-bytes), oldest first.";
}

// outcomeTag is the class of a message's outcome.
function outcomeTag(outcome) {
  return { delivered: "tag ok", dead_lettered: "tag bad", no_subscribers: "tag warn", retrying: "tag warn", held: "tag warn" }[outcome] || "tag";
}

function messageRow(m) {
  return el("tr", { "data-id": m.messageId, "data-outcome": m.outcome },
    el("td", {}, timeEl(m.time)), el("td", { class: "nowrap" }, messageLink(m.messageId)), el("td", { class: "mono" }, m.topic),
    el("td", { class: "mono" }, m.from || "–"), el("td", { class: "nowrap" }, el("span", { class: outcomeTag(m.outcome) }, m.outcome.replace("_", " "))),
    el("td", {}, m.detail || "", m.attempts > 1 ? " (" + m.attempts + " attempts)" : ""), el("td", { class: "nowrap" }, m.node || "this node"));
}

function head(...names) { return el("tr", {}, ...names.map((n) => el("th", {}, n))); }

// loadRecent shows the newest messages the query matches, one row each.
async function loadRecent() {
  const q = msgQuery();
  q.set("limit", "100");
  let data;
  try { data = await call("messages?" + q); } catch (e) { banner(e.message); return; }
  banner("");
  msgNext = "";
  $("msg-next").disabled = true;
  $("msg-count").textContent = data.messages.length + " message" + (data.messages.length === 1 ? "" : "s") + (data.messages.length === 100 ? ", the newest 100" : "");
  clear($("msg-head"), head("accepted (UTC)", "message", "topic", "from", "outcome", "detail", "node"));
  clear($("msg-rows"), ...data.messages.map(messageRow));
}

async function loadMessages() {
  messagesWhere();
  const id = $("msg-id").value.trim();
  if (!$("msg-events").checked) {
    await loadRecent();
    if (id) showTimeline(id);
    return;
  }
  const q = msgQuery();
  q.set("limit", "100");
  if (msgAfter) q.set("after", msgAfter);
  let data;
  try { data = await call("events?" + q); } catch (e) { banner(e.message); return; }
  banner("");
  msgNext = data.more ? data.next : "";
  $("msg-next").disabled = !msgNext;
  $("msg-count").textContent = data.events.length + " event" + (data.events.length === 1 ? "" : "s") +
    (data.more ? "; more on the next page" : "") + (data.gap ? "; older ones were dropped by retention" : "") +
    missingNote(data.missing);
  clear($("msg-head"), head("time (UTC)", "event", "message", "topic", "detail", "node"));
  clear($("msg-rows"), ...data.events.map(eventRow));
  if (id && !msgAfter) showTimeline(id);
}

// missingNote names the nodes of a cluster that did not answer a search:
// their events are not shown.
function missingNote(missing) {
  return missing && missing.length ? "; node" + (missing.length === 1 ? " " : "s ") + missing.join(", ") +
    " did not answer: " + (missing.length === 1 ? "its" : "their") + " events are missing" : "";
}

// showTimeline shows one message's story: every event of it the journal
// holds, in order.
async function showTimeline(id) {
  const events = [];
  const missing = new Set();
  let after = "";
  for (let i = 0; i < 10; i++) {
    const q = new URLSearchParams({ messageId: id, limit: "1000" });
    if (after) q.set("after", after);
    let data;
    try { data = await call("events?" + q); } catch (e) { banner(e.message); return; }
    events.push(...data.events);
    (data.missing || []).forEach((n) => missing.add(n));
    if (!data.more) break;
    after = data.next;
  }
  const box = $("msg-timeline");
  const gone = missingNote([...missing]).replace(/^; /, "");
  if (!events.length) {
    clear(box, el("div", { class: "card" }, el("p", {}, "The journal holds no event of message ", el("code", {}, id),
      ": it was published before the journal's window, or on a topic this login may not see."), gone ? el("p", { class: "hint", id: "timeline-missing" }, gone) : null));
    return;
  }
  const first = events[0];
  const story = storyOf(events);
  const payload = el("div", {});
  if (session.journalPayloads) {
    payload.append(el("button", { type: "button", id: "timeline-payload", onclick: () => showPayload(id, payload) }, "Show payload"));
  } else {
    payload.append(el("p", { class: "hint" }, "Payloads are not journaled on this bus (bub serve --journal-payloads keeps them)."));
  }
  clear(box, el("div", { class: "card", id: "story" },
    el("h2", {}, "Message ", el("code", {}, id), " on ", el("code", {}, first.topic)),
    el("p", { id: "story-outcome" }, el("span", { class: outcomeTag(story.outcome) }, story.outcome.replace("_", " ")), " ", story.detail,
      story.deadLetterId ? [" ", el("a", { href: "#deadletters", id: "story-deadletter", onclick: (e) => { e.preventDefault(); openDeadLetter(story.deadLetterId); } },
        "open dead letter " + story.deadLetterId)] : null),
    first.correlationId ? el("p", {}, "Correlation id ", messageLink(first.correlationId)) : null,
    el("p", { class: "hint" }, "In a terminal: ", el("code", {}, "bub trace " + id), story.deadLetterId ? ["; ", el("code", {}, "bub dlq show " + story.deadLetterId)] : null,
      ". Times are UTC (hover for local), offsets from the first event."),
    el("ol", { class: "timeline", id: "timeline" }, ...story.steps.map(({ ev, offset, took }) => el("li", { "data-kind": ev.kind, "data-attempt": ev.attempt || "" },
      el("span", { class: "offset mono" }, "+" + offset.toFixed(3) + " s"), " ", timeEl(ev.time), " ", el("span", { class: kindTag(ev) }, ev.kind), " ", describe(ev),
      took !== null ? el("span", { class: "hint" }, " (answered after " + took.toFixed(3) + " s)") : null,
      ev.node ? el("span", { class: "tag" }, "node " + ev.node) : null))),
    gone ? el("p", { class: "hint", id: "timeline-missing" }, gone) : null,
    payload));
}

// storyOf reads one message's events, oldest first, as its story: what
// became of it in the end, and each step with its offset from the first
// and, for an answer, how long it took from the attempt's start (the
// routing, or the retry's due time).
function storyOf(events) {
  const t0 = new Date(events[0].time).getTime();
  const started = {}; // clientId → when its current attempt started
  const steps = events.map((ev) => {
    const at = new Date(ev.time).getTime();
    let took = null;
    if (ev.kind === "routed" || ev.kind === "woken") for (const c of ev.chain || []) started[c] = at;
    if (ev.kind === "retry_scheduled") started[ev.clientId] = new Date(ev.nextAt).getTime();
    if (ev.kind === "delivery" && started[ev.clientId] !== undefined) took = Math.max(0, at - started[ev.clientId]) / 1000;
    return { ev, offset: (at - t0) / 1000, took };
  });
  const dead = events.filter((e) => e.kind === "dead_lettered").pop();
  const processed = events.filter((e) => e.kind === "delivery" && e.outcome === "processed").pop();
  const last = events[events.length - 1];
  const attempts = events.filter((e) => e.kind === "delivery").length;
  let outcome = "pending", detail = "no answer yet", deadLetterId = "";
  if (dead) {
    outcome = "dead_lettered";
    deadLetterId = dead.deadLetterId;
    detail = "as " + dead.deadLetterId + " (" + dead.reason + ") after " + attempts + " attempt" + (attempts === 1 ? "" : "s") + ".";
  } else if (processed) {
    outcome = "delivered";
    detail = "processed by " + processed.clientId + " at attempt " + processed.attempt + ".";
  } else if (last.kind === "retry_scheduled") {
    outcome = "retrying";
    detail = "attempt " + last.attempt + " to " + last.clientId + " is due " + fmtTime(last.nextAt) + ".";
  } else if (last.kind === "held") {
    outcome = "held";
    detail = "waits for a subscriber until " + fmtTime(last.nextAt) + ".";
  } else if (events.some((e) => e.kind === "routed" && !(e.chain || []).length)) {
    outcome = "no_subscribers";
    detail = "nobody subscribed.";
  }
  return { steps, outcome, detail, deadLetterId };
}

// openDeadLetter shows a dead letter on its page.
function openDeadLetter(id) {
  location.hash = "#deadletters";
  showDeadLetter(id);
}

async function showPayload(id, box) {
  let data;
  try { data = await call("events?" + new URLSearchParams({ messageId: id, kind: "accepted", payloads: "1", limit: "1" })); } catch (e) { banner(e.message); return; }
  const ev = data.events[0];
  clear(box, ev && ev.payload !== undefined ? el("pre", {}, JSON.stringify(ev.payload, null, 2))
    : el("p", { class: "hint" }, "The journal holds no payload of this message."));
}

// startTail follows the journal's events of a topic pattern on a stream
// of its own, open while the Messages page is shown.
async function startTail(pattern) {
  stopTail();
  const q = new URLSearchParams();
  if (pattern) q.set("topic", pattern);
  // A page of one first: a bad pattern gets its error as text, which an
  // EventSource does not give.
  try { await call("events?limit=1&" + q); } catch (e) { banner(e.message); return; }
  tail = new EventSource(api + "events/stream?" + q);
  $("tail-state").textContent = "connecting…";
  $("tail-stop").disabled = false;
  // Open: the bus has fixed where the tail starts, with the next event.
  tail.onopen = () => { $("tail-state").textContent = "following " + (pattern || "every topic") + "…"; };
  tail.onmessage = (m) => {
    const rows = $("tail-rows");
    rows.prepend(eventRow(JSON.parse(m.data)));
    while (rows.childElementCount > 200) rows.lastElementChild.remove();
  };
  tail.onerror = () => {
    if (tail && tail.readyState === EventSource.CLOSED) {
      stopTail();
      $("tail-state").textContent = "the tail ended; start it again";
    }
  };
}

function stopTail() {
  if (tail) { tail.close(); tail = null; }
  $("tail-stop").disabled = true;
  $("tail-state").textContent = "";
}

$("msg-form").addEventListener("submit", (ev) => { ev.preventDefault(); msgAfter = ""; loadMessages(); });
$("msg-events").addEventListener("change", () => { msgAfter = ""; loadMessages(); });
$("msg-next").addEventListener("click", () => { if (msgNext) { msgAfter = msgNext; loadMessages(); } });
$("tail-form").addEventListener("submit", (ev) => { ev.preventDefault(); startTail($("tail-topic").value.trim()); });
$("tail-stop").addEventListener("click", stopTail);

// ---- dead letters ----

let dlCursor = "";
let dlNext = "";

function dlQuery() {
  const q = new URLSearchParams();
  if ($("dl-topic").value.trim()) q.set("topic", $("dl-topic").value.trim());
  if ($("dl-reason").value) q.set("reason", $("dl-reason").value);
  // datetime-local is the browser's local time; the bus takes RFC 3339.
  for (const name of ["since", "until"]) {
    const v = $("dl-" + name).value;
    if (v) q.set(name, new Date(v).toISOString());
  }
  return q;
}

async function loadDeadLetters() {
  const q = dlQuery();
  q.set("limit", "50");
  if (dlCursor) q.set("cursor", dlCursor);
  let data;
  try { data = await call("deadletters?" + q); } catch (e) { banner(e.message); return; }
  dlNext = data.next;
  $("dl-next").disabled = !dlNext;
  $("dl-count").textContent = data.total + " in the queue; this page " + data.entries.length;
  clear($("dl-rows"), ...data.entries.map((d) => el("tr", { "data-id": d.id },
    el("td", { class: "mono nowrap" }, d.id), el("td", { class: "mono" }, d.topic), el("td", {}, d.reason),
    el("td", { class: "mono" }, d.client_id || "–"), el("td", { class: "mono" }, d.from || "–"), el("td", { class: "num" }, d.attempts.length),
    el("td", {}, fmtTime(d.dead_at)), el("td", { class: "num" }, d.payloadBytes),
    el("td", {},
      el("button", { type: "button", onclick: () => showDeadLetter(d.id) }, "Show"), " ",
      el("button", { type: "button", class: "replay", onclick: () => replay(d, "topic") }, "Replay to topic"), " ",
      d.client_id ? el("button", { type: "button", onclick: () => replay(d, "subscriber") }, "Replay to subscriber") : null, " ",
      el("button", { type: "button", class: "danger", onclick: () => purgeOne(d.id) }, "Purge")))));
}

async function showDeadLetter(id) {
  let d;
  try { d = await call("deadletters/one?id=" + encodeURIComponent(id)); } catch (e) { banner(e.message); return; }
  const payload = el("pre", { hidden: "" }, JSON.stringify(d.payload, null, 2));
  const attempts = el("ol", {}, ...d.attempts.map((a) => el("li", {}, fmtTime(a.at), ": ", a.error || "no answer")));
  clear($("dl-detail"), el("div", { class: "card" },
    el("h2", {}, "Dead letter ", el("code", {}, d.id)),
    el("p", {}, "Message ", el("code", {}, d.messageId), " on ", el("code", {}, d.topic), " from ", el("code", {}, d.from || "–"),
      ", published ", fmtTime(d.published_at), "; dead ", fmtTime(d.dead_at), " (", d.reason, ")",
      d.client_id ? ["; meant for ", el("code", {}, d.client_id), " under ", el("code", {}, d.subscription || "–")] : null, "."),
    el("h3", {}, "Attempts"), attempts,
    el("button", { type: "button", onclick: (ev) => { payload.hidden = !payload.hidden; ev.target.textContent = payload.hidden ? "Show payload" : "Hide payload"; } }, "Show payload"),
    payload));
}

async function replay(d, to) {
  const target = to === "topic" ? "its topic " + d.topic : "subscriber " + d.client_id;
  if (!(await confirmDialog("Replay dead letter " + d.id + " to " + target + "?"))) return;
  try {
    const res = await call("deadletters/replay", { ids: [d.id], to });
    const o = res.outcomes[0];
    if (o.accepted) banner("Replayed " + d.id + " to " + target + ".", true);
    else banner("Not replayed: " + (o.error || "not accepted"));
    loadDeadLetters();
  } catch (e) { banner(e.message); }
}

async function purgeOne(id) {
  if (!(await confirmDialog("Purge dead letter " + id + "? This cannot be undone."))) return;
  try {
    await call("deadletters/purge", { id });
    banner("Purged 1 dead letter.", true);
    loadDeadLetters();
  } catch (e) { banner(e.message); }
}

$("dl-purge").addEventListener("click", async () => {
  const q = dlQuery();
  let count;
  try { count = await call("deadletters/count?" + q); } catch (e) { banner(e.message); return; }
  if (count.count === 0) { banner("No dead letter matches the filter.", true); return; }
  const what = (q.get("topic") ? " on " + q.get("topic") : "") + (q.get("reason") ? " with reason " + q.get("reason") : "") +
    (q.get("since") ? " dead since " + fmtTime(q.get("since")) : "");
  if (!(await confirmDialog("Purge exactly " + count.count + " dead letter" + (count.count === 1 ? "" : "s") + what +
    " (those dead before " + fmtTime(count.asOf) + ")? This cannot be undone."))) return;
  try {
    const body = { asOf: count.asOf };
    for (const k of ["topic", "reason", "since", "until"]) if (q.get(k)) body[k] = q.get(k);
    const res = await call("deadletters/purge", body);
    banner("Purged " + res.purged + " dead letter" + (res.purged === 1 ? "" : "s") + ".", true);
    dlCursor = "";
    loadDeadLetters();
  } catch (e) { banner(e.message); }
});

$("dl-form").addEventListener("submit", (ev) => { ev.preventDefault(); dlCursor = ""; loadDeadLetters(); });
$("dl-first").addEventListener("click", () => { dlCursor = ""; loadDeadLetters(); });
$("dl-next").addEventListener("click", () => { if (dlNext) { dlCursor = dlNext; loadDeadLetters(); } });

// ---- BCP approvals ----

async function loadApprovals() {
  let data;
  try { data = await call("approvals"); } catch (e) {
    clear($("approvals"), el("p", { class: "hint" }, e.message));
    return;
  }
  $("bcp-who").textContent = "Deciding as approver “" + data.approver + "”.";
  if (!data.approvals.length) { clear($("approvals"), el("p", { class: "hint" }, "No approval is pending.")); return; }
  clear($("approvals"), ...data.approvals.map((a) => {
    const untrusted = (label, text) => text ? [el("div", { class: "name" }, label), el("div", { class: "untrusted" }, text)] : [];
    const card = el("div", { class: "card approval", "data-id": a.approval_id },
      el("h2", {}, a.kind === "summary" ? "Summary for " : "Escalation to Category 3: ", el("code", {}, a.controller), " ← ", el("code", {}, a.reader)),
      el("p", { class: "hint" }, "Approval ", el("code", {}, a.approval_id), ", expires ", fmtTime(a.expires_at)),
      a.warning ? el("p", { class: "tag warn" }, a.warning) : null,
      ...untrusted("Directive", a.directive), ...untrusted("Justification", a.justification), ...untrusted("Summary", a.summary),
      ...(a.anomalies || []).map((an) => el("p", { class: "tag bad" }, "anomaly: " + (an.kind || "?") + " in " + (an.question || "?") + ": " + (an.excerpt || ""))));
    const decide = async (decision, extra) => {
      try {
        await call("approvals/decide", Object.assign({ approval_id: a.approval_id, decision }, extra || {}));
        banner(decision + ": " + a.approval_id, true);
        loadApprovals();
      } catch (e) { banner(e.message); }
    };
    card.append(el("div", { class: "bar" },
      el("button", { type: "button", class: "primary approve", onclick: () => decide("approve") }, "Approve"),
      el("button", { type: "button", class: "danger", onclick: async () => {
        const reason = await promptDialog("Reject " + a.approval_id + "? The Reader is told the reason.", "");
        if (reason !== null) decide("reject", reason ? { reason } : {});
      } }, "Reject"),
      a.kind === "summary" ? el("button", { type: "button", class: "edit", onclick: async () => {
        const summary = await promptDialog("Edit the summary (it is validated again):", a.summary || "");
        if (summary) decide("edit", { summary });
      } }, "Edit") : null));
    return card;
  }));
}

// loadBudgets shows the channels' budgets and the recent validation
// failures and anomalies, from the gateway's system:bcp.* events.
async function loadBudgets() {
  let data;
  try { data = await call("bcp?limit=500"); } catch (e) { banner(e.message); return; }
  $("budgets-where").textContent = "From the gateway's system:bcp.* events routed through this node since it started (" + data.total + " channel" +
    (data.total === 1 ? "" : "s") + (data.total > data.channels.length ? ", showing " + data.channels.length : "") + ").";
  const of = (n, max) => n + (max ? " of " + max : "");
  clear($("budget-rows"), ...data.channels.map((c) => el("tr", { "data-channel": c.controller + "/" + c.reader },
    el("td", { class: "mono" }, c.controller), el("td", { class: "mono" }, c.reader), el("td", { class: "num" }, fmtNum(c.spent_bits)),
    el("td", { class: "num" }, el("span", { class: c.budget_bits > 0 && c.remaining_bits < 0.2 * c.budget_bits ? "tag warn" : "" }, fmtNum(c.remaining_bits))),
    el("td", { class: "num" }, fmtNum(c.budget_bits)), el("td", { class: "num" }, of(c.cat2_queries, c.max_cat2_queries)),
    el("td", { class: "num" }, of(c.cat3_queries, c.max_cat3_queries)), el("td", {}, c.event + " " + fmtTime(c.at)), el("td", { class: "mono" }, c.from))));
  clear($("bcp-events"), ...data.recent.map((e) => el("tr", { "data-kind": e.kind },
    el("td", { class: "nowrap" }, fmtTime(e.at)), el("td", {}, el("span", { class: e.kind === "failure" ? "tag bad" : "tag warn" }, e.kind)),
    el("td", { class: "mono" }, e.controller), el("td", { class: "mono" }, e.reader), el("td", { class: "mono" }, e.query_id || e.subscription_id || "–"),
    el("td", { class: "num" }, e.category),
    el("td", {}, e.kind === "failure" ? e.code + (e.attempts_left !== undefined ? " (" + e.attempts_left + " attempts left)" : "")
      : Object.entries(e.anomalies || {}).map(([k, n]) => k + " × " + n).join(", ")),
    el("td", { class: "mono" }, e.from))));
}

$("bcp-refresh").addEventListener("click", () => { loadApprovals(); loadBudgets(); });

// ---- agents ----

async function loadAgents() {
  let data;
  try { data = await call("agents"); } catch (e) { banner(e.message); return; }
  $("agents-where").textContent = "From the spawner's system:agent.* events routed through this node since it started (" + data.agents.length + " agents).";
  const tag = { running: "ok", hibernated: "", restarting: "warn", failed: "bad", exited: "bad", starting: "" };
  // An agent the spawner stopped (idle, drained) or that ended by itself
  // with status 0 exited cleanly: no error to show in red.
  const clean = (a) => a.state === "exited" && !a.error &&
    (!a.status || ["exit status 0", "signal: terminated", "signal: interrupt"].includes(a.status));
  clear($("agents-rows"), ...data.agents.map((a) => el("tr", { "data-agent": a.agentId, "data-state": a.state },
    el("td", { class: "mono" }, a.agentId),
    el("td", {}, el("span", { class: "tag " + (clean(a) ? "" : tag[a.state] || "") }, clean(a) ? "exited (clean)" : a.state)),
    el("td", { class: "mono" }, a.topic || "–"), el("td", { class: "mono" }, a.workspace || "–"), el("td", { class: "num" }, a.pid || "–"),
    el("td", {}, a.lastEvent), el("td", {}, timeEl(a.lastActive)),
    el("td", {}, [a.status, a.reason, a.error, a.nextStart ? "next start " + fmtTime(a.nextStart) : ""].filter(Boolean).join("; ")))));
}

// ---- dialogs ----

function confirmDialog(text) { return openDialog(text, null).then((v) => v !== null); }
function promptDialog(text, value) { return openDialog(text, value); }

// openDialog asks a question; with value not null it offers a text box
// and resolves to its text, else to "" (confirmed) or null (cancelled).
function openDialog(text, value) {
  const d = $("confirm");
  $("confirm-text").textContent = text;
  const box = value === null ? null : el("textarea", {});
  if (box) box.value = value;
  clear($("confirm-extra"), ...(box ? [box] : []));
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok" ? (box ? box.value : "") : null), { once: true });
    d.returnValue = "";
    d.showModal();
  });
}

// ---- routing ----

function current() { return (location.hash || "#overview").slice(1); }

function route() {
  if (!session) return;
  banner("");
  const page = current();
  if (!session.admin && page !== "messages") { location.hash = "#messages"; return; }
  for (const p of document.querySelectorAll(".page")) p.hidden = p.id !== "page-" + page;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("on", a.getAttribute("href") === "#" + page);
  if (page === "overview") renderOverview();
  else if (page === "clients") loadClients();
  else if (page === "deadletters") loadDeadLetters();
  else if (page === "bcp") { loadApprovals(); loadBudgets(); }
  else if (page === "agents") loadAgents();
  else if (page === "messages") loadMessages();
  if (page !== "messages") stopTail();
}

window.addEventListener("hashchange", route);

(async () => {
  try {
    const resp = await fetch(api + "session", { credentials: "same-origin" });
    if (resp.ok) { loggedIn(await resp.json()); return; }
  } catch (e) { /* not logged in */ }
  loggedOut("");
})();
