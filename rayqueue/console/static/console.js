// rayqueue console: renders the page the path names from the JSON API and refreshes it by
// polling. Every change is a form or a button that asks for confirmation first.
"use strict";

const REFRESH_MS = 2000;
const app = document.getElementById("app");
let timer = null;

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
const ids = a => (a || []).join(", ");
const num = v => (v === null || v === undefined ? "-" : Number(v).toLocaleString("en-US"));
const rate = v => Number(v || 0).toFixed(1);
// Bytes per second; "-" when unknown (no metrics endpoint answers).
const byteRate = v => (v === null || v === undefined ? "-" : bytes(Math.round(v)) + "/s");
const ms = v => (v === null || v === undefined ? "-" : (v >= 10 ? v.toFixed(0) : v.toFixed(1)) + " ms");
function bytes(n) {
  if (n === null || n === undefined) return "-";
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function banner(text, kind) {
  const b = document.getElementById("banner");
  if (!text) { b.hidden = true; return; }
  b.className = kind || "error";
  b.textContent = text;
  b.hidden = false;
}

async function api(method, path, body) {
  const init = {method, headers: {}};
  if (body !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new Error("cannot reach the console server: " + e.message);
  }
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (resp.status === 401 && data && data.error === "LOGIN_REQUIRED") {
    // No session (never logged in, expired, logged out, credential changed): log in, then back here.
    if (timer) clearInterval(timer);
    location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
    throw new Error(`${data.error}: ${data.message}`);
  }
  if (!resp.ok) {
    const what = data && data.error ? `${data.error}: ${data.message}` : `HTTP ${resp.status}`;
    throw new Error(what);
  }
  return data;
}

function table(headers, rows, opts) {
  opts = opts || {};
  const head = headers.map(h => `<th class="${h.num ? "num" : ""}">${esc(h.label || h)}</th>`).join("");
  const body = rows.map(r => `<tr class="${r.bad ? "bad" : ""}">` +
    r.cells.map((c, i) => `<td class="${headers[i].num ? "num" : ""}">${c}</td>`).join("") + "</tr>").join("");
  return `<table id="${opts.id || ""}"><thead><tr>${head}</tr></thead><tbody>${body ||
    `<tr><td colspan="${headers.length}" class="muted">${esc(opts.empty || "none")}</td></tr>`}</tbody></table>`;
}

// A tile: its label, its value and, for a figure that needs it, what it counts.
function card(label, value, id, bad, counts) {
  const hint = counts ? `<div class="counts">${esc(counts)}</div>` : "";
  return `<div class="card${bad ? " bad" : ""}"><div class="label">${esc(label)}</div><div class="value" id="${id}">${esc(value)}</div>${hint}</div>`;
}

// What the rate tiles count (the same words on every page).
const COUNTS = {
  in: "records appended to user topics (20 s average)",
  committed: "records consumer groups committed past (20 s average)",
  bytesIn: "record batches produced to user topics",
  bytesOut: "bytes fetched by consumers of user topics",
  p99: "broker request time, 99th percentile",
};

// Where a chart's numbers come from, shown beside it (the history's source_label).
function sourceInto(id, h) {
  const el = document.getElementById(id);
  el.textContent = h.source_label;
  el.dataset.source = h.source;
}

// The series of a throughput history: messages (in, committed out) and bytes (in, out).
function messageSeries(h) {
  return [
    {name: "messages in", color: "#2f5bd3", points: h.points.map(p => [p.t, p.messages_in])},
    {name: "messages committed (out)", color: "#18a058", points: h.points.map(p => [p.t, p.messages_out])}];
}
function byteSeries(h) {
  const known = h.points.filter(p => p.bytes_in !== null && p.bytes_in !== undefined);
  return [
    {name: "bytes in", color: "#7a4fd6", points: known.map(p => [p.t, p.bytes_in])},
    {name: "bytes out (fetched)", color: "#d9822b", points: known.map(p => [p.t, p.bytes_out])}];
}

const noBytes = h => (h.source === "metrics" ? undefined : "no metrics endpoint answers: bytes are unknown");

function chartInto(el, series, empty) {
  el.replaceChildren(lineChart(series, {empty}));
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.innerHTML = series.map(s => `<span><i style="background:${s.color}"></i>${esc(s.name)}</span>`).join("");
  el.appendChild(legend);
}

function every(load) {
  const run = async () => {
    try {
      await load();
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      banner(e.message);
    }
  };
  run();
  timer = setInterval(run, REFRESH_MS);
}

// -- overview ----------------------------------------------------------------------------

function overviewPage() {
  app.innerHTML = `<h1>Overview</h1><div id="cards" class="cards"></div>
    <h2>Brokers</h2><div id="brokers"></div><div id="unhealthy"></div>
    <h2>Messages per second (all user topics: appended, and committed by consumer groups)</h2><p class="muted source" id="chart-source"></p><div id="chart"></div>
    <h2>Bytes per second (all user topics: produced, and fetched by consumers)</h2><div id="bytes-chart"></div>
    <h2>Topics</h2><div id="rates"></div>`;
  every(async () => {
    const o = await api("GET", "/api/overview");
    document.getElementById("cards").innerHTML =
      card("Cluster id", o.cluster_id, "cluster-id") + card("Namespace", o.namespace, "namespace") +
      card("Controller epoch", o.controller_epoch, "controller-epoch") + card("Brokers", o.brokers.length, "broker-count") +
      card("Topics", o.topics, "topic-count") + card("Partitions", o.partitions, "partition-count") +
      card("Under-replicated", o.under_replicated.length, "urp-count", o.under_replicated.length > 0) +
      card("Offline", o.offline.length, "offline-count", o.offline.length > 0) +
      card("Messages in/s", rate(o.messages_in_per_sec), "messages-in", false, COUNTS.in) +
      card("Messages committed/s", rate(o.messages_out_per_sec), "messages-out", false, COUNTS.committed) +
      card("Bytes in/s", byteRate(o.bytes_in_per_sec), "bytes-in", false, COUNTS.bytesIn) +
      card("Bytes out/s", byteRate(o.bytes_out_per_sec), "bytes-out", false, COUNTS.bytesOut) +
      card("Produce p99", ms(o.produce_p99_ms), "produce-p99", false, COUNTS.p99) + card("Fetch p99", ms(o.fetch_p99_ms), "fetch-p99", false, COUNTS.p99) +
      card("Groups", o.groups, "group-count") + card("Open transactions", o.open_transactions, "txn-count");
    document.getElementById("brokers").innerHTML = table(
      ["ID", "Node", "Rack", "Alive", {label: "Partitions", num: 1}, {label: "Leaders", num: 1}],
      o.brokers.map(b => ({bad: !b.alive, cells: [b.broker_id, `${esc(b.node_address)} <span class="muted">${esc(b.node_id.slice(0, 12))}</span>`,
        esc(b.rack || "-"), b.alive ? "yes" : "no", num(b.partitions), num(b.leaders)]})), {id: "brokers-table"});
    const bad = o.offline.map(p => [p, "offline"]).concat(o.under_replicated.map(p => [p, "under-replicated"]));
    document.getElementById("unhealthy").innerHTML = bad.length ? "<h2 class='bad'>Unhealthy partitions</h2>" +
      table(["Topic", "Partition", "Problem"], bad.map(([p, why]) => ({bad: true, cells: [esc(p[0]), p[1], why]})), {id: "unhealthy-table"}) : "";
    document.getElementById("rates").innerHTML = table(["Topic", {label: "In/s", num: 1}, {label: "Committed/s", num: 1},
      {label: "Bytes in/s", num: 1}, {label: "Bytes out/s", num: 1}],
      Object.entries(o.rates).map(([t, r]) => ({cells: [`<a href="/topics/${encodeURIComponent(t)}">${esc(t)}</a>`, rate(r.messages_in),
        rate(r.messages_out), byteRate(r.bytes_in), byteRate(r.bytes_out)]})), {id: "rates-table"});
    if (o.errors.length) banner(o.errors.join("; ")); else banner("");
    const h = await api("GET", "/api/history");
    sourceInto("chart-source", h);
    chartInto(document.getElementById("chart"), messageSeries(h));
    chartInto(document.getElementById("bytes-chart"), byteSeries(h), noBytes(h));
  });
}

// -- topics ------------------------------------------------------------------------------

function parseLines(text) {
  const out = {};
  for (const line of text.split(/\n|,/)) {
    if (!line.trim()) continue;
    const i = line.indexOf("=");
    if (i < 1) throw new Error(`expected KEY=VALUE, got "${line.trim()}"`);
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

function topicsPage() {
  app.innerHTML = `<h1>Topics</h1>
    <form id="create-topic">
      <label>Name<input name="name" required></label>
      <label>Partitions<input name="partitions" type="number" placeholder="default"></label>
      <label>Replication factor<input name="replication_factor" type="number" placeholder="default"></label>
      <label>Configs (KEY=VALUE per line)<textarea name="configs" placeholder="retention.ms=86400000"></textarea></label>
      <button type="submit">Create topic</button>
    </form>
    <p><label><input type="checkbox" id="show-internal"> show internal topics</label></p>
    <div id="topics"></div>`;
  const form = document.getElementById("create-topic");
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    try {
      const body = {name: f.get("name").trim(), configs: parseLines(f.get("configs"))};
      if (f.get("partitions")) body.partitions = Number(f.get("partitions"));
      if (f.get("replication_factor")) body.replication_factor = Number(f.get("replication_factor"));
      const t = await api("POST", "/api/topics", body);
      banner(`Created topic ${t.name} (${t.partitions} partitions, replication factor ${t.replication_factor}).`, "ok");
      form.reset();
      await load();
    } catch (e) { banner(e.message); }
  });
  const load = async () => {
    const internal = document.getElementById("show-internal").checked;
    const data = await api("GET", "/api/topics" + (internal ? "?internal=true" : ""));
    document.getElementById("topics").innerHTML = table(
      ["Topic", {label: "Partitions", num: 1}, {label: "Replication", num: 1}, {label: "Messages", num: 1}, {label: "Size", num: 1},
       {label: "Retention ms", num: 1}, "Cleanup policy", {label: "In/s", num: 1}, {label: "Committed/s", num: 1}, ""],
      data.topics.map(t => ({bad: t.offline > 0 || t.under_replicated > 0, cells: [
        `<a href="/topics/${encodeURIComponent(t.name)}">${esc(t.name)}</a>${t.internal ? ' <span class="muted">internal</span>' : ""}` +
          (t.iceberg ? ` <span class="muted" data-iceberg-lag="${t.iceberg.lag_records}">iceberg lag ${num(t.iceberg.lag_records)}</span>` : ""),
        num(t.partitions), num(t.replication_factor), num(t.messages), bytes(t.size_bytes), num(t.retention_ms),
        esc(t.cleanup_policy), rate(t.messages_in), rate(t.messages_out),
        t.internal ? "" : `<button class="danger" data-delete="${esc(t.name)}">Delete</button>`]})),
      {id: "topics-table", empty: "no topics yet"});
    for (const b of document.querySelectorAll("button[data-delete]")) {
      b.onclick = async () => {
        const name = b.dataset.delete;
        const typed = prompt(`Delete topic "${name}" and all its data? Type its name to confirm.`);
        if (typed === null) return;
        if (typed !== name) { banner(`Not deleted: "${typed}" is not "${name}".`); return; }
        try {
          await api("DELETE", `/api/topics/${encodeURIComponent(name)}?confirm=${encodeURIComponent(typed)}`);
          banner(`Deleted topic ${name}.`, "ok");
          await load();
        } catch (e) { banner(e.message); }
      };
    }
  };
  document.getElementById("show-internal").onchange = load;
  every(load);
}

function topicPage(name) {
  const enc = encodeURIComponent(name);
  app.innerHTML = `<h1>Topic <span id="topic-name">${esc(name)}</span></h1>
    <p><a id="browse-link" href="/topics/${enc}/messages">Browse messages</a></p>
    <div id="cards" class="cards"></div>
    <h2>Partitions</h2><div id="partitions"></div>
    <div id="iceberg"></div>
    <h2>Messages per second</h2><p class="muted source" id="chart-source"></p><div id="chart"></div>
    <h2>Bytes per second</h2><div id="bytes-chart"></div>
    <h2>Configs</h2>
    <form id="alter-config">
      <label>Key<input name="key" required placeholder="retention.ms"></label>
      <label>Value<input name="value" required></label>
      <button type="submit">Set</button>
    </form>
    <div id="configs"></div>`;
  const form = document.getElementById("alter-config");
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    try {
      await api("POST", `/api/topics/${enc}/configs`, {set: {[f.get("key").trim()]: f.get("value").trim()}});
      banner(`Set ${f.get("key")} on ${name}.`, "ok");
      form.reset();
      await load();
    } catch (e) { banner(e.message); }
  });
  const load = async () => {
    const t = await api("GET", `/api/topics/${enc}`);
    document.getElementById("cards").innerHTML = card("Partitions", t.partitions.length, "partition-count") +
      card("Replication factor", t.replication_factor, "replication-factor") + card("Messages", num(t.messages), "messages") +
      card("Size", bytes(t.size_bytes), "size") + card("In/s", rate(t.rates.messages_in), "messages-in", false, COUNTS.in) +
      card("Committed/s", rate(t.rates.messages_out), "messages-out", false, COUNTS.committed) + card("Bytes in/s", byteRate(t.rates.bytes_in), "bytes-in") +
      card("Bytes out/s", byteRate(t.rates.bytes_out), "bytes-out") + card("Topic id", t.topic_id, "topic-id");
    document.getElementById("partitions").innerHTML = table(
      [{label: "Partition", num: 1}, {label: "Leader", num: 1}, "Replicas", "ISR", "Offline replicas", {label: "Log start", num: 1},
       {label: "High watermark", num: 1}, {label: "LSO", num: 1}, {label: "Size", num: 1}, {label: "Segments", num: 1}],
      t.partitions.map(p => ({bad: p.offline || p.under_replicated, cells: [p.partition, p.leader >= 0 ? p.leader : "none",
        ids(p.replicas), ids(p.isr), ids(p.offline_replicas), num(p.log_start_offset), num(p.high_watermark),
        num(p.last_stable_offset), bytes(p.size_bytes), num(p.segments)]})), {id: "partitions-table"});
    // An Iceberg topic: each leader's translation into the topic's table (rayqueue.iceberg.*).
    document.getElementById("iceberg").innerHTML = !t.iceberg ? "" : `<h2>Iceberg table</h2>` + table(
      [{label: "Partition", num: 1}, "Mode", {label: "Translated to", num: 1}, {label: "High watermark", num: 1},
       {label: "Lag (records)", num: 1}, {label: "Lag (s)", num: 1}, {label: "Translated", num: 1}, {label: "Invalid", num: 1}, "Error"],
      t.partitions.filter(p => p.iceberg).map(p => ({bad: !!p.iceberg.error, cells: [p.partition, esc(p.iceberg.mode),
        num(p.iceberg.next_offset), num(p.iceberg.high_watermark), num(p.iceberg.lag_records), p.iceberg.lag_seconds.toFixed(1),
        num(p.iceberg.translated_records), num(p.iceberg.invalid_records), esc(p.iceberg.error || "")]})), {id: "iceberg-table"});
    document.getElementById("configs").innerHTML = t.configs === null
      ? '<p class="muted" id="configs-refused">Not shown: you may not describe this topic\'s configs (DESCRIBE_CONFIGS).</p>'
      : table(["Key", "Value", "Source", ""],
      Object.entries(t.configs).map(([k, c]) => ({cells: [esc(k), esc(c.value), esc(c.source),
        c.source === "TOPIC_CONFIG" || c.source === "DYNAMIC_TOPIC_CONFIG" ? `<button class="plain" data-unset="${esc(k)}">Remove override</button>` : ""]})),
      {id: "configs-table"});
    for (const b of document.querySelectorAll("button[data-unset]")) {
      b.onclick = async () => {
        if (!confirm(`Remove the override of ${b.dataset.unset} on ${name}?`)) return;
        try {
          await api("POST", `/api/topics/${enc}/configs`, {delete: [b.dataset.unset]});
          await load();
        } catch (e) { banner(e.message); }
      };
    }
    const h = await api("GET", `/api/history?topic=${enc}`);
    sourceInto("chart-source", h);
    chartInto(document.getElementById("chart"), messageSeries(h));
    chartInto(document.getElementById("bytes-chart"), byteSeries(h), noBytes(h));
  };
  every(load);
}

