// The run console's page: the runs list and a run's timeline, live.
//
// Every value the sidecar sends is data that a tool, a model or a client wrote: it is put into
// the document as text (textContent, text nodes), never as markup. Nothing here builds HTML
// from strings, and the page's Content-Security-Policy allows no other script.

"use strict";

const TOKEN_KEY = "cleveragents-console-token";
const FOLD_LINES = 14;
const FOLD_CHARS = 2400;
const STATUS_EVERY_MS = 3000;
const MIN_BAR = 0.8; // the narrowest bar on the time axis, in percent of its width

const auth = { token: sessionStorage.getItem(TOKEN_KEY) || "" };
let page = null; // the page shown: { stop() }
let me = null;

// -- small helpers ------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

function when(seconds) {
  if (!seconds) return "";
  const date = new Date(seconds * 1000);
  return date.toLocaleTimeString(undefined, { hour12: false }) + "." +
    String(date.getMilliseconds()).padStart(3, "0");
}

function day(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toLocaleString(undefined, { hour12: false });
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1) return ms.toFixed(2) + " ms";
  if (ms < 1000) return ms.toFixed(1) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(2) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

function number(n) {
  return n === null || n === undefined ? "" : Number(n).toLocaleString();
}

function showBanner(text) {
  const banner = document.getElementById("banner");
  banner.textContent = text;
  banner.hidden = !text;
}

// A block of text (usually pretty JSON), folded when long: the first lines and a button.
function folded(text, cls) {
  const pre = el("pre", { class: cls });
  const lines = text.split("\n");
  if (lines.length <= FOLD_LINES && text.length <= FOLD_CHARS) {
    pre.textContent = text;
    return pre;
  }
  let short = lines.slice(0, FOLD_LINES).join("\n");
  if (short.length > FOLD_CHARS) short = short.slice(0, FOLD_CHARS);
  const rest = text.length - short.length;
  pre.textContent = short + "\n…";
  pre.classList.add("folded");
  const more = el("button", { type: "button", class: "more" },
    `show all (${lines.length} lines, ${number(rest)} more characters)`);
  more.addEventListener("click", () => {
    const open = pre.classList.toggle("folded");
    pre.textContent = open ? short + "\n…" : text;
    more.textContent = open ? `show all (${lines.length} lines)` : "fold";
  });
  return el("div", { class: "fold" }, pre, more);
}

// -- talking to the sidecar ---------------------------------------------------------------

class SignInNeeded extends Error {}

function headers(extra) {
  const all = Object.assign({}, extra || {});
  if (auth.token) all.Authorization = "Bearer " + auth.token;
  return all;
}

async function answer(response) {
  if (response.status === 401) throw new SignInNeeded("sign in");
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (!response.ok) throw new Error((body && body.error) || response.statusText);
  return body;
}

async function get(path) {
  return answer(await fetch(path, { headers: headers(), cache: "no-store" }));
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", "X-Console-Request": "1" }),
    body: JSON.stringify(body),
    cache: "no-store",
  });
  return answer(response);
}

