// SPDX-License-Identifier: Apache-2.0
// weir's web console (docs/console.md): the jobs list at /, a job's page at
// /jobs/ID, drawn from the coordinator's JSON API (/api/v1/...) with
// same-origin URLs only (a token, when one is set, travels in the
// weir_token cookie the server sets, never through this script). A job's
// page follows /api/v1/jobs/ID/events (server-sent events, one "job" event
// a second) and falls back to polling /api/v1/jobs/ID every second when the
// stream fails. Plain JavaScript, no dependencies, no build step.
"use strict";

const BP_HIGH = 0.5; // backpressure at or above: backpressured (red)
const BP_LOW = 0.1; // below: fine (green); between: amber
const SAMPLES = 60; // throughput samples kept per operator

const app = document.getElementById("app");
const conn = document.getElementById("conn");

// ---- helpers -------------------------------------------------------------------------------
const esc = (s) =>
  String(s ?? "").replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

function fmtRate(r) {
  if (r == null || !isFinite(r)) return "–";
  if (r >= 1e6) return (r / 1e6).toFixed(1) + "M";
  if (r >= 1e4) return (r / 1e3).toFixed(0) + "k";
  if (r >= 1e3) return (r / 1e3).toFixed(1) + "k";
  return r >= 10 ? r.toFixed(0) : r.toFixed(1);
}
function fmtCount(n) {
  return n == null ? "–" : Number(n).toLocaleString("en-US");
}
function fmtMs(ms) {
  if (ms == null || !isFinite(ms)) return "–";
  if (ms < 1) return ms.toFixed(2) + " ms";
  if (ms < 1000) return ms.toFixed(ms < 10 ? 1 : 0) + " ms";
  return fmtDur(ms);
}
function fmtDur(ms) {
  if (ms == null || !isFinite(ms)) return "–";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + (s % 60) + " s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + " h " + (m % 60) + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}
function fmtBytes(b) {
  if (b == null) return "–";
  if (b < 1024) return b + " B";
  if (b < 1 << 20) return (b / 1024).toFixed(1) + " KiB";
  if (b < 1 << 30) return (b / (1 << 20)).toFixed(1) + " MiB";
  return (b / (1 << 30)).toFixed(2) + " GiB";
}
function fmtClock(ms) {
  if (ms == null) return "–";
  const d = new Date(ms);
  return d.toLocaleTimeString("en-GB", { hour12: false });
}
function pct(x) {
  return x == null ? "–" : Math.round(x * 100) + "%";
}
function bpClass(bp) {
  if (bp == null) return "idle";
  return bp >= BP_HIGH ? "bad" : bp >= BP_LOW ? "warn" : "ok";
}
function badge(state) {
  return `<span class="badge ${esc(state)}" data-testid="state">${esc(state)}</span>`;
}
function setConn(kind, text) {
  conn.className = "conn " + kind;
  conn.textContent = text;
}
async function getJSON(url) {
  const r = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try {
      const j = await r.json();
      if (j && j.error) msg = j.error;
    } catch (_) {
      /* not JSON */
    }
    const e = new Error(msg);
    e.status = r.status;
    if (r.status === 401) showUnauthorized();
    throw e;
  }
  return r.json();
}

// The coordinator wants its token and this browser's cookie no longer
// carries it (the coordinator was restarted with another token, say): the
// page was loaded, its API calls are refused.
function showUnauthorized() {
  app.innerHTML = `<h1>Sign in</h1><div class="card" data-testid="unauthorized">
    <p>This coordinator asks for its token (<code>WEIR_AUTH_TOKEN</code>). Open this page once as
    <code>${esc(location.pathname)}?access_token=<i>TOKEN</i></code>: the coordinator answers with a
    cookie, and this browser is let in from then on.</p></div>`;
}

// The coordinator's clock minus ours, learnt from now_ms (ages are its).
let skew = 0;
const now = () => Date.now() + skew;

