import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { FakeWebview } from "./fake-webview";
import { SERVER_COMMAND, call, within, workspace, type Workspace } from "./helpers";
import * as stub from "./vscode-stub";

stub.install();

interface Extension {
  activate(context: { subscriptions: { dispose(): unknown }[] }): void;
  deactivate(): Promise<void>;
}

/**
 * `tether.chat.focus` as VS Code answers it: the chat view is resolved into the stand-in webview
 * returned here, the first time the command runs.
 */
function chatViewOnFocus(): FakeWebview {
  const webview = new FakeWebview();
  let shown = false;
  stub.commands.set("tether.chat.focus", () => {
    if (shown) return;
    shown = true;
    (stub.webviewProviders.get("tether.chat") as { resolveWebviewView(view: unknown): void }).resolveWebviewView(
      webview.view(),
    );
    webview.send({ type: "ready" });
  });
  return webview;
}

interface SessionLike {
  sessionId: string;
  workspace: string;
}

describe("activate() with a stand-in vscode module", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: stub.Uri.file("/ext") };

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.provider"] = ws.provider([
      { text: "Let me look.", toolCalls: [call("c1", "read_file", { path: "README.md" })] },
      { text: "It is a demo project." },
      { text: "too slow", delay: 30 },
    ]);
    // The bundle that ships: dist/extension.js, loaded after the stand-in is in place.
    extension = require(join(__dirname, "..", "..", "dist", "extension.js")) as Extension;
    extension.activate(context);
  });

  after(async () => {
    await within(extension.deactivate(), "deactivate", 15_000);
    for (const item of context.subscriptions) item.dispose();
    ws.remove();
  });

  test("registers the commands and the chat view; package.json declares them, with keybindings", () => {
    const registered = [...stub.commands.keys()].filter((id) => id.startsWith("tether.") && id !== "tether.chat.focus");
    assert.deepEqual(registered.sort(), [
      "tether.ask",
      "tether.cancel",
      "tether.forkSession",
      "tether.newSession",
      "tether.openChat",
      "tether.pickMode",
      "tether.pickModel",
      "tether.sendSelection",
      "tether.showSessions",
    ]);
    const manifest = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8")) as {
      contributes: { commands: { command: string }[]; keybindings: { command: string; key: string }[] };
    };
    assert.deepEqual(manifest.contributes.commands.map((c) => c.command).sort(), registered.sort());
    assert.deepEqual(
      manifest.contributes.keybindings.map((k) => k.command).sort(),
      ["tether.cancel", "tether.openChat", "tether.sendSelection"],
    );
    assert.deepEqual([...stub.webviewProviders.keys()], ["tether.chat"]);
  });

  test("Tether: New Session calls session/create", { timeout: 60_000 }, async () => {
    const session = (await within(
      stub.vscode.commands.executeCommand("tether.newSession"),
      "tether.newSession",
    )) as SessionLike;
    assert.ok(session, `no session; errors: ${stub.shown.errors.join("; ")}`);
    assert.equal(session.workspace, stub.Uri.file(ws.root).toString());
    assert.ok(stub.shown.info.some((m) => m.includes(session.sessionId)));
  });

  test("Tether: Ask sends the question into the chat view, which shows the turn", { timeout: 60_000 }, async () => {
    const webview = chatViewOnFocus();
    stub.ui.inputBox = () => "What is this?";
    const result = (await within(stub.vscode.commands.executeCommand("tether.ask"), "tether.ask")) as {
      stopReason: string;
    };
    assert.equal(result?.stopReason, "end_turn", `errors: ${stub.shown.errors.join("; ")}`);
    assert.equal((await webview.next("turnStarted")).prompt, "What is this?");
    assert.equal((await webview.next("turnFinished")).stopReason, "end_turn");
    assert.ok(
      webview.received.some((m) => m.type === "progress" && m.event.kind === "tool_call" && m.event.title === "Read README.md"),
    );
    // No second UI: no progress notification; the output channel keeps its log.
    assert.deepEqual(stub.shown.progress, []);
    const output = stub.outputText();
    assert.match(output, /\[chat\] > What is this\?/);
    assert.match(output, /\[tool\] Read README.md \{"path": ?"README.md"\}/);
    assert.match(output, /It is a demo project\./);
  });

  test("Tether: Cancel stops the chat view's run", { timeout: 60_000 }, async () => {
    stub.ui.inputBox = () => "Take your time";
    const outputBefore = stub.outputText().length;
    const asking = stub.vscode.commands.executeCommand("tether.ask");
    await within(stub.when(() => stub.outputText().slice(outputBefore).includes("> Take your time")), "run started");
    assert.equal(await stub.vscode.commands.executeCommand("tether.cancel"), true);
    const result = (await within(asking, "tether.ask")) as { stopReason: string };
    assert.equal(result?.stopReason, "cancelled", `errors: ${stub.shown.errors.join("; ")}`);
  });

  test("Tether: Show Sessions opens a transcript from session/messages", { timeout: 60_000 }, async () => {
    const offered: { label: string; detail?: string }[] = [];
    stub.ui.quickPick = <T>(items: T[]) => {
      offered.push(...(items as { label: string; detail?: string }[]));
      return items.find((item) => (item as { label: string }).label === "What is this?") ?? items[0];
    };
    const picked = (await within(
      stub.vscode.commands.executeCommand("tether.showSessions"),
      "tether.showSessions",
    )) as SessionLike;
    assert.ok(picked, `errors: ${stub.shown.errors.join("; ")}`);
    const transcript = stub.shown.documents.at(-1) ?? "";
    assert.match(transcript, /## user\n\nWhat is this\?/);
    assert.match(transcript, /tool call `read_file`/);
    assert.match(transcript, /It is a demo project\./);
    // Sessions are named by their first prompt (or "New session"), with a relative time: no bare ids.
    assert.ok(offered.some((item) => item.label === "What is this?"), JSON.stringify(offered));
    for (const item of offered) {
      assert.doesNotMatch(item.label, /^[0-9a-f-]{36}$/);
      assert.match(item.detail ?? "", /^updated (just now|.* ago)/);
    }
  });

  test("Tether: Fork Session forks, or says the server cannot yet", { timeout: 60_000 }, async () => {
    const forked = await within(stub.vscode.commands.executeCommand("tether.forkSession"), "tether.forkSession");
    if (forked === undefined) {
      assert.ok(stub.shown.warnings.some((m) => m.includes("cannot fork")), stub.shown.errors.join("; "));
    } else {
      assert.ok(stub.shown.info.some((m) => m.startsWith("Tether: forked")));
    }
    assert.deepEqual(stub.shown.errors, []);
  });

  test("a server crash shows an error and restarts the server", { timeout: 60_000 }, async () => {
    const pids = () => [...stub.outputText().matchAll(/ready \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    const [pid] = pids().slice(-1);
    assert.ok(pid, "the server was started");
    process.kill(pid, "SIGKILL");
    await within(stub.when(() => stub.shown.errors.some((m) => m.includes("restarting"))), "the crash message");
    await within(stub.when(() => pids().length === 2), "the restart");
    assert.match(stub.shown.errors.at(-1) ?? "", /stopped unexpectedly \(signal SIGKILL\)/);
    stub.shown.errors.length = 0;
    const session = (await within(
      stub.vscode.commands.executeCommand("tether.newSession"),
      "tether.newSession after the restart",
    )) as SessionLike;
    assert.ok(session?.sessionId, stub.shown.errors.join("; "));
  });

  test("Tether: Cancel without a run says so", async () => {
    assert.equal(await stub.vscode.commands.executeCommand("tether.cancel"), false);
    assert.ok(stub.shown.info.includes("Tether: no run is going."));
  });
});

describe("edits and withdrawn permission prompts in the extension", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: stub.Uri.file("/ext") };

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.approval"] = "ask";
    stub.settings["tether.provider"] = ws.provider([
      { text: "Writing.", toolCalls: [call("w1", "write_file", { path: "notes.txt", content: "hello\n" })] },
      { text: "Written." },
      { toolCalls: [call("w2", "write_file", { path: "never.txt", content: "no\n" })] },
    ]);
    stub.commands.set("vscode.diff", () => undefined); // the proposal opened beside the question
    extension = require(join(__dirname, "..", "..", "dist", "extension.js")) as Extension;
    extension.activate(context);
  });

  after(async () => {
    await within(extension.deactivate(), "deactivate", 15_000);
    for (const item of context.subscriptions) item.dispose();
    stub.ui.modal = (_message, ...buttons) => buttons[0];
    stub.ui.info = () => undefined;
    ws.remove();
  });

  test("Allow in the chat view's card writes the file; the kind and the diff are logged", { timeout: 60_000 }, async () => {
    const webview = chatViewOnFocus();
    stub.ui.inputBox = () => "Write a note";
    const asking = stub.vscode.commands.executeCommand("tether.ask");
    const question = await webview.next("permission");
    assert.equal(question.title, "Write notes.txt");
    assert.match(question.diff ?? "", /\+hello/);
    webview.send({ type: "answer", requestId: question.requestId, outcome: "allow" });
    const result = (await within(asking, "tether.ask")) as { stopReason: string };
    assert.equal(result?.stopReason, "end_turn", `errors: ${stub.shown.errors.join("; ")}`);
    assert.equal(readFileSync(join(ws.root, "notes.txt"), "utf8"), "hello\n");
    assert.equal(stub.shown.modals.length, 0, "asked in the view, never in a dialog");
    const output = stub.outputText();
    assert.match(output, /\[tool\] \(edit\) Write notes.txt \{"path": ?"notes.txt"/);
    assert.match(output, /\[permission\] Write notes.txt: allow/);
    assert.match(output, /\[tool\] \(edit\) Write notes.txt: completed\n(.*\n)*\+\+\+ b\/notes\.txt\n(.*\n)*\+hello\n/);
    // The session's transcript keeps the edit's diff (stored with the tool message).
    stub.ui.quickPick = <T>(items: T[]) => items[0];
    await within(Promise.resolve(stub.vscode.commands.executeCommand("tether.showSessions")), "showSessions");
    assert.match(stub.shown.documents.at(-1) ?? "", /\(result of w1\)\n\n```diff\n--- \/dev\/null\n\+\+\+ b\/notes\.txt\n(.*\n)*\+hello\n```/);
  });

  test("a question left unanswered is withdrawn when the run is cancelled", { timeout: 60_000 }, async () => {
    stub.ui.inputBox = () => "Write another";
    const webview = chatViewOnFocus();
    const from = webview.received.length;
    const asking = stub.vscode.commands.executeCommand("tether.ask");
    await webview.next("permission", from);
    assert.equal(await stub.vscode.commands.executeCommand("tether.cancel"), true);
    const result = (await within(asking, "tether.ask")) as { stopReason: string };
    assert.equal(result?.stopReason, "cancelled", `errors: ${stub.shown.errors.join("; ")}`);
    await webview.next("permissionClosed", from);
    assert.match(stub.outputText(), /\[permission\] Write never.txt: withdrawn by the server/);
    assert.match(stub.outputText(), /\[tool\] \(edit\) Write never.txt: cancelled/);
    assert.equal(existsSync(join(ws.root, "never.txt")), false);
    assert.deepEqual(stub.shown.errors, []);
  });
});