// -- message browser ---------------------------------------------------------------------

function shown(b, view) {
  if (b === null || b === undefined) return '<span class="muted">null</span>';
  let text;
  if (view === "hex") text = b.hex;
  else if (view === "json") text = b.json ?? b.text ?? b.hex;
  else text = b.text ?? b.hex;
  return `<pre>${esc(text)}${b.truncated ? `<span class="muted"> ... (${b.size} bytes)</span>` : ""}</pre>`;
}

function messagesPage(name) {
  const enc = encodeURIComponent(name);
  app.innerHTML = `<h1>Messages of <a href="/topics/${enc}">${esc(name)}</a></h1>
    <form id="browse">
      <label>Partition<select name="partition" id="partition"></select></label>
      <label>Read<select name="mode" id="mode"><option value="newest">newest N</option><option value="offset">from offset</option>
        <option value="timestamp">from timestamp</option></select></label>
      <label>Offset<input name="offset" id="offset" type="number" min="0"></label>
      <label>Timestamp (ms or date)<input name="timestamp" id="timestamp" placeholder="2024-05-01T12:00"></label>
      <label>N<input name="limit" id="limit" type="number" value="20" min="1" max="500"></label>
      <label>Key contains<input name="key" id="key-filter"></label>
      <label>Show values as<select name="view" id="view"><option value="text">UTF-8</option><option value="json">JSON</option><option value="hex">hex</option></select></label>
      <button type="submit">Read</button>
    </form>
    <p id="bounds" class="muted"></p>
    <div id="records"></div>
    <h2>Produce a test record</h2>
    <form id="produce">
      <label>Key<input name="key" id="produce-key"></label>
      <label>Value<textarea name="value" id="produce-value"></textarea></label>
      <label>Partition<input name="partition" type="number" min="0" placeholder="by key" id="produce-partition"></label>
      <label>Headers (KEY=VALUE per line)<textarea name="headers" id="produce-headers"></textarea></label>
      <button type="submit">Produce</button>
    </form>`;
  let last = null;
  const render = () => {
    if (!last) return;
    const view = document.getElementById("view").value;
    document.getElementById("bounds").textContent =
      `partition ${last.partition}: log start ${last.log_start_offset}, high watermark ${last.high_watermark}; read from ${last.start_offset}`;
    document.getElementById("records").innerHTML = table(
      [{label: "Offset", num: 1}, "Timestamp", "Key", "Value", "Headers"],
      last.records.map(r => ({cells: [r.offset, esc(new Date(r.timestamp).toISOString()) + `<br><span class="muted">${r.timestamp} ${r.timestamp_type}</span>`,
        shown(r.key, view), shown(r.value, view),
        r.headers.map(h => `${esc(h.key)}: ${shown(h.value, view)}`).join("")]})),
      {id: "records-table", empty: "no records in this range"});
  };
  const read = async () => {
    const f = new FormData(document.getElementById("browse"));
    const q = new URLSearchParams({partition: f.get("partition") || 0, mode: f.get("mode"), limit: f.get("limit") || 20});
    if (f.get("key")) q.set("key", f.get("key"));
    if (f.get("mode") === "offset") q.set("offset", f.get("offset") || 0);
    if (f.get("mode") === "timestamp") {
      const raw = f.get("timestamp").trim();
      const ms = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw);
      if (Number.isNaN(ms)) throw new Error(`not a timestamp: "${raw}"`);
      q.set("timestamp", ms);
    }
    last = await api("GET", `/api/topics/${enc}/records?${q}`);
    render();
  };
  document.getElementById("view").onchange = render;
  document.getElementById("browse").addEventListener("submit", async ev => {
    ev.preventDefault();
    try { banner(""); await read(); } catch (e) { banner(e.message); }
  });
  const produce = document.getElementById("produce");
  produce.addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(produce);
    try {
      const body = {value: f.get("value"), headers: parseLines(f.get("headers"))};
      if (f.get("key")) body.key = f.get("key");
      if (f.get("partition") !== "") body.partition = Number(f.get("partition"));
      const md = await api("POST", `/api/topics/${enc}/records`, body);
      banner(`Produced to partition ${md.partition} at offset ${md.offset}.`, "ok");
    } catch (e) { banner(e.message); }
  });
  (async () => {
    try {
      const t = await api("GET", `/api/topics/${enc}`);
      document.getElementById("partition").innerHTML = t.partitions.map(p => `<option value="${p.partition}">${p.partition}</option>`).join("");
      const params = new URLSearchParams(location.search);
      for (const k of ["partition", "mode", "offset", "timestamp", "limit"]) {
        if (params.has(k)) document.getElementById(k).value = params.get(k);
      }
      await read();
    } catch (e) { banner(e.message); }
  })();
}

