/**
 * The chat view's extension side against the real server: a stand-in webview records what the
 * extension posts (`ToWebview`) and sends what a user would (`FromWebview`). With RECORD=1 the
 * streams are saved under test/webview/fixtures/, which the Chromium tests of the webview replay.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import type { ContextItem, FromWebview, ToWebview } from "../src/messages";
import { closeChat, openChat, type Extension, FakeWebview } from "./fake-webview";
import { SERVER_COMMAND, call, within, workspace, type Workspace } from "./helpers";
import * as stub from "./vscode-stub";

stub.install();

const FIXTURES = join(__dirname, "..", "..", "test", "webview", "fixtures");

function record(name: string, messages: ToWebview[]): void {
  if (!process.env.RECORD) return;
  mkdirSync(FIXTURES, { recursive: true });
  writeFileSync(join(FIXTURES, `${name}.json`), `${JSON.stringify(messages, null, 1)}\n`);
}

const PLAN = [{ content: "Change the answer", status: "completed", priority: "high" }];

describe("the chat view's extension side against the real server", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  let webview: FakeWebview;
  let chips: ContextItem[] = [];
  const diffs: unknown[][] = [];
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: stub.Uri.file("/ext") };

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.approval"] = "ask";
    const answer = [
      "Here is the entry point:",
      "",
      "```python",
      "def main():",
      "    return 42",
      "```",
      "",
      "It **returns 42**.",
    ].join("\n");
    const usage = (inputTokens: number, outputTokens: number) => ({ inputTokens, outputTokens });
    stub.settings["tether.provider"] = ws.provider([
      {
        thinking: "The entry point is in src/app.py; read it first.",
        text: "Let me look.",
        toolCalls: [call("c1", "read_file", { path: "src/app.py" })],
        usage: usage(100, 10),
      },
      { text: answer, usage: usage(150, 40) },
      {
        text: "I will change the answer.",
        toolCalls: [call("e1", "edit_file", { path: "src/app.py", oldString: "return 42", newString: "return 43" })],
        usage: usage(200, 20),
      },
      { text: "Changed.", toolCalls: [call("p1", "update_plan", { entries: PLAN })], usage: usage(230, 5) },
      { text: "Planned." },
      { toolCalls: [call("w1", "write_file", { path: "never.txt", content: "no\n" })] },
      { text: "Left it." },
      { text: "too slow", delay: 30 },
      { toolCalls: [call("n1", "write_file", { path: "first.txt", content: "1\n" })] },
      { toolCalls: [call("n2", "write_file", { path: "second.txt", content: "2\n" })] },
      { text: "Nothing written." },
      { text: "The list goes on and on and", finishReason: "length", usage: usage(50, 4096) },
      { text: "I cannot help with that.", finishReason: "content_filter" },
    ]);
    stub.commands.set("vscode.diff", (...args: unknown[]) => diffs.push(args));
    ({ extension, webview } = openChat(context));
  });

  after(async () => {
    await closeChat(extension, context);
    ws.remove();
  });

  test("the page has a strict CSP: scripts only with its nonce, nothing from the network", () => {
    const csp = /http-equiv="Content-Security-Policy" content="([^"]+)"/.exec(webview.html)?.[1] ?? "";
    assert.match(csp, /default-src 'none'/);
    const nonce = /script-src 'nonce-([^']+)'/.exec(csp)?.[1];
    assert.ok(nonce, csp);
    assert.match(webview.html, new RegExp(`<script nonce="${nonce.replace(/[+/]/g, "\\$&")}" src=`));
    assert.doesNotMatch(webview.html, /https?:/);
  });

  test("a prompt streams Markdown and a tool card, and ends with model and usage", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    webview.send({ type: "ready" });
    await webview.next("session", from);
    // The selection in the editor, attached as context: a chip, then part of the prompt.
    const editor = {
      document: {
        uri: stub.Uri.file("src/app.py"),
        getText: (range?: unknown) => (range ? "return 42" : "def main():\n    return 42\n"),
      },
      selection: { isEmpty: false, start: { line: 1 }, end: { line: 1 } },
    };
    (stub.vscode.window as { activeTextEditor: unknown }).activeTextEditor = editor;
    webview.send({ type: "attach", what: "selection" });
    chips = (await webview.next("context", from, (m) => m.items.length === 1)).items;
    assert.deepEqual(chips, [{ label: "src/app.py:2-2", file: "src/app.py", lines: [2, 2], text: "return 42" }]);
    (stub.vscode.window as { activeTextEditor: unknown }).activeTextEditor = undefined;
    webview.send({ type: "send", text: "What does main return?" });
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn", JSON.stringify(finished));
    assert.equal(finished.model, "scripted");
    assert.ok(finished.usage, "usage is reported");
    const stream = webview.received.slice(from);
    record("answer", stream);
    const started = stream.find((m) => m.type === "turnStarted");
    assert.deepEqual(started, {
      type: "turnStarted",
      prompt: "What does main return?",
      context: chips,
      sessionId: started?.type === "turnStarted" ? started.sessionId : "",
      title: "What does main return?",
    });
    const events = stream.flatMap((m) => (m.type === "progress" ? [m.event] : []));
    const toolCall = events.find((e) => e.kind === "tool_call");
    assert.equal(toolCall?.kind === "tool_call" && toolCall.title, "Read src/app.py");
    const text = events.map((e) => (e.kind === "message_delta" ? e.text : "")).join("");
    assert.match(text, /```python\ndef main\(\):/);
    assert.ok(events.some((e) => e.kind === "tool_call_update" && e.status === "completed"));
    // The output channel logs the chat's runs too, calls by their title.
    assert.match(stub.outputText(), /\[chat\] > What does main return\?/);
    assert.match(stub.outputText(), /\[tool\] Read src\/app.py: completed/);
  });

  test("an edit is asked with its diff before it applies; Allow writes it", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    webview.send({ type: "send", text: "Make it 43" });
    const asked = await webview.next("permission", from);
    assert.equal(asked.title, "Edit src/app.py");
    assert.equal(asked.file, "src/app.py");
    // The server's proposal, announced with the pending call too.
    const pending = webview.received
      .slice(from)
      .find((m) => m.type === "progress" && m.event.kind === "tool_call");
    assert.deepEqual(pending?.type === "progress" && pending.event.kind === "tool_call" && pending.event.diff, {
      path: "src/app.py",
      oldText: "def main():\n    return 42\n",
      newText: "def main():\n    return 43\n",
    });
    assert.match(asked.diff ?? "", /^-    return 42$/m);
    assert.match(asked.diff ?? "", /^\+    return 43$/m);
    // Nothing is written while the question is open; the diff opened on two virtual documents.
    assert.equal(readFileSync(join(ws.root, "src", "app.py"), "utf8"), "def main():\n    return 42\n");
    const [left, right, title] = diffs.at(-1) as [{ scheme: string; path: string }, { scheme: string; path: string }, string];
    assert.equal(left.scheme, "tether-proposal");
    assert.equal(right.scheme, "tether-proposal");
    assert.match(title, /src\/app\.py/);
    webview.send({ type: "answer", requestId: asked.requestId, outcome: "allow" });
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn");
    assert.equal(readFileSync(join(ws.root, "src", "app.py"), "utf8"), "def main():\n    return 43\n");
    const closed = await webview.next("permissionClosed", from);
    assert.equal(closed.outcome, "allow");
    const plans = webview.received.slice(from).flatMap((m) => (m.type === "progress" && m.event.kind === "plan" ? [m.event] : []));
    assert.deepEqual(plans, [{ kind: "plan", entries: PLAN }]);
    record("edit-allowed", webview.received.slice(from));
  });

  test("Reject leaves the file unwritten", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    webview.send({ type: "send", text: "Write never.txt" });
    const asked = await webview.next("permission", from);
    assert.match(asked.diff ?? "", /^\+no$/m);
    webview.send({ type: "answer", requestId: asked.requestId, outcome: "reject" });
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn");
    assert.equal(existsSync(join(ws.root, "never.txt")), false);
    const failed = webview.received
      .slice(from)
      .find((m) => m.type === "progress" && m.event.kind === "tool_call_update" && m.event.status === "failed");
    assert.ok(failed, "the rejected call fails");
    record("write-rejected", webview.received.slice(from));
  });

  test("Stop cancels the run", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    webview.send({ type: "send", text: "Take your time" });
    // The first words are streamed before the turn waits: the answer is cut short, not absent.
    await webview.next("progress", from, (m) => m.event.kind === "message_delta");
    webview.send({ type: "stop" });
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "cancelled");
    record("cancelled", webview.received.slice(from));
  });

  test("Always reject refuses the tool for the rest of the session without asking again", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    webview.send({ type: "send", text: "Write two files" });
    const asked = await webview.next("permission", from);
    assert.equal(asked.title, "Write first.txt");
    assert.match(asked.diff ?? "", /^--- \/dev\/null$/m);
    webview.send({ type: "answer", requestId: asked.requestId, outcome: "reject_always" });
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn");
    const stream = webview.received.slice(from);
    assert.equal(stream.filter((m) => m.type === "permission").length, 1, "the second write is not asked");
    const failed = stream.flatMap((m) =>
      m.type === "progress" && m.event.kind === "tool_call_update" && m.event.status === "failed" ? [m.event.toolCallId] : [],
    );
    assert.deepEqual(failed, ["n1", "n2"]);
    assert.equal(existsSync(join(ws.root, "first.txt")), false);
    assert.equal(existsSync(join(ws.root, "second.txt")), false);
  });

  test("a cut-off answer and a refusal end as such, not as a normal end", { timeout: 60_000 }, async () => {
    let from = webview.received.length;
    webview.send({ type: "send", text: "List everything" });
    const cut = await webview.next("turnFinished", from);
    assert.equal(cut.stopReason, "max_tokens");
    record("cut-off", webview.received.slice(from));
    from = webview.received.length;
    webview.send({ type: "send", text: "Something it refuses" });
    const refused = await webview.next("turnFinished", from);
    assert.equal(refused.stopReason, "refusal");
    record("refused", webview.received.slice(from));
  });

  test("the mode picker sets the session's mode; the status bar shows it", { timeout: 60_000 }, async () => {
    const [item] = stub.statusBarItems;
    assert.ok(item?.shown, "a status bar item");
    assert.equal(item.command, "tether.pickMode");
    assert.match(item.text, /Ask$/);
    stub.ui.quickPick = <T>(items: T[]) => items.find((entry) => (entry as { mode?: string }).mode === "read_only");
    const session = (await within(
      Promise.resolve(stub.vscode.commands.executeCommand("tether.pickMode")),
      "tether.pickMode",
    )) as { sessionId: string; mode: string };
    assert.equal(session.mode, "read_only");
    assert.match(item.text, /Read only$/);
    // Kept by the server: the session opened again (session/get) is still read-only.
    const from = webview.received.length;
    webview.send({ type: "switchSession", sessionId: session.sessionId });
    await webview.next("session", from);
    assert.match(item.text, /Read only$/);
    stub.ui.quickPick = <T>(items: T[]) => items.find((entry) => (entry as { mode?: string }).mode === "ask");
    await stub.vscode.commands.executeCommand("tether.pickMode");
    assert.match(item.text, /Ask$/);
    stub.ui.quickPick = <T>(items: T[]) => items[0];
  });

  test("sessions are listed with their first prompt; fork and delete", { timeout: 60_000 }, async () => {
    let from = webview.received.length;
    webview.send({ type: "listSessions" });
    const listed = await webview.next("sessions", from);
    assert.equal(listed.sessions.length, 1);
    const [only] = listed.sessions;
    assert.equal(only.title, "What does main return?");
    assert.equal(listed.currentId, only.sessionId);
    from = webview.received.length;
    webview.send({ type: "forkSession", sessionId: only.sessionId });
    const forked = await webview.next("session", from);
    assert.notEqual(forked.sessionId, only.sessionId);
    assert.equal(forked.title, "What does main return? (fork)");
    // The inherited history is shown: the first prompt and the read card.
    const { messageId: firstPromptId, ...firstPrompt } = forked.items[0] as { messageId?: string };
    assert.deepEqual(firstPrompt, { type: "user", text: "What does main return?", context: chips });
    assert.ok(firstPromptId, "a stored prompt carries its message id");
    assert.ok(forked.items.some((item) => item.type === "tool" && item.title === "Read src/app.py"));
    const after = await webview.next("sessions", from);
    assert.equal(after.sessions.length, 2);
    record("sessions", [after]);
    // Delete asks first; dismissed, nothing is deleted.
    const modals = stub.shown.modals.length;
    stub.ui.modal = () => undefined;
    webview.send({ type: "deleteSession", sessionId: forked.sessionId ?? "" });
    await within(stub.when(() => stub.shown.modals.length > modals), "the question");
    assert.equal(stub.shown.modals.at(-1), 'Delete the session "What does main return? (fork)"?');
    stub.ui.modal = (_message, ...buttons) => buttons[0];
    from = webview.received.length;
    webview.send({ type: "listSessions" });
    assert.equal((await webview.next("sessions", from)).sessions.length, 2);
    from = webview.received.length;
    webview.send({ type: "deleteSession", sessionId: forked.sessionId ?? "" });
    const emptied = await webview.next("session", from);
    assert.equal(emptied.sessionId, undefined);
    const remaining = await webview.next("sessions", from);
    assert.deepEqual(
      remaining.sessions.map((s) => s.sessionId),
      [only.sessionId],
    );
    from = webview.received.length;
    webview.send({ type: "switchSession", sessionId: only.sessionId });
    const switched = await webview.next("session", from);
    assert.equal(switched.sessionId, only.sessionId);
    assert.ok(switched.items.some((item) => item.type === "assistant" && item.text === "Changed."));
    assert.deepEqual(switched.plan, PLAN); // read from session/get: shown above the prompt
    record("switched", [switched]);
    // The rebuilt transcript is the live one: each run's end with its tokens, the edit's diff,
    // the cancelled answer's partial text, the kinds of the calls.
    const live = webview.received.flatMap((m) => (m.type === "turnFinished" ? [m] : []));
    const rebuilt = switched.items.flatMap((item) => (item.type === "runEnd" ? [item] : []));
    assert.deepEqual(
      rebuilt.map(({ usage, model }) => ({ usage, model })),
      live.map(({ usage, model }) => ({ usage, model })),
    );
    // A cut-off or refused answer is told apart from a normal end only by the stop reason, which
    // the server keeps in the answer's metadata: rebuilt, those runs end as they did live.
    assert.deepEqual(
      rebuilt.map((end) => end.stopReason),
      live.map((end) => end.stopReason),
    );
    assert.deepEqual(
      live.map((end) => end.stopReason),
      ["end_turn", "end_turn", "end_turn", "cancelled", "end_turn", "max_tokens", "refusal"],
    );
    const liveDiff = webview.received.find(
      (m) => m.type === "progress" && m.event.kind === "tool_call_update" && m.event.toolCallId === "e1" && m.event.diff,
    );
    const edit = switched.items.find((item) => item.type === "tool" && item.toolCallId === "e1");
    assert.ok(liveDiff?.type === "progress" && liveDiff.event.kind === "tool_call_update");
    assert.equal(edit?.type === "tool" && edit.diff, liveDiff.event.diff);
    assert.deepEqual(
      switched.items.flatMap((item) => (item.type === "tool" ? [[item.toolCallId, item.toolKind, item.status]] : [])),
      [
        ["c1", "read", "completed"],
        ["e1", "edit", "completed"],
        ["p1", "other", "completed"],
        ["w1", "edit", "failed"],
        ["n1", "edit", "failed"],
        ["n2", "edit", "failed"],
      ],
    );
    assert.ok(
      switched.items.some((item) => item.type === "assistant" && item.cancelled === true && item.text === "too "),
      JSON.stringify(switched.items.filter((item) => item.type === "assistant")),
    );
    // The reasoning streamed live comes back with the answer it led to, and only with it.
    const thought = webview.received
      .flatMap((m) => (m.type === "progress" && m.event.kind === "thought_delta" ? [m.event.text] : []))
      .join("");
    assert.equal(thought, "The entry point is in src/app.py; read it first.");
    const reasoned = switched.items.flatMap((item) => (item.type === "assistant" && item.reasoning ? [item] : []));
    assert.deepEqual(reasoned, [{ type: "assistant", text: "Let me look.", reasoning: thought }]);
  });

  test("a server command that fails to start shows its exit and stderr in the view", { timeout: 60_000 }, async () => {
    const failing = [process.execPath, "-e", "process.stderr.write('No module named tether\\n'); process.exit(1)"];
    stub.settings["tether.serverCommand"] = failing;
    stub.changeConfiguration("tether.serverCommand");
    const from = webview.received.length;
    webview.send({ type: "send", text: "Anyone there?" });
    const error = await webview.next("error", from);
    assert.match(error.message, /exited with code 1 before it answered initialize/);
    assert.match(error.message, /No module named tether/);
    assert.doesNotMatch(error.message, /-32097|connection got disposed/);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
  });
});

describe("Restore on a prompt of the chat view against the real server", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  let webview: FakeWebview;
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: stub.Uri.file("/ext") };
  const prompts: string[] = [];
  const app = () => readFileSync(join(ws.root, "src", "app.py"), "utf8");

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.approval"] = "auto";
    stub.settings["tether.provider"] = ws.provider([
      { toolCalls: [call("w1", "write_file", { path: "notes.txt", content: "hello\n" })] },
      { text: "Noted." },
      { toolCalls: [call("e1", "edit_file", { path: "src/app.py", oldString: "return 42", newString: "return 43" })] },
      { text: "Changed." },
      { text: "Nothing to change." },
    ]);
    ({ extension, webview } = openChat(context));
  });

  after(async () => {
    await closeChat(extension, context);
    stub.settings["tether.approval"] = "ask";
    stub.ui.quickPick = <T>(items: T[]) => items[0];
    stub.ui.modal = (_message, ...buttons) => buttons[0];
    ws.remove();
  });

  /** Send a prompt; its id (`run_started.userMessageId`) and what its run posted. */
  async function turn(text: string): Promise<ToWebview[]> {
    const from = webview.received.length;
    webview.send({ type: "send", text });
    await webview.next("turnFinished", from);
    const stream = webview.received.slice(from);
    const started = stream.find((m) => m.type === "progress" && m.event.kind === "run_started");
    assert.ok(started?.type === "progress" && started.event.kind === "run_started");
    prompts.push(started.event.userMessageId);
    return stream;
  }

  function pick(label: string): void {
    stub.ui.quickPick = <T>(items: T[]) => items.find((item) => (item as { label?: string }).label === label);
  }

  test("a turn that changed files announces its checkpoint; one that did not, none", { timeout: 60_000 }, async () => {
    webview.send({ type: "ready" });
    await turn("Write a note");
    const stream = await turn("Make it 43");
    record("checkpoint", stream);
    const checkpoints = stream.flatMap((m) => (m.type === "progress" && m.event.kind === "checkpoint" ? [m.event] : []));
    assert.deepEqual(
      checkpoints.map((event) => event.files),
      [["src/app.py"]],
    );
    const quiet = await turn("Anything else?");
    assert.ok(!quiet.some((m) => m.type === "progress" && m.event.kind === "checkpoint"));
    assert.equal(app(), "def main():\n    return 43\n");
    // Opened again, the transcript marks the prompts whose turns changed files.
    const from = webview.received.length;
    webview.send({ type: "switchSession", sessionId: (webview.received.find((m) => m.type === "turnStarted") as { sessionId: string }).sessionId });
    const session = await webview.next("session", from);
    record("restorable", [session]);
    assert.deepEqual(
      session.items.flatMap((item) => (item.type === "user" ? [[item.messageId, item.files]] : [])),
      [
        [prompts[0], ["notes.txt"]],
        [prompts[1], ["src/app.py"]],
        [prompts[2], undefined],
      ],
    );
  });

  test("Files puts back that turn's files, listed first; the conversation stays", { timeout: 60_000 }, async () => {
    pick("Files");
    const picks = stub.shown.quickPicks.length;
    const from = webview.received.length;
    webview.send({ type: "restore", messageId: prompts[1] });
    await within(stub.when(() => stub.shown.info.includes("Tether: restored src/app.py.")), "the restore");
    assert.deepEqual(stub.shown.quickPicks.slice(picks), ["Files it will change: src/app.py"]);
    assert.equal(app(), "def main():\n    return 42\n");
    assert.equal(readFileSync(join(ws.root, "notes.txt"), "utf8"), "hello\n");
    assert.ok(!webview.received.slice(from).some((m) => m.type === "session"), "the view is not rebuilt");
  });

  test("a file changed by hand is overwritten only after Overwrite; both rewinds the conversation", { timeout: 60_000 }, async () => {
    writeFileSync(join(ws.root, "notes.txt"), "mine\n");
    pick("Files and conversation");
    const modals = stub.shown.modals.length;
    stub.ui.modal = () => undefined; // the dialog closed: nothing changes
    webview.send({ type: "restore", messageId: prompts[0] });
    await within(stub.when(() => stub.shown.modals.length > modals), "the conflict question");
    assert.match(stub.shown.modals.at(-1) ?? "", /^Changed since tether wrote them: notes\.txt\./);
    assert.equal(readFileSync(join(ws.root, "notes.txt"), "utf8"), "mine\n");

    let offered: string[] = [];
    stub.ui.modal = (_message, ...buttons) => {
      offered = buttons;
      return "Overwrite";
    };
    const picks = stub.shown.quickPicks.length;
    const from = webview.received.length;
    webview.send({ type: "restore", messageId: prompts[0] });
    const rebuilt = await webview.next("session", from);
    assert.deepEqual(offered, ["Overwrite"]);
    assert.deepEqual(stub.shown.quickPicks.slice(picks), ["Files it will change: notes.txt, src/app.py"]);
    assert.equal(existsSync(join(ws.root, "notes.txt")), false);
    assert.equal(app(), "def main():\n    return 42\n");
    assert.deepEqual(rebuilt.items, []);
  });
});

