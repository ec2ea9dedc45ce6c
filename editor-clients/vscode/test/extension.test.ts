import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { SERVER_COMMAND, call, within, workspace, type Workspace } from "./helpers";
import * as stub from "./vscode-stub";

stub.install();

interface Extension {
  activate(context: { subscriptions: { dispose(): unknown }[] }): void;
  deactivate(): Promise<void>;
}

interface SessionLike {
  sessionId: string;
  workspace: string;
}

describe("activate() with a stand-in vscode module", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  const context = { subscriptions: [] as { dispose(): unknown }[] };

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

  test("registers the seven commands and the chat view", () => {
    assert.deepEqual(
      [...stub.commands.keys()].sort(),
      [
        "tether.ask",
        "tether.cancel",
        "tether.forkSession",
        "tether.newSession",
        "tether.openChat",
        "tether.pickMode",
        "tether.showSessions",
      ],
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

  test("Tether: Ask streams the answer and tool calls into the output channel", { timeout: 60_000 }, async () => {
    stub.ui.inputBox = () => "What is this?";
    const result = (await within(stub.vscode.commands.executeCommand("tether.ask"), "tether.ask")) as {
      stopReason: string;
    };
    assert.equal(result?.stopReason, "end_turn", `errors: ${stub.shown.errors.join("; ")}`);
    const output = stub.outputText();
    assert.match(output, /> What is this\?/);
    assert.match(output, /Let me look\./);
    assert.match(output, /\[tool\] Read README.md \{"path": ?"README.md"\}/);
    assert.match(output, /\[tool\] Read README.md: completed/);
    assert.match(output, /It is a demo project\./);
    assert.match(output, /\[end_turn\] 2 iteration\(s\), 1 tool call\(s\)/);
    assert.deepEqual(stub.shown.progress, ["iteration 1", "iteration 1 · tool Read README.md", "iteration 2"]);
  });

  test("cancelling the progress notification sends kernel/cancel", { timeout: 60_000 }, async () => {
    stub.ui.inputBox = () => "Take your time";
    let cancel: (() => void) | undefined;
    stub.ui.progressStarted = (cancelProgress) => {
      cancel = cancelProgress;
    };
    const before = stub.shown.progress.length;
    const asking = stub.vscode.commands.executeCommand("tether.ask");
    // Cancel once the run has started (its first iteration is reported).
    await within(stub.when(() => cancel !== undefined && stub.shown.progress.length > before), "run started");
    cancel?.();
    const result = (await within(asking, "tether.ask")) as { stopReason: string };
    assert.equal(result?.stopReason, "cancelled", `errors: ${stub.shown.errors.join("; ")}`);
    assert.match(stub.outputText(), /\[cancelled\]/);
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
  const context = { subscriptions: [] as { dispose(): unknown }[] };

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

  test("Allow on the prompt writes the file; the kind and the diff are shown", { timeout: 60_000 }, async () => {
    const modals = stub.shown.modals.length;
    stub.ui.inputBox = () => "Write a note";
    let offered: string[] = [];
    stub.ui.modal = (_message, ...buttons) => {
      offered = buttons;
      return buttons.includes("Allow") ? "Allow" : undefined;
    };
    stub.ui.info = (_message, ...items) => (items.includes("Open Diff") ? "Open Diff" : undefined);
    const documents = stub.shown.documents.length;
    const result = (await within(stub.vscode.commands.executeCommand("tether.ask"), "tether.ask")) as {
      stopReason: string;
    };
    assert.equal(result?.stopReason, "end_turn", `errors: ${stub.shown.errors.join("; ")}`);
    assert.equal(readFileSync(join(ws.root, "notes.txt"), "utf8"), "hello\n");
    assert.deepEqual(stub.shown.modals.slice(modals), ["Tether wants to: Write notes.txt"]);
    assert.deepEqual(offered, ["Allow", "Always allow", "Always reject", "Reject"]);
    // The change the server proposes, as a unified diff: no raw JSON with \n escapes.
    const detail = stub.shown.modalDetails.at(-1) ?? "";
    assert.match(detail, /^--- \/dev\/null\n\+\+\+ b\/notes\.txt\n@@ -0,0 \+1(,1)? @@\n\+hello\n/);
    const output = stub.outputText();
    assert.match(output, /\[tool\] \(edit\) Write notes.txt \{"path": ?"notes.txt"/);
    assert.match(output, /\[permission\] Write notes.txt: allow/);
    assert.match(output, /\[tool\] \(edit\) Write notes.txt: completed\n(.*\n)*\+\+\+ b\/notes\.txt\n(.*\n)*\+hello\n/);
    assert.ok(
      stub.shown.progress.includes("iteration 1 · tool (edit) Write notes.txt"),
      stub.shown.progress.join("; "),
    );
    assert.ok(stub.shown.info.includes("Tether changed notes.txt."));
    // "Open Diff" opens the diff as a read-only virtual document in the diff language.
    await within(stub.when(() => stub.shown.documents.length > documents), "the diff document");
    assert.match(stub.shown.documents.at(-1) ?? "", /^\+hello$/m);
    assert.equal(stub.shown.languages.at(-1), "diff");
    // The session's transcript keeps the edit's diff (stored with the tool message).
    await within(Promise.resolve(stub.vscode.commands.executeCommand("tether.showSessions")), "showSessions");
    assert.match(stub.shown.documents.at(-1) ?? "", /\(result of w1\)\n\n```diff\n--- \/dev\/null\n\+\+\+ b\/notes\.txt\n(.*\n)*\+hello\n```/);
  });

  test("a prompt withdrawn when the run is cancelled is no longer waited for", { timeout: 60_000 }, async () => {
    const modals = stub.shown.modals.length;
    stub.ui.inputBox = () => "Write another";
    // A user who never answers the modal.
    stub.ui.modal = () => new Promise<string | undefined>(() => undefined);
    let cancel: (() => void) | undefined;
    stub.ui.progressStarted = (cancelProgress) => {
      cancel = cancelProgress;
    };
    const asking = stub.vscode.commands.executeCommand("tether.ask");
    await within(stub.when(() => stub.shown.modals.length > modals), "the permission prompt");
    cancel?.();
    const result = (await within(asking, "tether.ask")) as { stopReason: string };
    assert.equal(result?.stopReason, "cancelled", `errors: ${stub.shown.errors.join("; ")}`);
    assert.match(stub.outputText(), /\[permission\] Write never.txt: withdrawn by the server/);
    assert.match(stub.outputText(), /\[tool\] \(edit\) Write never.txt: cancelled/);
    assert.equal(existsSync(join(ws.root, "never.txt")), false);
    assert.deepEqual(stub.shown.errors, []);
  });
});
