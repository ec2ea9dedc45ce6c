/**
 * The chat view in a real VS Code: code-server (npm, pinned by package-lock.json) with the packaged
 * tether.vsix installed, the real `tether serve` of this checkout behind it (scripted provider),
 * driven by Debian's Chromium through playwright-core. Assertions are on the DOM of the workbench
 * and of the view's webview (iframes: frameLocator). Screenshots: e2e/artifacts/.
 *
 * The server keeps its sessions in the SQLite store the extension asks for by default, in the test's
 * own data directory (XDG_DATA_HOME). Screenshots of the chat in the light and the dark theme:
 * e2e/artifacts/NN-theme-light.png and NN-theme-dark.png.
 *
 * Run with `make vscode-e2e`. Environment: CHROMIUM (default /usr/bin/chromium), TETHER_PYTHON
 * (default the checkout's .venv/bin/python), E2E_KEEP=1 keeps the temporary directory.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = join(HERE, "..", "..", "..");
const VSIX = join(HERE, "..", "tether.vsix");
const CODE_SERVER = join(HERE, "node_modules", ".bin", "code-server");
const ARTIFACTS = join(HERE, "artifacts");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const PYTHON = process.env.TETHER_PYTHON ?? join(REPO, ".venv", "bin", "python");
/** Generous: code-server and its extension host start slowly on a busy machine. */
const WAIT = 120_000;

const call = (id, name, args) => ({ id, name, arguments: JSON.stringify(args) });

/** One script for the server's life: each prompt below consumes the turns noted beside it. */
const SCRIPT = [
  // "What is in app.py?"
  { text: "Let me read it.", toolCalls: [call("c1", "read_file", { path: "src/app.py" })] },
  {
    text: "`src/app.py` defines one function:\n\n```python\ndef main():\n    return 42\n```\n\nIt **returns 42**.",
  },
  // "Make it return 43"
  {
    text: "I will change the return value.",
    toolCalls: [call("e1", "edit_file", { path: "src/app.py", oldString: "return 42", newString: "return 43" })],
  },
  { text: "Done: `main()` now returns 43." },
  // "Write a note"
  { text: "Writing the note.", toolCalls: [call("w1", "write_file", { path: "notes.txt", content: "a note\n" })] },
  { text: "Understood, I left it alone." },
  // "Take your time" (stopped)
  { text: "This takes a while.", delay: 60 },
  // "Hello again" (a second session)
  { text: "Hello! This is a **new** session." },
];

const paragraphs = (count, what) =>
  Array.from({ length: count }, (_, index) => `${what} paragraph ${index + 1}: the story goes on.`).join("\n\n");

/** The script a settings change mid-chat points tether.provider to (the running server takes it). */
const SCRIPT_AFTER_CHANGE = [
  // "Do you remember?" (the same session, on the same server, with the new provider)
  { text: "Yes: you asked what is in app.py." },
  // "Tell me a long story"
  { text: paragraphs(60, "Long") },
  // "And another one" (streams on while the user reads above)
  { text: `Another story.\n\n${paragraphs(80, "More")}`, delay: 4 },
  // "Try the endpoint" (the endpoint fails; Retry)
  { error: "Incorrect API key provided", status: 401 },
  { text: "Recovered after the retry." },
  // Tether: Ask from the command palette
  { text: "Asked from the palette, answered in the chat." },
  // "Show me the new app" (its code block applied)
  { text: "Here is `src/app.py`:\n\n```python\ndef main():\n    return 44\n```" },
];

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function waitForHttp(url, child, log) {
  const deadline = Date.now() + WAIT;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`code-server exited (${child.exitCode}):\n${log()}`);
    try {
      const response = await fetch(url);
      if (response.status < 500) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error(`code-server did not answer at ${url}:\n${log()}`);
}

