/**
 * The chat view's own script (dist/webview.js) in real headless Chromium: the page it runs in has
 * the CSP the extension gives it, `acquireVsCodeApi` records what the script posts, and the
 * message streams recorded from the real server (fixtures/, see test/chat.test.ts) are replayed
 * into it. Assertions are on the DOM. Screenshots go to e2e/artifacts/.
 *
 * Chromium: CHROMIUM, else /usr/bin/chromium (Debian's `chromium`).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, join, normalize } from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";

import { chromium, type Browser, type Page } from "playwright-core";

import type { FromWebview, ToWebview } from "../../src/messages";

const PACKAGE = join(__dirname, "..", "..", "..");
const DIST = join(PACKAGE, "dist");
const FIXTURES = join(PACKAGE, "test", "webview", "fixtures");
const THEME = join(PACKAGE, "test", "webview", "theme.css");
const ARTIFACTS = join(PACKAGE, "e2e", "artifacts");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const WAIT_MS = 20_000;

const TYPES: Record<string, string> = {
  ".js": "text/javascript",
  ".css": "text/css",
  ".ttf": "font/ttf",
  ".html": "text/html",
};

function fixture(name: string): ToWebview[] {
  return JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), "utf8")) as ToWebview[];
}

/** The page the extension builds (same CSP), served over HTTP with a recording vscode API. */
function page(nonce: string, origin: string): string {
  const csp = [
    "default-src 'none'",
    `img-src ${origin} data:`,
    `style-src ${origin}`,
    `font-src ${origin}`,
    `script-src 'nonce-${nonce}'`,
  ].join("; ");
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/theme.css">
<link rel="stylesheet" href="/dist/webview-style.css">
</head><body><div id="app"></div>
<script nonce="${nonce}">
  window.__posted = [];
  window.__violations = [];
  document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective + " " + e.blockedURI));
  window.acquireVsCodeApi = () => ({ postMessage: (m) => window.__posted.push(m), getState: () => undefined, setState: () => undefined });