// -- consumer groups ---------------------------------------------------------------------

function groupsPage() {
  app.innerHTML = `<h1>Consumer groups</h1><div id="groups"></div>`;
  every(async () => {
    const data = await api("GET", "/api/groups");
    document.getElementById("groups").innerHTML = table(
      ["Group", "State", "Protocol type", "Protocol", {label: "Members", num: 1}, {label: "Lag", num: 1}],
      data.groups.map(g => ({cells: [`<a href="/groups/${encodeURIComponent(g.group_id)}">${esc(g.group_id)}</a>`, esc(g.state),
        esc(g.protocol_type), esc(g.protocol || "-"), num(g.members), num(g.lag)]})),
      {id: "groups-table", empty: "no consumer groups"});
  });
}

function groupPage(id) {
  const enc = encodeURIComponent(id);
  app.innerHTML = `<h1>Group <span id="group-id">${esc(id)}</span></h1>
    <div id="cards" class="cards"></div>
    <h2>Members</h2><div id="members"></div>
    <h2>Offsets and lag</h2><div id="offsets"></div>
    <h2>Lag over the last minutes</h2><p class="muted source" id="chart-source"></p><div id="chart"></div>
    <h2>Reset offsets</h2>
    <p class="muted">Only while the group has no members (kafka-consumer-groups --reset-offsets).</p>
    <form id="reset">
      <label>To<select name="to" id="reset-to"><option value="earliest">earliest</option><option value="latest">latest</option>
        <option value="timestamp">timestamp</option></select></label>
      <label>Timestamp (ms or date)<input name="timestamp" id="reset-timestamp"></label>
      <label>Topics (comma separated; empty: all with offsets)<input name="topics" id="reset-topics"></label>
      <button type="submit" class="danger">Reset offsets</button>
    </form>`;
  const form = document.getElementById("reset");
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    const body = {group_id: id, to: f.get("to"), topics: f.get("topics").split(",").map(s => s.trim()).filter(Boolean), confirm: true};
    if (body.to === "timestamp") {
      const raw = f.get("timestamp").trim();
      body.timestamp = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw);
      if (Number.isNaN(body.timestamp)) { banner(`not a timestamp: "${raw}"`); return; }
    }
    if (!confirm(`Reset the committed offsets of group "${id}" to ${body.to}${body.to === "timestamp" ? " " + body.timestamp : ""}?`)) return;
    try {
      const r = await api("POST", "/api/group-offsets/reset", body);
      banner(`Reset ${r.offsets.length} partition(s) of ${id}.`, "ok");
      await load();
    } catch (e) { banner(e.message); }
  });
  const load = async () => {
    const g = await api("GET", `/api/groups/${enc}`);
    document.getElementById("cards").innerHTML = card("State", g.state, "state") + card("Protocol", g.protocol || "-", "protocol") +
      card("Protocol type", g.protocol_type, "protocol-type") + card("Generation", g.generation_id, "generation") +
      card("Members", g.members.length, "member-count") + card("Lag", num(g.lag), "lag");
    document.getElementById("members").innerHTML = table(["Member id", "Instance id", "Client id", "Assignment"],
      g.members.map(m => ({cells: [esc(m.member_id), esc(m.group_instance_id || "-"), esc(m.client_id),
        esc(m.assignment.map(tp => `${tp.topic}-${tp.partition}`).join(", ") || "-")]})), {id: "members-table", empty: "no members"});
    document.getElementById("offsets").innerHTML = table(["Topic", {label: "Partition", num: 1}, {label: "Committed", num: 1},
      {label: "Log end", num: 1}, {label: "Lag", num: 1}, "Owner"],
      g.offsets.map(o => ({cells: [esc(o.topic), o.partition, num(o.committed), num(o.log_end_offset), num(o.lag), esc(o.owner || "-")]})),
      {id: "offsets-table", empty: "no committed offsets"});
    const h = await api("GET", `/api/history?group=${enc}`);
    sourceInto("chart-source", h);
    chartInto(document.getElementById("chart"), [{name: "total lag", color: "#d9822b", points: h.points.map(p => [p.t, p.lag])}]);
  };
  every(load);
}

