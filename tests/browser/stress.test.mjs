// Responsiveness test of the web view with 250 live sessions, against a fake API (no troupe
// needed): a small Node HTTP server serves server/static/index.html and implements the API
// contract with synthetic data, streaming ~13,000 events/s over SSE for a few seconds.
//
// Usage: node tests/browser/stress.test.mjs
// Env:   ARTIFACTS_DIR (default target/artifacts), CHROMIUM (default /usr/bin/chromium),
//        STRESS_SECONDS (default 5), MAX_FRAME_GAP_MS (default 5000), MIN_FPS (default 0: only
//        reported), COLOR_SCHEME (light|dark).
//
// Checks: the selected session's text equals the concatenation of every delta sent (no loss,
// no duplication), its DOM node is the same node from start to end (updated in place, not
// re-rendered), the session list renders at most 200 items (+ an overflow note), the actor tree
// at most 600 rows, and the page never hung (no gap between animation frames over
// MAX_FRAME_GAP_MS). Frame rate and gaps are measured and printed, with a warning below the
// 5 fps target, but they do not fail the run unless MIN_FPS is set: on a shared 2-core machine
// they measure the machine's load as much as the page (the house rule: speed is measured, not
// asserted with timings in tests). Screenshot $ARTIFACTS_DIR/webview-stress.png.

import { createServer } from "node:http";
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const html = readFileSync(join(here, "..", "..", "server", "static", "index.html"));
const artifacts = resolve(process.env.ARTIFACTS_DIR || "target/artifacts");
mkdirSync(artifacts, { recursive: true });
const SECONDS = Number(process.env.STRESS_SECONDS || 5);
const MAX_GAP = Number(process.env.MAX_FRAME_GAP_MS || 5000);
const MIN_FPS = Number(process.env.MIN_FPS || 0);
const TARGET_FPS = 5;
const N = 250;
const TICK_MS = 20;

const pad = (i) => String(i).padStart(3, "0");
const now = Date.now();
const sessions = Array.from({ length: N }, (_, i) => ({
  id: "ses_" + pad(i),
  title: "stress session " + i,
  directory: "/tmp/stress",
  agent: "build",
  time: { created: now - i * 1000, updated: now - i * 1000 },
  cost: 0,
  tokens: { input: 0, output: 0, reasoning: 0, cache: { read: 0, write: 0 } },
}));
function actors() {
  return {
    kind: "runtime", id: "runtime", status: "busy", started: now, steps: 0, tokens: 0, cost: 0,
    restarts: 0, failures: 0, queued: 0,
    children: sessions.map((s, i) => ({
      kind: "session", id: s.id, sessionID: s.id, status: "busy", agent: "build", started: now,
      steps: 1, tokens: 10, cost: 0, restarts: 0, failures: 0, queued: 0,
      children: [{
        kind: "processor", id: "msg_" + pad(i), sessionID: s.id, status: "busy", started: now,
        steps: 1, tokens: 10, cost: 0, restarts: 0, failures: 0, queued: 0,
        children: [{ kind: "tool_call", id: "call_" + pad(i), sessionID: s.id, status: "busy", tool: "bash",
          started: now, steps: 0, tokens: 0, cost: 0, restarts: 0, failures: 0, queued: 0, children: [] }],
      }],
    })),
  };
}

