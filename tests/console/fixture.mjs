// SPDX-License-Identifier: Apache-2.0
// fixture.mjs - a development aid for the web console (docs/console.md,
// "Working on the console"): serves web/ from the source tree beside a
// canned coordinator API, so the page can be worked on with a browser and
// no cluster.
//
//     node tests/console/fixture.mjs [PORT]      (default 8090; 0: a free one)
//
// then open http://127.0.0.1:PORT/jobs/1. Job 1 ("console_job") runs with
// a slow operator: "numbers" is backpressured, rates climb for the first
// seconds, a checkpoint completes every 2 s (every fifth is aborted), and
// 25 s in worker w2 is lost and the job restarts. Job 2 has failed. The
// events stream (/api/v1/jobs/1/events) sends a "job" event a second;
// FIXTURE_NO_SSE=1 answers it 404 instead, to try the polling fallback.
// No test runs this: the real-browser test (tests/integration/console.sh)
// drives a real coordinator.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const web = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../web");
const t0 = Date.now();
const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8" };

function job1() {
  const now = Date.now();
  const up = (now - t0) / 1000;
  const lost = up > 25;
  const attempt = lost ? 1 : 0;
  const ramp = Math.min(1, up / 8);
  const rate = 1000 * ramp + 30 * Math.sin(up);
  const sub = (i, w, o) => ({ index: i, worker: w, ...o });
  const op = (id, name, inR, outR, bp, lag) => ({
    id, name, records_in: Math.round(inR * up), records_out: Math.round(outR * up),
    records_in_per_s: inR, records_out_per_s: outR, backpressure: bp,
    watermark: lag == null ? null : now - lag, watermark_lag_ms: lag,
    subtasks: [0, 1].map((i) => sub(i, i ? (lost ? "w1" : "w2") : "w1", {
      records_in: Math.round((inR * up) / 2), records_out: Math.round((outR * up) / 2),
      records_in_per_s: inR / 2, records_out_per_s: outR / 2, backpressure: bp - 0.02 * i,
      watermark: lag == null ? null : now - lag, watermark_lag_ms: lag })),
  });
  const history = [];
  for (let id = 1; id <= Math.floor(up / 2); id++) {
    const at = t0 + id * 2000;
    const aborted = id % 5 === 0;
    history.push(aborted
      ? { id, attempt: at > t0 + 25000 ? 1 : 0, state: "aborted", trigger_ms: at, end_ms: at + 900, reason: "timed out after 900 ms" }
      : { id, attempt: at > t0 + 25000 ? 1 : 0, state: "completed", trigger_ms: at, end_ms: at + 12 + (id % 7) * 3,
          duration_ms: 12 + (id % 7) * 3, bytes: 4096 + id * 64 });
  }
  const done = history.filter((c) => c.state === "completed");
  return {
    id: 1, name: "console_job", state: "running", parallelism: 2, submitted_ms: t0, now_ms: now,
    attempt, restarts: attempt,
    plan: {
      operators: [
        { id: 0, name: "numbers", kind: "source", parallelism: 2, chain: 0 },
        { id: 1, name: "slow", kind: "operator", parallelism: 2, chain: 1 },
        { id: 2, name: "sink", kind: "sink", parallelism: 2, chain: 1 },
      ],
      edges: [{ from: 0, to: 1, partition: "hash" }, { from: 1, to: 2, partition: "forward" }],
    },
    operators: [
      op(0, "numbers", 0, rate, 0.93 * ramp, 60),
      op(1, "slow", rate, rate, 0.04, 1200 + 100 * Math.sin(up)),
      op(2, "sink", rate, 0, 0, 1250),
    ],
    checkpoints: {
      completed: done.length, latest: done.length ? done[done.length - 1].id : 0, restored: lost && done.length ? done[done.length - 1].id : 0,
      last_duration_ms: done.length ? done[done.length - 1].duration_ms : 0, interval_ms: 2000, dir: "/var/lib/weir/ckpt",
      history: history.slice(-64),
    },
    restart_history: lost ? [{ attempt: 1, at_ms: t0 + 25000, cause: "worker w2 lost: no heartbeat for 2000 ms" }] : [],
    errors: lost ? [{ at_ms: t0 + 25000, attempt: 0, operator: "slow", subtask: 1, worker: "w2", message: "worker w2 lost: no heartbeat for 2000 ms" }] : [],
    subtasks: [
      { chain: 0, index: 0, operators: ["numbers"], worker: "w1" },
      { chain: 0, index: 1, operators: ["numbers"], worker: lost ? "w1" : "w2" },
      { chain: 1, index: 0, operators: ["slow", "sink"], worker: "w1" },
      { chain: 1, index: 1, operators: ["slow", "sink"], worker: lost ? "w1" : "w2" },
    ],
  };
}

