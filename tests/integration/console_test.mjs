// SPDX-License-Identifier: Apache-2.0
// console_test.mjs - the web console in a real browser (Debian's chromium,
// driven by playwright-core from tests/npm), run by console.sh against a
// coordinator and two workers running examples/console_job.c:
//
//     node console_test.mjs BASE_URL JOB_ID KILL_PID KILL_WORKER SCREENSHOT [QUERY]
//
// It opens BASE_URL/jobs/JOB_ID (with QUERY, "?access_token=T" when the
// server wants a token: it answers with its cookie) and checks what the
// page shows: the graph's three operators, figures live from the job's
// event stream, "numbers" (upstream of the slow operator) marked
// backpressured and "slow" named the bottleneck, records/s rising from
// nothing, a completed checkpoint in the history; it saves a screenshot
// of the page; then it SIGKILLs KILL_PID (worker KILL_WORKER) and waits
// for the restart, with its cause naming that worker, in the page's
// restart list and the jobs list; last it cancels the job and waits for
// its page to say so. Every wait is a poll with a generous deadline,
// never a fixed sleep. Exit 0 passed, 1 failed, 77 chromium could not
// start (console.sh skips).
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../npm/package.json"));
const { chromium } = require("playwright-core");

const [base, jobId, killPid, killWorker, shot, query = ""] = process.argv.slice(2);
if (!shot) {
  console.error("usage: console_test.mjs BASE_URL JOB_ID KILL_PID KILL_WORKER SCREENSHOT");
  process.exit(2);
}
const exe = process.env.CHROMIUM || "/usr/bin/chromium";
const step = (msg) => console.log("console_test: " + msg);

let browser;
try {
  const args = ["--disable-gpu", "--disable-dev-shm-usage"];
  if (process.getuid && process.getuid() === 0) args.push("--no-sandbox");
  browser = await chromium.launch({ executablePath: exe, args, timeout: 60000 });
} catch (e) {
  console.log(`console_test: SKIP: chromium (${exe}) cannot start: ${String(e.message).split("\n")[0]}`);
  process.exit(77);
}

const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
const problems = [];
page.on("pageerror", (e) => problems.push("page error: " + e.message));
page.on("console", (m) => {
  if (m.type() === "error" && /Content Security Policy/i.test(m.text())) problems.push(m.text());
});