// ---- routing -------------------------------------------------------------------------------
let page = null; // the current page: {stop()}

function route() {
  if (page) page.stop();
  page = null;
  const m = location.pathname.match(/^\/jobs\/(\d+)\/?$/);
  if (m) page = jobPage(Number(m[1]));
  else page = jobsPage();
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a[data-link]");
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  if (a.getAttribute("href") !== location.pathname) history.pushState(null, "", a.getAttribute("href"));
  route();
});
window.addEventListener("popstate", route);

// ---- the jobs list -------------------------------------------------------------------------
function jobsPage() {
  let timer = null;
  let stopped = false;
  document.title = "Jobs · weir";
  async function tick() {
    try {
      const jobs = await getJSON("/api/v1/jobs");
      if (stopped) return;
      setConn("poll", "updated " + fmtClock(Date.now()));
      renderJobs(jobs);
    } catch (e) {
      if (stopped) return;
      setConn("down", "coordinator unreachable: " + e.message);
    }
    if (!stopped) timer = setTimeout(tick, 2000);
  }
  tick();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

function renderJobs(jobs) {
  jobs = [...jobs].sort((a, b) => b.id - a.id);
  const rows = jobs
    .map((j) => {
      const age = j.ended_ms ? "ran " + fmtDur(j.ended_ms - j.submitted_ms) : fmtDur(now() - j.submitted_ms);
      return `<tr data-testid="job-row" data-job-id="${j.id}" data-state="${esc(j.state)}">
        <td class="num">${j.id}</td>
        <td><a href="/jobs/${j.id}" data-link data-testid="job-link">${esc(j.name)}</a></td>
        <td>${badge(j.state)}${j.message ? ` <span class="muted">${esc(j.message)}</span>` : ""}</td>
        <td class="num">${j.parallelism ?? "–"}</td>
        <td class="num" title="submitted ${esc(new Date(j.submitted_ms).toISOString())}">${age}</td>
        <td class="num" data-testid="job-restarts">${j.restarts ?? 0}</td>
      </tr>`;
    })
    .join("");
  app.innerHTML = `
    <h1>Jobs</h1>
    <div class="card">
      ${
        jobs.length
          ? `<table data-testid="jobs"><thead><tr><th class="num">id</th><th>name</th><th>state</th>
             <th class="num">parallelism</th><th class="num">age</th><th class="num">restarts</th></tr></thead>
             <tbody>${rows}</tbody></table>`
          : `<p class="empty" data-testid="jobs-empty">No jobs yet: submit one with <code>weir submit JOB.so --coordinator HOST:PORT</code>.</p>`
      }
    </div>
    <div class="card"><h2>Workers</h2><div id="workers"></div></div>`;
  loadWorkers(document.getElementById("workers"));
}

// ---- workers -------------------------------------------------------------------------------
let workersCache = null;
async function loadWorkers(el) {
  try {
    workersCache = await getJSON("/api/v1/workers");
  } catch (_) {
    /* keep the last ones */
  }
  if (el && el.isConnected) el.innerHTML = workersHTML(workersCache);
}

function workersHTML(ws) {
  if (!ws) return `<p class="empty">–</p>`;
  if (!ws.length) return `<p class="empty" data-testid="workers-empty">No worker has registered.</p>`;
  return `<table data-testid="workers"><thead><tr><th>id</th><th>host</th><th>state</th>
    <th class="num">slots used</th><th class="num">last seen</th><th>cause</th></tr></thead><tbody>
    ${ws
      .map(
        (w) => `<tr data-testid="worker" data-worker="${esc(w.id)}" data-state="${esc(w.state)}">
      <td><b>${esc(w.id)}</b></td><td>${esc(w.host)}</td><td>${badge(w.state)}</td>
      <td class="num">${w.used ?? "–"} / ${w.slots == null ? "–" : w.slots > 1e6 ? "∞" : w.slots}</td>
      <td class="num">${w.last_seen_ms_ago == null ? "–" : fmtMs(w.last_seen_ms_ago) + " ago"}</td>
      <td>${esc(w.cause || "")}</td></tr>`
      )
      .join("")}</tbody></table>`;
}

// ---- a job's page --------------------------------------------------------------------------
function jobPage(id) {
  let stopped = false;
  let es = null;
  let pollTimer = null;
  let workerTimer = null;
  let lastJob = null;
  const samples = new Map(); // operator name -> [throughput samples]
  let lastSampleAt = 0;

  document.title = "Job " + id + " · weir";
  app.innerHTML = `<p class="muted">Loading job ${id}…</p>`;

  function onJob(job) {
    if (stopped) return;
    if (job.now_ms) skew = job.now_ms - Date.now();
    // One sample per update (the stream sends one a second).
    const t = job.now_ms || Date.now();
    if (t !== lastSampleAt) {
      lastSampleAt = t;
      for (const op of job.operators || []) {
        const h = samples.get(op.name) || [];
        h.push(opRate(op, job) ?? 0);
        if (h.length > SAMPLES) h.shift();
        samples.set(op.name, h);
      }
    }
    lastJob = job;
    if (isEnded(job.state)) setConn("poll", "job " + job.state);
    renderJob(job, samples, workersCache);
  }

  function poll() {
    getJSON("/api/v1/jobs/" + id)
      .then((job) => {
        setConn("poll", "polling · " + fmtClock(Date.now()));
        onJob(job);
      })
      .catch((e) => {
        if (stopped) return;
        if (e.status === 404) {
          app.innerHTML = `<h1>Job ${id}</h1><div class="card"><p class="empty" data-testid="no-job">
            The coordinator knows no job ${id}.</p> <a href="/" data-link>All jobs</a></div>`;
        }
        setConn("down", "job " + id + ": " + e.message);
      })
      .finally(() => {
        if (!stopped && !(lastJob && isEnded(lastJob.state))) pollTimer = setTimeout(poll, 1000);
      });
  }

  function stream() {
    if (!window.EventSource) return poll();
    es = new EventSource("/api/v1/jobs/" + id + "/events");
    es.addEventListener("job", (ev) => {
      setConn("live", "live · " + fmtClock(Date.now()));
      try {
        onJob(JSON.parse(ev.data));
      } catch (_) {
        /* a torn event: the next one will do */
      }
    });
    es.addEventListener("end", () => {
      es.close();
      es = null;
      setConn("poll", "job ended");
    });
    es.onerror = () => {
      if (!es) return;
      es.close(); // the stream failed (or is not there): poll instead
      es = null;
      if (!stopped && !(lastJob && isEnded(lastJob.state))) poll();
    };
  }

  function workersLoop() {
    getJSON("/api/v1/workers")
      .then((ws) => {
        workersCache = ws;
        const el = document.getElementById("workers");
        if (el) el.innerHTML = workersHTML(ws);
      })
      .catch(() => {})
      .finally(() => {
        if (!stopped) workerTimer = setTimeout(workersLoop, 2000);
      });
  }

  // First paint from one GET (the stream's first event may be a second away).
  getJSON("/api/v1/jobs/" + id)
    .then(onJob)
    .catch(() => {})
    .finally(() => {
      if (!stopped) stream();
    });
  workersLoop();

  return {
    stop() {
      stopped = true;
      if (es) es.close();
      clearTimeout(pollTimer);
      clearTimeout(workerTimer);
    },
  };
}

const isEnded = (s) => s === "succeeded" || s === "failed" || s === "cancelled";

// An operator's throughput: what a source emits, what the others take in.
function opRate(op, job) {
  const kind = planOp(job, op.name)?.kind;
  if (kind === "source") return op.records_out_per_s;
  if (kind) return op.records_in_per_s;
  return op.records_in ? op.records_in_per_s : op.records_out_per_s; // no plan: a source takes nothing in
}

function planOp(job, name) {
  return (job.plan?.operators || []).find((o) => o.name === name);
}

// The plan's operators and edges; without a plan, the operators in order,
// each feeding the next.
function graphOf(job) {
  if (job.plan && job.plan.operators && job.plan.operators.length) {
    return { ops: job.plan.operators, edges: job.plan.edges || [] };
  }
  const ops = (job.operators || []).map((o, i) => ({
    id: o.id ?? i,
    name: o.name,
    parallelism: o.parallelism,
    kind: i === 0 ? "source" : undefined,
  }));
  const edges = ops.slice(1).map((o, i) => ({ from: ops[i].id, to: o.id, partition: "" }));
  return { ops, edges };
}

// The bottleneck: an operator not itself backpressured whose input is.
function bottleneckOf(job) {
  const live = new Map((job.operators || []).map((o) => [o.id ?? o.name, o]));
  const byName = new Map((job.operators || []).map((o) => [o.name, o]));
  const g = graphOf(job);
  const fig = (op) => live.get(op.id) || byName.get(op.name);
  let best = null;
  for (const e of g.edges) {
    const from = g.ops.find((o) => o.id === e.from);
    const to = g.ops.find((o) => o.id === e.to);
    const f = from && fig(from);
    const t = to && fig(to);
    if (!f || !t || f.backpressure == null) continue;
    if (f.backpressure >= BP_HIGH && (t.backpressure ?? 0) < BP_HIGH) {
      if (!best || f.backpressure > best.bp) best = { op: to.name, upstream: from.name, bp: f.backpressure };
    }
  }
  return best;
}

function renderJob(job, hist, workers) {
  const ended = isEnded(job.state);
  const t = job.now_ms || now();
  const age = ended && job.ended_ms ? "ran " + fmtDur(job.ended_ms - job.submitted_ms) : "up " + fmtDur(t - job.submitted_ms);
  const bn = bottleneckOf(job);
  const ck = job.checkpoints || {};
  const hist_ = ck.history || [];
  const lastDone = [...hist_].reverse().find((c) => c.state === "completed");
  let ckHead;
  if (lastDone) {
    const at = lastDone.end_ms ?? lastDone.trigger_ms;
    ckHead = `<div class="big" data-testid="last-checkpoint" data-checkpoint-id="${lastDone.id}">#${lastDone.id}
      completed ${fmtDur(t - at)} ago</div>
      <div class="sub">at ${fmtClock(at)}, took ${fmtMs(lastDone.duration_ms)}${lastDone.bytes != null ? ", " + fmtBytes(lastDone.bytes) : ""}
      · ${fmtCount(ck.completed)} completed${ck.interval_ms ? " · every " + fmtMs(ck.interval_ms) : ""}</div>`;
  } else if (ck.completed) {
    ckHead = `<div class="big" data-testid="last-checkpoint" data-checkpoint-id="${ck.latest}">#${ck.latest} completed</div>
      <div class="sub">${fmtCount(ck.completed)} completed, the last took ${fmtMs(ck.last_duration_ms)}</div>`;
  } else {
    ckHead = `<div class="big muted" data-testid="last-checkpoint">none completed yet</div>
      <div class="sub">${ck.interval_ms || job.checkpoint_interval_ms ? "every " + fmtMs(ck.interval_ms || job.checkpoint_interval_ms) : "checkpoints are off for this job (submit with --checkpoint-interval-ms)"}</div>`;
  }
  const bnHead = bn
    ? `<div class="big" data-testid="bottleneck" data-op="${esc(bn.op)}">Bottleneck: ${esc(bn.op)}</div>
       <div class="sub"><b>${esc(bn.upstream)}</b> waits on it ${pct(bn.bp)} of the time</div>`
    : job.operators && job.operators.length
      ? `<div class="big" data-testid="bottleneck">No backpressure</div><div class="sub">every operator keeps up</div>`
      : `<div class="big muted" data-testid="bottleneck">–</div><div class="sub">no attempt is running</div>`;
  const restarts = job.restart_history || [];
  const lastRestart = restarts[restarts.length - 1];

  app.innerHTML = `
    <p><a href="/" data-link>← Jobs</a></p>
    <h1 data-testid="job-title"><span data-testid="job-name">${esc(job.name)}</span> <span class="muted">#${job.id}</span> ${badge(job.state)}</h1>
    <div class="facts">
      <span>parallelism <b>${job.parallelism ?? "–"}</b></span>
      <span>${age}</span>
      <span>submitted <b>${fmtClock(job.submitted_ms)}</b></span>
      ${job.attempt != null ? `<span>attempt <b>${job.attempt}</b></span>` : ""}
      <span>restarts <b data-testid="restart-count">${job.restarts ?? 0}</b></span>
    </div>
    ${job.message ? `<div class="message" data-testid="job-message">${esc(job.message)}</div>` : ""}
    <div class="headline">
      <div class="card"><h2>Throughput</h2>${bnHead}</div>
      <div class="card"><h2>Last checkpoint</h2>${ckHead}</div>
      <div class="card"><h2>Last restart</h2>${
        lastRestart
          ? `<div class="big">attempt ${lastRestart.attempt}, ${fmtDur(t - lastRestart.at_ms)} ago</div><div class="sub">${esc(lastRestart.cause)}</div>`
          : job.restarts
            ? `<div class="big">${job.restarts} restart${job.restarts > 1 ? "s" : ""}</div><div class="sub">their causes are not recorded</div>`
            : `<div class="big muted">none</div><div class="sub">the job has run without a restart</div>`
      }</div>
    </div>
    <div class="card"><h2>Dataflow</h2>${graphSVG(job, hist, bn)}
      <div class="legend"><span><i class="ok"></i>backpressure &lt; ${pct(BP_LOW)}</span>
        <span><i class="warn"></i>&lt; ${pct(BP_HIGH)}</span><span><i class="bad"></i>≥ ${pct(BP_HIGH)}: waiting for the next operator</span>
        <span>figures: records/s (a source's out, others' in) · watermark lag · sparkline: the last ${SAMPLES} samples</span></div>
    </div>
    <div class="card"><h2>Operators</h2>${operatorsHTML(job, hist)}</div>
    <div class="grid2">
      <div class="card"><h2>Checkpoints</h2>${checkpointsHTML(job)}</div>
      <div class="card"><h2>Workers</h2><div id="workers">${workersHTML(workers)}</div>
        ${subtasksHTML(job)}</div>
    </div>
    <div class="grid2">
      <div class="card"><h2>Errors</h2>${errorsHTML(job)}</div>
      <div class="card"><h2>Restarts</h2>${restartsHTML(job)}</div>
    </div>`;
}

// ---- the graph -----------------------------------------------------------------------------
const BOX_W = 200;
const BOX_H = 96;
const GAP_X = 70;
const GAP_Y = 28;

function graphSVG(job, hist, bn) {
  const g = graphOf(job);
  if (!g.ops.length) return `<p class="empty" data-testid="graph-empty">No plan to show.</p>`;
  const live = new Map((job.operators || []).map((o) => [o.name, o]));
  // Layers by topological depth: a node one deeper than its deepest input.
  const depth = new Map(g.ops.map((o) => [o.id, 0]));
  for (let pass = 0; pass < g.ops.length; pass++) {
    let moved = false;
    for (const e of g.edges) {
      const d = (depth.get(e.from) ?? 0) + 1;
      if (depth.has(e.to) && d > depth.get(e.to) && d < g.ops.length) {
        depth.set(e.to, d);
        moved = true;
      }
    }
    if (!moved) break;
  }
  const layers = [];
  for (const o of g.ops) (layers[depth.get(o.id)] ||= []).push(o);
  const rows = Math.max(...layers.map((l) => (l ? l.length : 0)));
  const W = layers.length * BOX_W + (layers.length - 1) * GAP_X + 20;
  const H = rows * BOX_H + (rows - 1) * GAP_Y + 20;
  const pos = new Map();
  layers.forEach((l, x) => {
    if (!l) return;
    const off = ((rows - l.length) * (BOX_H + GAP_Y)) / 2;
    l.forEach((o, y) => pos.set(o.id, { x: 10 + x * (BOX_W + GAP_X), y: 10 + off + y * (BOX_H + GAP_Y) }));
  });
  const edges = g.edges
    .map((e) => {
      const a = pos.get(e.from);
      const b = pos.get(e.to);
      if (!a || !b) return "";
      const x1 = a.x + BOX_W;
      const y1 = a.y + BOX_H / 2;
      const x2 = b.x - 4;
      const y2 = b.y + BOX_H / 2;
      const mx = (x1 + x2) / 2;
      return `<g class="edge" data-testid="edge" data-from="${e.from}" data-to="${e.to}">
        <path d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}" marker-end="url(#arrow)"/>
        ${e.partition ? `<text x="${mx}" y="${(y1 + y2) / 2 - 6}" text-anchor="middle">${esc(e.partition)}</text>` : ""}</g>`;
    })
    .join("");
  const boxes = g.ops
    .map((o) => {
      const p = pos.get(o.id);
      const f = live.get(o.name);
      const bp = f?.backpressure;
      const rate = f ? opRate(f, job) : null;
      const cls = f ? bpClass(bp) : "idle";
      const lag = f?.watermark_lag_ms;
      const h = hist.get(o.name) || [];
      const isBn = bn && bn.op === o.name;
      return `<g class="op ${cls}${isBn ? " bottleneck" : ""}" transform="translate(${p.x},${p.y})"
          data-testid="op" data-op="${esc(o.name)}" data-kind="${esc(o.kind || "")}"
          data-backpressured="${bp != null && bp >= BP_HIGH}" data-backpressure="${bp ?? ""}"
          data-rate="${rate ?? ""}">
        <title>${esc(o.name)}: ${o.parallelism ?? "?"} subtasks, backpressure ${pct(bp)}, records in ${fmtCount(f?.records_in)}, out ${fmtCount(f?.records_out)}</title>
        <rect class="box" width="${BOX_W}" height="${BOX_H}" rx="8"/>
        <text class="name" x="10" y="19">${esc(o.name)}</text>
        <text class="small" x="${BOX_W - 10}" y="19" text-anchor="end">${esc(o.kind || "")} ×${o.parallelism ?? "?"}</text>
        <text x="10" y="39" data-testid="op-rate">${f ? fmtRate(rate) + " rec/s" : "not running"}</text>
        <text x="${BOX_W - 10}" y="39" text-anchor="end" class="tag" data-testid="op-bp">${f && bp != null ? "bp " + pct(bp) : ""}</text>
        <text class="small" x="10" y="56" data-testid="op-lag">${lag != null ? "watermark lag " + fmtMs(lag) : f ? "no watermark" : ""}</text>
        ${isBn ? `<text class="tag bn" x="${BOX_W - 10}" y="56" text-anchor="end" data-testid="op-bottleneck">BOTTLENECK</text>` : ""}
        ${sparkline(h, 10, 62, BOX_W - 20, 26, "spark")}
      </g>`;
    })
    .join("");
  return `<div class="graph-wrap"><svg class="graph" data-testid="graph" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
      <path d="M0,0 L10,5 L0,10 z" fill="#7d8699"/></marker></defs>${edges}${boxes}</svg></div>`;
}

function sparkline(h, x, y, w, hgt, cls) {
  if (!h || h.length < 2) return "";
  const max = Math.max(...h, 1);
  const step = w / (SAMPLES - 1);
  const x0 = x + w - (h.length - 1) * step;
  const pts = h.map((v, i) => `${(x0 + i * step).toFixed(1)},${(y + hgt - (v / max) * hgt).toFixed(1)}`).join(" ");
  return `<polyline class="${cls}" data-testid="sparkline" points="${pts}"/>`;
}

function operatorsHTML(job, hist) {
  const ops = job.operators || [];
  if (!ops.length) return `<p class="empty">No attempt is running: no live figures.</p>`;
  return `<table data-testid="operators"><thead><tr><th>operator</th><th class="num">in/s</th><th class="num">out/s</th>
    <th class="num">records in</th><th class="num">records out</th><th class="num">backpressure</th>
    <th class="num">watermark lag</th><th>last ${SAMPLES} s</th></tr></thead><tbody>
    ${ops
      .map((o) => {
        const subs = (o.subtasks || [])
          .map(
            (s) => `<tr class="sub" data-testid="subtask" data-op="${esc(o.name)}" data-index="${s.index}">
            <td class="muted">&nbsp;&nbsp;#${s.index} on ${esc(s.worker)}</td>
            <td class="num muted">${fmtRate(s.records_in_per_s)}</td><td class="num muted">${fmtRate(s.records_out_per_s)}</td>
            <td class="num muted">${fmtCount(s.records_in)}</td><td class="num muted">${fmtCount(s.records_out)}</td>
            <td class="num"><span class="bp ${bpClass(s.backpressure)}">${pct(s.backpressure)}</span></td>
            <td class="num muted">${fmtMs(s.watermark_lag_ms)}</td><td></td></tr>`
          )
          .join("");
        return `<tr data-testid="operator-row" data-op="${esc(o.name)}"><td><b>${esc(o.name)}</b></td>
          <td class="num">${fmtRate(o.records_in_per_s)}</td><td class="num">${fmtRate(o.records_out_per_s)}</td>
          <td class="num">${fmtCount(o.records_in)}</td><td class="num">${fmtCount(o.records_out)}</td>
          <td class="num"><span class="bp ${bpClass(o.backpressure)}">${pct(o.backpressure)}</span></td>
          <td class="num">${fmtMs(o.watermark_lag_ms)}</td>
          <td><svg class="spark-cell" width="140" height="22">${sparkline(hist.get(o.name), 1, 1, 138, 20, "")}</svg></td></tr>${subs}`;
      })
      .join("")}</tbody></table>`;
}

// ---- checkpoints ---------------------------------------------------------------------------
function checkpointsHTML(job) {
  const ck = job.checkpoints || {};
  const h = ck.history || [];
  const facts = `<div class="facts"><span>completed <b data-testid="checkpoints-completed">${fmtCount(ck.completed ?? 0)}</b></span>
    ${ck.restored ? `<span>restored from <b>#${ck.restored}</b></span>` : ""}
    ${ck.interval_ms ? `<span>every <b>${fmtMs(ck.interval_ms)}</b></span>` : ""}
    ${ck.dir ? `<span>in <b>${esc(ck.dir)}</b></span>` : ""}</div>`;
  if (!h.length) return facts + `<p class="empty" data-testid="checkpoints-empty">No checkpoint has been taken yet.</p>`;
  const rows = [...h]
    .reverse()
    .map(
      (c) => `<tr data-testid="checkpoint-row" data-checkpoint-id="${c.id}" data-state="${esc(c.state)}">
      <td class="num">${c.id}</td><td>${badge(c.state)}</td><td class="num">${c.attempt ?? ""}</td>
      <td class="num" title="${esc(new Date(c.trigger_ms).toISOString())}">${fmtClock(c.trigger_ms)}</td>
      <td class="num">${c.state === "completed" || c.duration_ms ? fmtMs(c.duration_ms) : "–"}</td><td class="num">${c.bytes != null ? fmtBytes(c.bytes) : "–"}</td>
      <td>${esc(c.reason || "")}</td></tr>`
    )
    .join("");
  return `${facts}${durationChart(h)}
    <div class="scroll"><table data-testid="checkpoints"><thead><tr><th class="num">id</th><th>state</th><th class="num">attempt</th>
    <th class="num">triggered</th><th class="num">duration</th><th class="num">size</th><th>reason</th></tr></thead>
    <tbody>${rows}</tbody></table></div>`;
}

function durationChart(h) {
  const W = 520;
  const H = 70;
  const last = h.slice(-64);
  const max = Math.max(1, ...last.map((c) => c.duration_ms || 0));
  const bw = W / 64;
  const bars = last
    .map((c, i) => {
      const v = c.duration_ms || 0;
      const bh = c.state === "aborted" && !v ? H - 14 : Math.max(1, (v / max) * (H - 14));
      return `<rect class="bar ${esc(c.state)}" x="${(i * bw + 1).toFixed(1)}" y="${(H - bh).toFixed(1)}"
        width="${(bw - 2).toFixed(1)}" height="${bh.toFixed(1)}"><title>#${c.id} ${esc(c.state)} ${fmtMs(c.duration_ms)}</title></rect>`;
    })
    .join("");
  return `<svg class="chart" data-testid="checkpoint-chart" width="100%" height="${H}" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">
    <line x1="0" y1="${H - 0.5}" x2="${W}" y2="${H - 0.5}"/>${bars}
    <text x="2" y="10">duration, max ${fmtMs(max)}</text></svg>`;
}