let sent = 0;
let expectedText = ""; // of ses_000's part prt_000
let streamDone = false;
let streamStarted = false;
// When the stream stops (ms since epoch): set once the page shows the streamed part, so the
// page is judged over STRESS_SECONDS of streaming however long a loaded machine took to
// load it. A page that never gets there stops the stream after MAX_STREAM_MS.
let stopAt = Infinity;
const MAX_STREAM_MS = 60000;
const server = createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  const json = (v) => { res.writeHead(200, { "content-type": "application/json" }); res.end(JSON.stringify(v)); };
  if (url.pathname === "/") { res.writeHead(200, { "content-type": "text/html" }); return res.end(html); }
  if (url.pathname === "/session") return json(sessions);
  if (url.pathname === "/permission") return json([]);
  if (url.pathname === "/question") return json([]);
  if (url.pathname === "/actors") return json(actors());
  const m = url.pathname.match(/^\/session\/([^/]+)\/message$/);
  if (m) {
    // Like the real store: the text so far (ses_000 only), so the page must not apply the
    // deltas it queued while loading twice.
    if (m[1] !== "ses_000" || !streamStarted) return json([]);
    const text = expectedText;
    return setTimeout(() => json([{ info: { id: "msg_000", sessionID: "ses_000", role: "assistant", time: { created: now } },
      parts: [{ id: "prt_000", sessionID: "ses_000", messageID: "msg_000", type: "text", text }] }]), 150);
  }
  if (url.pathname === "/event") {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const send = (type, properties) => { res.write(`data: ${JSON.stringify({ type, properties })}\n\n`); sent++; };
    send("server.connected", {});
    streamStarted = true;
    // Each session: a message, a text part, then a delta per tick; a status and session update
    // every 10 ticks; a tool part update every 25 ticks.
    for (const s of sessions) {
      const mid = "msg_" + s.id.slice(4);
      send("session.status", { sessionID: s.id, status: { type: "busy" } });
      send("message.updated", { info: { id: mid, sessionID: s.id, role: "assistant", time: { created: now } } });
      send("message.part.updated", { part: { id: "prt_" + s.id.slice(4), sessionID: s.id, messageID: mid, type: "text", text: "" } });
    }
    let tick = 0;
    const started = Date.now();
    const timer = setInterval(() => {
      tick++;
      for (let i = 0; i < N; i++) {
        const s = sessions[i];
        const sfx = s.id.slice(4);
        const delta = `[${sfx}:${tick}] `;
        if (i === 0) expectedText += delta;
        send("message.part.delta", { sessionID: s.id, messageID: "msg_" + sfx, partID: "prt_" + sfx, field: "text", delta });
        if (tick % 10 === i % 10) {
          s.time.updated = Date.now();
          s.tokens.output += 5;
          s.cost += 0.0001;
          send("session.updated", { info: s });
        }
        if (tick % 25 === i % 25) {
          send("message.part.updated", { part: { id: "tool_" + sfx + "_" + tick, sessionID: s.id, messageID: "msg_" + sfx,
            type: "tool", tool: "bash", callID: "call_" + sfx, state: { status: "completed", input: { command: "echo " + tick }, output: String(tick) } } });
        }
      }
      if (Date.now() > stopAt || Date.now() - started > MAX_STREAM_MS) {
        clearInterval(timer);
        streamDone = true;
      }
    }, TICK_MS);
    req.on("close", () => clearInterval(timer));
    return;
  }
  res.writeHead(404); res.end("not found");
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const base = `http://127.0.0.1:${server.address().port}`;