// poll(what, seconds, fn): fn() until it returns a truthy value.
async function poll(what, seconds, fn) {
  const deadline = Date.now() + seconds * 1000;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${seconds} s (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
const attr = (sel, name) => page.$eval(sel, (el, n) => el.getAttribute(n), name).catch(() => null);

let failed = false;
try {
  await page.goto(`${base}/jobs/${jobId}${query}`, { waitUntil: "load", timeout: 60000 });

  // The graph: its three operators and the edges between them.
  await poll("the graph's operators", 60, async () => {
    const ops = await page.$$eval('[data-testid="op"]', (els) => els.map((e) => e.getAttribute("data-op")));
    return ["numbers", "slow", "sink"].every((n) => ops.includes(n)) && ops;
  });
  await poll("an edge into slow", 10, async () => (await page.$$('[data-testid="edge"]')).length >= 2);
  step("the graph shows numbers, slow and sink");
  // Fed by the job's event stream, not by polling.
  await poll("the page live on the event stream", 30, async () =>
    /\blive\b/.test(await attr('[data-testid="connection"]', "class")));
  step("the page follows the job's event stream");

  // records/s rising: nothing at first, then a positive rate through slow.
  const first = Number((await attr('[data-op="slow"][data-testid="op"]', "data-rate")) || 0);
  const rate = await poll("slow's records/s rising", 90, async () => {
    const r = Number((await attr('[data-op="slow"][data-testid="op"]', "data-rate")) || 0);
    return r > first && r > 0 && r;
  });
  const text = await page.$eval('[data-op="slow"] [data-testid="op-rate"]', (e) => e.textContent);
  if (!/rec\/s/.test(text)) throw new Error(`slow's box shows no rate: "${text}"`);
  step(`slow's records/s rose from ${first} to ${rate} ("${text}")`);

  // The operator upstream of slow waits for it.
  const bp = await poll("numbers marked backpressured", 90, async () =>
    (await attr('[data-op="numbers"][data-testid="op"]', "data-backpressured")) === "true" &&
    attr('[data-op="numbers"][data-testid="op"]', "data-backpressure"));
  const slowBp = await attr('[data-op="slow"][data-testid="op"]', "data-backpressured");
  if (slowBp !== "false") throw new Error(`slow itself is marked backpressured (${slowBp})`);
  step(`numbers is backpressured (${bp}), slow is not`);
  const bn = await poll("the bottleneck named", 30, () => attr('[data-testid="bottleneck"]', "data-op"));
  if (bn !== "slow") throw new Error(`the bottleneck shown is "${bn}", not slow`);

  // A completed checkpoint in the history, and the headline saying so.
  const ck = await poll("a completed checkpoint in the history", 90, () =>
    attr('[data-testid="checkpoint-row"][data-state="completed"]', "data-checkpoint-id"));
  await poll("the last checkpoint's headline", 10, async () =>
    /completed/.test(await page.$eval('[data-testid="last-checkpoint"]', (e) => e.textContent)));
  step(`checkpoint ${ck} completed`);

  // A few more samples for the sparklines (CONSOLE_SHOT_SAMPLES, default
  // 5: the docs' picture takes more), then the picture.
  const want = Number(process.env.CONSOLE_SHOT_SAMPLES || 5);
  await poll(`sparklines with ${want} samples`, want * 3 + 30, async () =>
    page.$eval('[data-op="numbers"] [data-testid="sparkline"]', (e, n) => e.getAttribute("points").split(" ").length >= n, want));
  await page.screenshot({ path: shot, fullPage: true });
  step("screenshot " + shot);

  // A worker lost: the restart and its cause appear.
  process.kill(Number(killPid), "SIGKILL");
  step(`SIGKILLed worker ${killWorker} (pid ${killPid})`);
  const cause = await poll("a restart with its cause", 120, async () => {
    const c = await page.$$eval('[data-testid="restart"] [data-testid="restart-cause"]', (els) =>
      els.map((e) => e.textContent));
    return c.find((t) => t.includes(killWorker));
  });
  await poll("the restart count", 10, async () =>
    Number(await page.$eval('[data-testid="restart-count"]', (e) => e.textContent)) >= 1);
  // The worker list no longer shows it alive (lost, or gone from the list).
  await poll(`worker ${killWorker} no longer alive`, 30, async () =>
    (await page.$$(`[data-testid="worker"][data-worker="${killWorker}"][data-state="alive"]`)).length === 0);
  step(`the restart shows its cause: "${cause}"`);

  // The jobs list links the job, with its restart.
  await page.click('a[href="/"]');
  await poll("the jobs list", 30, async () =>
    Number(await page.$eval(`[data-testid="job-row"][data-job-id="${jobId}"] [data-testid="job-restarts"]`,
      (e) => e.textContent)) >= 1);
  step("the jobs list shows the job and its restart");

  // Cancelled (DELETE, with the page's cookie): its page says so.
  await page.click(`a[href="/jobs/${jobId}"]`);
  await poll("the job's page again", 30, () => page.$('[data-testid="graph"]'));
  const status = await page.evaluate(async (u) => (await fetch(u, { method: "DELETE" })).status,
    `/api/v1/jobs/${jobId}`);
  if (status >= 300) throw new Error(`DELETE /api/v1/jobs/${jobId}: ${status}`);
  await poll("the job shown cancelled", 60, async () =>
    (await page.$eval('[data-testid="job-title"] [data-testid="state"]', (e) => e.textContent)) === "cancelled");
  step("the cancelled job's page says so");
  if (problems.length) throw new Error(problems.join("; "));
} catch (e) {
  failed = true;
  console.error("console_test: FAIL: " + e.message);
  await page.screenshot({ path: shot.replace(/\.png$/, "") + "-failed.png", fullPage: true }).catch(() => {});
  console.error("console_test: the page as it was: " + shot.replace(/\.png$/, "") + "-failed.png");
}
await browser.close();
process.exit(failed ? 1 : 0);