describe("the tether chat view in code-server", { timeout: 900_000 }, () => {
  let base;
  let project;
  let codeServer;
  let serverLog = "";
  let browser;
  let page;
  let shot = 0;
  let userData;
  let settings;
  let script2;

  /** The user's settings.json before code-server starts (`changes` on top). */
  const writeSettings = (changes) => {
    settings = { ...settings, ...changes };
    writeFileSync(join(userData, "User", "settings.json"), JSON.stringify(settings, null, 2));
  };

  /** Runs a command from the command palette (F1), by its title. */
  const runCommand = async (title) => {
    await page.locator(".statusbar").click({ position: { x: 5, y: 5 } }); // the workbench has the keys
    await page.keyboard.press("F1");
    const input = page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible", timeout: WAIT });
    await input.fill(`>${title}`);
    await page.locator(".quick-input-widget .monaco-list-row", { hasText: title }).first().waitFor({ timeout: WAIT });
    await input.press("Enter");
  };

  /**
   * Changes settings as a user does while VS Code runs: Preferences: Open User Settings (JSON),
   * the new text, save (code-server does not watch the file for changes made behind its back).
   */
  const changeSettings = async (changes) => {
    settings = { ...settings, ...changes };
    await runCommand("Preferences: Open User Settings (JSON)");
    const tab = page.locator('.tabs-container .tab[aria-label*="settings.json"]').first();
    await tab.waitFor({ timeout: WAIT });
    await page.locator(".editor-instance .monaco-editor .view-lines").first().click();
    await page.keyboard.press("Control+A");
    await page.keyboard.press("Delete");
    await page.keyboard.type(JSON.stringify(settings));
    await page.keyboard.press("Control+S");
    await page.locator(".tabs-container .tab.dirty").waitFor({ state: "detached", timeout: WAIT });
    await runCommand("View: Close Editor");
    await tab.waitFor({ state: "detached", timeout: WAIT });
  };

  const screenshot = async (name) => {
    shot += 1;
    await page.screenshot({ path: join(ARTIFACTS, `${String(shot).padStart(2, "0")}-${name}.png`) });
  };

  /** The chat view's document: the webview's outer iframe, then its active frame. */
  const chat = () => page.frameLocator("iframe.webview.ready").frameLocator("iframe#active-frame");

  /** Types a prompt, presses Enter, and waits until the view shows it as a new turn. */
  const sendPrompt = async (text) => {
    const turns = await chat().locator(".turn").count();
    const prompt = chat().locator("textarea.prompt");
    await prompt.click();
    await prompt.fill(text);
    await prompt.press("Enter");
    await chat().locator(".turn").nth(turns).locator(".message.user", { hasText: text }).waitFor({ timeout: WAIT });
  };

  /** Waits for the last turn to finish (Send is back) and returns it. */
  const finishedTurn = async () => {
    await chat().locator("button.send").waitFor({ state: "visible", timeout: WAIT });
    const turn = chat().locator(".turn").last();
    await turn.locator(".turn-footer .meta").waitFor({ timeout: WAIT });
    return turn;
  };

  before(async () => {
    assert.ok(existsSync(VSIX), `${VSIX} is missing: make vscode-package`);
    assert.ok(existsSync(CODE_SERVER), `${CODE_SERVER} is missing: make vscode-e2e installs it`);
    mkdirSync(ARTIFACTS, { recursive: true });
    base = mkdtempSync(join(tmpdir(), "tether-code-server-"));
    project = join(base, "project");
    mkdirSync(join(project, "src"), { recursive: true });
    writeFileSync(join(project, "README.md"), "# Demo\nA small project.\n");
    writeFileSync(join(project, "src", "app.py"), "def main():\n    return 42\n");
    const script = join(base, "script.json");
    writeFileSync(script, JSON.stringify(SCRIPT));
    script2 = join(base, "script-after-change.json");
    writeFileSync(script2, JSON.stringify(SCRIPT_AFTER_CHANGE));
    userData = join(base, "user-data");
    const extensions = join(base, "extensions");
    mkdirSync(join(userData, "User"), { recursive: true });
    settings = {
      "tether.serverCommand": [PYTHON, "-m", "tether", "serve"],
      "tether.provider": { type: "scripted", script },
      "tether.approval": "ask",
      "workbench.startupEditor": "none",
      "workbench.tips.enabled": false,
      "workbench.colorTheme": "Default Light Modern",
      // Typed into the settings editor as it is (changeSettings).
      "editor.autoClosingBrackets": "never",
      "editor.autoClosingQuotes": "never",
      "editor.autoSurround": "never",
      "editor.formatOnType": false,
      "editor.quickSuggestions": { other: false, comments: false, strings: false },
      "editor.suggestOnTriggerCharacters": false,
      "editor.acceptSuggestionOnCommitCharacter": false,
      "security.workspace.trust.enabled": false,
      "telemetry.telemetryLevel": "off",
      "extensions.autoUpdate": false,
      "extensions.autoCheckUpdates": false,
    };
    writeSettings({});
    const config = join(base, "config.yaml");
    writeFileSync(config, "auth: none\ncert: false\n");
    const common = ["--config", config, "--user-data-dir", userData, "--extensions-dir", extensions];
    // Every tether process of the test keeps its data (the SQLite session store) here.
    const env = { ...process.env, PASSWORD: undefined, XDG_DATA_HOME: join(base, "data") };
    const installed = spawnSync(CODE_SERVER, [...common, "--install-extension", VSIX], { encoding: "utf8", env });
    assert.equal(installed.status, 0, `--install-extension failed:\n${installed.stdout}\n${installed.stderr}`);
    assert.match(installed.stdout, /tether/i);
    const port = await freePort();
    codeServer = spawn(
      CODE_SERVER,
      [
        ...common,
        "--bind-addr",
        `127.0.0.1:${port}`,
        "--disable-telemetry",
        "--disable-update-check",
        "--disable-workspace-trust",
        "--disable-getting-started-override",
        project,
      ],
      { stdio: ["ignore", "pipe", "pipe"], env },
    );
    codeServer.stdout.on("data", (chunk) => (serverLog += chunk));
    codeServer.stderr.on("data", (chunk) => (serverLog += chunk));
    const url = `http://127.0.0.1:${port}/?folder=${encodeURIComponent(project)}`;
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, codeServer, () => serverLog);
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: `http://127.0.0.1:${port}` });
    page = await context.newPage();
    page.setDefaultTimeout(WAIT);
    await page.goto(url);
    await page.locator(".monaco-workbench").waitFor({ timeout: WAIT });
  });

  after(async () => {
    await browser?.close();
    codeServer?.kill();
    if (codeServer && codeServer.exitCode === null) await new Promise((resolve) => codeServer.once("exit", resolve));
    if (process.env.E2E_KEEP) console.log(`kept ${base}`);
    else if (base) rmSync(base, { recursive: true, force: true });
  });

  test("the Tether activity-bar container opens the chat view", async () => {
    const item = page.locator('.activitybar [aria-label^="Tether"]').first();
    await item.waitFor({ timeout: WAIT });
    await item.click();
    await chat().locator("textarea.prompt").waitFor({ timeout: WAIT });
    await chat().locator(".empty").waitFor();
    await screenshot("chat-view-opened");
  });

  test("a prompt streams Markdown and a tool card reaches completed", async () => {
    await sendPrompt("What is in app.py?");
    const turn = await finishedTurn();
    const card = turn.locator(".tool-card");
    assert.equal(await card.getAttribute("data-status"), "completed");
    assert.equal(await card.locator(".tool-title").textContent(), "Read src/app.py");
    const answer = turn.locator(".message.assistant .markdown").last();
    assert.equal(await answer.locator("strong").textContent(), "returns 42");
    assert.equal(await answer.locator("pre.hljs .hljs-keyword").first().textContent(), "def");
    assert.match(await turn.locator(".turn-footer .meta").textContent(), /scripted/);
    assert.equal(await chat().locator(".session-title").textContent(), "What is in app.py?");
    await card.locator("details.tool-output summary").click();
    await screenshot("answer-with-tool-card");
  });

  test("an edit is reviewed as a diff before it applies; Allow writes the file", async () => {
    await sendPrompt("Make it return 43");
    const card = chat().locator('.tool-card[data-tool-call-id="e1"]');
    await card.locator("button.allow").waitFor({ timeout: WAIT });
    assert.equal(await card.getAttribute("data-status"), "approval");
    assert.match(await card.locator(".proposal .hljs-addition").last().textContent(), /return 43/);
    // The diff editor opened beside, on virtual documents; the file is not written yet.
    await page.locator(".monaco-diff-editor").first().waitFor({ timeout: WAIT });
    await page.locator('.tabs-container .tab[aria-label*="app.py"]').first().waitFor({ timeout: WAIT });
    const diffEditor = page.locator(".monaco-diff-editor").first();
    await diffEditor.locator(".editor.modified .view-line", { hasText: "return 43" }).waitFor({ timeout: WAIT });
    await diffEditor.locator(".editor.original .view-line", { hasText: "return 42" }).waitFor({ timeout: WAIT });
    assert.equal(readFileSync(join(project, "src", "app.py"), "utf8"), "def main():\n    return 42\n");
    await screenshot("edit-awaiting-approval-with-diff");
    await card.locator("button.allow").click();
    await finishedTurn();
    assert.equal(await card.getAttribute("data-status"), "completed");
    assert.equal(readFileSync(join(project, "src", "app.py"), "utf8"), "def main():\n    return 43\n");
    // The proposal's diff editor closes with the question; no "Open Diff" notification for the view's runs.
    await page.locator('.tabs-container .tab[aria-label*="app.py"]').first().waitFor({ state: "detached", timeout: WAIT });
    assert.equal(await page.locator(".notifications-toasts .notification-toast", { hasText: "Tether changed" }).count(), 0);
    await screenshot("edit-allowed");
  });

  test("a rejected write leaves the disk alone", async () => {
    await sendPrompt("Write a note");
    const card = chat().locator('.tool-card[data-tool-call-id="w1"]');
    await card.locator("button.reject").waitFor({ timeout: WAIT });
    await card.locator("button.reject").click();
    await finishedTurn();
    assert.equal(await card.getAttribute("data-status"), "failed");
    assert.match(await card.locator("details.tool-output pre").textContent(), /rejected by user/);
    assert.equal(existsSync(join(project, "notes.txt")), false);
    await screenshot("write-rejected");
  });

  test("Stop cancels a running turn", async () => {
    await sendPrompt("Take your time");
    const stop = chat().locator("button.stop");
    await stop.waitFor({ state: "visible", timeout: WAIT });
    await screenshot("running-with-stop");
    await stop.click();
    const turn = await finishedTurn();
    assert.equal(await turn.getAttribute("data-stop-reason"), "cancelled");
    assert.match(await turn.locator(".turn-footer .meta").textContent(), /cancelled/);
  });

  test("a new session, then switching back and forking from the session list", async () => {
    await chat().locator('.header button[title="New session"]').click();
    await chat().locator(".empty").waitFor({ timeout: WAIT });
    await sendPrompt("Hello again");
    const turn = await finishedTurn();
    assert.match(await turn.locator(".message.assistant .markdown").textContent(), /new session/);

    await chat().locator('.header button[title="Sessions"]').click();
    const items = chat().locator(".session-item");
    await items.nth(1).waitFor({ timeout: WAIT });
    assert.deepEqual(await chat().locator(".session-name").allTextContents(), ["Hello again", "What is in app.py?"]);
    for (const when of await chat().locator(".session-when").allTextContents()) assert.match(when, /messages/);
    await screenshot("session-list");
    await chat().locator('.session-item .session-open[title="Open What is in app.py?"]').click();
    await chat()
      .locator(".session-title", { hasText: "What is in app.py?" })
      .waitFor({ timeout: WAIT });
    // The transcript is rebuilt from the server: all four turns, the edit card completed.
    await chat().locator('.tool-card[data-tool-call-id="e1"][data-status="completed"]').waitFor({ timeout: WAIT });
    assert.equal(await chat().locator(".turn").count(), 4);

    await chat().locator('.header button[title="Fork this session"]').click();
    await chat()
      .locator(".session-title", { hasText: "What is in app.py? (fork)" })
      .waitFor({ timeout: WAIT });
    assert.equal(await chat().locator(".turn").count(), 4);
    await chat().locator('.header button[title="Sessions"]').click();
    await chat().locator(".session-item").nth(2).waitFor({ timeout: WAIT });
    assert.ok(
      (await chat().locator(".session-name").allTextContents()).includes("What is in app.py? (fork)"),
      "the fork is listed",
    );
    await screenshot("forked");
  });

  test("Restore on the edit's prompt lists the file, then puts back the file and the conversation", async () => {
    await chat().locator('.header button[title="Sessions"]').click(); // close the list
    const turns = chat().locator(".turn");
    const edited = turns.filter({ has: chat().locator(".message.user", { hasText: "Make it return 43" }) });
    // Only the turn that changed a file offers Restore (its tooltip names the file).
    assert.equal(await chat().locator(".message.user button.restore").count(), 1);
    const restore = edited.locator("button.restore");
    assert.match(await restore.getAttribute("title"), /changed: src\/app\.py/);
    await restore.click();
    const picker = page.locator(".quick-input-widget");
    await picker.waitFor({ state: "visible", timeout: WAIT });
    assert.match(await picker.locator("input").getAttribute("placeholder"), /Files it will change: src\/app\.py/);
    await screenshot("restore-choices");
    await picker.locator(".monaco-list-row", { hasText: "Files and conversation" }).click();
    // The conversation from that prompt on is gone from the view, rebuilt from the server.
    await chat().locator(".message.user", { hasText: "Make it return 43" }).waitFor({ state: "detached", timeout: WAIT });
    assert.equal(await turns.count(), 1);
    assert.equal(readFileSync(join(project, "src", "app.py"), "utf8"), "def main():\n    return 42\n");
    await page
      .locator(".notifications-toasts .notification-toast", { hasText: "restored src/app.py" })
      .waitFor({ timeout: WAIT });
    await screenshot("restored");
  });

  test("a setting changed mid-chat goes to the running server and keeps the conversation", async () => {
    const title = await chat().locator(".session-title").textContent();
    const turns = await chat().locator(".turn").count();
    await chat().locator('.header button[title="Sessions"]').click();
    await chat().locator(".session-item").first().waitFor({ timeout: WAIT });
    const sessions = await chat().locator(".session-item").count();
    await chat().locator('.sessions button[title="Close"]').click();
    // The user points tether.provider elsewhere (settings.json): the running server takes it.
    await changeSettings({ "tether.provider": { type: "scripted", script: script2 } });
    await chat().locator(".notice.info", { hasText: "Settings changed: the next turn uses them" }).waitFor({ timeout: WAIT });
    assert.equal(await chat().locator(".notice", { hasText: "restarted" }).count(), 0, "no restart");
    await sendPrompt("Do you remember?");
    const turn = await finishedTurn();
    assert.match(await turn.locator(".message.assistant .markdown").textContent(), /you asked what is in app\.py/);
    // The same session, shown whole; no new one in the list; no "could not be resumed".
    assert.equal(await chat().locator(".session-title").textContent(), title);
    assert.equal(await chat().locator(".turn").count(), turns + 1);
    assert.equal(await chat().locator(".notice", { hasText: "could not be resumed" }).count(), 0);
    await chat().locator('.header button[title="Sessions"]').click();
    await chat().locator(".session-item").first().waitFor({ timeout: WAIT });
    assert.equal(await chat().locator(".session-item").count(), sessions);
    await chat().locator('.sessions button[title="Close"]').click();
    await screenshot("setting-changed-mid-chat");
  });

  test("the view stays where the user reads while an answer streams on", async () => {
    await sendPrompt("Tell me a long story");
    await finishedTurn();
    const log = chat().locator(".log");
    const distance = () => log.evaluate((node) => node.scrollHeight - node.scrollTop - node.clientHeight);
    assert.ok((await distance()) <= 40, "followed to the end");
    await sendPrompt("And another one");
    // The first words are in; the rest waits a few seconds: the user scrolls up to read meanwhile.
    await chat().locator(".message.assistant .markdown", { hasText: "Another" }).waitFor({ timeout: WAIT });
    await log.hover();
    await page.mouse.wheel(0, -2500);
    await chat().locator("button.jump-latest").waitFor({ state: "visible", timeout: WAIT });
    const reading = await log.evaluate((node) => node.scrollTop);
    await chat().locator(".message.assistant .markdown", { hasText: "More paragraph 80" }).waitFor({ timeout: WAIT });
    await finishedTurn();
    assert.equal(await log.evaluate((node) => node.scrollTop), reading, "not pulled down");
    assert.ok((await distance()) > 1000);
    await screenshot("reading-above-while-streaming");
    await chat().locator("button.jump-latest").click();
    assert.ok((await distance()) <= 40);
  });

  test("Copy on a code block puts its code on the clipboard", async () => {
    const block = chat().locator(".code-block", { hasText: "def main" }).first();
    await block.scrollIntoViewIfNeeded();
    await block.hover();
    await block.locator("button.copy").click();
    await block.locator(".copy-done").waitFor({ timeout: WAIT });
    await page.waitForFunction(
      async () => (await navigator.clipboard.readText()) === "def main():\n    return 42",
      undefined,
      { timeout: WAIT },
    );
    await screenshot("code-block-copied");
  });

  test("an endpoint error is shown in view with Retry; Retry answers, the prompt kept once", async () => {
    await sendPrompt("Try the endpoint");
    const error = chat().locator(".turn-footer .notice.error").last();
    await error.waitFor({ timeout: WAIT });
    assert.match(await error.textContent(), /Incorrect API key provided/);
    assert.equal(await error.locator("button.retry").isVisible(), true);
    await screenshot("endpoint-error-with-retry");
    await error.locator("button.retry").click();
    await chat().locator(".message.assistant .markdown", { hasText: "Recovered after the retry." }).waitFor({ timeout: WAIT });
    await finishedTurn();
    assert.equal(await chat().locator(".message.user", { hasText: "Try the endpoint" }).count(), 1);
    assert.equal(await chat().locator(".notice.error", { hasText: "Incorrect API key" }).count(), 0);
  });

  test("Tether: Ask from the command palette sends into the chat view", async () => {
    const turns = await chat().locator(".turn").count();
    // The toasts of earlier tests (a restore's) may still show: none is this ask's.
    await runCommand("Notifications: Clear All Notifications");
    await page.locator(".notifications-toasts .notification-toast").first().waitFor({ state: "detached", timeout: WAIT });
    await runCommand("Tether: Ask");
    const input = page.locator(".quick-input-widget input");
    await page.locator(".quick-input-widget", { hasText: "What should tether do?" }).waitFor({ timeout: WAIT });
    await input.fill("Where does this go?");
    await input.press("Enter");
    await chat().locator(".turn").nth(turns).locator(".message.user", { hasText: "Where does this go?" }).waitFor({ timeout: WAIT });
    const turn = await finishedTurn();
    assert.match(await turn.locator(".message.assistant .markdown").textContent(), /answered in the chat/);
    // One UI: no progress notification of its own.
    assert.equal(await page.locator(".notifications-toasts .notification-toast", { hasText: "Tether" }).count(), 0);
  });

  test("@ lists the workspace's files; the picked one is attached", async () => {
    const prompt = chat().locator("textarea.prompt");
    await prompt.click();
    await prompt.pressSequentially("Explain @app");
    const menu = chat().locator(".command-menu");
    await menu.locator(".command-name", { hasText: "@src/app.py" }).waitFor({ timeout: WAIT });
    await screenshot("mention-menu");
    await prompt.press("Enter");
    await chat().locator(".composer .chips .chip", { hasText: "src/app.py" }).waitFor({ timeout: WAIT });
    assert.equal(await prompt.inputValue(), "Explain @src/app.py ");
    await chat().locator('.composer .chips .chip button[title="Remove src/app.py"]').click();
    await chat().locator(".composer .chips .chip").waitFor({ state: "detached", timeout: WAIT });
    await prompt.fill("");
  });

  test("@ lists the workspace's symbols too; the picked one attaches its lines", async () => {
    // The Markdown extension offers README.md's heading as a symbol once it runs: a Markdown file open.
    await page.locator(".statusbar").click({ position: { x: 5, y: 5 } });
    await page.keyboard.press("Control+P");
    const quickOpen = page.locator(".quick-input-widget input");
    await quickOpen.waitFor({ state: "visible", timeout: WAIT });
    await quickOpen.fill("README.md");
    await page.locator(".quick-input-widget .monaco-list-row", { hasText: "README.md" }).first().waitFor({ timeout: WAIT });
    await quickOpen.press("Enter");
    await page.locator('.tabs-container .tab[aria-label*="README.md"]').first().waitFor({ timeout: WAIT });
    const prompt = chat().locator("textarea.prompt");
    await prompt.click();
    // Its index may come after the first ask: the word is typed again until a symbol is offered.
    const symbol = chat().locator(".command-menu .command", { has: chat().locator(".command-icon:not(.codicon-file)") });
    const deadline = Date.now() + WAIT;
    await prompt.pressSequentially("Explain @Demo");
    while (!(await symbol.first().isVisible())) {
      assert.ok(Date.now() < deadline, "no workspace symbol offered for @Demo");
      await prompt.press("Backspace");
      await prompt.pressSequentially("o");
      await symbol.first().waitFor({ timeout: 2_000 }).catch(() => undefined);
    }
    assert.match(await symbol.first().locator(".command-description").textContent(), /^README\.md:1$/);
    await screenshot("mention-symbol-menu");
    await symbol.first().dispatchEvent("mousedown");
    const chip = chat().locator(".composer .chips .chip", { hasText: "README.md:1-" });
    await chip.waitFor({ timeout: WAIT });
    await chip.locator("button").click();
    await chip.waitFor({ state: "detached", timeout: WAIT });
    await prompt.fill("");
  });

  test("the view's mode picker sets the session's mode; the status bar shows it", async () => {
    const picker = chat().locator("select.mode-picker");
    assert.equal(await picker.inputValue(), "ask");
    await picker.selectOption("read_only");
    await page.locator(".statusbar-item", { hasText: "Read only" }).waitFor({ timeout: WAIT });
    await screenshot("mode-read-only");
    await picker.selectOption("ask");
    await page.locator(".statusbar-item", { hasText: /\bAsk\b/ }).waitFor({ timeout: WAIT });
  });

  test("Apply on a code block shows the diff; Accept writes the file", async () => {
    await sendPrompt("Show me the new app");
    const turn = await finishedTurn();
    const block = turn.locator(".code-block", { hasText: "return 44" });
    await block.hover();
    const apply = block.locator("button.apply");
    assert.equal(await apply.getAttribute("title"), "Apply to src/app.py");
    await apply.click();
    const diffEditor = page.locator(".monaco-diff-editor").first();
    await diffEditor.locator(".editor.modified .view-line", { hasText: "return 44" }).waitFor({ timeout: WAIT });
    await diffEditor.locator(".editor.original .view-line", { hasText: "return 42" }).waitFor({ timeout: WAIT });
    const toast = page.locator(".notifications-toasts .notification-toast", { hasText: "apply the code block to src/app.py" });
    await toast.waitFor({ timeout: WAIT });
    const tab = page.locator('.tabs-container .tab[aria-label*="Apply"]').first();
    await tab.waitFor({ timeout: WAIT });
    assert.equal(readFileSync(join(project, "src", "app.py"), "utf8"), "def main():\n    return 42\n", "nothing written yet");
    await screenshot("apply-diff");
    await toast.getByRole("button", { name: "Accept" }).click();
    // The diff editor closes once the file is written.
    await tab.waitFor({ state: "detached", timeout: WAIT });
    assert.equal(readFileSync(join(project, "src", "app.py"), "utf8"), "def main():\n    return 44\n");
  });

  test("light and dark themes", async () => {
    await chat().locator(".log").evaluate((node) => (node.scrollTop = 0));
    await chat().locator(".code-block").first().hover(); // its Copy, Insert and Apply
    await screenshot("theme-light");
    await changeSettings({ "workbench.colorTheme": "Default Dark Modern" });
    await page.locator(".monaco-workbench.vs-dark").waitFor({ timeout: WAIT });
    await chat().locator(".code-block").first().hover();
    await screenshot("theme-dark");
  });
});
