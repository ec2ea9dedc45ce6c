/**
 * The chat view's conversation outlives a change of settings (sent to the running server, or a
 * restart for those it cannot take), VS Code reopening the workspace, and, when the store cannot
 * give the session back, a notice in the view. Against the real server, with its default store (SQLite, here in the test's own data directory).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { FakeWebview } from "./fake-webview";
import { SERVER_COMMAND, within, workspace, type Workspace } from "./helpers";
import * as stub from "./vscode-stub";

stub.install();

interface Context {
  subscriptions: { dispose(): unknown }[];
  extensionUri: unknown;
  workspaceState: { get<T>(key: string): T | undefined; update(key: string, value: unknown): Promise<void> };
}

interface Extension {
  activate(context: Context): void;
  deactivate(): Promise<void>;
}

interface Provider {
  resolveWebviewView(view: unknown): void;
}

/** VS Code's per-workspace memento, kept across the "windows" this test opens. */
const state = new Map<string, unknown>();
const workspaceState: Context["workspaceState"] = {
  get: <T>(key: string) => state.get(key) as T | undefined,
  update: async (key, value) => {
    if (value === undefined) state.delete(key);
    else state.set(key, value);
  },
};

const serverPids = () => [...stub.outputText().matchAll(/ready \(pid (\d+)\)/g)].map((m) => Number(m[1]));