describe("a sub-agent in the chat view against the real server", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  let webview: FakeWebview;
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: stub.Uri.file("/ext") };

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.approval"] = "auto";
    // Each model request takes the next turn: the parent's, the sub-agent's two, the parent's last.
    stub.settings["tether.provider"] = ws.provider([
      { toolCalls: [call("t1", "task", { prompt: "What does main return?", description: "Read the app" })] },
      { text: "Reading it.", toolCalls: [call("c1", "read_file", { path: "src/app.py" })] },
      { text: "It returns **42**." },
      { text: "The sub-agent found 42." },
      { toolCalls: [call("t2", "task", { prompt: "Take a slow look", description: "Slow look" })] },
      { text: "Looking slowly.", delay: 2 },
      { text: "Both done." },
    ]);
    ({ extension, webview } = openChat(context));
  });

  after(async () => {
    await closeChat(extension, context);
    stub.settings["tether.approval"] = "ask";
    ws.remove();
  });

  test("its progress is posted under the task call; Open shows its session in the view", { timeout: 60_000 }, async () => {
    webview.send({ type: "ready" });
    let from = webview.received.length;
    webview.send({ type: "send", text: "Ask a sub-agent" });
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn", JSON.stringify(finished));
    const stream = webview.received.slice(from);
    record("subagent", stream);
    const started = stream.find((m) => m.type === "turnStarted");
    const parentId = started?.type === "turnStarted" ? started.sessionId : "";
    const progress = stream.flatMap((m) => (m.type === "progress" ? [m] : []));
    const nested = progress.filter((m) => m.subagent);
    assert.ok(nested.length > 0, "the sub-agent's progress reaches the view");
    const [first] = nested;
    const childId = first.subagent?.sessionId ?? "";
    assert.notEqual(childId, parentId);
    const parentRun = progress.find((m) => !m.subagent && m.event.kind === "run_started");
    for (const m of nested) {
      assert.equal(m.subagent?.sessionId, childId);
      assert.equal(m.subagent?.parentToolCallId, "t1");
      assert.notEqual(m.subagent?.runId, m.subagent?.parentRunId);
    }
    assert.ok(parentRun, "the view's own run");
    const text = nested.flatMap((m) => (m.event.kind === "message_delta" ? [m.event.text] : [])).join("");
    assert.equal(text, "Reading it.It returns **42**.");
    assert.deepEqual(
      nested.flatMap((m) => (m.event.kind === "tool_call" ? [m.event.title] : [])),
      ["Read src/app.py"],
    );
    // The task call itself is the view's own: its result is the sub-agent's answer.
    const taskDone = progress.find(
      (m) => !m.subagent && m.event.kind === "tool_call_update" && m.event.toolCallId === "t1" && m.event.status === "completed",
    );
    assert.ok(taskDone?.event.kind === "tool_call_update" && /It returns \*\*42\*\*/.test(taskDone.event.result ?? ""));

    from = webview.received.length;
    webview.send({ type: "openSession", sessionId: childId });
    const shown = await webview.next("session", from);
    assert.equal(shown.sessionId, childId);
    assert.equal(shown.title, "Read the app");
    assert.deepEqual(
      shown.items.flatMap((item) => (item.type === "user" ? [item.text] : item.type === "assistant" ? [item.text] : [])),
      ["What does main return?", "Reading it.", "It returns **42**."],
    );
    // The parent opened again: its task call, titled as live, names the sub-agent's session.
    from = webview.received.length;
    webview.send({ type: "switchSession", sessionId: parentId });
    const parent = await webview.next("session", from);
    record("subagent-stored", [parent]);
    const task = parent.items.find((item) => item.type === "tool" && item.toolCallId === "t1");
    const liveTask = progress.find((m) => !m.subagent && m.event.kind === "tool_call" && m.event.toolCallId === "t1");
    assert.ok(task?.type === "tool" && liveTask?.event.kind === "tool_call");
    assert.equal(task.title, liveTask.event.title);
    assert.equal(task.title, "Task: Read the app");
    assert.equal(task.childSessionId, childId);
  });

  test("Open while the view's run goes on shows the sub-agent's transcript beside it", { timeout: 60_000 }, async () => {
    const from = webview.received.length;
    const documents = stub.shown.documents.length;
    webview.send({ type: "send", text: "Another look" });
    const delta = await webview.next("progress", from, (m) => m.subagent !== undefined && m.event.kind === "message_delta");
    webview.send({ type: "openSession", sessionId: delta.subagent?.sessionId ?? "" });
    await within(stub.when(() => stub.shown.documents.length > documents), "the transcript");
    const [document] = stub.shown.documents.slice(documents);
    assert.match(document, /^# Slow look\n/);
    assert.match(document, /Take a slow look/);
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn");
    // The view stayed on its own session and run.
    assert.ok(!webview.received.slice(from).some((m) => m.type === "session"));
  });
});