const userDataDir = mkdtempSync(join(tmpdir(), "troupe-chromium-"));
let context;
let code = 0;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1440, height: 900 },
    colorScheme: process.env.COLOR_SCHEME === "dark" ? "dark" : "light",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = context.pages()[0] || (await context.newPage());
  // Calibration: how many frames does a blank page paint in one second on this machine right
  // now? On a loaded CI machine Chromium itself may paint far below 60 fps; the frame floor
  // below is scaled by this, so the test judges the web view and not the machine's load.
  await page.goto("about:blank");
  const baselineFps = await page.evaluate(() => new Promise((done) => {
    let n = 0;
    const t0 = performance.now();
    const loop = (t) => { n++; if (t - t0 >= 1000) done(n * 1000 / (t - t0)); else requestAnimationFrame(loop); };
    requestAnimationFrame(loop);
  }));
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  // Record animation-frame gaps from the first script onwards.
  await page.addInitScript(() => {
    window.__gaps = [];
    window.__last = performance.now();
    const loop = (t) => { window.__gaps.push(t - window.__last); window.__last = t; requestAnimationFrame(loop); };
    requestAnimationFrame(loop);
  });
  await page.goto(base + "/#ses_000", { waitUntil: "domcontentloaded" });
  await page.locator('[data-part-id="prt_000"]').waitFor({ timeout: 15000 });
  // The measured window starts here (not at navigation): a loaded machine may take a while
  // to show the part, and frames are judged over the time actually measured.
  await page.evaluate(() => {
    window.__part = document.querySelector('[data-part-id="prt_000"]');
    window.__gaps = [];
    window.__t0 = performance.now();
  });
  stopAt = Date.now() + SECONDS * 1000;
  const deadline = Date.now() + SECONDS * 1000 + 15000;
  while (!streamDone && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (!streamDone) throw new Error("the fake stream did not finish");
  // Let the last events arrive and render.
  await page.waitForFunction((n) => {
    const el = document.querySelector('[data-part-id="prt_000"] .txt');
    return el && el.textContent.length >= n;
  }, expectedText.length, { timeout: 10000 }).catch(() => {});
  await page.waitForTimeout(300);
  const r = await page.evaluate(() => {
    // A main thread still blocked at the end has not painted since its last frame: that
    // wait counts as a gap too.
    const now = performance.now();
    const gaps = window.__gaps.concat([now - window.__last]).sort((a, b) => a - b);
    const el = document.querySelector('[data-part-id="prt_000"]');
    return {
      text: el ? el.querySelector(".txt").textContent : null,
      sameNode: el === window.__part,
      items: document.querySelectorAll("[data-testid=session-item]").length,
      more: document.getElementById("sessions-more").textContent,
      treeRows: document.querySelectorAll("[data-testid=actor-node]").length,
      frames: window.__gaps.length,
      windowMs: now - window.__t0,
      p50: gaps[Math.floor(gaps.length * 0.5)] || 0,
      p95: gaps[Math.floor(gaps.length * 0.95)] || 0,
      max: gaps[gaps.length - 1] || 0,
    };
  });
  console.log(`[stress] ${sent} events to ${N} sessions; frames ${r.frames} in ${(r.windowMs / 1000).toFixed(2)}s measured, gap p50 ${r.p50.toFixed(1)} ms, p95 ${r.p95.toFixed(1)} ms, max ${r.max.toFixed(1)} ms; list items ${r.items} (${r.more}); tree rows ${r.treeRows}`);
  await page.screenshot({ path: join(artifacts, "webview-stress.png") });
  const fails = [];
  if (r.text !== expectedText) fails.push(`selected session text differs from the deltas sent (got ${r.text ? r.text.length : "no"} chars, want ${expectedText.length})`);
  if (!r.sameNode) fails.push("the streamed part's DOM node was replaced (expected in-place updates)");
  if (r.items !== 200) fails.push(`session list renders ${r.items} items, expected the cap of 200`);
  if (!/50 older sessions/.test(r.more)) fails.push(`no overflow note for the 50 sessions past the cap: "${r.more}"`);
  if (r.treeRows > 600) fails.push(`actor tree renders ${r.treeRows} rows, cap is 600`);
  // The target is 5 fps while streaming, or a tenth of what a blank page manages here if that
  // is lower; below it is a warning (or a failure with MIN_FPS).
  const fps = r.frames / Math.max(0.001, r.windowMs / 1000);
  const target = Math.min(TARGET_FPS, baselineFps / 10);
  console.log(`[stress] ${fps.toFixed(1)} fps while streaming (target ${target.toFixed(1)}); blank-page baseline ${baselineFps.toFixed(0)} fps; load ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
  if (fps < target) console.log(`[stress] WARNING: below the ${target.toFixed(1)} fps target (the machine's load counts too)`);
  if (MIN_FPS > 0 && fps < MIN_FPS) fails.push(`${fps.toFixed(1)} fps while streaming, MIN_FPS is ${MIN_FPS}`);
  if (r.max > MAX_GAP) fails.push(`the page hung for ${r.max.toFixed(0)} ms (limit ${MAX_GAP} ms)`);
  if (errors.length) fails.push("page errors: " + errors.join("; "));
  if (fails.length) {
    code = 1;
    console.error("stress test FAILED:\n  " + fails.join("\n  "));
  } else {
    console.log("[stress] PASS");
  }
} catch (e) {
  code = 1;
  console.error("stress test FAILED: " + e.message);
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
  server.close();
  server.closeAllConnections?.();
}
process.exit(code);