</script>
<script nonce="${nonce}" src="/dist/webview.js"></script>
</body></html>`;
}

describe("the chat view's webview script in headless Chromium", { timeout: 300_000 }, () => {
  let server: Server;
  let browser: Browser;
  let tab: Page;
  let url: string;
  const errors: string[] = [];

  before(async () => {
    server = createServer((request, response) => {
      const path = normalize(decodeURIComponent((request.url ?? "/").split("?")[0]));
      let file: string | undefined;
      if (path.startsWith("/dist/")) file = join(DIST, path.slice("/dist/".length));
      else if (path === "/theme.css") file = THEME;
      if (path === "/") {
        const origin = `http://${request.headers.host ?? ""}`;
        response.writeHead(200, { "content-type": "text/html" });
        response.end(page(randomBytes(16).toString("base64"), origin));
        return;
      }
      try {
        const body = readFileSync(file ?? "/nonexistent");
        response.writeHead(200, { "content-type": TYPES[extname(file ?? "")] ?? "application/octet-stream" });
        response.end(body);
      } catch {
        response.writeHead(404);
        response.end();
      }
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
    mkdirSync(ARTIFACTS, { recursive: true });
  });

  after(async () => {
    await browser?.close();
    await new Promise((resolve) => server?.close(resolve));
  });

  beforeEach(async () => {
    await tab?.close();
    errors.length = 0;
    tab = await browser.newPage({ viewport: { width: 420, height: 760 } });
    tab.setDefaultTimeout(WAIT_MS);
    tab.on("pageerror", (error) => errors.push(error.message));
    tab.on("console", (message) => {
      if (message.type() === "error") errors.push(message.text());
    });
    await tab.goto(url);
    await tab.waitForSelector(".composer .prompt");
  });

  async function feed(messages: ToWebview[]): Promise<void> {
    await tab.evaluate((items) => {
      const target = globalThis as unknown as { postMessage(message: unknown, origin: string): void };
      for (const item of items) target.postMessage(item, "*");
    }, messages);
    // Messages are delivered as tasks; streamed Markdown renders on the task after.
    await tab.evaluate(() => new Promise((resolve) => setTimeout(resolve, 0)));
    await tab.evaluate(() => new Promise((resolve) => setTimeout(resolve, 0)));
  }

  async function posted(): Promise<FromWebview[]> {
    return tab.evaluate(() => (globalThis as unknown as { __posted: FromWebview[] }).__posted);
  }

  async function clean(): Promise<void> {
    const violations = await tab.evaluate(() => (globalThis as unknown as { __violations: string[] }).__violations);
    assert.deepEqual(violations, [], "CSP violations");
    assert.deepEqual(errors, [], "page errors");
  }

  test("says it is ready, and shows the welcome until a turn starts", async () => {
    assert.deepEqual(await posted(), [{ type: "ready" }]);
    assert.match((await tab.textContent(".empty")) ?? "", /Ask tether/);
    assert.equal(await tab.isVisible(".send"), true);
    assert.equal(await tab.isVisible(".stop"), false);
    await clean();
  });

  test("a recorded answer: prompt with its chip, highlighted Markdown, a completed tool card, the model", async () => {
    const stream = fixture("answer");
    const toolCall = stream.findIndex((m) => m.type === "progress" && m.event.kind === "tool_call");
    // Half way: running, the card pending, Stop instead of Send.
    await feed(stream.slice(0, toolCall + 1));
    assert.equal(await tab.isVisible(".stop"), true);
    assert.equal(await tab.isVisible(".send"), false);
    assert.equal(await tab.getAttribute(".tool-card", "data-status"), "pending");
    await feed(stream.slice(toolCall + 1));
    assert.equal(await tab.isVisible(".send"), true);
    assert.equal(await tab.isVisible(".stop"), false);
    assert.equal(await tab.textContent(".message.user .markdown"), "What does main return?\n");
    assert.equal(await tab.textContent(".session-title"), "What does main return?");
    assert.equal(await tab.textContent(".message.user .chip"), "src/app.py:2-2");
    const card = tab.locator(".tool-card");
    assert.equal(await card.count(), 1);
    assert.equal(await card.getAttribute("data-status"), "completed");
    assert.equal(await card.locator(".tool-title").textContent(), "Read src/app.py");
    assert.equal(await card.locator(".kind.codicon-file").count(), 1);
    assert.match((await card.locator(".tool-status").textContent()) ?? "", /completed/);
    // The output is there, folded; a click unfolds it.
    const output = card.locator("details.tool-output");
    assert.equal(await output.getAttribute("open"), null);
    await output.locator("summary").click();
    assert.notEqual(await output.getAttribute("open"), null);
    assert.match((await output.locator("pre").textContent()) ?? "", /def main/);
    // The answer: Markdown with a highlighted Python block.
    const answer = tab.locator(".message.assistant .markdown").last();
    assert.equal(await answer.locator("strong").textContent(), "returns 42");
    assert.equal(await answer.locator("pre.hljs .hljs-keyword").first().textContent(), "def");
    assert.match((await tab.textContent(".turn-footer .meta")) ?? "", /scripted/);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-answer.png") });
    await clean();
  });

  test("an edit waits in its card with the proposed diff; Allow and Review diff are posted", async () => {
    const stream = fixture("edit-allowed");
    const asked = stream.findIndex((m) => m.type === "permission");
    await feed(stream.slice(0, asked + 1));
    const card = tab.locator(".tool-card.asking");
    assert.equal(await card.getAttribute("data-status"), "approval");
    assert.equal(await card.locator(".tool-title").textContent(), "Edit src/app.py");
    assert.equal(await card.locator(".kind.codicon-edit").count(), 1);
    assert.match((await card.locator(".proposal .hljs-deletion").textContent()) ?? "", /-\s+return 42/);
    assert.match((await card.locator(".proposal .hljs-addition").last().textContent()) ?? "", /\+\s+return 43/);
    assert.deepEqual(await card.locator(".tool-actions button").allTextContents(), [
      "Review diff",
      "Allow",
      "Always allow",
      "Reject",
      "Always reject",
    ]);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-permission.png") });
    await card.locator("button.review").click();
    await card.locator("button.allow").click();
    const requestId = (stream[asked] as { requestId: string }).requestId;
    assert.deepEqual((await posted()).slice(1), [
      { type: "openDiff", requestId },
      { type: "answer", requestId, outcome: "allow" },
    ]);
    await feed(stream.slice(asked + 1));
    const done = tab.locator('.tool-card[data-tool-call-id="e1"]');
    assert.equal(await done.getAttribute("data-status"), "completed");
    assert.equal(await done.locator(".tool-actions button").count(), 0);
    assert.match((await done.locator("details.tool-output pre").textContent()) ?? "", /\+\s+return 43/);
    await clean();
  });

  test("a rejected write ends failed with the reason shown", async () => {
    const stream = fixture("write-rejected");
    const asked = stream.findIndex((m) => m.type === "permission");
    await feed(stream.slice(0, asked + 1));
    await tab.locator(".tool-card.asking button.reject").click();
    const requestId = (stream[asked] as { requestId: string }).requestId;
    assert.deepEqual((await posted()).at(-1), { type: "answer", requestId, outcome: "reject" });
    await feed(stream.slice(asked + 1));
    const card = tab.locator('.tool-card[data-tool-call-id="w1"]');
    assert.equal(await card.getAttribute("data-status"), "failed");
    assert.notEqual(await card.locator("details.tool-output").getAttribute("open"), null);
    assert.match((await card.locator("details.tool-output pre").textContent()) ?? "", /rejected by user/);
    await clean();
  });

  test("Always reject is posted as reject_always", async () => {
    const stream = fixture("write-rejected");
    const asked = stream.findIndex((m) => m.type === "permission");
    await feed(stream.slice(0, asked + 1));
    const never = tab.locator(".tool-card.asking button.never");
    assert.match((await never.getAttribute("title")) ?? "", /every later call of this tool/);
    await never.click();
    const requestId = (stream[asked] as { requestId: string }).requestId;
    assert.deepEqual((await posted()).at(-1), { type: "answer", requestId, outcome: "reject_always" });
    await clean();
  });

  test("a cancelled turn says so under the answer, its partial text marked", async () => {
    await feed(fixture("cancelled"));
    assert.equal(await tab.getAttribute(".turn", "data-stop-reason"), "cancelled");
    assert.match((await tab.textContent(".turn-footer .meta")) ?? "", /cancelled/);
    const answer = tab.locator(".message.assistant");
    assert.equal(await answer.getAttribute("class"), "message assistant cancelled");
    assert.equal(await answer.locator(".who .badge").textContent(), "cancelled");
    assert.equal(await tab.isVisible(".send"), true);
    await clean();
  });

  test("a run's cost follows its tokens when its model has a price, and nothing pretends one when not", async () => {
    const answer = fixture("answer");
    const started = answer.findIndex((message) => message.type === "turnStarted");
    const turn = answer.slice(started).filter((message) => message.type !== "turnFinished");
    const ended = (usage: { inputTokens: number; outputTokens: number; cost?: number }): ToWebview => ({
      type: "turnFinished",
      stopReason: "end_turn",
      model: "gpt-4o",
      usage,
    });
    await feed([...turn, ended({ inputTokens: 1200, outputTokens: 30, cost: 0.0033 })]);
    await feed([...turn, ended({ inputTokens: 12, outputTokens: 7 })]);
    const footers = await tab.locator(".turn-footer .meta").allTextContents();
    assert.deepEqual(footers.slice(-2), [
      "gpt-4o · 1,200 in · 30 out tokens · $0.0033",
      "gpt-4o · 12 in · 7 out tokens",
    ]);
    await clean();
  });

  test("a cut-off answer and a refusal are told apart from a normal end", async () => {
    await feed(fixture("cut-off"));
    assert.equal(await tab.getAttribute(".turn", "data-stop-reason"), "max_tokens");
    assert.match((await tab.textContent(".turn-footer .stop-max_tokens")) ?? "", /cut off/);
    assert.match((await tab.textContent(".turn-footer .meta")) ?? "", /4,096 out tokens · max tokens/);
    await feed(fixture("refused"));
    const refused = tab.locator(".turn").last();
    assert.equal(await refused.getAttribute("data-stop-reason"), "refusal");
    assert.match((await refused.locator(".turn-footer .stop-refusal").textContent()) ?? "", /refused/);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-stop-reasons.png") });
    await clean();
  });

  test("Stop posts stop while a turn runs", async () => {
    const stream = fixture("answer");
    await feed(stream.slice(0, stream.findIndex((m) => m.type === "turnStarted") + 1));
    await tab.locator("button.stop").click();
    assert.deepEqual((await posted()).at(-1), { type: "stop" });
  });

  test("the session list: titles, relative times; switch, fork and delete are posted", async () => {
    await tab.locator('button[title="Sessions"]').click();
    assert.deepEqual((await posted()).at(-1), { type: "listSessions" });
    const [sessions] = fixture("sessions");
    await feed([sessions]);
    const items = tab.locator(".session-item");
    assert.equal(await items.count(), 2);
    const names = await tab.locator(".session-name").allTextContents();
    assert.deepEqual(names.sort(), ["What does main return?", "What does main return? (fork)"]);
    for (const when of await tab.locator(".session-when").allTextContents()) {
      assert.match(when, /(ago|just now|yesterday|last) .*messages|^(just now|.* ago) · \d+ messages/);
    }
    await tab.screenshot({ path: join(ARTIFACTS, "webview-sessions.png") });
    const first = items.first();
    const id = (await first.getAttribute("data-session-id")) ?? "";
    await first.hover();
    await first.locator('button[title="Fork"]').click();
    await first.locator('button[title="Delete"]').click();
    await first.locator(".session-open").click();
    assert.deepEqual((await posted()).slice(-3), [
      { type: "forkSession", sessionId: id },
      { type: "deleteSession", sessionId: id },
      { type: "switchSession", sessionId: id },
    ]);
    assert.equal(await tab.isVisible(".sessions"), false);
  });

  test("a switched-to session is rebuilt from its transcript", async () => {
    const [switched] = fixture("switched");
    await feed([switched]);
    assert.equal(await tab.textContent(".session-title"), "What does main return?");
    assert.ok((await tab.locator(".turn").count()) >= 3);
    assert.equal(await tab.locator(".message.user .chip").first().textContent(), "src/app.py:2-2");
    assert.equal(await tab.locator(".tool-card").first().getAttribute("data-status"), "completed");
    const answers = await tab.locator(".message.assistant .markdown").allTextContents();
    assert.ok(answers.includes("Changed.\n"), answers.join(" | "));
    // As the live turns showed them: the edit's diff, the kinds, each run's tokens, the cancel.
    const edit = tab.locator('.tool-card[data-tool-call-id="e1"]');
    assert.equal(await edit.getAttribute("data-kind"), "edit");
    assert.equal(await edit.locator("details.tool-output summary").textContent(), "Diff");
    assert.match((await edit.locator("details.tool-output pre").textContent()) ?? "", /\+\s+return 43/);
    assert.equal(await tab.locator('.tool-card[data-tool-call-id="c1"]').getAttribute("data-kind"), "read");
    const footers = await tab.locator(".turn-footer .meta").allTextContents();
    assert.equal(footers[0], "scripted · 250 in · 50 out tokens");
    assert.equal(footers[1], "scripted · 430 in · 25 out tokens");
    const cancelled = tab.locator(".turn[data-stop-reason=cancelled]");
    assert.equal(await cancelled.count(), 1);
    assert.equal(await cancelled.locator(".message.assistant.cancelled .markdown").textContent(), "too\n");
    assert.match((await cancelled.locator(".turn-footer .meta").textContent()) ?? "", /cancelled$/);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-transcript.png"), fullPage: true });
    await clean();
  });

  test("a prompt gets Restore once its run records a checkpoint; it posts restore with the prompt's id", async () => {
    const stream = fixture("checkpoint");
    const at = stream.findIndex((m) => m.type === "progress" && m.event.kind === "checkpoint");
    const started = stream.find((m) => m.type === "progress" && m.event.kind === "run_started");
    const messageId = started?.type === "progress" && started.event.kind === "run_started" ? started.event.userMessageId : "";
    await feed(stream.slice(0, at));
    const user = tab.locator(".message.user");
    assert.equal(await user.getAttribute("data-message-id"), messageId);
    assert.equal(await user.locator("button.restore").count(), 0, "no Restore before the turn changed a file");
    await feed(stream.slice(at));
    const restore = user.locator("button.restore");
    assert.equal(await restore.textContent(), "Restore");
    assert.equal(await restore.getAttribute("title"), "Restore to before this prompt (changed: src/app.py)");
    await tab.screenshot({ path: join(ARTIFACTS, "webview-restore.png") });
    await restore.click();
    assert.deepEqual((await posted()).at(-1), { type: "restore", messageId });
    await clean();
  });

  test("a rebuilt transcript offers Restore on the prompts whose turns changed files", async () => {
    const [session] = fixture("restorable");
    assert.ok(session.type === "session");
    await feed([session]);
    const users = tab.locator(".message.user");
    assert.equal(await users.count(), 3);
    const titles = await users.evaluateAll((nodes) =>
      nodes.map((node) => node.querySelector("button.restore")?.getAttribute("title") ?? null),
    );
    assert.deepEqual(titles, [
      "Restore to before this prompt (changed: notes.txt)",
      "Restore to before this prompt (changed: src/app.py)",
      null,
    ]);
    await users.first().locator("button.restore").click();
    const first = session.items[0];
    assert.deepEqual((await posted()).at(-1), { type: "restore", messageId: first.type === "user" ? first.messageId : "" });
    await clean();
  });

  test("Enter sends, Shift+Enter starts a new line; context buttons and chips post", async () => {
    const prompt = tab.locator(".prompt");
    await prompt.fill("first line");
    await prompt.press("Shift+Enter");
    await prompt.pressSequentially("second line");
    assert.equal(await prompt.inputValue(), "first line\nsecond line");
    assert.deepEqual(await posted(), [{ type: "ready" }]);
    await prompt.press("Enter");
    assert.deepEqual((await posted()).at(-1), { type: "send", text: "first line\nsecond line" });
    assert.equal(await prompt.inputValue(), "");
    await tab.locator("button.attach-selection").click();
    await tab.locator("button.attach-file").click();
    assert.deepEqual((await posted()).slice(-2), [
      { type: "attach", what: "selection" },
      { type: "attach", what: "file" },
    ]);
    await feed([{ type: "context", items: [{ label: "src/app.py", file: "src/app.py", text: "x" }] }]);
    assert.equal(await tab.textContent(".composer .chip"), "src/app.py");
    await tab.locator('.composer .chip button[title="Remove src/app.py"]').click();
    assert.deepEqual((await posted()).at(-1), { type: "detach", index: 0 });
    await clean();
  });

  test("the plan is a checklist above the prompt, replaced by each plan event, gone with the session", async () => {
    assert.equal(await tab.locator(".plan").isHidden(), true);
    await feed([
      {
        type: "session",
        sessionId: "s",
        title: "t",
        items: [],
        running: false,
        plan: [{ content: "Read the code", status: "in_progress", priority: "high" }],
      },
    ]);
    assert.equal(await tab.textContent(".plan-heading"), "Plan · 0/1 done");
    await feed([
      { type: "turnStarted", prompt: "go", context: [], sessionId: "s", title: "t" },
      {
        type: "progress",
        event: {
          kind: "plan",
          entries: [
            { content: "Read the code", status: "completed", priority: "high" },
            { content: "<b>Fix</b> it", status: "in_progress" },
            { content: "Test", status: "pending" },
          ],
        },
      },
    ]);
    assert.equal(await tab.textContent(".plan-heading"), "Plan · 1/3 done");
    assert.deepEqual(await tab.locator(".plan-entry").evaluateAll((items) => items.map((i) => i.getAttribute("data-status"))), [
      "completed",
      "in_progress",
      "pending",
    ]);
    assert.deepEqual(await tab.locator(".plan-content").allTextContents(), ["Read the code", "<b>Fix</b> it", "Test"]);
    assert.equal(await tab.locator(".plan b").count(), 0);
    const [plan, composer] = await Promise.all([tab.locator(".plan").boundingBox(), tab.locator(".composer").boundingBox()]);
    assert.ok(plan && composer && plan.y + plan.height <= composer.y + 1, "the plan is above the prompt");
    await tab.screenshot({ path: join(ARTIFACTS, "webview-plan.png"), fullPage: true });
    await feed([{ type: "session", items: [], running: false }]);
    assert.equal(await tab.locator(".plan").isHidden(), true);
    await clean();
  });

  test("a notice shows as a notice, never as the answer's text", async () => {
    await feed([
      { type: "turnStarted", prompt: "hi", context: [], sessionId: "s", title: "t" },
      {
        type: "progress",
        event: { kind: "notice", level: "warning", message: "MCP server 'broken' did not start" },
      },
      { type: "progress", event: { kind: "message_delta", messageId: "m1", text: "Answered." } },
    ]);
    assert.equal(await tab.textContent(".turn .notice.warning"), "MCP server 'broken' did not start");
    assert.equal(await tab.textContent(".message.assistant .markdown"), "Answered.\n");
    await clean();
  });

  test("model text never becomes markup", async () => {
    await feed([
      { type: "turnStarted", prompt: "<img src=x onerror=alert(1)>", context: [], sessionId: "s", title: "t" },
      { type: "progress", event: { kind: "message_delta", messageId: "m1", text: "<script>window.__pwned=1</script>" } },
      { type: "error", message: "<b>bold</b>" },
    ]);
    assert.equal(await tab.locator(".log img, .log script, .log b").count(), 0);
    assert.match((await tab.textContent(".message.assistant")) ?? "", /<script>/);
    assert.equal(await tab.evaluate(() => (globalThis as unknown as { __pwned?: number }).__pwned), undefined);
  });

  // -- following, working, reasoning, code blocks, errors -------------------------------------

  /** A turn whose answer streams `lines` lines, one delta each. */
  function streamed(lines: number, from = 0): ToWebview[] {
    return Array.from({ length: lines }, (_, index) => ({
      type: "progress" as const,
      event: { kind: "message_delta" as const, messageId: "m1", text: `Line ${from + index} of a long answer.\n\n` },
    }));
  }

  const started: ToWebview[] = [
    { type: "turnStarted", prompt: "Explain at length.", context: [], sessionId: "s1", title: "Explain" },
    { type: "progress", event: { kind: "run_started", maxIterations: 10, userMessageId: "u1" } },
    { type: "progress", event: { kind: "iteration_started", iteration: 1 } },
  ];

  test("the view follows the stream only while the user is at the bottom; Latest goes back down", async () => {
    await feed([...started, ...streamed(60)]);
    const log = tab.locator(".log");
    const bottom = () => log.evaluate((node) => node.scrollHeight - node.scrollTop - node.clientHeight);
    assert.ok((await bottom()) <= 40, "at the bottom while following");
    // The user scrolls up to read; the answer goes on: the view stays where they read.
    await log.evaluate((node) => {
      node.scrollTop = 100;
      node.dispatchEvent(new Event("scroll"));
    });
    await feed(streamed(40, 60));
    assert.equal(await log.evaluate((node) => node.scrollTop), 100);
    assert.equal(await tab.isVisible("button.jump-latest"), true);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-reading-above.png") });
    await tab.locator("button.jump-latest").click();
    assert.ok((await bottom()) <= 40, "back at the bottom");
    assert.equal(await tab.isVisible("button.jump-latest"), false);
    await feed(streamed(10, 100));
    assert.ok((await bottom()) <= 40, "following again");
    await clean();
  });

  test("a working indicator while the model thinks; its reasoning folded, then labelled Reasoning", async () => {
    await feed(started);
    assert.equal(await tab.isVisible(".turn .working"), true);
    assert.match((await tab.textContent(".turn .working")) ?? "", /Working/);
    await feed([
      { type: "progress", event: { kind: "thought_delta", messageId: "m1", text: "The user wants " } },
      { type: "progress", event: { kind: "thought_delta", messageId: "m1", text: "a long answer." } },
    ]);
    const reasoning = tab.locator(".message.assistant details.reasoning");
    assert.equal(await reasoning.count(), 1);
    assert.equal(await reasoning.getAttribute("open"), null, "folded");
    assert.equal(await reasoning.locator("summary").textContent(), "Thinking…");
    assert.match((await tab.textContent(".turn .working")) ?? "", /Thinking/);
    await feed(streamed(1));
    assert.equal(await tab.locator(".turn .working").count(), 0, "gone once the answer streams");
    assert.equal(await reasoning.locator("summary").textContent(), "Reasoning");
    await reasoning.locator("summary").click();
    assert.equal(await reasoning.locator(".reasoning-text").textContent(), "The user wants a long answer.");
    // The reasoning is not part of the answer's text.
    assert.doesNotMatch((await tab.textContent(".message.assistant .markdown")) ?? "", /user wants/);
    await feed([{ type: "progress", event: { kind: "run_finished", stopReason: "end_turn", iterations: 1 } }]);
    assert.equal(await tab.locator(".turn .working").count(), 0);
    await clean();
  });

  test("a reopened session shows each answer's reasoning folded before it, as live", async () => {
    await feed([
      {
        type: "session",
        sessionId: "s1",
        title: "Reasoned",
        running: false,
        items: [
          { type: "user", text: "What does main return?" },
          { type: "assistant", text: "", reasoning: "Read the file first." },
          { type: "tool", toolCallId: "c1", name: "read_file", title: "Read src/app.py", toolKind: "read", status: "completed", output: "return 42" },
          { type: "assistant", text: "It returns **42**.", reasoning: "The file says 42." },
          { type: "runEnd", stopReason: "end_turn", usage: { inputTokens: 10, outputTokens: 5 } },
        ],
      },
    ]);
    const reasoning = tab.locator(".message.assistant details.reasoning");
    assert.equal(await reasoning.count(), 2);
    for (const index of [0, 1]) {
      const details = reasoning.nth(index);
      assert.equal(await details.getAttribute("open"), null, "folded");
      assert.equal(await details.locator("summary").textContent(), "Reasoning");
    }
    await reasoning.nth(1).locator("summary").click();
    assert.equal(await reasoning.nth(1).locator(".reasoning-text").textContent(), "The file says 42.");
    assert.equal(await reasoning.nth(0).locator(".reasoning-text").textContent(), "Read the file first.");
    // Each before its own answer, and never part of an answer's text.
    const second = tab.locator(".message.assistant").filter({ has: tab.locator("details.reasoning") }).nth(1);
    assert.equal((await second.locator(".markdown").textContent())?.trim(), "It returns 42.");
    const order = await second.evaluate((node) => [...node.children].map((child) => child.className));
    assert.deepEqual(order.slice(-2), ["reasoning", "markdown"]);
    assert.doesNotMatch((await tab.textContent(".message.assistant .markdown")) ?? "", /file says/);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-replayed-reasoning.png") });
    await clean();
  });

  test("one tether header per answer, however many model calls it took", async () => {
    await feed(fixture("answer"));
    assert.ok((await tab.locator(".message.assistant").count()) >= 2, "two model calls");
    assert.equal(await tab.locator(".message.assistant .who").count(), 1);
    await clean();
  });

  test("code blocks: Copy and Insert post the code; a wide block scrolls instead of being cut", async () => {
    await feed(fixture("answer"));
    const block = tab.locator(".message.assistant .code-block").last();
    await block.hover();
    await block.locator("button.copy").click();
    assert.deepEqual((await posted()).at(-1), { type: "copy", text: "def main():\n    return 42" });
    assert.equal(await block.locator(".copy-done").textContent(), "Copied");
    await block.locator("button.insert").click();
    assert.deepEqual((await posted()).at(-1), { type: "insert", text: "def main():\n    return 42" });
    const wide = `\`\`\`python\nx = ${"1 + ".repeat(120)}1\n\`\`\`\n`;
    await feed([...started, { type: "progress", event: { kind: "message_delta", messageId: "w1", text: wide } }]);
    const pre = tab.locator(".code-block pre").last();
    const sizes = await pre.evaluate((node) => ({
      scroll: node.scrollWidth,
      client: node.clientWidth,
      right: node.getBoundingClientRect().right,
      view: node.closest(".log")?.getBoundingClientRect().right ?? 0,
    }));
    assert.ok(sizes.scroll > sizes.client, "it scrolls sideways");
    assert.ok(sizes.right <= sizes.view, "inside the view");
    await pre.evaluate((node) => (node.scrollLeft = node.scrollWidth));
    assert.ok((await pre.evaluate((node) => node.scrollLeft)) > 0);
    await clean();
  });

  test("code blocks: Apply posts the code and the file the fence or the text just before names", async () => {
    const answer = [
      "In `src/app.py`:",
      "",
      "```python",
      "def main():",
      "    return 43",
      "```",
      "",
      "The whole file:",
      "",
      "```python src/other.py",
      "x = 1",
      "```",
      "",
      "```ts:src/a.ts",
      "let a = 1;",
      "```",
      "",
      "See `src/app.py` for more. Or this:",
      "",
      "```",
      "plain",
      "```",
    ].join("\n");
    await feed([...started, { type: "progress", event: { kind: "message_delta", messageId: "a1", text: answer } }]);
    const applies = tab.locator(".message.assistant .code-block button.apply");
    assert.equal(await applies.count(), 4);
    assert.deepEqual(
      await applies.evaluateAll((nodes) => nodes.map((node) => node.getAttribute("title"))),
      ["Apply to src/app.py", "Apply to src/other.py", "Apply to src/a.ts", "Apply to the active editor"],
    );
    // The fence's file does not hide its language.
    assert.ok((await tab.locator(".code-block").nth(1).locator(".hljs-number").count()) > 0, "python highlighted");
    const sent: { text: string; path?: string }[] = [];
    for (let index = 0; index < 4; index += 1) {
      await tab.locator(".code-block").nth(index).hover();
      await applies.nth(index).click();
      const last = (await posted()).at(-1);
      assert.ok(last?.type === "apply", JSON.stringify(last));
      sent.push({ text: last.text, path: last.path ?? undefined });
    }
    assert.deepEqual(sent, [
      { text: "def main():\n    return 43", path: "src/app.py" },
      { text: "x = 1", path: "src/other.py" },
      { text: "let a = 1;", path: "src/a.ts" },
      { text: "plain", path: undefined },
    ]);
    await tab.locator(".code-block").first().hover();
    await tab.screenshot({ path: join(ARTIFACTS, "webview-apply.png") });
    await clean();
  });

  test("an error is scrolled into view with Retry, which posts retry", async () => {
    await feed([...started, ...streamed(60)]);
    await tab.locator(".log").evaluate((node) => {
      node.scrollTop = 0;
      node.dispatchEvent(new Event("scroll"));
    });
    await feed([{ type: "turnFinished", stopReason: "error", error: "HTTP 401: Incorrect API key provided (-32012)" }]);
    const retry = tab.locator(".turn-footer .notice.error button.retry");
    assert.equal(await retry.isVisible(), true);
    const inView = await retry.evaluate((node) => {
      const box = node.getBoundingClientRect();
      const log = node.closest(".log")?.getBoundingClientRect();
      return log !== undefined && box.top >= log.top && box.bottom <= log.bottom;
    });
    assert.equal(inView, true, "the error is where the user looks");
    assert.equal(await tab.isVisible("button.jump-latest"), false, "nothing covers it");
    await tab.screenshot({ path: join(ARTIFACTS, "webview-error-retry.png") });
    await retry.click();
    assert.deepEqual((await posted()).at(-1), { type: "retry" });
    assert.equal(await retry.isDisabled(), true);
    await clean();
  });

  test("a session that could not be resumed is said so; the next one starts below a line", async () => {
    await feed(fixture("answer"));
    await feed([{ type: "notice", level: "warning", message: "This conversation could not be resumed: gone." }]);
    assert.match((await tab.textContent(".notice.warning")) ?? "", /could not be resumed/);
    await feed([{ type: "turnStarted", prompt: "Hello", context: [], sessionId: "another", title: "Hello" }]);
    assert.equal(await tab.textContent(".session-divider"), "New session");
    assert.match((await tab.textContent(".log")) ?? "", /What does main return\?/, "the old transcript stays");
    await clean();
  });

  test("`/` completes the session's commands: asked once, filtered as typed, picked with the keys", async () => {
    await feed(fixture("answer"));
    const prompt = tab.locator(".composer .prompt");
    await prompt.click();
    await tab.keyboard.type("/");
    assert.deepEqual((await posted()).at(-1), { type: "commands" });
    await feed([
      {
        type: "commands",
        commands: [
          { name: "help", description: "lists the commands" },
          { name: "compact", description: "summarizes the older turns" },
          { name: "cost", description: "tokens used so far" },
          { name: "model", description: "shows or sets the model", argumentHint: "[model]" },
        ],
      },
    ]);
    const menu = tab.locator(".command-menu");
    assert.equal(await menu.isVisible(), true);
    assert.equal(await menu.locator(".command").count(), 4);
    await tab.keyboard.type("co");
    assert.deepEqual(await menu.locator(".command-name").allTextContents(), ["/compact", "/cost"]);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-commands.png") });
    await tab.keyboard.press("ArrowDown");
    await tab.keyboard.press("Enter");
    assert.equal(await prompt.inputValue(), "/cost ");
    assert.equal(await menu.isVisible(), false);
    assert.equal((await posted()).filter((m) => m.type === "commands").length, 1, "asked once");
    assert.ok(!(await posted()).some((m) => m.type === "send"), "Enter completed, did not send");
    await prompt.fill("");
    await tab.keyboard.type("/he");
    await tab.keyboard.press("Tab");
    assert.equal(await prompt.inputValue(), "/help ");
    await clean();
  });

  test("`@` completes a workspace file: asked as typed, picked with Enter, attached", async () => {
    const prompt = tab.locator(".composer .prompt");
    await prompt.click();
    await tab.keyboard.type("Explain @ap");
    assert.deepEqual((await posted()).at(-1), { type: "mentions", query: "ap" });
    await feed([{ type: "mentions", query: "ap", files: ["src/app.py", "src/apply.py"], symbols: [] }]);
    const menu = tab.locator(".command-menu");
    assert.deepEqual(await menu.locator(".command-name").allTextContents(), ["@src/app.py", "@src/apply.py"]);
    // An answer for an older word is not shown over the newer one.
    await tab.keyboard.type("p");
    await feed([{ type: "mentions", query: "ap", files: ["stale.py"], symbols: [] }]);
    assert.equal(await menu.isVisible(), false);
    await feed([{ type: "mentions", query: "app", files: ["src/app.py"], symbols: [] }]);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-mention.png") });
    await tab.keyboard.press("Enter");
    assert.equal(await prompt.inputValue(), "Explain @src/app.py ");
    assert.deepEqual((await posted()).at(-1), { type: "attachFile", path: "src/app.py" });
    assert.ok(!(await posted()).some((m) => m.type === "send"), "Enter picked, did not send");
    await clean();
  });

  test("`@` offers workspace symbols after the files; a picked one is attached by its lines", async () => {
    const prompt = tab.locator(".composer .prompt");
    await prompt.click();
    await tab.keyboard.type("Explain @mai");
    const symbol = { name: "main", kind: "function", file: "src/app.py", lines: [1, 2] as [number, number] };
    const method = { name: "main_loop", kind: "method", file: "src/app.py", lines: [5, 9] as [number, number], container: "App" };
    await feed([{ type: "mentions", query: "mai", files: ["src/main.py"], symbols: [symbol, method] }]);
    const menu = tab.locator(".command-menu");
    assert.deepEqual(await menu.locator(".command-name").allTextContents(), ["@src/main.py", "@main", "@main_loop"]);
    assert.equal(await menu.locator(".command").nth(1).locator(".codicon-symbol-function").count(), 1);
    assert.deepEqual(await menu.locator(".command").nth(2).locator(".command-hint, .command-description").allTextContents(), [
      "App",
      "src/app.py:5",
    ]);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-mention-symbol.png") });
    await tab.keyboard.press("ArrowDown");
    await tab.keyboard.press("Enter");
    assert.equal(await prompt.inputValue(), "Explain @main ");
    assert.deepEqual((await posted()).at(-1), { type: "attachSymbol", symbol });
    await clean();
  });

  test("the mode picker beside the prompt shows the session's mode and sets another; the model button picks", async () => {
    const picker = tab.locator(".composer select.mode-picker");
    assert.equal(await picker.inputValue(), "ask");
    assert.deepEqual(await picker.locator("option").allTextContents(), ["Ask", "Accept edits", "Read only"]);
    await feed([{ type: "sessionConfig", mode: "read_only", model: "gpt-test" }]);
    assert.equal(await picker.inputValue(), "read_only");
    const model = tab.locator(".composer button.model-picker");
    assert.equal(await model.innerText(), "gpt-test");
    await tab.screenshot({ path: join(ARTIFACTS, "webview-mode-picker.png") });
    await picker.selectOption("accept_edits");
    assert.deepEqual((await posted()).at(-1), { type: "setMode", mode: "accept_edits" });
    await model.click();
    assert.deepEqual((await posted()).at(-1), { type: "pickModel" });
    await clean();
  });

  test("the session list is searched by title, kept when the list is refreshed", async () => {
    await tab.locator('button[title="Sessions"]').click();
    const [sessions] = fixture("sessions");
    await feed([sessions]);
    const search = tab.locator(".sessions input.session-search");
    await search.fill("FORK main");
    const visible = () => tab.locator(".session-item:not(.hidden) .session-name").allTextContents();
    assert.deepEqual(await visible(), ["What does main return? (fork)"]);
    await feed([sessions]); // refreshed (after a fork or delete): still searched
    assert.deepEqual(await visible(), ["What does main return? (fork)"]);
    await search.fill("nothing like it");
    assert.deepEqual(await visible(), []);
    assert.equal(await tab.isVisible(".session-nomatch"), true);
    await search.fill("");
    assert.equal((await visible()).length, 2);
    assert.equal(await tab.isVisible(".session-nomatch"), false);
    await clean();
  });

  test("a sub-agent's text and calls are nested under its task call; Open posts its session", async () => {
    const stream = fixture("subagent");
    await feed(stream);
    const nested = stream.flatMap((m) => (m.type === "progress" && m.subagent ? [m.subagent] : []));
    const childId = nested[0]?.sessionId;
    assert.ok(childId, "the fixture has a sub-agent's progress");
    const task = tab.locator('.log > * .tool-card[data-tool-call-id="t1"]').first();
    const box = task.locator(".subagent");
    assert.equal(await box.count(), 1);
    assert.equal(await box.getAttribute("data-status"), "end_turn");
    assert.deepEqual(
      (await box.locator(".subagent-text").allInnerTexts()).map((text) => text.trim()),
      ["Reading it.", "It returns 42."],
    );
    assert.equal(await box.locator(".subagent-text strong").textContent(), "42");
    const read = box.locator(".tool-card.sub");
    assert.equal(await read.count(), 1);
    assert.equal(await read.locator(".tool-title").textContent(), "Read src/app.py");
    assert.equal(await read.getAttribute("data-status"), "completed");
    // Only the task call is a card of the view's own turn; the sub-agent's call is not.
    assert.equal(await tab.locator(".tool-card:not(.sub)").count(), 1);
    assert.equal(await task.getAttribute("data-status"), "completed");
    // The answer of the parent follows, outside the box.
    assert.match((await tab.locator(".log").innerText()) ?? "", /The sub-agent found 42\./);
    assert.doesNotMatch((await box.innerText()) ?? "", /The sub-agent found 42/);
    await tab.screenshot({ path: join(ARTIFACTS, "webview-subagent.png") });
    await box.locator("button.subagent-open").click();
    assert.deepEqual((await posted()).at(-1), { type: "openSession", sessionId: childId });
    await clean();
  });

  test("a sub-agent's question is asked in its call's card, inside the sub-agent's box", async () => {
    const stream = fixture("subagent-permission");
    const at = stream.findIndex((m) => m.type === "permission");
    const asked = stream[at];
    assert.ok(asked?.type === "permission" && asked.subagentRunId, "the fixture has a sub-agent's question");
    await feed(stream.slice(0, at + 1));
    const box = tab.locator(".subagent");
    const card = box.locator('.tool-card.sub[data-tool-call-id="c1"]');
    assert.equal(await card.count(), 1);
    assert.equal(await card.getAttribute("data-status"), "approval");
    assert.match((await card.locator(".proposal").innerText()) ?? "", /from the sub-agent/);
    // Only the task call is a card of the view's own turn: the question is not asked there.
    assert.equal(await tab.locator(".tool-card:not(.sub)").count(), 1);
    await card.locator("button.allow").click();
    assert.deepEqual((await posted()).at(-1), { type: "answer", requestId: asked.requestId, outcome: "allow" });
    await feed(stream.slice(at + 1));
    assert.equal(await card.locator("button.allow").count(), 0);
    assert.equal(await card.getAttribute("data-status"), "completed");
    await clean();
  });

  test("a stored task call offers to open its sub-agent's session", async () => {
    const [stored] = fixture("subagent-stored");
    assert.ok(stored?.type === "session");
    const child = stored.items.find((item) => item.type === "tool" && item.childSessionId);
    assert.ok(child?.type === "tool" && child.childSessionId);
    await feed([stored]);
    const card = tab.locator('.tool-card[data-tool-call-id="t1"]');
    assert.equal(await card.locator(".tool-title").textContent(), "Task: Read the app");
    await card.locator("button.subagent-open").click();
    assert.deepEqual((await posted()).at(-1), { type: "openSession", sessionId: child.childSessionId });
    // Other calls have no such action.
    assert.equal(await tab.locator("button.subagent-open").count(), 1);
    await clean();
  });
});