describe("the chat view keeps its conversation when the server restarts", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  let context: Context;
  let webview: FakeWebview;
  let sessionId = "";

  /** A VS Code window on the workspace: the extension activated, its chat view shown. */
  function open(): void {
    context = { subscriptions: [], extensionUri: stub.Uri.file("/ext"), workspaceState };
    extension.activate(context);
    webview = new FakeWebview();
    (stub.webviewProviders.get("tether.chat") as Provider).resolveWebviewView(webview.view());
  }

  async function close(): Promise<void> {
    await within(extension.deactivate(), "deactivate", 15_000);
    for (const item of context.subscriptions) item.dispose();
  }

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.approval"] = "ask";
    delete stub.settings["tether.sessions.store"]; // the default: sqlite
    stub.settings["tether.provider"] = ws.provider([{ text: "Noted: 7." }]);
    stub.commands.set("tether.chat.focus", () => undefined);
    extension = require(join(__dirname, "..", "..", "dist", "extension.js")) as Extension;
    open();
  });

  after(async () => {
    await close();
    ws.remove();
  });

  /** The text the view was streamed from `from` on. */
  function answered(from: number): string {
    return webview.received
      .slice(from)
      .flatMap((m) => (m.type === "progress" && m.event.kind === "message_delta" ? [m.event.text] : []))
      .join("");
  }

  test("a provider changed mid-chat goes to the running server; the next prompt uses it in the same session", { timeout: 60_000 }, async () => {
    webview.send({ type: "ready" });
    webview.send({ type: "send", text: "Remember 7." });
    sessionId = (await webview.next("turnStarted")).sessionId;
    assert.equal((await webview.next("turnFinished")).stopReason, "end_turn");
    const pids = serverPids().length;

    const from = webview.received.length;
    stub.settings["tether.provider"] = ws.provider([{ text: "You said 7." }]);
    stub.changeConfiguration("tether.provider");
    webview.send({ type: "send", text: "What did I say?" }); // at once: the settings went first
    assert.equal((await webview.next("turnStarted", from)).sessionId, sessionId);
    assert.equal((await webview.next("turnFinished", from)).stopReason, "end_turn");
    assert.equal(answered(from), "You said 7.", "the new provider answered");
    assert.equal(serverPids().length, pids, "the same server");
    assert.deepEqual(
      webview.received.slice(from).filter((m) => m.type === "notice"),
      [{ type: "notice", level: "info", message: "Settings changed: the next turn uses them; this conversation goes on." }],
    );
    webview.send({ type: "listSessions" });
    const { sessions } = await webview.next("sessions", from);
    assert.deepEqual(
      sessions.map((s) => [s.sessionId, s.messageCount]),
      [[sessionId, 4]],
    );
  });

  test("a provider changed while a turn runs leaves that turn as it began; the next turn uses it", { timeout: 60_000 }, async () => {
    stub.settings["tether.provider"] = ws.provider([{ text: "Slow answer.", delay: 1.5 }]);
    stub.changeConfiguration("tether.provider");
    let from = webview.received.length;
    webview.send({ type: "send", text: "Take a moment." });
    await webview.next("progress", from, (m) => m.event.kind === "message_delta");
    const pids = serverPids().length;
    stub.settings["tether.provider"] = ws.provider([{ text: "After the change." }]);
    stub.changeConfiguration("tether.provider");
    assert.equal((await webview.next("turnFinished", from)).stopReason, "end_turn", "the turn was not cut short");
    assert.equal(answered(from), "Slow answer.");
    from = webview.received.length;
    webview.send({ type: "send", text: "And now?" });
    assert.equal((await webview.next("turnStarted", from)).sessionId, sessionId);
    assert.equal((await webview.next("turnFinished", from)).stopReason, "end_turn");
    assert.equal(answered(from), "After the change.");
    assert.equal(serverPids().length, pids, "the same server");
  });

  test("a setting that needs a restart, changed while a turn runs, restarts the server once the turn has ended", { timeout: 60_000 }, async () => {
    stub.settings["tether.provider"] = ws.provider([{ text: "Slow answer.", delay: 1.5 }, { text: "On the new server." }]);
    stub.changeConfiguration("tether.provider");
    let from = webview.received.length;
    webview.send({ type: "send", text: "Take a moment." });
    await webview.next("progress", from, (m) => m.event.kind === "message_delta");
    const pids = serverPids().length;
    stub.changeConfiguration("tether.serverCommand");
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn", "the turn was not cut short");
    from = webview.received.length;
    const notice = await webview.next("notice", from);
    assert.equal(notice.message, "The server restarted with the new settings: this conversation goes on.");
    assert.equal(serverPids().length, pids + 1);
    const shown = await webview.next("session", from);
    assert.equal(shown.sessionId, sessionId);
  });

  test("VS Code opening the workspace again shows the same conversation", { timeout: 60_000 }, async () => {
    await close();
    open();
    webview.send({ type: "ready" });
    const shown = await webview.next("session");
    assert.equal(shown.sessionId, sessionId);
    assert.equal(shown.items.filter((item) => item.type === "user").length, 5);
  });

  test("a server that crashes is started again and the view shows its session again", { timeout: 60_000 }, async () => {
    const [pid] = serverPids().slice(-1);
    const from = webview.received.length;
    process.kill(pid, "SIGKILL");
    const notice = await webview.next("notice", from);
    assert.equal(notice.message, "The server restarted after it stopped: this conversation goes on.");
    const shown = await webview.next("session", from);
    assert.equal(shown.sessionId, sessionId);
    assert.ok(!stub.shown.errors.some((m) => m.includes("gone")), "a durable store keeps the sessions");
  });

  test("a session the new store does not have is said so; the next prompt starts another", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    stub.settings["tether.sessions.store"] = "memory";
    stub.settings["tether.provider"] = ws.provider([{ text: "Fresh." }]);
    stub.changeConfiguration("tether.sessions.store");
    // The restart is lazy only when no server runs: this one runs, so it restarts and tries now.
    const notice = await webview.next("notice", from);
    assert.match(notice.message, /could not be resumed: the server keeps sessions in memory/);
    webview.send({ type: "send", text: "Hello again." });
    const started = await webview.next("turnStarted", from);
    assert.notEqual(started.sessionId, sessionId);
    assert.equal((await webview.next("turnFinished", from)).stopReason, "end_turn");
    delete stub.settings["tether.sessions.store"];
  });

  test("Retry after an endpoint error sends the prompt again; the conversation holds it once", { timeout: 60_000 }, async () => {
    webview.send({ type: "newSession" });
    const from = webview.received.length;
    stub.settings["tether.provider"] = ws.provider([
      { error: "Incorrect API key provided", status: 401 },
      { text: "Now it works." },
    ]);
    stub.changeConfiguration("tether.provider");
    webview.send({ type: "send", text: "Try this." });
    const failed = await webview.next("turnFinished", from);
    assert.equal(failed.stopReason, "error");
    assert.match(failed.error ?? "", /Incorrect API key provided/);
    const retryFrom = webview.received.length;
    webview.send({ type: "retry" });
    const started = await webview.next("turnStarted", retryFrom);
    assert.equal(started.prompt, "Try this.");
    assert.equal((await webview.next("turnFinished", retryFrom)).stopReason, "end_turn");
    webview.send({ type: "listSessions" });
    const { sessions } = await webview.next("sessions", retryFrom);
    assert.equal(sessions.find((s) => s.sessionId === started.sessionId)?.messageCount, 2);
  });

  test("a code block's Copy fills the clipboard; Insert replaces the editor's selection", async () => {
    webview.send({ type: "copy", text: "def main():\n    return 42" });
    await within(stub.when(() => stub.clipboard.length > 0), "the clipboard");
    assert.deepEqual(stub.clipboard, ["def main():\n    return 42"]);
    const replaced: [unknown, string][] = [];
    const selection = { start: 0, end: 3 };
    stub.vscode.window.activeTextEditor = {
      selections: [selection],
      document: { getText: () => "" },
      edit: async (build: (edit: { replace(range: unknown, text: string): void }) => void) => {
        build({ replace: (range, text) => replaced.push([range, text]) });
        return true;
      },
    };
    try {
      webview.send({ type: "insert", text: "x = 1" });
      await within(stub.when(() => stub.shown.documents.length > 0 || replaced.length > 0), "the insert");
      assert.deepEqual(replaced, [[selection, "x = 1"]]);
    } finally {
      stub.vscode.window.activeTextEditor = undefined;
    }
  });

  test("`/` asks for the session's slash commands (session/commands)", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    webview.send({ type: "commands" });
    const { commands } = await webview.next("commands", from);
    const names = commands.map((command) => command.name);
    for (const name of ["help", "compact"]) assert.ok(names.includes(name), names.join(", "));
    assert.ok(commands.every((command) => command.description.length > 0));
  });

  test("Tether: Set Model sets the model of the chat's session (session/configure)", { timeout: 60_000 }, async () => {
    stub.ui.quickPick = <T>(items: T[]) => items.find((item) => (item as { label: string }).label === "Another model…");
    stub.ui.inputBox = () => "my-model";
    const session = (await within(
      Promise.resolve(stub.vscode.commands.executeCommand("tether.pickModel")),
      "tether.pickModel",
    )) as { sessionId: string; model?: string } | undefined;
    assert.equal(session?.model, "my-model", stub.shown.errors.join("; "));
    // Offered again, the session's model is the current one, and the configured one is a way back.
    let offered: { label: string; description?: string }[] = [];
    stub.ui.quickPick = <T>(items: T[]) => {
      offered = items as { label: string; description?: string }[];
      return items.find((item) => (item as { label: string }).label === "The configured model");
    };
    const reset = (await stub.vscode.commands.executeCommand("tether.pickModel")) as { model?: string } | undefined;
    assert.deepEqual(offered[0], { label: "my-model", description: "current" });
    assert.equal(reset?.model, undefined);
    stub.ui.quickPick = <T>(items: T[]) => items[0];
    stub.ui.inputBox = () => undefined;
  });

  test("`@` offers the workspace's files; a picked one is attached as context", { timeout: 60_000 }, async () => {
    let from = webview.received.length;
    webview.send({ type: "mentions", query: "app" });
    const offered = await webview.next("mentions", from);
    assert.deepEqual(offered, { type: "mentions", query: "app", files: ["src/app.py"], symbols: [] });
    from = webview.received.length;
    webview.send({ type: "attachFile", path: "src/app.py" });
    const { items } = await webview.next("context", from);
    assert.deepEqual(items.at(-1), { label: "src/app.py", file: "src/app.py", text: "def main():\n    return 42\n" });
    webview.send({ type: "detach", index: items.length - 1 });
  });
});