const job2 = () => ({ id: 2, name: "wordcount", state: "failed", parallelism: 3, submitted_ms: t0 - 3600e3,
  ended_ms: t0 - 3500e3, message: "operator split #1: bad input line 17", restarts: 2, now_ms: Date.now(),
  attempt: 2, plan: { operators: [{ id: 0, name: "lines", kind: "source", parallelism: 1, chain: 0 }], edges: [] },
  checkpoints: { completed: 0, latest: 0, restored: 0, last_duration_ms: 0, history: [] }, restart_history: [], errors: [] });

const summary = (j) => {
  const { id, name, state, parallelism, submitted_ms, ended_ms, message, restarts } = j;
  return { id, name, state, parallelism, submitted_ms, ended_ms, message, restarts };
};

function workers() {
  const lost = Date.now() - t0 > 25000;
  return [
    { id: "w1", host: "127.0.0.1", slots: 4, used: lost ? 4 : 2, state: "alive", last_seen_ms_ago: 40 },
    lost ? { id: "w2", host: "127.0.0.1", slots: 4, used: 0, state: "lost", last_seen_ms_ago: Date.now() - t0 - 23000, cause: "no heartbeat for 2000 ms" }
      : { id: "w2", host: "127.0.0.1", slots: 4, used: 2, state: "alive", last_seen_ms_ago: 25 },
  ];
}

const json = (res, code, v) => {
  res.writeHead(code, { "Content-Type": "application/json" });
  res.end(JSON.stringify(v));
};

const server = http.createServer((req, res) => {
  const u = new URL(req.url, "http://x");
  const p = u.pathname;
  if (p === "/api/v1/jobs") return json(res, 200, [summary(job1()), summary(job2())]);
  if (p === "/api/v1/jobs/1") return json(res, 200, job1());
  if (p === "/api/v1/jobs/2") return json(res, 200, job2());
  if (p === "/api/v1/workers") return json(res, 200, workers());
  if (p === "/api/v1/jobs/1/events" && !process.env.FIXTURE_NO_SSE) {
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    const send = () => res.write("event: job\ndata: " + JSON.stringify(job1()) + "\n\n");
    send();
    const t = setInterval(send, 1000);
    req.on("close", () => clearInterval(t));
    return;
  }
  if (p.startsWith("/api/") || p.startsWith("/metrics")) return json(res, 404, { error: "no such API route", status: 404 });
  let f = p === "/" ? "index.html" : p.slice(1);
  if (!/^[\w.-]+$/.test(f) || !fs.existsSync(path.join(web, f))) {
    if (/\.[^/]*$/.test(p)) return json(res, 404, { error: "not found", status: 404 });
    f = "index.html";
  }
  res.writeHead(200, { "Content-Type": types[path.extname(f)] || "application/octet-stream", "Cache-Control": "no-cache" });
  res.end(fs.readFileSync(path.join(web, f)));
});
server.listen(Number(process.argv[2] ?? 8090), "127.0.0.1", () => {
  console.log("fixture: http on 127.0.0.1:" + server.address().port);
});
