// Browser test of troupe's web view (server/static/index.html) against a live `troupe serve`
// whose provider is troupe-mock running tests/browser/mock-script.json.
//
// Usage: node tests/browser/webview.test.mjs http://127.0.0.1:PORT/[?token=PASSWORD]
// Env:   ARTIFACTS_DIR (default target/artifacts), CHROMIUM (default /usr/bin/chromium),
//        STEP_TIMEOUT_MS (default 20000).
//
// Flow: load the page → send a prompt through the prompt box (creates a session) → the session
// appears in the list → the assistant text streams in → the bash permission request appears →
// click "Once" → the tool completes with its output → the final text arrives → the session goes
// idle and the actor tree shows it → a second prompt fails: its session is marked failed (error on
// hover), still after a reload, times carry dates, and the status/directory filters work → a
// session with a tool call and two parallel subagents (sent through the API) shows a timeline
// whose bars match its stored parts (count and order, derived here from the messages API), with
// the subagents on their own lanes; clicking a bar highlights its part in the transcript (a
// subagent's bar opens the subagent's session). Screenshots go to $ARTIFACTS_DIR/webview.png (and
// webview-permission.png, webview-timeline.png; webview-failure.png on failure). Exit code 1 on
// any failed expectation.

import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const target = process.argv[2];
if (!target) {
  console.error("usage: node webview.test.mjs URL");
  process.exit(2);
}
const artifacts = resolve(process.env.ARTIFACTS_DIR || "target/artifacts");
mkdirSync(artifacts, { recursive: true });
const STEP = Number(process.env.STEP_TIMEOUT_MS || 20000);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const PROMPT = "browser test: please list the files";
const FAILING_PROMPT = "browser failure: this prompt fails";
const QUESTION_PROMPT = "browser question: pick a color";
const TIMELINE_PROMPT = "browser timeline: look around with two explorers";
const base = new URL(target);
const apiToken = base.searchParams.get("token") || "";