// ---- subtasks, errors, restarts ------------------------------------------------------------
function subtasksHTML(job) {
  const s = job.subtasks || [];
  if (!s.length) return "";
  return `<details><summary>${s.length} subtasks: where they run</summary><table data-testid="subtasks">
    <thead><tr><th class="num">chain</th><th class="num">index</th><th>operators</th><th>worker</th></tr></thead><tbody>
    ${s.map((x) => `<tr><td class="num">${x.chain}</td><td class="num">${x.index}</td><td>${esc((x.operators || []).join(" → "))}</td><td>${esc(x.worker)}</td></tr>`).join("")}
    </tbody></table></details>`;
}

function errorsHTML(job) {
  const e = job.errors || [];
  if (!e.length) return `<ul class="events" data-testid="errors"></ul><p class="empty">No errors.</p>`;
  return `<div class="scroll"><ul class="events" data-testid="errors">${[...e]
    .reverse()
    .map(
      (x) => `<li data-testid="error" data-op="${esc(x.operator || "")}">
      <span class="when">${fmtClock(x.at_ms)}</span><span class="who">${esc(x.operator || "job")}${x.subtask != null ? " #" + x.subtask : ""}${x.worker ? " on " + esc(x.worker) : ""}</span>
      <span class="muted">attempt ${x.attempt ?? "?"}</span><div>${esc(x.message)}</div></li>`
    )
    .join("")}</ul></div>`;
}

function restartsHTML(job) {
  const r = job.restart_history || [];
  if (!r.length) return `<ul class="events" data-testid="restarts"></ul><p class="empty">No restarts.</p>`;
  return `<div class="scroll"><ul class="events" data-testid="restarts">${[...r]
    .reverse()
    .map(
      (x) => `<li data-testid="restart" data-attempt="${x.attempt}">
      <span class="when">${fmtClock(x.at_ms)}</span><span class="who">attempt ${x.attempt}</span>
      <div data-testid="restart-cause">${esc(x.cause)}</div></li>`
    )
    .join("")}</ul></div>`;
}

// ---- start ---------------------------------------------------------------------------------
// A token given in the address (?access_token=T) has become the server's
// cookie by now: take it out of the address bar and the history.
if (new URLSearchParams(location.search).has("access_token")) {
  const u = new URL(location.href);
  u.searchParams.delete("access_token");
  history.replaceState(null, "", u.pathname + u.search + u.hash);
}
route();