describe("a sub-agent's question in the chat view against the real server", { timeout: 300_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  let webview: FakeWebview;
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: stub.Uri.file("/ext") };

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.approval"] = "ask";
    stub.settings["tether.provider"] = ws.provider([
      { toolCalls: [call("t1", "task", { prompt: "Write the note", description: "Note" })] },
      { toolCalls: [call("c1", "write_file", { path: "note.txt", content: "from the sub-agent\n" })] },
      { text: "Wrote it." },
      { text: "The sub-agent wrote the note." },
    ]);
    ({ extension, webview } = openChat(context));
  });

  after(async () => {
    await closeChat(extension, context);
    ws.remove();
  });

  test("is asked in the sub-agent's box, not in a dialog; Allow writes the file", { timeout: 60_000 }, async () => {
    webview.send({ type: "ready" });
    const from = webview.received.length;
    const modals = stub.shown.modals.length;
    webview.send({ type: "send", text: "Have a sub-agent write the note" });
    const asked = await webview.next("permission", from);
    const child = webview.received
      .slice(from)
      .find((m) => m.type === "progress" && m.subagent !== undefined && m.event.kind === "tool_call");
    assert.ok(child?.type === "progress" && child.subagent, "the sub-agent's call came first");
    assert.equal(asked.subagentRunId, child.subagent.runId);
    assert.equal(asked.toolCallId, "c1");
    assert.match(asked.diff ?? "", /^\+from the sub-agent$/m);
    assert.equal(stub.shown.modals.length, modals, "no modal dialog");
    webview.send({ type: "answer", requestId: asked.requestId, outcome: "allow" });
    const finished = await webview.next("turnFinished", from);
    assert.equal(finished.stopReason, "end_turn", JSON.stringify(finished));
    assert.equal(readFileSync(join(ws.root, "note.txt"), "utf8"), "from the sub-agent\n");
    record("subagent-permission", webview.received.slice(from));
  });
});