function transactionsPage() {
  app.innerHTML = `<h1>Transactions</h1><div id="transactions"></div>`;
  every(async () => {
    const data = await api("GET", "/api/transactions");
    document.getElementById("transactions").innerHTML = table(
      ["Transactional id", {label: "Producer id", num: 1}, {label: "Epoch", num: 1}, "State", {label: "Age", num: 1},
       {label: "Timeout ms", num: 1}, "Partitions"],
      data.transactions.map(t => ({cells: [esc(t.transactional_id), t.producer_id, t.producer_epoch, esc(t.state),
        t.age_ms === null ? "-" : (t.age_ms / 1000).toFixed(1) + " s", num(t.timeout_ms),
        esc(t.partitions.map(tp => `${tp.topic}-${tp.partition}`).join(", ") || "-")]})),
      {id: "transactions-table", empty: "no transactional ids"});
  });
}

// -- who is logged in ----------------------------------------------------------------------

// With a login (the cluster has authentication) the header names the user and offers logout.
async function who() {
  let s;
  try { s = await api("GET", "/api/session"); } catch (e) { return; }
  if (!s.authentication || !s.user) return;
  document.getElementById("who-name").textContent = s.principal;
  document.getElementById("who").hidden = false;
  document.getElementById("logout").onclick = async () => {
    try { await api("POST", "/api/logout"); } catch (e) { banner(e.message); return; }
    location.assign("/login");
  };
}

// -- routing -----------------------------------------------------------------------------

function route() {
  const path = decodeURIComponent(location.pathname);
  let m, nav;
  if (path === "/") { nav = "overview"; overviewPage(); }
  else if (path === "/topics") { nav = "topics"; topicsPage(); }
  else if ((m = path.match(/^\/topics\/([^/]+)\/messages$/))) { nav = "topics"; messagesPage(m[1]); }
  else if ((m = path.match(/^\/topics\/([^/]+)$/))) { nav = "topics"; topicPage(m[1]); }
  else if (path === "/groups") { nav = "groups"; groupsPage(); }
  else if ((m = path.match(/^\/groups\/(.+)$/))) { nav = "groups"; groupPage(m[1]); }
  else if (path === "/transactions") { nav = "transactions"; transactionsPage(); }
  else if (path === "/schemas") { nav = "schemas"; schemasPage(); }
  else { app.innerHTML = "<h1>Not found</h1>"; }
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === nav);
}

who();
route();