/** A JSON request to the server under test (outside the page), with the page's token. */
async function apiCall(path, body) {
  const headers = {};
  if (apiToken) headers.Authorization = "Bearer " + apiToken;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(new URL(path, base.origin), {
    method: body === undefined ? "GET" : "POST", headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${body === undefined ? "GET" : "POST"} ${path}: HTTP ${res.status} ${await res.text()}`);
  return res.json();
}

/**
 * The bars a session's timeline must show, from its stored parts (GET /session/{id}/message):
 * per assistant step its step-start part twice (step, then provider request: the step-start
 * part must carry the request's times), then each tool part that ran; after a `task` part the
 * child session's bar and the child's own bars (its messages created during the call).
 * Returns [kind, partID, sessionID] triples in order.
 */
async function expectedBars(sid, window) {
  const out = [];
  const messages = await apiCall(`/session/${encodeURIComponent(sid)}/message`);
  for (const m of messages) {
    const created = m.info.time.created;
    if (window && (created < window[0] || created > window[1])) continue;
    if (m.info.role !== "assistant") continue;
    const start = m.parts.find((p) => p.type === "step-start");
    if (!start) throw new Error(`step ${m.info.id} has no step-start part`);
    if (!start.request) throw new Error(`the step-start part of ${m.info.id} has no request times`);
    out.push(["step", start.id, sid], ["request", start.id, sid]);
    for (const p of m.parts) {
      if (p.type !== "tool" || !p.state || !p.state.time) continue;
      out.push(["tool", p.id, sid]);
      const child = p.tool === "task" && p.state.metadata && p.state.metadata.sessionId;
      if (child) {
        out.push(["subagent", p.id, sid]);
        out.push(...(await expectedBars(child, [p.state.time.start, p.state.time.end])));
      }
    }
  }
  return out;
}

let step = "start";
const t0 = Date.now();
function log(msg) {
  console.log(`[webview ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
}

/** Wait for `locator` to become visible; fail with `what` otherwise. */
async function expectVisible(locator, what, timeout = STEP) {
  step = what;
  try {
    await locator.first().waitFor({ state: "visible", timeout });
  } catch (e) {
    throw new Error(`expected ${what} within ${timeout} ms (${e.message.split("\n")[0]})`);
  }
  log(`ok: ${what}`);
}

/** Poll `fn` in the page until it returns a truthy value; fail with `what` otherwise. */
async function expectTrue(page, what, fn, arg, timeout = STEP) {
  step = what;
  try {
    const h = await page.waitForFunction(fn, arg, { timeout, polling: 100 });
    const v = await h.jsonValue();
    log(`ok: ${what}`);
    return v;
  } catch (e) {
    throw new Error(`expected ${what} within ${timeout} ms (${e.message.split("\n")[0]})`);
  }
}

const userDataDir = mkdtempSync(join(tmpdir(), "troupe-chromium-"));
let context;
let page;
const pageErrors = [];
let exitCode = 0;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  page = context.pages()[0] || (await context.newPage());
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") pageErrors.push("console: " + m.text());
  });

  step = "load the page";
  const resp = await page.goto(target, { waitUntil: "domcontentloaded", timeout: STEP });
  if (!resp || !resp.ok()) throw new Error(`GET ${target} answered ${resp ? resp.status() : "nothing"}`);
  log(`loaded ${target}`);

  await expectTrue(page, "the event stream to connect (conn = live)", () =>
    document.querySelector("[data-testid=conn]")?.classList.contains("live"));
  await expectVisible(page.locator("[data-testid=actor-node][data-kind=runtime]"), "the actor tree to show the runtime");

  // Send a prompt through the UI: no session is selected, so this creates one.
  step = "send the prompt";
  await page.locator("[data-testid=prompt-input]").fill(PROMPT);
  await page.locator("[data-testid=prompt-send]").click();

  await expectVisible(page.locator("[data-testid=session-item]"), "the new session in the session list");
  const sid = await page.locator("[data-testid=session-item]").first().getAttribute("data-session-id");
  if (!sid) throw new Error("the session list item has no data-session-id");
  log(`session ${sid}`);
  await expectVisible(page.locator(`[data-testid=session-item][data-session-id="${sid}"].selected`), "the new session to be selected");
  await expectVisible(page.locator("[data-testid=message][data-role=user]", { hasText: PROMPT }), "the user message");

  // The first step streams text, then asks to run bash.
  await expectVisible(page.locator("[data-testid=part-text]", { hasText: "Let me list the files in this project" }), "the first assistant text to stream in");
  await expectVisible(page.locator("[data-testid=permission]"), "a permission request", STEP);
  const perm = page.locator("[data-testid=permission]").first();
  const permText = await perm.innerText();
  if (!/bash/.test(permText)) throw new Error(`the permission request does not mention bash: ${permText}`);
  if (!/echo hello-from-bash/.test(permText)) throw new Error(`the permission request does not show the command: ${permText}`);
  await expectVisible(page.locator("[data-testid=part-tool][data-tool=bash]"), "the bash tool part (waiting for permission)");
  // The session is working (waiting on the permission): its actor is in the supervision tree.
  await expectVisible(page.locator(`[data-testid=actor-node][data-kind=session][data-actor-id="${sid}"]`), "the session in the actor tree");
  await page.screenshot({ path: join(artifacts, "webview-permission.png") });

  step = "click Once";
  await perm.locator("[data-testid=permission-once]").click();
  await expectTrue(page, "the permission card to go away", () => !document.querySelector("[data-testid=permission]"));

  await expectVisible(page.locator("[data-testid=part-tool][data-tool=bash][data-status=completed]"), "the bash tool to complete");
  await expectTrue(page, "the tool output to contain hello-from-bash", () =>
    [...document.querySelectorAll("[data-testid=part-tool][data-tool=bash] [data-testid=tool-output]")]
      .some((e) => e.textContent.includes("hello-from-bash")));
  await expectVisible(page.locator("[data-testid=part-text]", { hasText: "All done: the command printed hello-from-bash, so the shell works." }), "the final text");

  await expectTrue(page, "the session to be idle in the list", (id) => {
    const b = document.querySelector(`[data-testid=session-item][data-session-id="${id}"] [data-testid=session-status]`);
    return b && b.textContent.trim() === "idle";
  }, sid);
  await expectTrue(page, "the session's tokens to be counted in the list", (id) => {
    const t = document.querySelector(`[data-testid=session-item][data-session-id="${id}"] [data-testid=session-tokens]`);
    return t && !/^0 tok$/.test(t.textContent.trim());
  }, sid);

  // Snapshots (issue 15): the bash step's new file is its patch, and the session's diff
  // opens from the header.
  await expectTrue(page, "the bash step's patch to name hello.txt", () =>
    [...document.querySelectorAll("[data-testid=part-patch] [data-testid=patch-file]")]
      .some((e) => e.textContent.trim() === "hello.txt"));
  await expectTrue(page, "the header to show the session's changes", () => {
    const b = document.querySelector("[data-testid=diff-toggle]");
    return b && !b.hidden && /^1 file \+1 −0$/.test(b.textContent.trim());
  });
  await page.locator("[data-testid=diff-toggle]").click();
  await expectVisible(page.locator('[data-testid=diff-file][data-file="hello.txt"]'), "hello.txt in the session diff");
  await page.locator('[data-testid=diff-file][data-file="hello.txt"] summary').click();
  await expectTrue(page, "the diff of hello.txt to show the added line", () => {
    const pre = document.querySelector('[data-testid=diff-file][data-file="hello.txt"] pre');
    return pre && pre.textContent.includes("+hello-from-bash");
  });
  await page.screenshot({ path: join(artifacts, "webview-diff.png") });
  await page.locator("[data-testid=diff-toggle]").click();

  // Text was streamed, not duplicated: the final text appears exactly once.
  const finalCount = await page.locator("[data-testid=part-text]", { hasText: "All done:" }).count();
  if (finalCount !== 1) throw new Error(`the final text is rendered ${finalCount} times, expected once`);

  // A reload rebuilds the same view from the API (selected session kept in the URL hash).
  step = "reload";
  await page.reload({ waitUntil: "domcontentloaded" });
  await expectVisible(page.locator("[data-testid=part-tool][data-tool=bash][data-status=completed]"), "the completed tool after a reload");
  await expectVisible(page.locator("[data-testid=part-text]", { hasText: "All done:" }), "the final text after a reload");
  await page.waitForTimeout(300);

  // A failed turn: the session is marked failed in the list, the error on hover, and stays
  // marked after a reload (the server's lastError), and the status filter finds it.
  step = "send a prompt that fails";
  await page.locator("[data-testid=new-session]").click();
  await page.locator("[data-testid=prompt-input]").fill(FAILING_PROMPT);
  await page.locator("[data-testid=prompt-send]").click();
  const failedSid = await expectTrue(page, "a second session in the list", (first) => {
    const other = [...document.querySelectorAll("[data-testid=session-item]")]
      .map((li) => li.getAttribute("data-session-id"))
      .find((id) => id && id !== first);
    return other || false;
  }, sid);
  log(`failing session ${failedSid}`);
  const markedFailed = (id) => {
    const li = document.querySelector(`[data-testid=session-item][data-session-id="${id}"]`);
    const badge = li && li.querySelector("[data-testid=session-status]");
    return !!li && li.dataset.failed === "true" && li.classList.contains("failed") &&
      badge.textContent.trim() === "failed" && /refuses this prompt/.test(badge.title);
  };
  await expectTrue(page, "the failed session to be marked failed with its error on hover", markedFailed, failedSid);
  await expectTrue(page, "the chat header of the failed session to say failed, not idle", () => {
    const b = document.getElementById("chat-status");
    return !!b && !b.hidden && b.textContent.trim() === "failed" && /refuses this prompt/.test(b.title);
  });
  const okMarked = await page.evaluate((id) =>
    document.querySelector(`[data-testid=session-item][data-session-id="${id}"]`).dataset.failed, sid);
  if (okMarked !== "false") throw new Error(`the finished session is marked failed=${okMarked}`);
  await page.screenshot({ path: join(artifacts, "webview-failed.png") });

  step = "reload with a failed session";
  await page.reload({ waitUntil: "domcontentloaded" });
  await expectTrue(page, "the failed session to stay marked after a reload", markedFailed, failedSid);
  await expectTrue(page, "times to carry a date", (id) => {
    const t = document.querySelector(`[data-testid=session-item][data-session-id="${id}"] .sid`);
    return !!t && /[A-Za-z]{3,}\.? ?\d{1,2}|\d{1,2}\.? [A-Za-z]{3,}/.test(t.textContent);
  }, failedSid);

  step = "filter by status and directory";
  await page.locator("[data-testid=filter-status]").selectOption("failed");
  await expectTrue(page, "only the failed session with the failed filter", (id) => {
    const ids = [...document.querySelectorAll("[data-testid=session-item]")].map((li) => li.getAttribute("data-session-id"));
    return ids.length === 1 && ids[0] === id;
  }, failedSid);
  await page.locator("[data-testid=filter-status]").selectOption("");
  await page.locator("[data-testid=filter-dir]").fill("/no/such/directory");
  await expectTrue(page, "no session for a directory none is in", () =>
    document.querySelectorAll("[data-testid=session-item]").length === 0);
  await page.locator("[data-testid=filter-dir]").fill("");
  await expectTrue(page, "both sessions again without filters", () =>
    document.querySelectorAll("[data-testid=session-item]").length >= 2);

  // The `question` tool: its card shows the options; picking one and answering lets the
  // turn go on with the answer.
  step = "answer a question from the model";
  await page.locator("[data-testid=new-session]").click();
  await page.locator("[data-testid=prompt-input]").fill(QUESTION_PROMPT);
  await page.locator("[data-testid=prompt-send]").click();
  await expectVisible(page.locator("[data-testid=question]"), "the question card", STEP);
  const qText = await page.locator("[data-testid=question]").first().innerText();
  if (!/Which color should the button be\?/.test(qText)) throw new Error(`the question card does not show the question: ${qText}`);
  await page.locator("[data-testid=question-option]", { hasText: "blue" }).click();
  await page.screenshot({ path: join(artifacts, "webview-question.png") });
  await page.locator("[data-testid=question-answer]").click();
  await expectTrue(page, "the question card to go away", () => !document.querySelector("[data-testid=question]"));
  await expectVisible(page.locator("[data-testid=part-text]", { hasText: "Blue it is" }), "the text after the answer");
  await expectTrue(page, "the question tool's output to carry the answer", () =>
    [...document.querySelectorAll("[data-testid=part-tool][data-tool=question] [data-testid=tool-output]")]
      .some((e) => e.textContent.includes("Which color should the button be?: blue")));

  // The timeline of a finished session with a tool call and two parallel subagents.
  step = "run a session with subagents through the API";
  const tl = await apiCall("/session", { title: "timeline session" });
  await apiCall(`/session/${encodeURIComponent(tl.id)}/message`, { parts: [{ type: "text", text: TIMELINE_PROMPT }] });
  log(`timeline session ${tl.id} finished`);
  await expectVisible(page.locator(`[data-testid=session-item][data-session-id="${tl.id}"]`), "the timeline session in the list");
  await page.locator(`[data-testid=session-item][data-session-id="${tl.id}"]`).click();
  await expectVisible(page.locator("[data-testid=part-text]", { hasText: "Both explorers reported back." }), "the timeline session's transcript");
  await page.locator("[data-testid=timeline-toggle]").click();
  await expectVisible(page.locator("[data-testid=timeline-bar]"), "timeline bars");
  const want = await expectedBars(tl.id);
  const served = await apiCall(`/session/${encodeURIComponent(tl.id)}/timeline`);
  if (served.rows.length !== want.length) throw new Error(`GET /timeline has ${served.rows.length} rows, the stored parts make ${want.length}`);
  if (want.filter((b) => b[0] === "subagent").length !== 2) throw new Error(`expected 2 subagent bars: ${JSON.stringify(want)}`);
  const got = await page.$$eval("[data-testid=timeline-bar]", (bars) =>
    bars.map((b) => [b.dataset.kind, b.dataset.partId, b.dataset.sessionId]));
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    throw new Error(`the timeline's bars do not match the stored parts:\n  shown:  ${JSON.stringify(got)}\n  stored: ${JSON.stringify(want)}`);
  }
  log(`ok: ${got.length} bars match the stored parts in count and order`);
  // Parallel subagents: on different lanes, their bars overlapping in time.
  const lanes = await page.$$eval(".tl-row[data-kind=subagent]", (rows) => rows.map((r) => r.dataset.lane));
  if (new Set(lanes).size !== 2) throw new Error(`the parallel subagents share a lane: ${JSON.stringify(lanes)}`);
  const subRows = served.rows.filter((r) => r.kind === "subagent");
  if (!(subRows[0].start < subRows[1].end && subRows[1].start < subRows[0].end)) throw new Error("the subagents did not overlap in time");
  // Bars are placed by time: a later bar never starts left of the first step's bar.
  const boxes = await page.$$eval("[data-testid=timeline-bar]", (bars) => bars.map((b) => { const r = b.getBoundingClientRect(); return [r.left, r.width]; }));
  if (boxes.some(([l, w]) => !(w > 0) || l < boxes[0][0] - 0.5)) throw new Error(`bars out of place: ${JSON.stringify(boxes)}`);
  // Tooltip: the name and the duration.
  const readBar = page.locator('[data-testid=timeline-bar][data-kind=tool]').first();
  const tip = await readBar.getAttribute("title");
  if (!/^tool: read README\.md\n\d+(\.\d+)? (ms|s) · completed/.test(tip || "")) throw new Error(`unexpected tooltip ${JSON.stringify(tip)}`);
  // A click scrolls to the part in the transcript and highlights it.
  step = "click a tool bar";
  const readPart = await readBar.getAttribute("data-part-id");
  await readBar.click();
  await expectTrue(page, "the clicked tool part to be highlighted in view", (id) => {
    const e = document.querySelector(`#messages [data-part-id="${id}"]`);
    if (!e || !e.classList.contains("highlight")) return false;
    const r = e.getBoundingClientRect(), box = document.getElementById("messages-scroll").getBoundingClientRect();
    return r.bottom > box.top && r.top < box.bottom;
  }, readPart);
  await page.screenshot({ path: join(artifacts, "webview-timeline.png") });
  // A bar of a subagent's own part opens the subagent's session with that part highlighted.
  step = "click a subagent's tool bar";
  const childBar = page.locator(`[data-testid=timeline-bar][data-kind=tool]:not([data-session-id="${tl.id}"])`).first();
  const [childPart, childSid] = [await childBar.getAttribute("data-part-id"), await childBar.getAttribute("data-session-id")];
  await childBar.click();
  await expectTrue(page, "the subagent's session to open with its part highlighted", ([id, s]) =>
    location.hash === "#" + s && !!document.querySelector(`#messages [data-part-id="${id}"].highlight`), [childPart, childSid]);
  await expectTrue(page, "the timeline to follow the selected subagent session", (s) => {
    const bars = [...document.querySelectorAll("[data-testid=timeline-bar]")];
    return bars.length > 0 && bars.every((b) => b.dataset.sessionId === s);
  }, childSid);

  // A long session opens on its newest page; "load earlier messages" pages back (GET
  // /message?before=&limit=) until the first message, in order, keeping the reader's place.
  step = "page back through a long session";
  const LONG = 450;
  const long = await apiCall("/session", { title: "long session" });
  for (let i = 0; i < LONG; i++) {
    await apiCall(`/session/${encodeURIComponent(long.id)}/message`, { noReply: true, parts: [{ type: "text", text: `long message ${i}` }] });
  }
  await expectVisible(page.locator(`[data-testid=session-item][data-session-id="${long.id}"]`), "the long session in the list");
  await page.locator(`[data-testid=session-item][data-session-id="${long.id}"]`).click();
  await expectVisible(page.locator("[data-testid=part-text]", { hasText: `long message ${LONG - 1}` }), "the long session's newest message");
  const shownTexts = () => page.$$eval("#messages [data-testid=message] [data-testid=part-text]", (ps) => ps.map((p) => p.textContent.trim()));
  const expectRange = async (from) => {
    const texts = await shownTexts();
    const want = Array.from({ length: LONG - from }, (_, i) => `long message ${from + i}`);
    if (JSON.stringify(texts) !== JSON.stringify(want)) throw new Error(`expected messages ${from}..${LONG - 1} in order, shown ${texts.length}: ${JSON.stringify(texts.slice(0, 3))} … ${JSON.stringify(texts.slice(-2))}`);
  };
  await expectRange(LONG - 300);
  // The timeline panel (still open) of a session without steps says so, and nothing else.
  await expectTrue(page, "the empty timeline to say 'No steps yet.' without a stray 'null'", () => {
    const t = document.getElementById("timeline-panel");
    return !t.hidden && /No steps yet\./.test(t.textContent) && !/null/.test(t.textContent);
  });
  const earlier = page.locator("[data-testid=earlier-messages]");
  await expectVisible(earlier, "the load-earlier button");
  await earlier.click();
  await expectTrue(page, "the second page to be prepended", (n) =>
    document.querySelectorAll("#messages [data-testid=message]").length === n, 400);
  await expectRange(LONG - 400);
  await expectTrue(page, "the reader's place kept (not scrolled to the top)", () =>
    document.getElementById("messages-scroll").scrollTop > 0);
  await earlier.click();
  await expectTrue(page, "every message shown", (n) =>
    document.querySelectorAll("#messages [data-testid=message]").length === n, LONG);
  await expectRange(0);
  if (await page.locator("[data-testid=earlier-messages]").count() !== 0) throw new Error("the load-earlier button stays after the first message");
  log(`ok: ${LONG} messages paged back in order`);

  // A cluster server (`serve --cluster`) adds its workers to /actors under `nodes`; the data
  // itself is tested against real workers in tests/cluster_e2e.rs. Here the page is given
  // such a document: each worker is a node row with its state, the dead one marked, and its
  // tree below it.
  step = "show a cluster's workers";
  const fleet = await apiCall("/actors");
  fleet.nodes = [
    { node: "w-alive", host: "hostA", pid: 41, status: "alive", lastHeartbeatMs: 800, timeoutMs: 15000,
      running: ["t-7"], concurrency: 4, tree: { kind: "runtime", id: "troupe", status: "busy",
        children: [{ kind: "session", id: "ses_remote1", status: "busy", steps: 2, children: [] }] } },
    { node: "w-dead", host: "hostB", pid: 42, status: "dead", lastHeartbeatMs: 65000, timeoutMs: 15000,
      running: ["t-1", "t-2"], concurrency: 2, tree: null },
  ];
  await page.route("**/actors", (route) => route.fulfill({ json: fleet }));
  await page.evaluate(() => requestActors());
  await expectTrue(page, "the workers as node rows, the dead one marked, the alive one's session below it", () => {
    const nodes = [...document.querySelectorAll("[data-testid=actor-node][data-kind=node]")];
    const dead = nodes.find((e) => e.dataset.actorId === "w-dead");
    const alive = nodes.find((e) => e.dataset.actorId === "w-alive");
    const remote = document.querySelector("[data-testid=actor-node][data-actor-id=ses_remote1]");
    return nodes.length === 2 && dead && dead.dataset.status === "dead" && /heartbeat 1m 05s ago/.test(dead.textContent)
      && alive && alive.dataset.status === "alive" && /1\/4 tasks/.test(alive.textContent)
      && remote && alive.compareDocumentPosition(remote) & Node.DOCUMENT_POSITION_FOLLOWING;
  });
  await page.screenshot({ path: join(artifacts, "webview-fleet.png") });
  await page.unroute("**/actors");
  log("ok: a cluster's workers shown, the dead one marked");

  if (pageErrors.length) throw new Error("the page reported errors:\n  " + pageErrors.join("\n  "));
  await page.screenshot({ path: join(artifacts, "webview.png") });
  log(`PASS; screenshot ${join(artifacts, "webview.png")}`);
} catch (e) {
  exitCode = 1;
  console.error(`webview test FAILED at "${step}": ${e.message}`);
  if (pageErrors.length) console.error("page errors:\n  " + pageErrors.join("\n  "));
  if (page) {
    try {
      await page.screenshot({ path: join(artifacts, "webview-failure.png") });
      console.error(`failure screenshot: ${join(artifacts, "webview-failure.png")}`);
      const text = await page.locator("body").innerText({ timeout: 2000 });
      console.error("page text:\n" + text.slice(0, 4000));
    } catch (_) {
      // best effort
    }
  }
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(exitCode);