// Reads a server-sent event stream through fetch (EventSource cannot send the token).
async function stream(path, signal, onEvent) {
  const response = await fetch(path, { headers: headers(), signal, cache: "no-store" });
  if (!response.ok) await answer(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

// -- signing in ---------------------------------------------------------------------------

function showSignIn(message) {
  if (page) page.stop();
  page = null;
  clear(document.getElementById("main"));
  const form = document.getElementById("sign-in");
  form.hidden = false;
  const error = document.getElementById("sign-in-error");
  error.textContent = message || "";
  error.hidden = !message;
  document.getElementById("token").focus();
}

document.getElementById("sign-in").addEventListener("submit", (event) => {
  event.preventDefault();
  auth.token = document.getElementById("token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, auth.token);
  document.getElementById("token").value = "";
  start(true);
});

document.getElementById("sign-out").addEventListener("click", () => {
  auth.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  me = null;
  document.getElementById("who").textContent = "";
  document.getElementById("sign-out").hidden = true;
  showSignIn("");
});

async function start(afterSignIn) {
  try {
    me = await get("/api/me");
  } catch (error) {
    if (error instanceof SignInNeeded) {
      showSignIn(afterSignIn ? "The sidecar does not know that token." : "");
      return;
    }
    showBanner("The console cannot reach its sidecar: " + error.message);
    return;
  }
  document.getElementById("sign-in").hidden = true;
  const who = me.identity + (me.roles.length ? " (" + me.roles.join(", ") + ")" : "");
  document.getElementById("who").textContent = "signed in as " + who;
  document.getElementById("sign-out").hidden = me.auth !== "token";
  showBanner("");
  refreshStatus();
  route();
}

// -- the status strip ---------------------------------------------------------------------

let status = null;

async function refreshStatus() {
  const strip = document.getElementById("status-strip");
  try {
    status = await get("/api/status");
  } catch (error) {
    if (error instanceof SignInNeeded) return;
    clear(strip).append(el("span", { class: "health bad" }, "sidecar unreachable"));
    return;
  }
  clear(strip);
  strip.append(el("span", { id: "health", class: "health " +
    (status.health === "serving" ? "good" : "bad") }, status.health));
  strip.append(el("span", { id: "live-runs" }, `${status.live_runs} live run` +
    (status.live_runs === 1 ? "" : "s")));
  const store = status.store_failure ? `store: ${status.store} failing (${status.store_failure})`
    : `store: ${status.store}`;
  strip.append(el("span", { id: "store", class: status.store_failure ? "bad" : "" }, store));
  if (status.sidecar_id) strip.append(el("span", { id: "sidecar-id" }, "sidecar " + status.sidecar_id));
  if (status.mcp_servers.length) {
    const servers = el("span", { id: "mcp" }, "MCP: ");
    for (const server of status.mcp_servers) {
      servers.append(el("span", { class: "mcp " + (server.up ? "good" : "bad"),
        title: `${server.failures} failures` }, `${server.name} ${server.up ? "up" : "down"}`));
    }
    strip.append(servers);
  } else {
    strip.append(el("span", { id: "mcp" }, "no MCP servers"));
  }
}

setInterval(() => { if (me) refreshStatus(); }, STATUS_EVERY_MS);

// -- pages --------------------------------------------------------------------------------

function route() {
  if (!me) return;
  if (page) page.stop();
  const main = clear(document.getElementById("main"));
  const match = location.hash.match(/^#\/runs\/(.+)$/);
  page = match ? new RunPage(main, decodeURIComponent(match[1])) : new RunsPage(main);
}

window.addEventListener("hashchange", route);

// Keeps a feed open: reconnects (after a pause that grows) when it breaks.
class Feed {
  constructor(path, onEvent, onBreak) {
    this.path = path;
    this.onEvent = onEvent;
    this.onBreak = onBreak;
    this.controller = null;
    this.stopped = false;
    this.pause = 500;
  }

  open() {
    if (this.stopped) return;
    this.controller = new AbortController();
    stream(this.path(), this.controller.signal, (name, data) => {
      this.pause = 500;
      this.onEvent(name, data);
    }).then(() => this.ended(null), (error) => this.ended(error));
  }

  ended(error) {
    if (this.stopped) return;
    if (error instanceof SignInNeeded) { showSignIn(""); return; }
    if (this.onBreak(error) === false) return;
    setTimeout(() => this.open(), this.pause);
    this.pause = Math.min(this.pause * 2, 10000);
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }
}

// -- the runs list ------------------------------------------------------------------------

class RunsPage {
  constructor(main) {
    document.title = "Runs · cleveragents-sidecar";
    this.rows = [];
    this.stateFilter = el("select", { id: "filter-state" },
      ["", "running", "completed", "failed", "cancelled"].map((s) =>
        el("option", { value: s }, s || "every state")));
    this.ownerFilter = el("select", { id: "filter-owner" }, el("option", { value: "" }, "every owner"));
    this.stateFilter.addEventListener("change", () => this.render());
    this.ownerFilter.addEventListener("change", () => this.render());
    this.body = el("tbody");
    this.count = el("span", { id: "runs-count" });
    main.append(
      el("section", { id: "runs-page" },
        el("div", { class: "toolbar" }, el("h1", {}, "Runs"), this.count,
          el("label", {}, "State ", this.stateFilter), el("label", {}, "Owner ", this.ownerFilter)),
        el("table", { id: "runs" },
          el("thead", {}, el("tr", {}, ["Run", "State", "Owner", "Profile · model", "Started",
            "Iterations", "Tool calls", "Tokens", "Sidecar"].map((h) => el("th", {}, h)))),
          this.body)));
    this.feed = new Feed(() => "/api/runs", (name, data) => {
      if (name === "runs") { this.rows = data; this.render(); showBanner(""); }
      else if (name === "error") showBanner("The runs cannot be listed: " + data.error);
    }, (error) => { showBanner("The runs list stopped" + (error ? ": " + error.message : "") +
      "; reconnecting…"); });
    this.feed.open();
  }

  stop() { this.feed.stop(); }

  render() {
    const owners = [...new Set(this.rows.map((r) => r.owner))].sort();
    const chosen = this.ownerFilter.value;
    if (this.ownerFilter.options.length - 1 !== owners.length ||
        owners.some((o, i) => this.ownerFilter.options[i + 1].value !== o)) {
      clear(this.ownerFilter).append(el("option", { value: "" }, "every owner"),
        ...owners.map((o) => el("option", { value: o }, o)));
      this.ownerFilter.value = owners.includes(chosen) ? chosen : "";
    }
    const state = this.stateFilter.value, owner = this.ownerFilter.value;
    const shown = this.rows.filter((r) => (!state || r.state === state) && (!owner || r.owner === owner));
    this.count.textContent = `${shown.length} of ${this.rows.length}`;
    clear(this.body);
    for (const row of shown) {
      const link = el("a", { href: "#/runs/" + encodeURIComponent(row.run_id), class: "run-link" },
        row.run_id);
      const stateText = row.waiting_for_client ? "waiting for its client" : row.state;
      const stateCell = el("td", {}, el("span", { class: "state state-" + row.state }, stateText));
      if (row.approvals_waiting) {
        stateCell.append(el("span", { class: "badge approvals-waiting" },
          `${row.approvals_waiting} approval${row.approvals_waiting === 1 ? "" : "s"} waiting`));
      }
      if (row.stop_reason && row.state !== "running") {
        stateCell.append(el("span", { class: "stop-reason" }, row.stop_reason));
      }
      const calls = el("td", { class: "num" }, number(row.tool_calls));
      if (row.failed_calls) calls.append(el("span", { class: "failed" }, ` (${row.failed_calls} failed)`));
      this.body.append(el("tr", { dataset: { runId: row.run_id, state: row.state } },
        el("td", {}, link, el("div", { class: "prompt" }, row.prompt)),
        stateCell,
        el("td", { class: "owner" }, row.owner),
        el("td", {}, row.profile + (row.model ? " · " + row.model : "")),
        el("td", {}, day(row.started_at)),
        el("td", { class: "num" }, number(row.iterations)),
        calls,
        el("td", { class: "num" }, number(row.tokens.total_tokens)),
        el("td", { class: "sidecar" }, row.sidecar || "this one")));
    }
    if (!shown.length) {
      this.body.append(el("tr", {}, el("td", { colspan: 9, class: "empty" },
        this.rows.length ? "No run matches the filters." : "No runs yet.")));
    }
  }
}

// -- one run ------------------------------------------------------------------------------

class RunPage {
  constructor(main, runId) {
    document.title = runId + " · cleveragents-sidecar";
    this.runId = runId;
    this.header = null;
    this.lastSeq = 0;
    this.calls = new Map();      // call_id -> { started, record, card, ... }
    this.approvals = new Map();  // call_id -> { event, decided, card }
    this.live = new Map();       // iteration -> { text, next, block }
    this.iterations = 0;
    this.usage = { input_tokens: 0, output_tokens: 0, total_tokens: 0 };
    this.ended = null;
    this.headerBox = el("section", { id: "run-header" });
    this.controls = el("section", { id: "run-controls" });
    this.budgets = el("section", { id: "budgets" });
    this.waiting = el("section", { id: "approvals" });
    this.axis = el("section", { id: "time-axis" });
    this.timeline = el("ol", { id: "timeline" });
    this.result = el("section", { id: "result" });
    main.append(el("section", { id: "run-page", dataset: { runId } },
      el("p", {}, el("a", { href: "#/", id: "back" }, "← all runs")),
      this.headerBox, this.controls, this.waiting, this.budgets, this.axis,
      el("h2", {}, "Timeline"), this.timeline, this.result));
    this.feed = new Feed(() => `/api/runs/${encodeURIComponent(runId)}/events?after=${this.lastSeq}`,
      (name, data) => this.take(name, data),
      (error) => this.broke(error));
    this.feed.open();
    this.clock = setInterval(() => { if (!this.ended) { this.renderBudgets(); this.renderAxis(); } }, 1000);
  }

  stop() { this.feed.stop(); clearInterval(this.clock); }

  broke(error) {
    if (this.ended && !this.ended.dropped) return false;
    if (error && /no run with id/.test(error.message)) {
      showBanner(error.message);
      return false;
    }
    showBanner("The run's feed stopped" + (error ? ": " + error.message : "") + "; reconnecting…");
    return true;
  }

  take(name, data) {
    if (name === "run") {
      this.header = data;
      this.renderHeader();
      this.renderControls();
      this.renderBudgets();
      showBanner("");
    } else if (name === "events") {
      for (const event of data) this.event(event);
      this.renderBudgets();
      this.renderAxis();
      this.renderApprovals();
    } else if (name === "end") {
      this.ended = data;
      if (data.dropped) { showBanner("This page fell behind the run; catching up…"); return; }
      if (data.lost) showBanner(data.lost);
      this.header.state = data.state;
      this.header.stop_reason = data.stop_reason;
      this.renderHeader();
      this.renderControls();
      this.renderApprovals();
      this.renderAxis();
    }
  }

  event(e) {
    if (e.kind === "delta") { this.delta(e); return; }
    if (e.seq <= this.lastSeq) return; // a reconnect's overlap
    this.lastSeq = e.seq;
    const item = el("li", { class: "event " + e.kind, dataset: { seq: e.seq, kind: e.kind } },
      el("span", { class: "seq" }, "#" + e.seq), el("time", {}, when(e.time)));
    switch (e.kind) {
      case "run_started":
        item.append(el("span", { class: "what" }, "run started"),
          el("div", { class: "detail" }, "tools offered: " + (e.tool_names.join(", ") || "none")));
        break;
      case "run_resumed":
        item.append(el("span", { class: "what" }, "resumed"), el("div", { class: "detail" }, e.reason));
        break;
      case "iteration_started":
        this.iterations = Math.max(this.iterations, e.iteration - 1);
        item.append(el("span", { class: "what" }, `iteration ${e.iteration}`));
        item.classList.add("iteration");
        break;
      case "llm_responded": {
        this.iterations = Math.max(this.iterations, e.iteration);
        if (e.usage) {
          this.usage.input_tokens += e.usage.input_tokens;
          this.usage.output_tokens += e.usage.output_tokens;
          this.usage.total_tokens += e.usage.total_tokens;
        }
        const live = this.live.get(e.iteration);
        if (live) { live.block.remove(); this.live.delete(e.iteration); }
        item.append(el("span", { class: "what" }, e.refusal ? "the model refused" : "the model answered"));
        if (e.usage) item.append(el("span", { class: "usage" },
          `${number(e.usage.input_tokens)} in · ${number(e.usage.output_tokens)} out`));
        if (e.reasoning) item.append(el("div", { class: "reasoning" }, e.reasoning));
        if (e.content) item.append(folded(e.content, "model-text"));
        if (e.refusal) item.append(el("div", { class: "refusal" }, e.refusal));
        if (e.tool_calls.length) {
          item.append(el("div", { class: "detail" }, "asked for: " +
            e.tool_calls.map((c) => c.name).join(", ")));
        }
        break;
      }
      case "tool_call_started": {
        const call = this.call(e.call_id);
        call.started = e;
        call.tool = e.tool_name;
        call.startTime = e.time;
        item.append(call.card);
        item.classList.add("call");
        this.renderCall(call);
        break;
      }
      case "tool_call_progress": {
        const call = this.call(e.call_id);
        call.progress = e;
        this.renderCall(call);
        return;
      }
      case "tool_call_completed": {
        const call = this.call(e.record.call_id);
        call.record = e.record;
        call.tool = e.record.tool_name;
        call.endTime = e.time;
        if (!call.startTime) call.startTime = e.record.started_at || e.time;
        if (!call.card.isConnected) { item.append(call.card); item.classList.add("call"); }
        else { this.renderCall(call); return; }
        this.renderCall(call);
        break;
      }
      case "approval_requested": {
        this.approvals.set(e.call_id, { event: e, decided: null, card: null });
        item.append(el("span", { class: "what" }, `approval asked for ${e.tool_name}`),
          el("div", { class: "detail" }, e.reason));
        break;
      }
      case "approval_decided": {
        const asked = this.approvals.get(e.call_id);
        if (asked) asked.decided = e;
        const by = e.identity ? `${e.identity} (${e.by})` : e.by;
        item.append(el("span", { class: "what " + (e.approved ? "approved" : "denied") },
          `${e.approved ? "approved" : "denied"} by ${by}`),
        e.reason ? el("div", { class: "detail" }, e.reason) : null);
        break;
      }
      case "run_completed":
      case "run_failed":
      case "run_cancelled":
        this.finish(e, item);
        break;
      default:
        item.append(el("span", { class: "what" }, e.kind));
    }
    this.timeline.append(item);
  }

  delta(e) {
    let live = this.live.get(e.iteration);
    if (!live) {
      const text = el("pre", { class: "model-text typing" });
      const calls = el("div", { class: "typing-calls" });
      const block = el("li", { class: "event live", dataset: { kind: "typing" } },
        el("span", { class: "what" }, `iteration ${e.iteration}: the model is answering`), text, calls);
      live = { next: 0, text, calls, args: new Map(), block };
      this.live.set(e.iteration, live);
      this.timeline.append(block);
    }
    const count = e.count || 1;
    if (e.index + count <= live.next) return; // sent before a reconnect
    live.next = e.index + count;
    if (e.text) live.text.append(e.text);
    if (e.tool_call_index !== null && e.tool_call_index !== undefined) {
      let args = live.args.get(e.tool_call_index);
      if (!args) {
        args = el("pre", { class: "typing-args" });
        live.calls.append(el("div", {}, el("span", { class: "tool-name" }, e.tool_name || "tool"), args));
        live.args.set(e.tool_call_index, args);
      }
      if (e.arguments) args.append(e.arguments);
    }
  }

  call(id) {
    let call = this.calls.get(id);
    if (!call) {
      call = { id, card: el("div", { class: "tool-call", dataset: { callId: id } }) };
      this.calls.set(id, call);
    }
    return call;
  }

  renderCall(call) {
    const card = clear(call.card);
    const record = call.record;
    let state = "running", label = "running";
    if (record) {
      state = record.success ? "ok" : (record.error_kind || "failed");
      label = record.success ? "ok" : (record.error_kind || "failed");
    } else if (this.approvals.has(call.id) && !this.approvals.get(call.id).decided) {
      state = label = "waiting for approval";
    }
    card.dataset.status = state;
    card.append(el("div", { class: "call-head" },
      el("span", { class: "tool-name" }, call.tool || ""),
      el("span", { class: "call-id" }, call.id),
      el("span", { class: "call-status status-" + state.replace(/ /g, "-") }, label),
      record ? el("span", { class: "duration" }, duration(record.duration_ms)) : null));
    const inputs = record ? record.inputs : call.started ? call.started.inputs : null;
    if (inputs) card.append(el("div", { class: "label" }, "inputs"), folded(pretty(inputs), "inputs"));
    if (!record && call.progress) {
      const p = call.progress;
      card.append(el("div", { class: "progress" },
        p.total ? el("progress", { value: p.progress, max: p.total }) : null,
        el("span", {}, p.message || `${p.progress}${p.total ? " / " + p.total : ""}`)));
    }
    if (record) {
      if (record.error) card.append(el("div", { class: "label" }, "error"),
        el("pre", { class: "error" }, record.error));
      if (record.success || Object.keys(record.output).length) {
        card.append(el("div", { class: "label" }, "output"), folded(pretty(record.output), "output"));
      }
    }
  }

  finish(e, item) {
    const result = e.result;
    const words = { run_completed: "completed", run_failed: "failed", run_cancelled: "cancelled" };
    item.append(el("span", { class: "what end" }, `run ${words[e.kind]} (${result.stop_reason})`));
    if (e.kind === "run_failed") item.append(el("pre", { class: "error" }, e.message));
    if (e.kind === "run_cancelled" && e.reason) item.append(el("div", { class: "detail" }, e.reason));
    clear(this.result).append(el("h2", {}, "Result"),
      el("dl", {},
        el("dt", {}, "stop reason"), el("dd", { id: "stop-reason" }, result.stop_reason),
        el("dt", {}, "iterations"), el("dd", {}, number(result.iterations)),
        el("dt", {}, "tool calls"), el("dd", {}, number(result.tool_calls)),
        el("dt", {}, "usage"), el("dd", { id: "usage" }, result.usage
          ? `${number(result.usage.input_tokens)} in · ${number(result.usage.output_tokens)} out · ` +
            `${number(result.usage.total_tokens)} total` : "not reported")),
      result.content ? el("div", { class: "label" }, "final answer") : null,
      result.content ? folded(result.content, "final") : null,
      result.output_json ? el("div", { class: "label" }, "output (JSON)") : null,
      result.output_json ? folded(result.output_json, "final") : null,
      result.output_error ? el("pre", { class: "error" }, result.output_error) : null);
    this.header.state = words[e.kind];
    this.header.stop_reason = result.stop_reason;
    this.header.finished_at = e.time;
    if (result.usage) this.usage = result.usage;
    this.iterations = result.iterations;
    this.renderHeader();
    this.renderControls();
  }

  renderHeader() {
    const h = this.header;
    if (!h) return;
    const where = h.sidecar && (!status || h.sidecar !== status.sidecar_id)
      ? `runs on sidecar ${h.sidecar}` : h.sidecar ? `runs on this sidecar (${h.sidecar})` : "";
    clear(this.headerBox).append(
      el("h1", {}, el("span", { id: "run-id" }, h.run_id), " ",
        el("span", { id: "run-state", class: "state state-" + h.state }, h.state)),
      el("dl", { class: "facts" },
        el("dt", {}, "owner"), el("dd", { id: "run-owner" }, h.owner),
        el("dt", {}, "profile · model"), el("dd", {}, h.profile + (h.model ? " · " + h.model : "")),
        el("dt", {}, "automation"), el("dd", {}, h.automation_profile),
        el("dt", {}, "started"), el("dd", {}, day(h.started_at)),
        h.stop_reason ? el("dt", {}, "stop reason") : null,
        h.stop_reason ? el("dd", { id: "run-stop-reason" }, h.stop_reason) : null,
        where ? el("dt", {}, "where") : null,
        where ? el("dd", { id: "run-sidecar" }, where) : null),
      el("div", { class: "label" }, "prompt"), folded(h.prompt, "prompt"));
  }

  renderControls() {
    const h = this.header;
    clear(this.controls);
    if (!h || !h.may_cancel || h.state !== "running") return;
    const reason = el("input", { id: "cancel-reason", type: "text", placeholder: "why (optional)" });
    const button = el("button", { id: "cancel-run", type: "button", class: "danger" }, "Cancel run");
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const answer = await post(`/api/runs/${encodeURIComponent(this.runId)}/cancel`,
          { reason: reason.value });
        showBanner(answer.state === "running" ? "Cancelling: the run has not ended yet." : "");
      } catch (error) {
        showBanner("Cancel refused: " + error.message);
        button.disabled = false;
      }
    });
    this.controls.append(el("div", { class: "toolbar" }, reason, button));
  }

  // The approvals that wait, each card made once (a reason being typed is kept while events
  // come), and gone once decided or once the run ended.
  renderApprovals() {
    const h = this.header;
    const over = this.ended && !this.ended.dropped;
    const open = [...this.approvals.values()].filter((a) => !a.decided && !over);
    for (const asked of this.approvals.values()) {
      if (asked.card && (asked.decided || over)) { asked.card.remove(); asked.card = null; }
    }
    if (!open.length) { clear(this.waiting); return; }
    if (!this.waiting.firstChild) this.waiting.append(el("h2", {}, "Waiting for approval"));
    for (const asked of open) {
      if (asked.card) continue;
      const e = asked.event;
      const card = el("div", { class: "approval", dataset: { callId: e.call_id } },
        el("div", { class: "call-head" }, el("span", { class: "tool-name" }, e.tool_name),
          el("span", { class: "call-id" }, e.call_id)),
        el("div", { class: "detail" }, e.reason),
        e.how_to_answer ? el("div", { class: "detail" }, e.how_to_answer) : null,
        el("div", { class: "label" }, "inputs"), folded(pretty(e.inputs), "inputs"));
      if (h && h.may_decide) {
        const reason = el("input", { type: "text", class: "decision-reason", placeholder: "reason (optional)" });
        const decide = async (approved) => {
          for (const b of card.querySelectorAll("button")) b.disabled = true;
          try {
            await post(`/api/runs/${encodeURIComponent(this.runId)}/decisions`,
              { call_id: e.call_id, approved, reason: reason.value });
          } catch (error) {
            showBanner("Decision refused: " + error.message);
            for (const b of card.querySelectorAll("button")) b.disabled = false;
          }
        };
        const approve = el("button", { type: "button", class: "approve" }, "Approve");
        const deny = el("button", { type: "button", class: "deny danger" }, "Deny");
        approve.addEventListener("click", () => decide(true));
        deny.addEventListener("click", () => decide(false));
        card.append(el("div", { class: "toolbar" }, reason, approve, deny));
      }
      asked.card = card;
      this.waiting.append(card);
    }
    for (const call of this.calls.values()) if (!call.record) this.renderCall(call);
  }

  renderBudgets() {
    const h = this.header;
    if (!h) return;
    const limits = h.limits;
    const calls = [...this.calls.values()].filter((c) => c.record).length;
    const end = h.finished_at || (this.ended ? Date.now() / 1000 : Date.now() / 1000);
    const elapsed = Math.max(0, end - h.started_at);
    const row = (name, used, limit, id) => el("tr", { id },
      el("th", {}, name), el("td", { class: "num" }, used),
      el("td", { class: "num" }, limit === null || limit === undefined ? "no limit" : "of " + limit),
      el("td", {}, limit ? el("meter", { min: 0, max: 1, value: Math.min(1, parseFloat(String(used).replace(/[^0-9.]/g, "")) / limit) }) : null));
    clear(this.budgets).append(el("h2", {}, "Usage and budgets"), el("table", { class: "budgets" },
      row("iterations", String(this.iterations), limits.max_iterations, "budget-iterations"),
      row("tool calls", String(calls), limits.max_tool_calls, "budget-tool-calls"),
      row("tokens", String(this.usage.total_tokens), limits.max_total_tokens, "budget-tokens"),
      row("wall clock (s)", elapsed.toFixed(1), limits.max_wall_clock_s, "budget-wall-clock")),
    el("p", { class: "usage" }, `${number(this.usage.input_tokens)} input tokens · ` +
      `${number(this.usage.output_tokens)} output tokens`));
  }

  // The tool calls on a time axis: calls that overlapped in time get lanes of their own.
  renderAxis() {
    const calls = [...this.calls.values()].filter((c) => c.startTime);
    clear(this.axis);
    if (!calls.length || !this.header) return;
    const now = Date.now() / 1000;
    const ends = (c) => c.record ? c.startTime + c.record.duration_ms / 1000
      : (this.ended ? (c.endTime || now) : now);
    const origin = Math.min(this.header.started_at, ...calls.map((c) => c.startTime));
    const last = Math.max(...calls.map(ends), this.header.finished_at || 0, origin + 0.001);
    const span = last - origin;
    const lanes = [];
    const least = span * MIN_BAR / 100; // a bar is drawn at least this long
    for (const call of calls.sort((a, b) => a.startTime - b.startTime)) {
      let lane = lanes.find((l) => l.end <= call.startTime);
      if (!lane) { lane = { end: 0, calls: [] }; lanes.push(lane); }
      lane.calls.push(call);
      lane.end = Math.max(ends(call), call.startTime + least);
    }
    const box = el("div", { class: "lanes" });
    for (const lane of lanes) {
      const row = el("div", { class: "lane" });
      for (const call of lane.calls) {
        const left = ((call.startTime - origin) / span) * 100;
        const width = Math.max(((ends(call) - call.startTime) / span) * 100, MIN_BAR);
        const state = call.record ? (call.record.success ? "ok" : "failed") : "running";
        const bar = el("div", { class: "bar bar-" + state, dataset: { callId: call.id },
          title: `${call.tool} ${call.id}: ${call.record ? duration(call.record.duration_ms) : "running"}` },
        call.tool || call.id);
        bar.style.left = left + "%";
        bar.style.width = Math.min(width, 100 - left) + "%";
        row.append(bar);
      }
      box.append(row);
    }
    this.axis.append(el("h2", {}, "Tool calls in time"),
      el("div", { class: "axis-scale" }, el("span", {}, "0 s"), el("span", {}, (span).toFixed(2) + " s")),
      box);
  }
}

start(false);
